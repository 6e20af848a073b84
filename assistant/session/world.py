"""Connecting a command to the world it measures: which server, which memory
source, which limit.

Three worlds, one shape: a user's own Ollama (``--host`` or ``OLLAMA_HOST``),
the rig's real Ollama with the NeoHorse-1 stand-ins (``--rig``, the embedded
default of the demo), or the GPU simulator (``--simulate SCENARIO``). Every
command reads its world flags once into :class:`WorldOptions` (the budget
already a :class:`probes.budget.Budget`), opens a :class:`World` from them
and hands its :class:`probes.base.ProbeEnv` to the probes, which never learn
which world they are in.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterator

from common.catalog import t
from common.errors import UsageError
from probes.base import ProbeEnv, known_keys
from probes.budget import Budget, Limit, parse_budget, resolve_limit
from probes.units import SizeError
from probes.memory.select import Selection, select_reader
from probes.ollama_api import Ollama
from probes.serverinfo import read_server
from probes.serverlog import find_log
from probes.serverlog import parse as parse_log
from probes.server import DEFAULT_HOST, SETTING_PREFIXES, ForeignServer, visible_env


def add_world_args(parser: argparse.ArgumentParser, *, model_required: bool = False) -> None:
    """The flags every measuring command shares."""
    parser.add_argument("--model", "-m", required=model_required, help="model tag, e.g. neohorse-1:q8_0")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--host", help=f"Ollama server URL (default: $OLLAMA_HOST or {DEFAULT_HOST})")
    where.add_argument("--rig", action="store_true",
                       help="use oomvet's own test Ollama with the NeoHorse-1 stand-ins (built and cached on first use)")
    where.add_argument("--simulate", metavar="SCENARIO", help="play a GPU + Ollama from a scenario file")
    parser.add_argument("--rig-version", metavar="V",
                        help="with --rig: 0.34.4 (current engine, default) or 0.11.4 (legacy); $OOMVET_RIG_VERSION")
    parser.add_argument("--rig-env", metavar="KEY=VALUE", action="append", type=rig_env_arg, default=[],
                        help="with --rig: start its server with this setting, as a user's server runs with it "
                             "(OLLAMA_* or LLAMA_ARG_*; repeat for more)")
    parser.add_argument("--budget", type=budget_arg,
                        help="memory cap for the model: 6GiB, 600MiB, 7.5G or 80%% of the device")
    # no argparse choices: select_reader() refuses a wrong name with the reason
    # (e.g. why /api/ps is not a measurement), in one line
    parser.add_argument("--memory-source", metavar="NAME",
                        help="force one memory source: nvml, nvidia-smi, rocm-smi or host (default: the first that works)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a probe gives up (default 900)")
    parser.add_argument("--hz", type=float, default=20.0, help="memory readings per second while sampling (default 20)")
    parser.add_argument("--server-log", metavar="PATH",
                        help="the Ollama server's log file, read as evidence (default: the rig's own log; "
                             "~/.ollama/logs/server.log on macOS; journalctl -u ollama on Linux when readable)")


def budget_arg(text: str) -> Budget:
    """``--budget``, parsed once as argparse reads it. A bad one is our usage
    error (one line, exit 2), not argparse's ValueError, which would bury the
    reason under a usage block."""
    try:
        return parse_budget(text)
    except SizeError as exc:
        raise UsageError(str(exc)) from None


def rig_env_arg(text: str) -> tuple[str, str]:
    """``--rig-env KEY=VALUE``: one server setting for the rig, refused in one line when it is not one."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key.startswith(SETTING_PREFIXES) or not key.replace("_", "").isalnum():
        raise UsageError(t("world.bad_rig_env", text=text))
    return key, value.strip()


@dataclass(frozen=True)
class WorldOptions:
    """The world flags (:func:`add_world_args`) of one command, typed and read once."""

    host: str | None = None
    rig: bool = False
    rig_version: str | None = None
    simulate: str | None = None            # a scenario file
    budget: Budget | None = None
    memory_source: str | None = None
    timeout_s: float = 900.0               # a probe gives up; also bounds each HTTP request
    hz: float = 20.0                       # memory readings per second while sampling
    server_log: str | None = None
    rig_env: tuple[tuple[str, str], ...] = ()   # --rig-env: the rig server's settings

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WorldOptions:
        return cls(host=args.host, rig=args.rig, rig_version=args.rig_version, simulate=args.simulate,
                   budget=args.budget, memory_source=args.memory_source, timeout_s=args.timeout, hz=args.hz,
                   server_log=args.server_log, rig_env=tuple(getattr(args, "rig_env", None) or ()))


