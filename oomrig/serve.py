"""Serving: start the rig's Ollama on a free loopback port (never the user's
11434) with each engine's own model store, and create the stand-in tags in it."""
from __future__ import annotations

import itertools
import os
import subprocess
import tempfile
from pathlib import Path

from oomrig.build import check_engine, ensure_ollama
from oomrig.models import GEMMA_LEVEL, GEMMA_TAG, LATEST, TAGS, ensure_ggufs
from oomrig.paths import (CURRENT_VERSION, ENGINES, FALLBACK_VERSION, LEGACY_VERSION, Log, RigError,
                          RigPaths, _stderr_log, default_root, resolve_version)
from probes.ollama_api import Ollama
from probes.server import ManagedServer

#: numbers rig instances of this process, for their own log files
_INSTANCES = itertools.count(1)


def ensure_tags(server: ManagedServer, ggufs: dict[str, Path], log: Log = _stderr_log) -> dict[str, str]:
    """Create the neohorse-1 tags (and Gemma's, when its file is there) with
    ``ollama create`` (as a user would) if missing; return tag ->
    quantization level as ``/api/show`` reports it."""
    api = Ollama(server.host, timeout_s=30)
    have = set(api.tags())
    levels = {}
    wanted = [(tag, level, ggufs[level]) for tag, level in TAGS.items()]
    if GEMMA_TAG in ggufs:
        wanted.append((GEMMA_TAG, GEMMA_LEVEL, ggufs[GEMMA_TAG]))
    for tag, level, gguf_file in wanted:
        if tag not in have:
            log(f"creating {tag} from {gguf_file.name}")
            with tempfile.TemporaryDirectory() as tmp:
                modelfile = Path(tmp) / "Modelfile"
                modelfile.write_text(f"FROM {gguf_file}\n")
                proc = subprocess.run([server.ollama_bin, "create", tag, "-f", str(modelfile)],
                                      env=server.process_env(), capture_output=True, text=True)
            if proc.returncode != 0:
                raise RigError(f"ollama create {tag} failed: {proc.stderr.strip().splitlines()[-1:]}")
        levels[tag] = api.show(tag).quantization
        if levels[tag] != level:
            raise RigError(f"{tag} reports quantization {levels[tag]}, expected {level}")
    latest, target = LATEST
    if latest not in have:
        subprocess.run([server.ollama_bin, "cp", target, latest], env=server.process_env(),
                       capture_output=True, text=True, check=True)
    return levels


class Rig:
    """Build (or reuse) everything, start the server, create the tags.

    ``with Rig() as rig: rig.host`` — stopped, model processes included, on
    exit. ``version``: ``0.34.4`` / ``current`` (default, or
    ``OOMVET_RIG_VERSION``) or ``0.11.4`` / ``legacy``.
    """

    def __init__(self, paths: RigPaths | None = None, log: Log = _stderr_log, env: dict | None = None,
                 version: str | None = None):
        self.version = resolve_version(version or (paths.version if paths else None))
        self.paths = RigPaths(paths.root if paths else default_root(), self.version)
        self.log = log
        self.server: ManagedServer | None = None
        self.levels: dict[str, str] = {}
        self._env = env or {}

    @property
    def engine(self) -> str:
        """``llama-server`` (v0.30+) or ``runner`` (the legacy in-process runner)."""
        return ENGINES[self.server.version if self.server and self.server.version in ENGINES else self.version]

    def setup(self) -> "Rig":
        ollama_bin = ensure_ollama(self.paths, self.log)
        check_engine(self.paths, ollama_bin)
        ggufs = ensure_ggufs(self.paths, self.log)
        self.paths.log_dir.mkdir(parents=True, exist_ok=True)
        instance = f"{os.getpid()}-{next(_INSTANCES)}"
        self.server = ManagedServer(ollama_bin, self.paths.models_dir, env=self._env,
                                    log_path=self.paths.serve_log(instance))
        self.server.start()
        try:
            served = self.server.version
            allowed = (CURRENT_VERSION,) if self.paths.current else (LEGACY_VERSION, FALLBACK_VERSION)
            if served not in allowed:
                raise RigError(f"{ollama_bin} serves Ollama {served}, but the rig was asked for {self.version}",
                               hint="unset OLLAMA_BIN, or ask for the version it serves with --rig-version")
            self.levels = ensure_tags(self.server, ggufs, self.log)
        except BaseException:
            self.server.stop()
            raise
        return self

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def server_pid(self) -> int | None:
        return self.server.pid if self.server else None

    @property
    def ollama_bin(self) -> str:
        return self.server.ollama_bin

    @property
    def env(self) -> dict[str, str]:
        """Environment for running the ``ollama`` CLI against the rig."""
        return self.server.process_env()

    def stop(self) -> None:
        if self.server:
            self.server.stop()
            Path(self.server.log_path).unlink(missing_ok=True)  # the log lived as long as its server

    def __enter__(self) -> "Rig":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.stop()
