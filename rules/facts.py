"""The fact contract between intake, probes and the rules, in one place.

Facts are plain dicts with a ``kind``. Intake and the probes build them, the
rules read them, and everything posted to the knowledge base passes through
:func:`validate` first, so a probe that forgets a field fails loudly at the
boundary instead of silently matching no rule. Each kind is a pydantic model
here (strict: no coercion, ``True`` is not a size); a fact is checked against
its kind's model and comes back a plain dict again, holding only the fields it
was given. Sizes are bytes (int), times seconds (float). Extend a kind by adding
an optional field here; never fork it.

Facts are measurements, never verdicts: a probe posts what it read (a peak,
token counts, the kind of a failure, the figures of an answer) and whether the
server answered; whether that fits, was truncated, ran out of memory or is
coherent is a reading rule's decision (rules/readings.py), recorded per fact
(:meth:`rules.engine.Advisor.readings`). ``answered`` is the server's own
reply: every call the measurement made got one (a request the probe did not
send, because the load already told enough, is not a failure).
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

PHASES = ("load", "long_input", "concurrent", "slow", "creeping", "crash", "unknown")
CAUSES = ("weights", "kv_cache", "not_released", "concurrency", "not_memory")
ACTIONS = ("ask", "probe", "change", "done")
PROBES = ("reproduce", "baseline", "context", "quant", "backend", "stability")
TIERS = ("short", "medium", "long", "longer", "longest")
REMEDIES = ("context", "quant", "backend")
#: the kinds a probe measures: each is read by a reading rule, which gives its verdict
MEASUREMENTS = ("reproduction", "load", "tier", "quant_trial", "knob_trial", "stability")
# where Ollama put the model (/api/ps size_vram vs size); "partial"/"cpu" on a
# GPU is a memory shortage even without an error
PLACEMENTS = ("gpu", "partial", "cpu", None)

#: what a failed load or request was (probes/oomtext.py classifies; see there)
FAILURES = ("startup_oom", "runtime_oom", "killed", "crash", "config", "not_found", "engine_missing",
            "timeout", "busy", "error")
#: the failures that mean memory ran out
OOM_FAILURES = ("startup_oom", "runtime_oom", "killed")
ENGINES = ("runner", "llama-server")
#: why a request without num_ctx gets the context it gets
DEFAULT_CTX_WHY = ("vram_tier", "env", "modelfile", "legacy_default")
FLASH_ATTENTION = ("auto", "on", "off")
KNOBS = ("num_batch", "num_parallel", "kv_cache_type", "kv_cache_off")

#: the default of a field a fact may leave out. It is never a value: a fact
#: comes back with only the fields it was given, and ``None`` is a value only
#: where the type says ``| None`` (a probe that could not read a value says so
#: with None rather than inventing one)
ABSENT: Any = None

Num = Union[int, float]
Placement = Literal[PLACEMENTS]
#: what a failed load or request was (with the log line that said so in `oom_marker`)
Failure = Literal[FAILURES + (None,)]


class FactError(ValueError):
    """A fact that does not fit the contract; seen by developers, and by users
    only through a bug report (probes and intake build facts, not people)."""


class _Fact(BaseModel):
    # extra fields pass through untouched (the engine numbers facts with _seq)
    model_config = ConfigDict(strict=True, extra="allow")


class _Measurement(_Fact):
    # every measurement says whether its figures are measurements: False for a
    # failed reading, a source that cannot see the model, or a refused sanity
    # check, with the reason in `unmeasured`
    measured: bool = ABSENT
    unmeasured: str | None = ABSENT
    # models ollama ps listed at the step's idle reading and not at its end: Ollama evicted them
    evicted: list = ABSENT
    # bytes processes that are not Ollama's gained (negative: gave back) during the step;
    # left out of the step's figures, which are the model's share
    others_moved: int = ABSENT


class Symptom(_Fact):
    kind: Literal["symptom"]
    phase: Literal[PHASES]
    text: str
    error: str | None = ABSENT


class Target(_Fact):
    kind: Literal["target"]
    model: str | None
    want_ctx: int | None
    want_parallel: int | None
    budget: int | None
    keep_context: bool | None = ABSENT
    keep_concurrency: bool | None = ABSENT
    ctx_unset: bool | None = ABSENT  # True: the user's app sends no num_ctx (the server's default applies)
    upgraded_from: str | None = ABSENT  # an upgrade the user blames: the version it worked on, "" if not named


class Device(_Fact):
    kind: Literal["device"]
    name: str
    vendor: str  # nvidia / amd / apple / cpu / simulated
    total: int
    used_idle: int | None  # None: the idle reading failed
    unified: bool
    limit: int = ABSENT  # min(budget, what the device can give)
    source: str = ABSENT


class Load(_Measurement):
    kind: Literal["load"]
    model: str
    options: dict
    answered: bool
    error: str | None
    peak: int | None = ABSENT  # the highest usage above idle through the load
    size: int | None
    size_vram: int | None
    used_after: int | None
    used_settled: int | None
    drift_per_min: Num | None
    used_idle: int | None = ABSENT
    placement: Placement = ABSENT
    # quantization level of the loaded tag (/api/ps details.quantization_level,
    # e.g. "Q8_0"); the config's quant_type comes from here, never a guess
    level: str | None = ABSENT
    failure: Failure = ABSENT
    oom_marker: str | None = ABSENT


class Reproduction(_Measurement):
    """The user's setup as it runs (probes/reproduce.py): the model at the
    context they asked for, on the server's own settings, under the load
    their symptom names. Whether that failed is the rules' reading."""
    kind: Literal["reproduction"]
    model: str
    num_ctx: int | None  # None: the app sends none and the server did not say what it gave
    # the server's OLLAMA_NUM_PARALLEL as read, and where from; None: not read
    num_parallel: int | None
    parallel_from: str
    requests: int  # sent at once; 0: the load alone (a failure at load)
    phase: Literal[PHASES]
    answered: bool
    error: str | None
    peak: int | None
    used_idle: int | None = ABSENT
    size: int | None = ABSENT
    size_vram: int | None = ABSENT
    placement: Placement = ABSENT
    prompt_tokens: int | None = ABSENT  # the least any request had evaluated
    sent_tokens: int | None = ABSENT    # what each request's fill sent
    level: str | None = ABSENT
    failure: Failure = ABSENT
    oom_marker: str | None = ABSENT