def host_from(options: WorldOptions) -> str:
    host = options.host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST
    if "://" not in host:
        host = f"http://{host}"
    return host.rstrip("/")


@dataclass
class World:
    env: ProbeEnv
    selection: Selection
    limit: Limit
    budget: Budget | None
    kind: str                     # "ollama" | "rig" | "simulated"
    server_fact: dict | None = None   # what the server is (probes/serverinfo.py), posted to the rules first
    server_log: Any = None            # probes.serverlog.ServerLog, or None with log_why saying why not
    log_why: str = ""

    @property
    def host(self) -> str:
        return self.env.api.host

    def device_fact(self) -> dict:
        info = self.selection.reader.info()
        reading = self.selection.reader.read()
        total = int(info.total_bytes or 0)
        if info.vendor == "cpu" and self.budget is not None:
            # no GPU: the budget stands in for the card being planned for, so
            # shares of the device (gpu_memory_utilization) are shares of it
            total = int(self.limit.bytes)
        idle = reading.used_bytes
        return {"kind": "device", "name": info.name, "vendor": info.vendor, "total": total,
                "used_idle": None if idle is None else int(idle), "unified": bool(info.unified),
                "limit": int(self.limit.bytes), "source": info.source}


@contextlib.contextmanager
def open_world(options: WorldOptions, log=None) -> Iterator[World]:
    """Start (or reach) the server, pick the memory source, resolve the limit;
    stop whatever was started on the way out, Ctrl-C included."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    if options.rig_env and not options.rig:
        raise UsageError(t("world.rig_env_needs_rig"))
    budget = options.budget
    # --timeout bounds each request too: a hung server (SIGSTOP) ends in one line, not a wait forever
    http_timeout = options.timeout_s or 900.0
    with contextlib.ExitStack() as stack:
        nvml_lib = smi_runner = None
        server_pid = None
        if options.simulate:
            import oomsim as sim

            from probes.serverlog import MemoryLog

            handle = stack.enter_context(sim.start(options.simulate))
            api, control, kind = Ollama(handle.host), handle.control, "simulated"
            nvml_lib, smi_runner = handle.nvml, handle.smi_runner
            server_log, log_why = MemoryLog(lambda: handle.state.log), "the simulator's log"
        elif options.rig:
            try:
                from oomrig import Rig  # the test rig: the "rig" extra (gguf, numpy)
            except ModuleNotFoundError as exc:
                if exc.name not in ("oomrig", "gguf", "numpy"):
                    raise
                from common.errors import DependencyError

                raise DependencyError(t("world.no_rig", missing=exc.name)) from None

            rig = stack.enter_context(Rig(log=lambda m: log(f"[rig] {m}"), env=dict(options.rig_env),
                                          version=options.rig_version))
            api, control, kind = Ollama(rig.host, timeout_s=http_timeout), rig.server, "rig"
            server_pid = lambda: rig.server_pid  # noqa: E731  (follows restarts of the rig)
            server_log, log_why = find_log(options.server_log or rig.server.log_path)
        else:
            api, kind = Ollama(host_from(options), timeout_s=http_timeout), "ollama"
            server_pid = local_server(api.host)
            server_log, log_why = find_log(options.server_log) \
                if server_pid is not None or options.server_log else (None, "the server is elsewhere")
            control = None  # read below, with the log
        api.version()  # unreachable -> ServerUnreachable (exit 3) before anything else
        digest = parse_log(server_log.read()) if server_log is not None else None
        if control is None:
            # its settings as they are: its process's environment, else what its model
            # process's command line or its log's last model start shows; unknown otherwise
            control = ForeignServer.of_process(server_pid if server_pid not in (None, UNKNOWN_PID) else None,
                                               log=digest)
        blind = None
        if server_pid == UNKNOWN_PID:
            log(t("world.cannot_see_listener"))
            server_pid = None
        elif kind == "ollama" and server_pid is None:
            # no process of this machine serves that URL: this machine's memory says
            # nothing about it, so take what the server reports and never call it measured
            blind = t("world.blind", "en", host=api.host)  # the facts' language is English
            log(t("world.blind", host=api.host))
            selection = remote_selection(api.host)
        else:
            # the GPUs the server may use are its own *_VISIBLE_DEVICES', where they were read
            selection = select_reader(options.memory_source, server_pid=server_pid,
                                      nvml_lib=nvml_lib, smi_runner=smi_runner, env=visible_env(control))
        stack.callback(selection.reader.close)
        info = selection.reader.info()
        # memory a model already holds on the GPU is ours to reuse when probes reload it
        own = sum(m.size_vram_bytes for m in api.ps()) if info.vendor in ("nvidia", "amd") else None
        limit = resolve_limit(budget, info, selection.reader.read(), own_bytes=own)
        env = ProbeEnv(api=api, reader=selection.reader, limit_bytes=limit.bytes, device=info, control=control,
                       hz=options.hz, timeout_s=options.timeout_s,
                       on_gpu=info.vendor in ("nvidia", "amd"), blind=blind)
        server = read_server(api.version, env=control.env(), settings_from=control.source,
                             known=known_keys(control), sources=_sources(control),
                             log=digest,
                             vram_total=(info.total_bytes or 0) if env.on_gpu else (None if blind else 0),
                             local=blind is None)
        env.log = server_log
        if kind == "ollama" and blind is None:  # a user's server on this machine: say what was read
            log(_settings_line(control))
            if server.get("kv_cache_asked"):
                log(t("world.kv_ignored", asked=server["kv_cache_asked"], version=server.get("version")))
        yield World(env=env, selection=selection, limit=limit, budget=budget, kind=kind, server_fact=server,
                    server_log=server_log, log_why=log_why)


#: the settings the chat names, with where each was read
SHOWN_SETTINGS = ("OLLAMA_NUM_PARALLEL", "OLLAMA_KV_CACHE_TYPE", "OLLAMA_FLASH_ATTENTION", "OLLAMA_CONTEXT_LENGTH")


def _sources(control) -> dict[str, str] | None:
    """Where each setting that matters to memory was read (None: nothing was)."""
    if control.env() is None or not hasattr(control, "source_of"):
        return None
    keys = sorted(set(SHOWN_SETTINGS) | set(control.env()))
    return {k: control.source_of(k) for k in keys if k not in ("OLLAMA_HOST", "OLLAMA_MODELS")}


def _settings_line(control: ForeignServer) -> str:
    """The user's server settings as read, each with its source (or why they were not), one line."""
    settings = control.env()
    if settings is None:
        return t("world.settings_unknown", why=control.why)
    shown = []
    for key, source in (_sources(control) or {}).items():
        if source == "unknown":
            shown.append(t("world.setting_unknown", key=key))
        elif key in settings:
            shown.append(t("world.setting_from", key=key, value=settings[key], source=_from(source)))
        elif key in SHOWN_SETTINGS:
            shown.append(t("world.setting_unset", key=key, source=_from(source)))
    return t("world.settings_read", settings="; ".join(shown))


