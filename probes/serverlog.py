"""The Ollama server log as evidence: where to read it, and what its lines say.

Ollama writes its own slog ``key=value`` lines and, unchanged, what its model
process prints (v0.11.x ``ollama runner``, v0.30+ ``llama-server``). This
module finds the log (a path given with ``--server-log`` or by the rig,
``journalctl -u ollama`` on Linux when permitted, ``~/.ollama/logs/server.log``
on macOS, the simulator's in-memory log), reads just the lines one load or
request wrote (:meth:`ServerLog.offset` before, :meth:`ServerLog.lines_since`
after), and turns them into a ``log`` fact: the model process's real command
line, the buffer sizes per device, llama.cpp's fit projection, Ollama's
automatic context back-off, its runtime-OOM expiry, a clamped context, and the
error and out-of-memory lines behind a generic failure. It reads; it never
decides what a line means for the diagnosis (that is the rules' job).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from probes.oomtext import oom_marker
from probes.units import parse_size

MIB = 1 << 20

# --- parsing ---------------------------------------------------------------------

# llama.cpp's buffer lines; match the "... buffer size =" part, not the function prefix,
# which changes between llama.cpp versions (llama_context / sched_reserve / llama_kv_cache[_unified])
_BUFFER = re.compile(r"(?:^|:)\s*(?P<device>[A-Za-z][\w-]*?)\s+(?P<kind>model|KV|compute|output|RS)\s+buffer size\s*="
                     r"\s*(?P<mib>\d+(?:\.\d+)?)\s*MiB")
# the Go engine's (v0.11.x ollamarunner: gemma3, ...) own lines for the same buffers
_GO_BUFFER = re.compile(r'msg="(?P<kind>model weights|compute graph)"[^\n]*?(?:buffer|buffer_type)=(?P<device>\S+)'
                        r'[^\n]*? size="?(?P<size>\d+(?:\.\d+)? ?[KMGT]?i?B)')
_GO_KIND = {"model weights": "model", "compute graph": "compute"}
_START = re.compile(r'msg="starting llama[- ]server" cmd="(?P<cmd>[^"]*)"')
_FIT_PROJECTED = re.compile(r"projected to use (?P<use>\d+) MiB of (?P<what>device|host) memory vs\. "
                            r"(?P<avail>\d+) MiB of (?P<kind>free device|total host|free host) memory")
_FIT_LEAVE = re.compile(r"will leave (?P<leave>-?\d+) >= (?P<target>\d+) MiB")
_FIT_SHORT = re.compile(r"cannot meet free memory target of (?P<target>\d+) MiB, need to reduce device memory by "
                        r"(?P<need>\d+) MiB")
_OFFLOADED = re.compile(r"offloaded (?P<gpu>\d+)/(?P<total>\d+) layers to GPU")
_BACKOFF = re.compile(r"reducing automatic context and retrying once")
#: the server's start: every setting it runs with, defaults filled in (both engines)
_CONFIG = re.compile(r'msg="server config" env="map\[(?P<env>.*)\]"')
_CONFIG_ITEM = re.compile(r"(?:^| )(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?P<value>\[[^\]]*\]|\S*)")
_CLAMP = re.compile(r"requested context size too large for model")
_DEFAULT = re.compile(r'msg="vram-based default context" total_vram="?(?P<vram>[^" ]+(?: [KMGT]?i?B)?)"? '
                      r"default_num_ctx=(?P<ctx>\d+)")
_RUNTIME_OOM = "runtime oom detected"
_KV_NEEDS_FA = "quantized v cache requires flash_attn"
_ERROR_LINE = re.compile(r"level=ERROR|\berror:|GGML_ASSERT|panic:|fatal error:|\bCUDA error|\bROCm error|"
                         r"error loading model|failed to load model|exiting due to|msg=\"Load failed\"|"
                         r"llama-server terminated|llama runner terminated|Unsupported cache type|"
                         r"error while handling environment variable", re.I)

#: command-line flags of both engines' model process -> the log fact's cmdline key
_FLAGS = {
    "-c": "ctx_total", "--ctx-size": "ctx_total",
    "-np": "num_parallel", "--parallel": "num_parallel",
    "-ngl": "n_gpu_layers", "--n-gpu-layers": "n_gpu_layers",
    "--cache-type-k": "cache_type_k", "--cache-type-v": "cache_type_v", "--kv-cache-type": "cache_type_k",
    "--flash-attn": "flash_attn",
    "-b": "batch", "--batch-size": "batch", "-ub": "ubatch",
    "--load-mode": "load_mode", "--model": "model_path",
}
_INT_KEYS = ("ctx_total", "num_parallel", "n_gpu_layers", "batch", "ubatch")


def config_settings(config: dict, engine: str | None) -> dict[str, str | None]:
    """What a ``server config`` line (:attr:`LogDigest.server_config`) says of
    the settings memory depends on: ``{key: value}``, None meaning unset. The
    line prints every variable with its default filled in, so an unset one
    and one set to the default look alike; where that matters it is left out
    (unknown): ``OLLAMA_FLASH_ATTENTION:false`` is unset (auto) or 0 on
    llama-server, whose difference is memory."""
    out: dict[str, str | None] = {}
    parallel = config.get("OLLAMA_NUM_PARALLEL")
    if parallel is not None and parallel.isdigit():
        out["OLLAMA_NUM_PARALLEL"] = parallel
    if "OLLAMA_KV_CACHE_TYPE" in config:
        out["OLLAMA_KV_CACHE_TYPE"] = config["OLLAMA_KV_CACHE_TYPE"] or None
    fa = str(config.get("OLLAMA_FLASH_ATTENTION", "")).lower()
    if fa == "true":
        out["OLLAMA_FLASH_ATTENTION"] = "1"
    elif fa == "false" and engine == "runner":  # off whether unset or 0
        out["OLLAMA_FLASH_ATTENTION"] = None
    for key in ("OLLAMA_CONTEXT_LENGTH", "OLLAMA_GPU_OVERHEAD", "OLLAMA_MAX_LOADED_MODELS"):
        value = config.get(key)
        if value is not None and value.isdigit():
            out[key] = None if value == "0" else value
    if "LLAMA_ARG_FIT_TARGET" in config:
        out["LLAMA_ARG_FIT_TARGET"] = config["LLAMA_ARG_FIT_TARGET"] or None
    return out


def parse_cmdline(cmd: str) -> dict:
    """The model process's settings from its command line (either engine).
    ``num_ctx`` is per slot (``-c`` is num_ctx x parallel); flags not given
    are absent, so "not passed" (e.g. no ``-ngl``: fit decides) stays visible."""
    try:
        argv = shlex.split(cmd)
    except ValueError:
        argv = cmd.split()
    out: dict = {"engine": "llama-server" if argv and Path(argv[0]).name.startswith("llama-server")
                 else "runner" if "runner" in argv[:3] else None}
    i = 1
    while i < len(argv):
        arg = argv[i]
        key = _FLAGS.get(arg)
        if key == "flash_attn" and (i + 1 >= len(argv) or argv[i + 1].startswith("-")):
            out[key] = "on"  # v0.11.x passes a bare --flash-attn
            i += 1
            continue
        if key and i + 1 < len(argv):
            value = argv[i + 1]
            if key not in _INT_KEYS:
                out[key] = value
            elif re.fullmatch(r"-?[0-9]+", value):
                out[key] = int(value)
            # a number flag whose value is not a number says nothing: left out, as if not passed
            i += 2
            continue
        if arg == "--no-mmap":
            out["load_mode"] = "none"
        i += 1
    if out.get("cache_type_k") and "cache_type_v" not in out and out["engine"] == "runner":
        out["cache_type_v"] = out["cache_type_k"]
    if isinstance(out.get("ctx_total"), int):
        out["num_ctx"] = out["ctx_total"] // max(int(out.get("num_parallel") or 1), 1)
    return out


def _kv(line: str, key: str) -> str | None:
    m = re.search(rf'\b{re.escape(key)}=("([^"]*)"|\S+)', line)
    if not m:
        return None
    return m.group(2) if m.group(2) is not None else m.group(1)


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and re.fullmatch(r"-?[0-9]+", text) else None


@dataclass
class LogDigest:
    """What a run of log lines says; :meth:`fact` is the ``log`` fact."""

    cmdline: dict | None = None
    buffers: list = field(default_factory=list)
    fit: dict | None = None
    auto_backoff: dict | None = None
    runtime_oom: bool = False
    ctx_clamped: dict | None = None
    default_ctx: dict | None = None
    kv_needs_fa: bool = False
    errors: list = field(default_factory=list)
    oom_lines: list = field(default_factory=list)
    offloaded: dict | None = None
    #: the last ``server config`` line's map (its start: a model start before it is another run's)
    server_config: dict | None = None
    lines: int = 0

    @property
    def engine(self) -> str | None:
        return (self.cmdline or {}).get("engine")

    def buffer_total(self, device: str | None = None, kind: str | None = None) -> int | None:
        """Bytes of the buffers logged (one device and/or kind); None if none were."""
        sizes = [b["bytes"] for b in self.buffers
                 if (device is None or b["device"] == device) and (kind is None or b["kind"] == kind)]
        return sum(sizes) if sizes else None

    def fact(self, source: str, model: str | None = None) -> dict:
        return {"kind": "log", "source": source, "model": model, "engine": self.engine, "cmdline": self.cmdline,
                "buffers": list(self.buffers), "fit": self.fit, "auto_backoff": self.auto_backoff,
                "runtime_oom": self.runtime_oom, "ctx_clamped": self.ctx_clamped, "default_ctx": self.default_ctx,
                "kv_needs_fa": self.kv_needs_fa, "errors": list(self.errors), "oom_lines": list(self.oom_lines)}


def parse(lines: Iterable[str]) -> LogDigest:
    """Read a run of server log lines (both engines). When a run holds more
    than one model start, buffers and fit are those of the last one."""
    d = LogDigest()
    for raw in lines:
        line = raw.rstrip("\n")
        d.lines += 1
        low = line.lower()
        m = _CONFIG.search(line)
        if m:  # the server (re)started: what an earlier run loaded says nothing of this one
            d.server_config = {c.group("key"): c.group("value") for c in _CONFIG_ITEM.finditer(m.group("env"))}
            d.cmdline, d.default_ctx = None, None
            d.buffers, d.fit, d.offloaded = [], None, None
            continue
        m = _START.search(line)
        if m:
            d.cmdline = parse_cmdline(m.group("cmd"))
            d.buffers, d.fit, d.offloaded = [], None, None
            continue
        m = _BUFFER.search(line)
        if m:
            d.buffers.append({"device": m.group("device"), "kind": m.group("kind"),
                              "bytes": int(round(float(m.group("mib")) * MIB))})
            continue
        m = _GO_BUFFER.search(line)
        if m:
            d.buffers.append({"device": m.group("device"), "kind": _GO_KIND[m.group("kind")],
                              "bytes": parse_size(m.group("size").replace(" ", ""))})
            continue
        m = _FIT_PROJECTED.search(line)
        if m:
            d.fit = dict(d.fit or {}, projected=int(m.group("use")) * MIB, available=int(m.group("avail")) * MIB,
                         memory=m.group("what"))
            continue
        m = _FIT_LEAVE.search(line) or _FIT_SHORT.search(line)
        if m and "common_params_fit" in line:
            fit = dict(d.fit or {})
            fit["target"] = int(m.group("target")) * MIB
            if "need" in m.groupdict():
                fit["short_by"] = int(m.group("need")) * MIB
            else:
                fit["leaves"] = int(m.group("leave")) * MIB
            d.fit = fit
            continue
        m = _OFFLOADED.search(line)
        if m:
            d.offloaded = {"gpu": int(m.group("gpu")), "total": int(m.group("total"))}
            d.fit = dict(d.fit or {}, layers_gpu=int(m.group("gpu")), layers_total=int(m.group("total")))
        if _BACKOFF.search(line):
            d.auto_backoff = {"old_num_ctx": _int(_kv(line, "old_num_ctx")),
                              "new_num_ctx": _int(_kv(line, "new_num_ctx"))}
        if _RUNTIME_OOM in low:
            d.runtime_oom = True
        if _CLAMP.search(line):
            d.ctx_clamped = {"num_ctx": _int(_kv(line, "num_ctx")), "n_ctx_train": _int(_kv(line, "n_ctx_train"))}
        m = _DEFAULT.search(line)
        if m:
            d.default_ctx = {"total_vram": m.group("vram"), "default_num_ctx": int(m.group("ctx"))}
        if _KV_NEEDS_FA in low:
            d.kv_needs_fa = True
        if oom_marker(line) or _RUNTIME_OOM in low:
            d.oom_lines.append(line[:500])
        elif _ERROR_LINE.search(line) and "level=warn" not in low:
            d.errors.append(line[:500])
    return d


# --- reading -----------------------------------------------------------------------

class ServerLog:
    """A place the server log can be read. ``offset()`` marks now;
    ``lines_since(mark)`` returns what was written after it."""

    source = "?"

    def offset(self):  # pragma: no cover - interface
        raise NotImplementedError

    def lines_since(self, offset) -> list[str]:  # pragma: no cover - interface
        raise NotImplementedError

    def read(self) -> list[str]:
        return self.lines_since(None)


class FileLog(ServerLog):
    """A log file (the rig's, ``--server-log PATH``, macOS's server.log).
    The offset is a byte position; a file that shrank (rotated) is read from its start."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.source = str(self.path)

    def offset(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def lines_since(self, offset: int | None) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                start = offset if offset is not None and 0 <= offset <= size else 0
                fh.seek(start)
                data = fh.read()
        except OSError:
            return []
        return data.decode("utf-8", errors="replace").splitlines()


class MemoryLog(ServerLog):
    """A log kept in memory (the simulator's): ``lines()`` returns all lines so far."""

    def __init__(self, lines: Callable[[], Sequence[str]], source: str = "simulator"):
        self._lines = lines
        self.source = source

    def offset(self) -> int:
        return len(self._lines())

    def lines_since(self, offset: int | None) -> list[str]:
        lines = list(self._lines())
        return lines[offset or 0:] if offset is not None and offset <= len(lines) else lines


class JournalLog(ServerLog):
    """``journalctl -u ollama`` (Linux, when this user may read the journal).
    The offset is a journal cursor."""

    source = "journalctl -u ollama"

    def __init__(self, unit: str = "ollama", run: Callable[[list[str]], str] | None = None):
        self.unit = unit
        self._run = run or _run_text

    def _query(self, extra: list[str]) -> list[str]:
        out = self._run(["journalctl", "-u", self.unit, "--no-pager", "-o", "cat", "--show-cursor", *extra])
        lines = out.splitlines()
        if lines and lines[-1].startswith("-- cursor:"):
            self._cursor = lines[-1].split(":", 1)[1].strip()
            lines = lines[:-1]
        return lines

    def offset(self) -> str | None:
        self._cursor = None
        self._query(["-n", "0"])
        return self._cursor

    def lines_since(self, offset: str | None) -> list[str]:
        return self._query(["--after-cursor", offset] if offset else ["-n", "5000"])


def _run_text(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout


def find_log(path: str | Path | None = None, *, platform: str = sys.platform, home: Path | None = None,
             which: Callable[[str], str | None] = shutil.which,
             run: Callable[[list[str]], str] | None = None) -> tuple[ServerLog | None, str]:
    """Where this server's log can be read: ``(log, how)``, or ``(None, why not)``.

    ``path``: given by the user (``--server-log``) or by oomvet for a server it
    started (the rig's log file); it must exist. Otherwise macOS's
    ``~/.ollama/logs/server.log``, then on Linux the journal of the ``ollama``
    unit if it can be read. Only the first two are certain to be the server
    oomvet talks to; the journal is the system service's.
    """
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            return None, f"no server log at {p}"
        return FileLog(p), f"the file {p}"
    home = home or Path.home()
    if platform == "darwin":
        p = home / ".ollama" / "logs" / "server.log"
        if p.is_file():
            return FileLog(p), f"the file {p}"
        return None, f"no {p} (Ollama.app writes it there)"
    if platform.startswith("linux"):
        if which("journalctl") is None:
            return None, "no journalctl here; pass --server-log PATH"
        journal = JournalLog(run=run)
        try:
            lines = journal._query(["-n", "1"])
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"journalctl -u ollama cannot be read ({exc.__class__.__name__}); pass --server-log PATH"
        if not lines:
            return None, "journalctl -u ollama has no lines (no ollama service, or no permission); " \
                         "pass --server-log PATH"
        return journal, "journalctl -u ollama"
    return None, f"no known server log location on {platform}; pass --server-log PATH"