class Tier(_Measurement):
    kind: Literal["tier"]
    name: str
    num_ctx: int
    prompt_tokens: int | None  # what the server evaluated
    peak: int | None
    answered: bool
    error: str | None
    model: str = ABSENT
    sent_tokens: int | None = ABSENT  # what the fill sent
    placement: Placement = ABSENT
    # model usage after load, after the first and after the second request
    # of the same size (the rules judge "released" from these)
    loaded_bytes: int | None = ABSENT
    after_first_bytes: int | None = ABSENT
    after_second_bytes: int | None = ABSENT
    # the peak through that second request; the tier's own peak is the fill's
    # (on llama-server the second prompt adds the first to its host-RAM prompt cache)
    second_request_peak: int | None = ABSENT
    failure: Failure = ABSENT
    oom_marker: str | None = ABSENT


class QuantTrial(_Measurement):
    kind: Literal["quant_trial"]
    tag: str
    level: str
    answered: bool
    # the memory read right after the load at num_ctx: the weights with the
    # KV cache and compute buffers (named as in DESIGN.md; shown as "after load")
    weights: int | None
    error: str | None = ABSENT
    # the figures of the answer to the fixed task (probes/coherence.py
    # measure; rules/coherence.py judges them)
    answer_chars: int = ABSENT
    repeat_share: Num = ABSENT
    garbled_share: Num = ABSENT
    done_reason: str | None = ABSENT
    last_char: str = ABSENT
    numbers_checked: int = ABSENT
    numbers_lost: int = ABSENT
    numbers_in_task: int = ABSENT
    numbers_invented: int = ABSENT
    code_spans: int = ABSENT
    code_spans_kept: int = ABSENT
    # how many answers the figures read (probes/coherence.py PATHS: the same task
    # answered new and cached; a loss counts where every answer shows it)
    answers: int = ABSENT
    task: Literal["first", "recheck"] = ABSENT  # which coherence task (probes/texts.py COHERENCE_TASKS)
    bits: Num | None = ABSENT
    peak: int | None = ABSENT
    num_ctx: int | None = ABSENT
    placement: Placement = ABSENT
    failure: Failure = ABSENT
    oom_marker: str | None = ABSENT


class KnobTrial(_Measurement):
    kind: Literal["knob_trial"]
    knob: Literal[KNOBS]
    old: int | str | None
    new: int | str | None
    peak: int | None
    answered: bool
    error: str | None = ABSENT
    applied: bool = ABSENT  # False: a server knob we could not change
    placement: Placement = ABSENT
    failure: Failure = ABSENT
    oom_marker: str | None = ABSENT