def _from(source: str) -> str:
    """A setting's source in the user's words (``version default`` -> ``world.from.version_default``)."""
    return t("world.from." + source.replace(" ", "_"))


def remote_selection(host: str) -> Selection:
    """The memory source for a server this machine cannot see: its own /api/ps."""
    from probes.memory.ollama_ps import OllamaPsReader
    from probes.memory.select import SourceStatus

    reader = OllamaPsReader(host, field="size")
    usable, reason = reader.probe()
    return Selection(reader, (SourceStatus(reader.name, usable, reason),),
                     "ollama-ps: the server is not on this machine, so only what it reports can be read",
                     "remote")


#: local_server() when this machine may not list listening sockets (an
#: unprivileged user on macOS): a loopback server is then taken as local
UNKNOWN_PID = -1


def local_server(host: str) -> int | None:
    """The pid of the ``ollama serve`` listening on a loopback ``host``, so the
    host memory source counts only that server's runners (not another Ollama
    on the machine); :data:`UNKNOWN_PID` when the sockets cannot be listed;
    None when no Ollama of this machine serves that URL (another host, or a
    proxy or tunnel in front of one: its figures are not this machine's)."""
    from urllib.parse import urlsplit

    import psutil

    parts = urlsplit(host)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1") or parts.port is None:
        return None
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == parts.port and conn.pid:
                return conn.pid if _is_ollama_server(conn.pid) else None
    except (psutil.Error, OSError):
        return UNKNOWN_PID
    return None


def _is_ollama_server(pid: int) -> bool:
    """``ollama serve`` (any path, ``ollama.exe`` too)."""
    import psutil

    try:
        cmd = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return False
    exe = (cmd[0].replace("\\", "/").rsplit("/", 1)[-1].lower() if cmd else "").removesuffix(".exe")
    return exe == "ollama" and "serve" in cmd[1:2]


def require_model(args) -> str:
    if not getattr(args, "model", None):
        raise UsageError("which model? pass --model TAG (e.g. --model neohorse-1:q8_0)")
    return args.model
