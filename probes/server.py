"""Running an Ollama server we own, and the small control surface probes use.

Server-wide knobs (``OLLAMA_NUM_PARALLEL``, ``OLLAMA_KV_CACHE_TYPE``,
``OLLAMA_FLASH_ATTENTION``) only change with a restart. A probe asks a
:class:`ServerControl` whether it may restart the server; for a server oomvet
started itself (the rig, the simulator) it may, for a user's server it may
not, and the probe prints the exact command instead. :class:`ManagedServer`
starts ``ollama serve`` on a free loopback port with its own model store and
stops it together with the processes that hold its models (``ollama runner``
up to v0.29, ``llama-server`` from v0.30), so a user's server on 11434 is
never touched. From v0.30 every ``LLAMA_ARG_*`` variable of the server's
environment reaches llama-server (the fit target, the KV-offload switch), so
those count as server settings too.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
from pathlib import Path
from typing import Mapping, Protocol, Sequence

import psutil

from common.errors import ProbeError, ServerUnreachable
# the API's address lives with the gateway; it is read from here too
from probes.ollama_api import DEFAULT_HOST, DEFAULT_PORT, Ollama  # noqa: F401
from probes.memory.host import is_ollama_runner
from probes.serverlog import LogDigest, config_settings, parse_cmdline

# environment variables that are server settings (LLAMA_ARG_*: llama-server's, passed through by v0.30+)
SETTING_PREFIXES = ("OLLAMA_", "LLAMA_ARG_")
#: the variables that say which GPUs a process may use (probes/memory/visible.py reads them)
VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def visible_env(control) -> dict[str, str] | None:
    """The server's own ``*_VISIBLE_DEVICES``, which decide the GPUs its models
    may use (not oomvet's): a server oomvet started has what it was started
    with, another one what its environment says when readable; None when it
    was not read (the readers then go by oomvet's own environment)."""
    if isinstance(control, ManagedServer):
        return {k: v for k, v in control.process_env().items() if k in VISIBLE_VARS}
    return getattr(control, "visible", None)


class ServerControl(Protocol):
    """What a probe may do to the server besides sending requests."""

    #: where ``env()`` comes from: "oomvet" (it started the server), "environ",
    #: "cmdline", "log", "cmdline+log" (each key's own in ``source_of``), "told", "unknown"
    source: str

    def can_restart(self) -> bool: ...

    def restart(self, env: Mapping[str, str | None]) -> None:
        """Restart with these OLLAMA_* settings on top of the current ones (None: unset)."""

    def env(self) -> dict[str, str] | None:
        """The OLLAMA_* (and LLAMA_ARG_*) settings the server runs with, as read;
        None when they could not be read (then none is assumed)."""


def cmdline_settings(parsed: Mapping) -> dict[str, str | None]:
    """What a model process's command line (:func:`probes.serverlog.parse_cmdline`)
    says of the server's settings: ``{key: value}``, None meaning "in effect as
    if unset". A key it cannot tell is absent. The line shows what is *in
    effect*, which is what memory depends on: the legacy runner drops a
    quantized cache without flash attention (no ``--kv-cache-type`` then),
    whatever the environment says.

    * ``-np`` / ``--parallel``: the slots (``OLLAMA_NUM_PARALLEL``; Ollama
      passes 1 for the few models it will not run in parallel);
    * ``--cache-type-k`` / ``--kv-cache-type``: the cache type; not passed is f16;
    * llama-server's ``--flash-attn on|off|auto``: ``on`` is
      ``OLLAMA_FLASH_ATTENTION=1``, ``auto`` is unset; ``off`` is either ``=0``
      or a device without flash attention, so it says nothing of the variable;
      the legacy runner's bare ``--flash-attn`` is ``=1``, its absence is off
      either way (unset or 0 mean the same there)."""
    engine = parsed.get("engine")
    if engine not in ("llama-server", "runner"):
        return {}
    out: dict[str, str | None] = {}
    if isinstance(parsed.get("num_parallel"), int):
        out["OLLAMA_NUM_PARALLEL"] = str(parsed["num_parallel"])
    kv = str(parsed.get("cache_type_k") or "").lower()
    out["OLLAMA_KV_CACHE_TYPE"] = None if kv in ("", "f16") else kv
    fa = parsed.get("flash_attn")
    if fa == "on":
        out["OLLAMA_FLASH_ATTENTION"] = "1"
    elif (engine == "llama-server" and fa == "auto") or (engine == "runner" and fa is None):
        out["OLLAMA_FLASH_ATTENTION"] = None
    return out


def model_cmdlines(server_pid: int) -> list[str]:
    """The command lines of the model processes of the ``ollama serve`` with
    pid ``server_pid`` (its children that hold a model; a process's command
    line is readable by every user where its environment is not)."""
    lines = []
    try:
        children = psutil.Process(server_pid).children(recursive=True)
    except psutil.Error:
        return []
    for child in children:
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue
        if is_ollama_runner(argv):
            lines.append(shlex.join(argv))
    return lines


class ForeignServer:
    """A server oomvet did not start: never restarted. Its settings are the
    ones read from its process (:meth:`of_process`) or told; otherwise they
    are unknown (``env()`` is None) and ``why`` says why.

    ``known``: the keys whose value is known when only some are (read from a
    model process's command line or the server log); None when ``env`` is
    the whole environment (then a key it lacks is unset: the version's
    default). :meth:`source_of` says where each setting came from."""

    def __init__(self, env: Mapping[str, str] | None = None, *, source: str | None = None, why: str | None = None,
                 known: frozenset[str] | None = None, sources: Mapping[str, str] | None = None):
        self._env = None if env is None else {str(k): str(v) for k, v in env.items()}
        self.source = source or ("told" if env is not None else "unknown")
        self.why = why or ("" if env is not None else "the server's settings were not read")
        self.known = None if env is None or known is None else frozenset(known)
        self._sources = dict(sources or {})  # key -> source, where keys came from different places
        #: the server's own *_VISIBLE_DEVICES (which GPUs it may use), read with its environment; None: not read
        self.visible: dict[str, str] | None = None

    @classmethod
    def of_process(cls, pid: int | None, log: LogDigest | None = None) -> ForeignServer:
        """The settings of the ``ollama serve`` process ``pid`` of this machine:
        from its environment (``/proc/PID/environ``, readable for the user who
        started it and for root); where that is another user's, from what can
        be read by anyone (:meth:`of_readable`)."""
        if pid is None:
            return cls(why="no process of this machine serves that address")
        try:
            proc = psutil.Process(pid)
            name = proc.name()
            if "ollama" not in name.lower():
                return cls(why=f"the process serving that address is {name} (pid {pid}), not ollama")
            environ = proc.environ()
        except psutil.AccessDenied:
            denied = (f"the environment of process {pid} is another user's (run oomvet as that user "
                      f"or root to read it)")
            return cls.of_readable(model_cmdlines(pid), log, why=denied)
        except psutil.Error as exc:
            return cls(why=f"process {pid} could not be read ({type(exc).__name__})")
        server = cls({k: v for k, v in environ.items() if k.startswith(SETTING_PREFIXES)}, source="environ")
        server.visible = {k: v for k, v in environ.items() if k in VISIBLE_VARS}
        return server

    @classmethod
    def of_readable(cls, cmdlines: Sequence[str], log: LogDigest | None = None, *,
                    why: str = "the server's environment was not read") -> ForeignServer:
        """The settings of a server whose environment is not readable, from
        what is: a running model process's command line (what is in effect,
        :func:`cmdline_settings`) over the ``server config`` line its log
        printed at its start (:func:`probes.serverlog.config_settings`), else
        the log's last model start of that run. A key none of them tells stays
        unknown; unknown altogether, with ``why``, when none says anything."""
        found: dict[str, str | None] = {}
        sources: dict[str, str] = {}
        live = [cmdline_settings(parse_cmdline(c)) for c in cmdlines]
        live = next((seen for seen in reversed(live) if seen), {})
        logged = config_settings(log.server_config, log.engine) if log is not None and log.server_config else {}
        started = cmdline_settings(log.cmdline or {}) if log is not None and not live else {}
        for layer, source in ((logged, "log"), (started, "log"), (live, "cmdline")):
            found.update(layer)
            sources.update({k: source for k in layer})
        if not found:
            return cls(why=why)
        env = {k: v for k, v in found.items() if v is not None}
        read_from = sorted(set(sources.values()))
        return cls(env, source=read_from[0] if len(read_from) == 1 else "cmdline+log", known=frozenset(found),
                   sources=sources, why=f"{why}; read instead from " + " and ".join(
                       {"cmdline": "its model process's command line", "log": "its log"}[s] for s in read_from))

    def knows(self, key: str) -> bool:
        """Whether the server's value of ``key`` (set or unset) is known."""
        return self._env is not None and (self.known is None or key in self.known)

    def source_of(self, key: str) -> str:
        """Where ``key``'s value came from: ``environ``, ``cmdline``, ``log``,
        ``told``; ``version default`` for a key a read environment leaves unset;
        ``unknown``."""
        if not self.knows(key):
            return "unknown"
        if key in self._sources:
            return self._sources[key]
        if key not in (self._env or {}) and self.source in ("environ", "told"):
            return "version default"
        return self.source

    def can_restart(self) -> bool:
        return False

    def restart(self, env: Mapping[str, str | None]) -> None:
        raise ProbeError("oomvet does not restart a server it did not start")

    def env(self) -> dict[str, str] | None:
        return None if self._env is None else dict(self._env)


def free_port() -> int:
    """A loopback port nobody listens on now (never the default 11434)."""
    while True:
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != DEFAULT_PORT:
            return port


def wait_until_up(host: str, timeout_s: float = 60.0, proc: subprocess.Popen | None = None) -> str:
    """Poll ``GET /api/version`` (``curl HOST/api/version``) until it answers;
    return the version string. ``proc``, the server just started: its exit
    ends the wait at once."""
    def running() -> None:
        if proc is not None and proc.poll() is not None:
            raise ServerUnreachable(f"ollama serve exited with code {proc.returncode} before answering")

    return Ollama(host).wait_until_up(timeout_s, check=running)


class ManagedServer:
    """``ollama serve`` started by oomvet on a free loopback port.

    Same as typing ``OLLAMA_HOST=127.0.0.1:PORT OLLAMA_MODELS=DIR ollama serve``.
    The server runs in its own process group, so stopping it also stops the
    ``ollama runner`` / ``llama-server`` children that hold the model. The
    caller's own ``OLLAMA_*`` and ``LLAMA_ARG_*`` settings are not inherited:
    only ``env`` sets them, so a rig behaves the same in every shell.
    """

    def __init__(self, ollama_bin: Path | str, models_dir: Path | str, *, log_path: Path | str | None = None,
                 env: Mapping[str, str] | None = None, port: int | None = None):
        self.ollama_bin = str(ollama_bin)
        self.models_dir = Path(models_dir)
        self.log_path = Path(log_path) if log_path else None
        self._extra_env = {k: str(v) for k, v in (env or {}).items()}
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.version: str | None = None

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def process_env(self) -> dict[str, str]:
        """Environment for ``ollama serve`` and for ``ollama`` CLI calls against it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(SETTING_PREFIXES)}
        env.update(OLLAMA_HOST=f"127.0.0.1:{self.port}", OLLAMA_MODELS=str(self.models_dir))
        env.update(self._extra_env)
        return env

    def start(self, timeout_s: float = 60.0) -> "ManagedServer":
        if self.proc is not None:
            return self
        self.models_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen([self.ollama_bin, "serve"], env=self.process_env(), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        try:
            self.version = wait_until_up(self.host, timeout_s, self.proc)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            children = []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout_s)
        # a runner that escaped the group (setsid) still belongs to us
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(children, timeout=timeout_s)

    # ServerControl: its settings are the ones oomvet started it with
    source = "oomvet"

    def can_restart(self) -> bool:
        return True

    def restart(self, env: Mapping[str, str | None]) -> None:
        """Restart with ``env`` on top of the current settings; a value of
        None removes that setting (an empty one would still be set: llama.cpp
        reads an empty ``LLAMA_ARG_*`` as a value and refuses it)."""
        self.stop()
        for k, v in env.items():
            if v is None:
                self._extra_env.pop(k, None)
            else:
                self._extra_env[k] = str(v)
        self.start()

    def env(self) -> dict[str, str]:
        return {k: v for k, v in self.process_env().items() if k.startswith(SETTING_PREFIXES)}

    def __enter__(self) -> "ManagedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