class Stability(_Measurement):
    kind: Literal["stability"]
    # the retest verifies a config only with a measured peak, so it must say
    # whether its peak was measured: a missing word is not a yes
    measured: bool
    # the server settings the retest needed that could not be confirmed in effect, and why
    unconfirmed: str | None = ABSENT
    config: dict
    eval_count: int | None
    done_reason: str | None
    answered: bool
    prompt_tokens: int | None = ABSENT  # what the server evaluated of the task
    task_tokens: int | None = ABSENT  # the task's own count, measured with room
    fill: Num | None = ABSENT  # the share of num_ctx the prompt was made to fill (long input)
    repeats: int = ABSENT  # requests sent one after another (memory that creeps)
    num_ctx: int | None = ABSENT  # the context the retest loaded
    at_once: int = ABSENT  # requests sent at the same time (the config's concurrency)
    load_eval_count: int | None = ABSENT  # tokens generated after the long input (its own answer)
    load_done_reason: str | None = ABSENT
    requests: int = ABSENT  # requests sent in all
    repeat_share: Num | None = ABSENT  # share of the output's word 4-grams that repeat
    errors: list
    peak: int | None = ABSENT
    failure: Failure = ABSENT
    oom_marker: str | None = ABSENT


class Server(_Fact):
    """The server oomvet talks to (probes/serverinfo.py). Every value it could
    not tell is None, with the reason in `unknown` (field -> why), never a guess."""
    kind: Literal["server"]
    version: str | None
    engine: Literal[ENGINES + (None,)]
    engine_why: str | None = ABSENT
    # the context a request without num_ctx gets, and why
    default_ctx: int | None
    default_ctx_why: Literal[DEFAULT_CTX_WHY + (None,)]
    vram_total: int | None = ABSENT  # what the VRAM tier was chosen from
    flash_attention: Literal[FLASH_ATTENTION + (None,)]
    kv_cache_type: str | None
    # the cache type the environment asks for where another is in effect (the legacy
    # runner keeps f16 without flash attention); None when what is asked is in effect
    kv_cache_asked: str | None = ABSENT
    num_parallel: int | None
    fit_target: int | None  # bytes llama.cpp's fit leaves free per device
    gpu_overhead: int | None = ABSENT  # OLLAMA_GPU_OVERHEAD as set (bytes)
    local: bool | None  # a process of this machine serves it
    sizes: Literal["estimate", "measured", None] = ABSENT  # /api/ps figures
    knobs: dict = ABSENT  # knob -> what it does on this version
    unknown: dict = ABSENT  # field -> why it is None
    # where its OLLAMA_*/LLAMA_ARG_* settings were read: "environ" (its process),
    # "cmdline" (its model process's command line: only some settings), "log"
    # (its log), "cmdline+log" (some from each: settings_sources says which),
    # "oomvet" (a server oomvet started),
    # "told"; None: not read (the values above say unknown)
    settings_from: str | None = ABSENT
    # setting -> where its value was read ("version default": unset in a read environment)
    settings_sources: dict | None = ABSENT


class Ledger(_Fact):
    """Who holds the memory with the model loaded (probes/ledger.py), from
    every source that says; a figure a source does not give is None."""
    kind: Literal["ledger"]
    model: str
    source: str | None
    total: int | None
    free: int | None
    in_use: int | None
    others: list  # [{pid, name, bytes}] processes that are not Ollama's
    others_total: int | None
    models: list  # [{name, bytes, this}] as ollama ps lists them
    ollama_seen: int | None  # Ollama's processes, as the memory source reads them
    buffers: dict | None  # this model's weights / kv_cache / compute / output, from the server log
    unaccounted: int | None  # in use - others - what ollama ps says the models hold
    devices: list = ABSENT  # [{label, name, total, used, free}] each card read apart, where there are several


class Log(_Fact):
    """What the server log said about one load or request (probes/serverlog.py)."""
    kind: Literal["log"]
    source: str  # a path, "journalctl -u ollama", "simulator"
    model: str | None = ABSENT
    engine: Literal[ENGINES + (None,)] = ABSENT
    cmdline: dict | None = ABSENT  # num_ctx, num_parallel, n_gpu_layers, cache types, ...
    buffers: list = ABSENT  # [{device, kind: model/KV/compute/output/RS, bytes}]
    fit: dict | None = ABSENT  # llama.cpp fit projection
    auto_backoff: dict | None = ABSENT  # {old_num_ctx, new_num_ctx}: Ollama shrank the context
    runtime_oom: bool = ABSENT  # Ollama expired every loaded model after an OOM
    ctx_clamped: dict | None = ABSENT  # {num_ctx, n_ctx_train}
    default_ctx: dict | None = ABSENT  # {total_vram, default_num_ctx}
    kv_needs_fa: bool = ABSENT  # quantized V cache refused without flash attention
    errors: list = ABSENT  # error lines, as logged
    oom_lines: list = ABSENT  # lines with an out-of-memory marker


