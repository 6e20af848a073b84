"""What a valid ``oomvet.yaml`` holds, as pydantic models, one message per problem.

The models say the shape: the keys of each section, each value's type and
bounds. :func:`problems_of` validates a parsed doc against them and says each
problem pydantic finds with a message from the catalog
(``common/messages/assistant/config.yaml``) and the dotted path of its key, so the
loader can put the line number in front. Each value's validator turns any error
inside it into that value's one message, so one bad value gives one line. What
no single value can say, that the values agree with each other and with the
``ollama:`` section, is checked after, on the values that are themselves fine.
"""
from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal, Mapping, Optional

from pydantic import (
    BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WrapValidator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from assistant.config.knobs import KV_CACHE_TYPES, OLLAMA_ENV_VARS, OLLAMA_OPTIONS, VOCAB, env_is_on, env_text
from common.catalog import t
from rules.facts import CAUSES

# GGUF file types as Ollama reports them in details.quantization_level, plus the
# names other backends' tags use for the same idea (the method speaks of both).
QUANT_TYPES = frozenset({
    "F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1",
    "Q4_K_M", "Q4_K_S", "Q4_0", "Q4_1", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K", "Q2_K_S",
    "IQ4_NL", "IQ4_XS", "IQ3_M", "IQ3_S", "IQ3_XS", "IQ3_XXS", "IQ2_M", "IQ2_S",
    "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4",
    "INT8", "INT4", "FP8", "FP4", "8BIT", "4BIT",
})

# plausible upper bounds: beyond these a value is a typo, not a setting
LIMITS = {
    "max_context_len": (1, 1 << 24),
    "max_batch_size": (1, 1 << 20),
    "max_concurrency": (1, 4096),
}

_MODEL_NAME = re.compile(
    r"^(?:\w[\w.:-]*/)?(?:\w[\w-]*/)?\w[\w.-]{0,79}(?::\w[\w.-]{0,79})?$", re.ASCII)


# ---------------------------------------------------------------- the values

def _says(message: str, out_of_range: str | None = None, found=None, **fixed) -> WrapValidator:
    """A value's validator: any error inside the value is one problem, ``message``
    (``out_of_range`` for a value of the right type outside its bounds)."""

    def wrap(value: Any, handler) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            kind = exc.errors()[0]["type"]
            # NaN is not a number to compare: it is the wrong kind of value, not out of range
            key = out_of_range if out_of_range and kind in _RANGE_ERRORS and value == value else message
            raise PydanticCustomError(key, key, {"value": value, "found": (found or _kind)(value), **fixed}) from None

    return WrapValidator(wrap)


_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _one_of(choices) -> Any:
    return Literal[tuple(choices)]


def _name(choices, message: str) -> Any:
    """A key of a section that must be one of ``choices`` (the message suggests the nearest)."""
    return Annotated[_one_of(choices), _says(message, near=choices)]


def _count(key: str) -> Any:
    lo, hi = LIMITS[key]
    return Optional[Annotated[int, Field(ge=lo, le=hi), _says("config.int_type", "config.int_range", lo=lo, hi=hi)]]


def _step_found(step: Any) -> str:
    return "{" + ", ".join(map(str, step)) + "}" if isinstance(step, Mapping) else _kind(step)


# quantization names are known in any case (q4_k_m is Q4_K_M)
_Upper = BeforeValidator(lambda name: name.upper() if isinstance(name, str) else name)
_Size = Optional[Annotated[int, Field(ge=0), _says("config.size_bad")]]
_Text = Optional[Annotated[str, _says("config.text_type")]]
_EnvValue = Annotated[Optional[str | int | float | bool], _says("config.env_value")]


# ---------------------------------------------------------------- the sections

# the sections whose every key is known are models that refuse any other; in the
# others (typed dicts) whatever a session writes beside the checked keys is kept
_STRICT = ConfigDict(strict=True)


class _Closed(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class Ollama(_Closed):
    from_: Any = Field(None, alias="from")
    parameters: Optional[dict[_name(OLLAMA_OPTIONS, "config.param_unknown"), Any]] = None
    options: Optional[dict[_name(OLLAMA_OPTIONS, "config.param_unknown"), Any]] = None
    env: Optional[dict[_name(OLLAMA_ENV_VARS, "config.env_unknown"), _EnvValue]] = None
    optional_env: Optional[dict[_name(OLLAMA_ENV_VARS, "config.env_unknown"), _EnvValue]] = None
    knobs: Optional[dict[_name(VOCAB, "config.unknown_key"), Annotated[str, _says("config.knob_text")]]] = None


class Diagnosis(_Closed):
    cause: Optional[Annotated[_one_of(CAUSES), _says("config.cause_unknown", choices=", ".join(CAUSES))]] = None
    summary: _Text = None
    advice: _Text = None
    advice_key: Any = None
    reproduction: _Text = None  # what the user's own setup did when it was run first, in words
    reproduced: Any = None      # the same, as figures: verdict, num_ctx, num_parallel, requests, peak, error
    findings: Any = None        # what the user must see beside the cause, in words (a list)
    choice: _Text = None        # what chose the config over the alternatives, in words


class Step(TypedDict):
    __pydantic_config__ = _STRICT
    n: int
    action: Annotated[str, Field(min_length=1)]


class Device(TypedDict, total=False):
    __pydantic_config__ = _STRICT
    total: _Size


class Evidence(TypedDict, total=False):
    __pydantic_config__ = _STRICT
    limit: _Size
    readings: Optional[dict[Any, _Size]]
    device: Optional[Device]


class Generated(_Closed):
    by: Any = None
    at: Any = None
    host: Any = None


class OomvetConfig(_Closed):
    """A whole oomvet.yaml; the fields in the order a reader meets their problems."""
    fits: Annotated[bool, _says("config.bool_type")] = True
    verified: Annotated[bool, _says("config.bool_type")]
    unverified: Optional[Annotated[str, _says("config.str_type")]] = None
    unmet: Optional[Annotated[list[_one_of(VOCAB)], _says("config.unmet_type")]] = None
    model: Optional[Annotated[str, Field(pattern=_MODEL_NAME), _says("config.model_bad")]]
    max_context_len: _count("max_context_len")
    max_batch_size: _count("max_batch_size")
    max_concurrency: _count("max_concurrency")
    quant_type: Optional[Annotated[_one_of(QUANT_TYPES), _Upper, _says("config.quant_unknown")]]
    kv_cache: Optional[Annotated[_one_of(KV_CACHE_TYPES), _says("config.kv_unknown")]]
    gpu_memory_utilization: Optional[Annotated[float, Field(gt=0, le=1),
                                               _says("config.util_type", "config.util_range")]] = None
    ollama: Optional[Ollama] = None
    # the other answers measured beside the config (report/alternatives.py alternatives_doc)
    alternatives: Any = None
    diagnosis: Optional[Diagnosis] = None
    steps: Optional[list[Annotated[Step, _says("config.step_bad", found=_step_found)]]] = None
    evidence: Optional[Evidence] = None
    generated: Optional[Generated] = None


def _keys(model: type[BaseModel]) -> tuple:
    return tuple(field.alias or name for name, field in model.model_fields.items())


TOP_KEYS = VOCAB + tuple(key for key in _keys(OomvetConfig) if key not in VOCAB)
REQUIRED = tuple(key for key in TOP_KEYS if OomvetConfig.model_fields[key].is_required())
DIAGNOSIS_KEYS = _keys(Diagnosis)
#: the model of each closed section by its key path: its keys are the known ones, in their order
_SECTIONS = {(): OomvetConfig, ("ollama",): Ollama, ("diagnosis",): Diagnosis, ("generated",): Generated}
# an entry of a section (a name in ollama.env, ...): the message names the section and the entry
_ENTRY_MESSAGES = ("config.param_unknown", "config.env_unknown", "config.env_value")


# ---------------------------------------------------------------- checking

def check_config(doc: Any, lang: str | None = None) -> list[str]:
    """Every problem in a parsed doc, one line each (empty = valid)."""
    return [message for _, message in problems_of(doc, lang)]


def problems_of(doc: Any, lang: str | None) -> list[tuple[str, str]]:
    """``(dotted key path, message)`` for every problem, in the order a reader
    meets them: unknown and missing keys, then the values in the models'
    order, each section's unknown keys first. The path lets the loader point a
    message at its line."""
    if not isinstance(doc, Mapping):
        return [("", t("config.not_mapping", lang, found=_kind(doc)))]
    try:
        OomvetConfig.model_validate(dict(doc))
        errors = []
    except ValidationError as exc:
        errors = exc.errors()
    found, refused = [], set()
    for error in errors:
        loc = error["loc"]
        if loc[-1] == "[key]":
            loc = loc[:-1]
            refused.add(loc)
        elif loc in refused:
            continue  # an entry whose name is refused says only that
        loc = _own_keys(doc, loc)
        order = ([-1, REQUIRED.index(loc[0])], 0) if error["type"] == "missing" else _order(loc)
        # a missing key has no line of its own: it is pointed at its section
        found.append((order, _path(loc[:-1] if error["type"] == "missing" else loc), _message(error, loc, lang)))
    found += _disagreements(doc, {path for _, path, _ in found}, lang)
    found.sort(key=lambda problem: problem[0])
    return [(path, message) for _, path, message in found]


def _message(error: dict, loc: tuple, lang: str | None) -> str:
    kind, value = error["type"], error["input"]
    path = _path(loc)
    if kind in ("extra_forbidden", "invalid_key"):
        return t("config.unknown_key", lang, field=path if len(loc) > 1 else loc[0],
                 suggest=_suggest(loc[-1], _keys(_SECTIONS[loc[:-1]]), lang))
    if kind == "missing":
        return t("config.missing_key", lang, field=loc[-1])
    if kind in ("model_type", "dict_type"):
        return t("config.section_type", lang, field=path, found=_kind(value))
    if kind == "list_type":
        return t("config.list_type", lang, field=path, found=_kind(value))
    # a value's own message (_says)
    values = dict(error["ctx"], field=_path(loc[:-1]) if kind in _ENTRY_MESSAGES else path, name=loc[-1], i=loc[-1])
    if "near" in values:
        values["suggest"] = _suggest(loc[-1], values["near"], lang)
    return t(kind, lang, **values)


def _order(loc: tuple, after: int = 0) -> tuple[list[int], int]:
    """Where a problem at ``loc`` comes: by each section's key order, its unknown
    keys first; ``after`` 1 puts a disagreement after the problems of its key."""
    order = []
    for depth, part in enumerate(loc):
        section = _SECTIONS.get(loc[:depth])
        if section is None:
            break  # entries of a mapping or list keep their own order
        keys = _keys(section)
        order.append(keys.index(part) if part in keys else -1)
    return order, after


def _disagreements(doc: Mapping, flagged: set[str], lang: str | None) -> list:
    """The values that disagree, among those that are themselves fine: one bad
    value gives one line, not one per knob that follows from it."""
    out = []

    def bad(slot: tuple, path: str, message_key: str, /, **values) -> None:
        out.append((_order(slot, 1), path, t(message_key, lang, **values)))

    verified, reason = doc.get("verified"), doc.get("unverified")
    if verified is True and doc.get("fits") is False:
        bad(("verified",), "verified", "config.verified_not_fits")
    if verified is True and isinstance(reason, str) and reason:
        bad(("unverified",), "unverified", "config.verified_with_reason")
    for key in VOCAB:
        # an empty value is fine in a config that does not fit; utilization is optional anyway
        if key in doc and doc[key] is None and doc.get("fits") is not False and key != "gpu_memory_utilization":
            bad((key,), key, "config.value_missing", field=key)
    section = doc.get("ollama")
    if not isinstance(section, Mapping):
        return out
    values = {key: None if key in flagged else doc.get(key) for key in VOCAB}
    model = values["model"]
    if "from" in section and isinstance(model, str) and section["from"] != model:
        bad(("ollama", "from"), "ollama.from", "config.from_mismatch", got=section["from"], want=model)
    for part in ("parameters", "options"):
        params = section.get(part)
        for name, vocab in (("num_ctx", "max_context_len"), ("num_batch", "max_batch_size")):
            want = values[vocab]
            if isinstance(params, Mapping) and name in params and want is not None and params[name] != want:
                bad(("ollama", part), f"ollama.{part}.{name}", "config.param_mismatch", field=f"ollama.{part}",
                    name=name, got=params[name], vocab=vocab, want=want)
    env = section.get("env")
    _env_disagreements(env if isinstance(env, Mapping) else {}, values, bad)
    return out


def _env_disagreements(envs: Mapping, values: Mapping, bad) -> None:
    """The server variables that carry a value must say what the value says
    (listed after both env sections)."""
    slot = ("ollama", "optional_env")
    parallel = values.get("max_concurrency")
    if "OLLAMA_NUM_PARALLEL" in envs and isinstance(parallel, int) \
            and env_text(envs["OLLAMA_NUM_PARALLEL"]) != str(parallel):
        bad(slot, "ollama.env.OLLAMA_NUM_PARALLEL", "config.env_mismatch", name="OLLAMA_NUM_PARALLEL",
            got=env_text(envs["OLLAMA_NUM_PARALLEL"]), vocab="max_concurrency", want=str(parallel))
    kv = values.get("kv_cache")
    if kv in KV_CACHE_TYPES:
        have = envs.get("OLLAMA_KV_CACHE_TYPE")
        if have is not None and env_text(have) != kv:
            bad(slot, "ollama.env.OLLAMA_KV_CACHE_TYPE", "config.env_mismatch", name="OLLAMA_KV_CACHE_TYPE",
                got=env_text(have), vocab="kv_cache", want=kv)
        # a quantized cache the section does not set is one the server already runs (the files write
        # only what differs); one it sets must not come with flash attention forced off
        elif kv != "f16" and have is not None and "OLLAMA_FLASH_ATTENTION" in envs \
                and not env_is_on(envs.get("OLLAMA_FLASH_ATTENTION", "")):
            bad(slot, "ollama.env", "config.kv_needs_fa", value=kv)


# ---------------------------------------------------------------- shared by the checks

def _own_keys(doc: Mapping, loc: tuple) -> tuple:
    """``loc`` with the doc's own keys: pydantic writes a key that is not text
    as a number or as its repr (``true:`` as 1, ``null:`` as 'None')."""
    node, own = doc, []
    for part in loc:
        if isinstance(node, Mapping):
            same = [key for key in node if key == part] or [key for key in node if repr(key) == part]
            part = same[0] if same else part
            node = node.get(part)
        else:
            node = node[part] if isinstance(node, list) and isinstance(part, int) and part < len(node) else None
        own.append(part)
    return tuple(own)


def _path(loc: tuple) -> str:
    return ".".join(map(str, loc))


def _suggest(name: Any, choices, lang) -> str:
    close = difflib.get_close_matches(str(name), sorted(choices), n=1, cutoff=0.6)
    return t("config.did_you_mean", lang, name=close[0]) if close else ""


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, str):
        return f"the text {value!r}"
    return f"{type(value).__name__} {value!r}"
