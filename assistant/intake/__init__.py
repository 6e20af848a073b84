"""Intake: what a user's free text (Chinese, English or both) tells us, as facts.

This is the assistant's front door. A person describes the trouble the way
people do in forum posts ("4060 8G，上下文开到 32k 就报 cudaMalloc failed",
"long prompts crash on my 24GB card") and :func:`parse` turns it into an
:class:`Intake`: the symptom phase, the model tag, the context, concurrency and
memory budget asked for, the GPU, the error text quoted from Ollama or CUDA,
and whether the context may shrink. It is deterministic: regular expressions
and a fixed precedence between phase cues, no network, so the same message
always yields the same facts and every phase comes with the cue that decided
it. Where no cue says *when*, a classifier fitted on the packaged development
corpus (``when_model``) may place it, and says so in the cue. It never raises
for any string; text it cannot read is phase ``unknown``. Optional help from a chat model lives in :mod:`assistant.intake_llm`.

Each field has a reader of its own in this package (``error_text``, ``model_names``,
``context``, ``parallel``, ``gpus``, ``sizes``, ``keep_context``, ``phase``); the cue
lists that are plain data live in ``lexicon/``. This module runs them in order,
each on the text the earlier ones left.
"""
from __future__ import annotations

import os
import re
from dataclasses import replace

from assistant.i18n import catalog
from assistant.intake.context import estimate_ctx, find_ctx
from assistant.intake.error_text import find_error
from assistant.intake.gpus import find_gpus
from assistant.intake.keep_context import find_keep_context
from assistant.intake.lang import detect_lang, has_words
from assistant.intake.model_names import find_model, normalise_model
from assistant.intake.parallel import find_parallel
from assistant.intake.phase import read_symptom
from assistant.intake.result import INTAKE_FIELDS, Intake, phase_text
from assistant.intake.sizes import find_budget, find_share, size_of
from assistant.intake.text import blank, normalise

__all__ = ["Intake", "detect_lang", "parse", "merge", "size_of", "normalise_model", "phase_text", "has_words", "INTAKE_FIELDS"]

MSG = catalog("intake")


def parse(text: str, tags: list[str] | None = None) -> Intake:
    """Read one message. ``tags`` are the models the server has (``/api/tags``
    names), when one is reachable: a name from that list found in the message
    is the model, as the server spells it. Never raises for a ``str``; anything
    else is read as empty."""
    if not isinstance(text, str):
        text = ""
    original = text
    try:
        return _parse(original, tuple(tags or ()))
    except Exception:  # noqa: BLE001 - the contract: intake never fails the chat
        if os.environ.get("OOMVET_RAISE"):  # tests: see the real bug, as the CLI does
            raise
        return Intake(lang=_safe_lang(original), text=original)


def _safe_lang(text: str) -> str:
    try:
        return detect_lang(text)
    except Exception:  # noqa: BLE001
        return "en"


_LONG_DIGITS = re.compile(r"\d{16,}")


def _parse(original: str, tags: tuple[str, ...] = ()) -> Intake:
    norm = normalise(original)
    error, error_spans = find_error(norm)
    # no size, context or count has 16 digits; hiding such runs (hashes, pasted
    # tensors) also keeps every number pattern linear in the length of a paste
    scrubbed = blank(norm, error_spans + [m.span() for m in _LONG_DIGITS.finditer(norm)])
    model, model_spans, model_sure = find_model(scrubbed, tags)
    numbers = blank(scrubbed, model_spans)  # "phi3:3.8b-mini-128k" is a name, not a context
    gpus = find_gpus(numbers)
    no_gpus = blank(numbers, [(s, e) for s, e, _ in gpus])
    want_ctx = find_ctx(no_gpus)
    estimated = None
    if want_ctx is None:
        estimated = estimate_ctx(no_gpus)
    else:
        guess = estimate_ctx(no_gpus)
        if guess and guess > want_ctx:
            estimated = guess
    want_parallel = find_parallel(numbers)
    budget = find_budget(numbers, gpus)
    share, allowed = find_share(numbers)
    if allowed:
        budget = None
    elif budget is not None:
        share = None
    when, what, phase, cue, learned = read_symptom(norm, numbers, error, want_parallel)
    return Intake(
        lang=detect_lang(original),
        phase=phase,
        model=model,
        want_ctx=estimated or want_ctx,
        want_parallel=want_parallel,
        budget=budget,
        gpu=gpus[0][2] if gpus else None,
        error=error,
        keep_context=find_keep_context(numbers),
        text=original,
        phase_cue=cue,
        when=when,
        what=what,
        budget_share=share,
        ctx_estimated=bool(estimated),
        when_learned=learned,
        weak=tuple(name for name, guessed in (("model", model is not None and not model_sure),
                                               ("want_ctx", bool(estimated)),
                                               ("phase", when == "unknown" or learned)) if guessed),
    )


def merge(base: Intake, newer: Intake) -> Intake:
    """A chat is several messages: what ``newer`` says overrides, what it leaves
    out is kept. The language stays the one of the first message that had words."""
    changes = {name: getattr(newer, name) for name in INTAKE_FIELDS if getattr(newer, name) is not None}
    if newer.want_ctx is not None:
        changes["ctx_estimated"] = newer.ctx_estimated
    if newer.budget is not None:
        changes["budget_share"] = None
    elif newer.budget_share is not None:
        changes["budget"] = None
    # a phase the learned reader gave does not replace one a cue gave earlier
    guess_over_cue = newer.when_learned and base.phase != "unknown" and not base.when_learned
    if newer.phase != "unknown" and not guess_over_cue:
        changes.update(phase=newer.phase, phase_cue=newer.phase_cue, when=newer.when, what=newer.what,
                       when_learned=newer.when_learned)
    changes["weak"] = tuple(name for name in ("model", "want_ctx", "phase")
                            if name in (newer.weak if name in changes else base.weak))
    if not has_words(base.text):
        changes["lang"] = newer.lang
    changes["text"] = "\n".join(part for part in (base.text, newer.text) if part)
    return replace(base, **changes)