class Answer(_Fact):
    """A user's reply to an `ask`."""
    kind: Literal["answer"]
    question: str
    value: str | int | float | bool | None


class ProbeDone(_Fact):
    """Posted by the session after a probe has posted all its facts, so the rules
    know the probe finished (a context probe may post 1..n tiers, a quant probe
    0..n trials); `ok: false` + `error` when the probe itself broke."""
    kind: Literal["probe_done"]
    probe: Literal[PROBES]
    ok: bool
    error: str | None = ABSENT
    skipped: bool = ABSENT  # the user declined it, or stopped it and chose to skip it: nothing was measured


class Refusal(_Fact):
    """The user will not take a recommended remedy; the rules move to the next
    one (an `answer` to `keep_context` with True refuses "context" the same way)."""
    kind: Literal["refusal"]
    remedy: Literal[REMEDIES]
    text: str | None = ABSENT


class Stop(_Fact):
    """The session cannot go on (the server went away, a probe broke in a way
    that leaves nothing to measure): the rules end with what was measured."""
    kind: Literal["stop"]
    reason: str
    by_user: bool = ABSENT  # the user stopped a probe (Ctrl-C, then "stop here"): nothing to fix


class Diagnosis(_Fact):
    kind: Literal["diagnosis"]
    cause: Literal[CAUSES]


class Next(_Fact):
    kind: Literal["next"]
    action: Literal[ACTIONS]


#: kind -> its model
KINDS: dict[str, type[_Fact]] = {
    get_args(m.model_fields["kind"].annotation)[0]: m
    for m in (Symptom, Target, Device, Reproduction, Load, Tier, QuantTrial, KnobTrial, Stability, Server, Ledger,
              Log, Answer, ProbeDone,
              Refusal, Stop, Diagnosis, Next)}
_FACT = TypeAdapter(Annotated[Union[tuple(KINDS.values())], Field(discriminator="kind")])


def validate(fact: Mapping[str, Any]) -> dict:
    """Return a plain-dict copy of ``fact`` if it fits the contract, else raise
    :class:`FactError` naming the kind and the field at fault."""
    if not isinstance(fact, Mapping):
        raise FactError(f"a fact must be a mapping, got {type(fact).__name__}")
    kind = fact.get("kind")
    if kind not in KINDS:
        raise FactError(f"unknown fact kind {kind!r} (known: {', '.join(KINDS)})")
    try:
        checked = _FACT.validate_python(dict(fact))
    except ValidationError as exc:
        raise FactError(_message(kind, exc.errors()[0], fact)) from None
    # unset optional fields stay absent (the rules test for absence), in the caller's order
    dumped = checked.model_dump(exclude_unset=True)
    return {name: dumped[name] for name in fact}


def _message(kind: str, error: dict, fact: Mapping[str, Any]) -> str:
    """The first problem pydantic found, said as the contract says it."""
    name = error["loc"][1]  # loc[0] is the kind, the union's tag
    if error["type"] == "missing":
        return f"{kind} fact is missing field {name!r}"
    types, choices = _expected(KINDS[kind].model_fields[name].annotation)
    value = fact[name]
    # bool is an int in Python; say so when True stood where a size was expected
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        expected = " or ".join("None" if t is type(None) else t.__name__ for t in types)
        return f"{kind}.{name} must be {expected}, got {type(value).__name__}"
    return f"{kind}.{name} must be one of {choices}, got {value!r}"


def _expected(annotation: Any) -> tuple[tuple[type, ...], tuple | None]:
    """The types a field takes and, for a Literal, its choices (None among them when nullable)."""
    args = get_args(annotation) or (annotation,)
    if getattr(annotation, "__origin__", None) is Literal:
        return tuple(dict.fromkeys(type(a) for a in args)), args
    literal = [a for a in args if getattr(a, "__origin__", None) is Literal]
    if literal:  # Literal[...] | None
        choices = get_args(literal[0]) + tuple(None for a in args if a is type(None))
        return tuple(dict.fromkeys(type(c) for c in choices)), choices
    return args, None
