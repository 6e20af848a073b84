"""Where the test rig keeps things: which Ollama versions it serves, and the
cache folders of each engine's build and model store.

The rig (this package) is oomvet's test-and-demo infrastructure, installed with
the ``rig`` extra (``pip install 'oomvet[rig]'``): a real Ollama on loopback
serving the NeoHorse-1 stand-ins. Everything lives in a git-ignored cache
(``.cache/`` in a checkout, or ``OOMVET_RIG_CACHE``); ``OOMVET_RIG_VERSION``
or ``--rig-version`` picks the engine.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common.errors import ProbeError

CURRENT_VERSION = "0.34.4"
LEGACY_VERSION = "0.11.4"
# what a test id, a flag or OOMVET_RIG_VERSION may say -> the version served
VERSIONS = {"current": CURRENT_VERSION, "legacy": LEGACY_VERSION}
PINNED_VERSION = LEGACY_VERSION
FALLBACK_VERSION = "0.9.6"  # its CPU backend also builds with plain cgo
ENGINES = {CURRENT_VERSION: "llama-server", LEGACY_VERSION: "runner", FALLBACK_VERSION: "runner"}

Log = Callable[[str], None]


class RigError(ProbeError):
    """The rig could not be set up here (no Go, build failed, model package missing)."""


def _stderr_log(msg: str) -> None:
    print(f"[rig] {msg}", file=sys.stderr, flush=True)


def resolve_version(version: str | None = None) -> str:
    """``version``, else ``OOMVET_RIG_VERSION``, else the current engine.
    Accepts ``0.34.4``, ``v0.34.4``, ``current``, ``legacy``."""
    raw = version or os.environ.get("OOMVET_RIG_VERSION") or CURRENT_VERSION
    wanted = raw.strip().lower().removeprefix("v")
    wanted = VERSIONS.get(wanted, wanted)
    if wanted not in (CURRENT_VERSION, LEGACY_VERSION):
        raise RigError(f"the rig serves Ollama {CURRENT_VERSION} (current) or {LEGACY_VERSION} (legacy), "
                       f"not {raw!r}", hint="--rig-version 0.34.4 | 0.11.4 (or OOMVET_RIG_VERSION)")
    return wanted


@dataclass(frozen=True)
class RigPaths:
    """Where one engine's build and model store live under the cache root.

    Legacy: ``ollama/bin/ollama`` and ``ollama/models`` (the layout the rig
    always had). Current: ``ollama-0.34.4/prefix/{bin/ollama,lib/ollama/...}``
    (Ollama's packaged layout, so the server finds ``llama-server`` in
    ``../lib/ollama`` by itself) and ``ollama-0.34.4/models``.
    """

    root: Path
    version: str = CURRENT_VERSION

    @property
    def current(self) -> bool:
        return self.version == CURRENT_VERSION

    @property
    def engine_dir(self) -> Path:
        return self.root / (f"ollama-{self.version}" if self.current else "ollama")

    @property
    def prefix(self) -> Path:
        return self.engine_dir / "prefix" if self.current else self.engine_dir

    @property
    def bin_dir(self) -> Path:
        return self.prefix / "bin"

    @property
    def ollama_bin(self) -> Path:
        return self.bin_dir / "ollama"

    @property
    def lib_dir(self) -> Path:
        return self.prefix / "lib" / "ollama"

    @property
    def llama_server(self) -> Path:
        return self.lib_dir / "llama-server"

    @property
    def gguf_dir(self) -> Path:
        return self.root / "gguf"

    @property
    def models_dir(self) -> Path:
        return self.engine_dir / "models"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    def serve_log(self, instance: str) -> Path:
        """One server's log: each rig instance has its own (two rigs on one
        cache, a test's and the CLI's it starts, must not read each other's lines)."""
        return self.log_dir / f"ollama-serve-{self.version}-{instance}.log"

    @property
    def build_log(self) -> Path:
        return self.log_dir / f"ollama-build-{self.version}.log"


def default_root() -> Path:
    """``OOMVET_RIG_CACHE``, else ``.cache/`` in the checkout, else ``~/.cache/oomvet``."""
    if os.environ.get("OOMVET_RIG_CACHE"):
        return Path(os.environ["OOMVET_RIG_CACHE"]).resolve()
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").exists():
        return checkout / ".cache"
    return Path.home() / ".cache" / "oomvet"


def default_paths(version: str | None = None) -> RigPaths:
    return RigPaths(default_root(), resolve_version(version))

