"""Scenario files: one YAML page that describes a GPU, an Ollama server and its
models, and the faults to play.

This module reads and checks them, and nothing else. Every mistake in a file
is reported as one :class:`common.errors.ProbeError` line naming the file and
the field (``scenarios/x.yaml: models.neohorse-1:f16.weights: not a size:
'14.9 gigs'``), so a typo never turns into a confusing simulation. The format
is documented in ``docs/scenarios.md``; sizes use :func:`probes.units.parse_size`
and quantization levels :func:`probes.memmodel.bits_per_weight`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from probes import memmodel
from common.errors import ProbeError
from probes.serverinfo import engine_of
from probes.units import SizeError, parse_size
from oomsim.devspec import VENDORS, DeviceSpec, MigSpec, read_devices

__all__ = ["Scenario", "ScenarioError", "DeviceSpec", "MigSpec", "ModelSpec", "ServerSpec", "VENDORS",
           "load_scenario", "scenario_from_dict", "canonical"]
KV_TYPES = ("f16", "q8_0", "q4_0")
INCOHERENT_KINDS = ("repetitive", "garbled")
_SIZE_HINT = "e.g. 8GiB, 600MiB, 4.58GiB"
_DURATION = re.compile(r"^\s*-?\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h)?(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))*\s*$")


class ScenarioError(ProbeError):
    """A scenario file that cannot be played; one line naming file and field."""


@dataclass(frozen=True)
class HostSpec:
    """System RAM, where layers that do not fit on the GPU go."""

    total_bytes: int = 32 << 30
    used_bytes: int = 4 << 30


@dataclass(frozen=True)
class ServerSpec:
    """The server's environment at start; ``restart(env)`` changes it."""

    version: str = "0.11.4"
    num_parallel: int = 1
    flash_attention: bool | None = False   # None: not set (auto on the current engine)
    kv_cache_type: str = "f16"
    context_length: int | None = 4096      # None: not set (4096 legacy; VRAM tier current)
    gpu_overhead_bytes: int = 0
    keep_alive: str = "5m"
    fit_target_mib: int | None = None      # LLAMA_ARG_FIT_TARGET (current engine)
    sched_spread: bool = False             # OLLAMA_SCHED_SPREAD
    max_loaded_models: int = 0             # OLLAMA_MAX_LOADED_MODELS (0: 3 per GPU)


@dataclass(frozen=True)
class ModelSpec:
    tag: str                       # canonical "name:tag"
    arch: memmodel.Arch
    weights_bytes: int
    quantization: str              # Ollama level string, e.g. Q4_K_M
    family: str
    parameter_size: str
    embedding: bool = False        # an embedding model: /api/embed only, one slot

    @property
    def bits(self) -> float:
        return memmodel.bits_per_weight(self.quantization)


@dataclass(frozen=True)
class FaultSpec:
    leak_per_request_bytes: int = 0
    leak_per_minute_bytes: int = 0
    incoherent: Mapping[str, str] = field(default_factory=dict)   # tag -> repetitive | garbled
    peak_extra_bytes: int = 0
    runner_error: Mapping[str, str] = field(default_factory=dict)  # tag -> error text


@dataclass(frozen=True)
class TimingSpec:
    """Wall time the simulator spends, so a memory sampler sees each phase."""

    load_s: float = 0.05
    request_s: float = 0.25


@dataclass(frozen=True)
class Scenario:
    source: str
    device: DeviceSpec
    server: ServerSpec
    models: Mapping[str, ModelSpec]
    faults: FaultSpec = field(default_factory=FaultSpec)
    host: HostSpec = field(default_factory=HostSpec)
    timing: TimingSpec = field(default_factory=TimingSpec)
    description: str = ""
    devices: tuple[DeviceSpec, ...] = ()   # every card, in CUDA / ROCm order; ``device`` is the first

    def __post_init__(self) -> None:
        if not self.devices:
            object.__setattr__(self, "devices", (self.device,))

    def find(self, name: str) -> ModelSpec | None:
        """The model a request names; ``name`` without a tag means ``:latest``,
        and case does not matter, as in Ollama."""
        return self.models.get(canonical(name).lower())

    def with_timing(self, load_s: float = 0.0, request_s: float = 0.0) -> "Scenario":
        """The same scenario with other wall times (tests use 0)."""
        return replace(self, timing=TimingSpec(load_s, request_s))


def canonical(name: str) -> str:
    name = (name or "").strip()
    return name if ":" in name else f"{name}:latest"


# -- reading ---------------------------------------------------------------------

def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file; raises ScenarioError (one line)."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{where}: no such scenario file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{where}: cannot read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{where}: not valid YAML{at}: {problem}") from None
    return scenario_from_dict(data, where)


def scenario_from_dict(data: Any, source: str = "<scenario>") -> Scenario:
    """Check a parsed scenario (the YAML as Python data)."""
    r = _Reader(source)
    top = r.mapping(data, "", required=("server", "models"),
                    optional=("device", "devices", "faults", "host", "timing", "description"))
    devices = read_devices(r, top)
    server = _server(r, top["server"])
    models = _models(r, top["models"])
    faults = _faults(r, top.get("faults") or {}, models)
    host = _host(r, top.get("host") or {})
    timing = _timing(r, top.get("timing") or {})
    description = r.text(top.get("description", ""), "description", allow_empty=True)
    return Scenario(source, devices[0], server, models, faults, host, timing, description, devices)


class _Reader:
    """Field checks that all fail the same way: ``file: path: what``."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, what: str):
        # a key may hold a line break: escaped, so the error stays one line
        path = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in path)
        raise ScenarioError(f"{self.source}: {path + ': ' if path else ''}{what}")

    def mapping(self, value: Any, path: str, required=(), optional=()) -> dict:
        if not isinstance(value, Mapping):
            self.fail(path, f"must be a mapping (key: value), got {_kind(value)}")
        known = tuple(required) + tuple(optional)
        for key in value:
            if not isinstance(key, str):
                self.fail(path, f"keys must be text, got {key!r}")
            if known and key not in known:
                self.fail(_join(path, key), f"unknown key (known here: {', '.join(known)})")
        for key in required:
            if key not in value or value[key] is None:
                self.fail(_join(path, key), "missing")
        return dict(value)

    def size(self, value: Any, path: str, zero_ok: bool = False) -> int:
        if zero_ok and _is_zero_size(value):
            return 0
        if isinstance(value, bool) or value is None:
            self.fail(path, f"not a size: {value!r} ({_SIZE_HINT})")
        try:
            return parse_size(value)
        except SizeError:
            self.fail(path, f"not a size: {value!r} ({_SIZE_HINT})")

    def integer(self, value: Any, path: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be a whole number, got {value!r}")
        if value < minimum:
            self.fail(path, f"must be at least {minimum}, got {value}")
        return value

    def number(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            self.fail(path, f"must be a number of seconds (0 or more), got {value!r}")
        return float(value)

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"must be true or false, got {value!r}")
        return value

    def text(self, value: Any, path: str, allow_empty: bool = False) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            self.fail(path, f"must be text, got {value!r}")
        return value.strip()

    def choice(self, value: Any, path: str, choices: tuple) -> str:
        text = self.text(value, path).lower()
        if text not in choices:
            self.fail(path, f"must be one of {', '.join(choices)}, got {value!r}")
        return text


_ZERO = re.compile(r"^\s*0+(?:\.0*)?\s*(?:b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?\s*$", re.I)


def _is_zero_size(value: Any) -> bool:
    """``0``, ``"0"``, ``0MiB``, ``0 GiB``: a zero with any size unit (parse_size refuses zero)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == 0
    return isinstance(value, str) and bool(_ZERO.match(value))


def _is_current(version: str) -> bool:
    return engine_of(version) == "llama-server"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _server(r: _Reader, data: Any) -> ServerSpec:
    s = r.mapping(data, "server", optional=("version", "num_parallel", "flash_attention", "kv_cache_type",
                                            "context_length", "gpu_overhead", "keep_alive", "fit_target",
                                            "sched_spread", "max_loaded_models"))
    version = r.text(s.get("version", "0.11.4"), "server.version")
    current = _is_current(version)
    keep_alive = str(s.get("keep_alive", "5m"))
    if not _DURATION.match(keep_alive):
        r.fail("server.keep_alive", f"not a duration: {keep_alive!r} (e.g. 5m, 30s, -1)")
    return ServerSpec(
        version=version,
        num_parallel=r.integer(s.get("num_parallel", 1), "server.num_parallel", 1),
        flash_attention=(None if current and s.get("flash_attention") is None
                         else r.boolean(s.get("flash_attention", False), "server.flash_attention")),
        kv_cache_type=r.choice(s.get("kv_cache_type", "f16"), "server.kv_cache_type", KV_TYPES),
        context_length=(None if current and s.get("context_length") is None
                        else r.integer(s.get("context_length", 4096), "server.context_length", 4)),
        fit_target_mib=(r.integer(s["fit_target"], "server.fit_target", 0) if s.get("fit_target") is not None
                        else None),
        gpu_overhead_bytes=r.size(s.get("gpu_overhead", 0), "server.gpu_overhead", zero_ok=True),
        keep_alive=keep_alive,
        sched_spread=r.boolean(s.get("sched_spread", False), "server.sched_spread"),
        max_loaded_models=r.integer(s.get("max_loaded_models", 0), "server.max_loaded_models"),
    )


_ARCH_INTS = ("block_count", "head_count", "head_count_kv", "embedding_length", "context_length")
_ARCH_OPTIONAL = ("vocab_size", "key_length", "value_length", "sliding_window", "feed_forward_length")


def _models(r: _Reader, data: Any) -> dict[str, ModelSpec]:
    if not isinstance(data, Mapping) or not data:
        r.fail("models", "must map at least one tag to its model (e.g. neohorse-1:q4_K_M: {...})")
    models: dict[str, ModelSpec] = {}
    for tag, spec in data.items():
        tag = str(tag).strip()
        path = f"models.{tag}"
        if not tag or any(c.isspace() for c in tag):
            r.fail(path, "a tag must be one word like name:tag")
        m = r.mapping(spec, path, required=("arch", "weights", "quantization") + _ARCH_INTS,
                      optional=_ARCH_OPTIONAL + ("family", "parameter_size", "embedding"))
        ints = {k: r.integer(m[k], f"{path}.{k}", 1) for k in _ARCH_INTS}
        extra = {k: r.integer(m[k], f"{path}.{k}", 1) for k in _ARCH_OPTIONAL if m.get(k) is not None}
        if ints["head_count_kv"] > ints["head_count"]:
            r.fail(f"{path}.head_count_kv", "cannot be more than head_count")
        arch = memmodel.Arch(arch=r.text(m["arch"], f"{path}.arch").lower(), **ints, **extra)
        level = r.text(m["quantization"], f"{path}.quantization")
        try:
            memmodel.bits_per_weight(level)
        except ValueError:
            r.fail(f"{path}.quantization", f"unknown quantization level {level!r} "
                   "(an Ollama level: F16, Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0, Q3_K_M, Q2_K, ...)")
        weights = r.size(m["weights"], f"{path}.weights")
        key = canonical(tag).lower()
        if key in models:
            r.fail(path, "listed twice (tags are case-insensitive; no tag means :latest)")
        models[key] = ModelSpec(
            tag=canonical(tag), arch=arch, weights_bytes=weights, quantization=level.upper(),
            family=r.text(m.get("family", arch.arch), f"{path}.family"),
            parameter_size=r.text(m.get("parameter_size") or _param_size(weights, level), f"{path}.parameter_size"),
            embedding=r.boolean(m.get("embedding", False), f"{path}.embedding"),
        )
    return models


def _param_size(weights: int, level: str) -> str:
    params = weights * 8 / memmodel.bits_per_weight(level)
    return f"{params / 1e9:.1f}B" if params >= 1e9 else f"{params / 1e6:.0f}M"


def _faults(r: _Reader, data: Any, models: Mapping[str, ModelSpec]) -> FaultSpec:
    f = r.mapping(data, "faults", optional=("leak_per_request", "leak_per_minute", "incoherent",
                                            "peak_extra", "runner_error"))

    def tag_of(name: Any, path: str) -> str:
        key = canonical(str(name)).lower()
        if key not in models:
            r.fail(path, f"no model {name!r} in models")
        return models[key].tag

    incoherent: dict[str, str] = {}
    raw = f.get("incoherent") or []
    if isinstance(raw, (list, tuple)):
        for i, name in enumerate(raw):
            incoherent[tag_of(name, f"faults.incoherent[{i}]")] = "repetitive"
    elif isinstance(raw, Mapping):
        for name, kind in raw.items():
            path = f"faults.incoherent.{name}"
            incoherent[tag_of(name, path)] = r.choice(kind, path, INCOHERENT_KINDS)
    else:
        r.fail("faults.incoherent", "must be a list of tags, or tag: repetitive|garbled")
    errors: dict[str, str] = {}
    raw = f.get("runner_error") or {}
    if not isinstance(raw, Mapping):
        r.fail("faults.runner_error", "must map a tag to the error text its runner fails with")
    for name, text in raw.items():
        path = f"faults.runner_error.{name}"
        errors[tag_of(name, path)] = r.text(text, path)
    return FaultSpec(
        leak_per_request_bytes=r.size(f.get("leak_per_request", 0), "faults.leak_per_request", zero_ok=True),
        leak_per_minute_bytes=r.size(f.get("leak_per_minute", 0), "faults.leak_per_minute", zero_ok=True),
        incoherent=incoherent,
        peak_extra_bytes=r.size(f.get("peak_extra", 0), "faults.peak_extra", zero_ok=True),
        runner_error=errors,
    )


def _host(r: _Reader, data: Any) -> HostSpec:
    h = r.mapping(data, "host", optional=("total", "used"))
    total = r.size(h.get("total", 32 << 30), "host.total")
    used = r.size(h.get("used", 4 << 30), "host.used", zero_ok=True)
    if used >= total:
        r.fail("host.used", "must be less than host.total")
    return HostSpec(total, used)


def _timing(r: _Reader, data: Any) -> TimingSpec:
    t = r.mapping(data, "timing", optional=("load_s", "request_s"))
    return TimingSpec(r.number(t.get("load_s", 0.05), "timing.load_s"),
                      r.number(t.get("request_s", 0.25), "timing.request_s"))
