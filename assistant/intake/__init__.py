"""Intake: what a user's free text (Chinese, English or both) tells us, as facts.

This is the assistant's front door. A person describes the trouble the way
people do in forum posts ("4060 8G，上下文开到 32k 就报 cudaMalloc failed",
"long prompts crash on my 24GB card") and :func:`parse` turns it into an
:class:`Intake`: the symptom phase, the model tag, the context, concurrency and
memory budget asked for, the GPU, the error text quoted from Ollama or CUDA,
and whether the context may shrink. It is deterministic: regular expressions
and a fixed precedence between phase cues, no network, so the same message
always yields the same facts and every phase comes with the cue that decided
it. Where no cue says *when* or *what*, or the size grammar finds no budget,
readers fitted on the packaged development corpus (:mod:`learned`) may, and
``Intake.learned`` names the fields they gave. It never raises for any
string; text it cannot read is phase ``unknown``. Optional help from a chat
model lives in :mod:`assistant.intake.llm`.

Every field read also carries the class of evidence it came from and, where
the message supports other values, those (``Intake.evidence``,
``Intake.alternatives``): :mod:`confidence` says from them which fields are
sure and which the chat must ask (issue 33), and :func:`settle` makes a
user's answer the field's value.

Each field has a reader of its own in this package (``error_text``, ``model_names``,
``context``, ``parallel``, ``gpus``, ``sizes``, ``keep_context``, ``phase``); the cue
lists that are plain data live in ``lexicon/``. This module runs them in order,
each on the text the earlier ones left.
"""
from __future__ import annotations

import os
from dataclasses import replace

from assistant.intake.context import ctx_sizes, estimate_ctx, find_ctx
from assistant.intake import budget_model, confidence, learned
from assistant.intake.gpus import find_gpus
from assistant.intake.app_ctx import find_ctx_unset
from assistant.intake.keep_context import find_keep_context
from assistant.intake.upgrade import find_upgraded_from
from assistant.intake.lang import detect_lang, has_words
from assistant.intake.model_names import normalise_model
from assistant.intake.parallel import parallel_counts
from assistant.intake.phase import read_symptom
from assistant.intake.result import INTAKE_FIELDS, Intake, phase_text
from assistant.intake.scrub import scrub
from assistant.intake.sizes import budget_sizes, card_count, find_share, size_of
from assistant.intake.text import blank

__all__ = ["Intake", "detect_lang", "parse", "merge", "without_budget", "settle", "size_of", "normalise_model", "phase_text", "has_words", "INTAKE_FIELDS"]


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


def _parse(original: str, tags: tuple[str, ...] = ()) -> Intake:
    seen = scrub(original, tags)
    error, model, numbers = seen.error, seen.model, seen.numbers
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
    par_seen = parallel_counts(numbers)
    want_parallel = max(par_seen) if par_seen else None
    sizes = budget_sizes(numbers, gpus)
    budget = next((min(kind) for kind in sizes.values() if kind), None)
    share, allowed = find_share(numbers)
    if allowed:
        budget = None
    elif budget is not None:
        share = None
    taught = ()
    if budget is None and share is None:
        found = learned.guess_budget(numbers)
        if found is not None:
            budget, taught = found.value, ("budget",)
    symptom = read_symptom(seen, want_parallel)
    taught = symptom.learned + taught
    keep = find_keep_context(numbers)
    top_when = learned.top("when", learned.view("when", seen)) if symptom.phase != "unknown" else None
    classes, others = confidence.evidence(
        phase=symptom.phase, when=symptom.when, what=symptom.what, cue=symptom.cue, taught=symptom.learned,
        top_when=top_when, model=model, model_sure=seen.model_sure, budget=budget, share=share,
        budget_taught="budget" in taught, sizes=sizes, other_sizes=[v for _, _, v in budget_model.candidates(numbers)],
        cards=card_count(numbers),
        ctx=estimated or want_ctx, ctx_estimated=bool(estimated), ctx_seen=ctx_sizes(no_gpus),
        parallel=want_parallel, par_seen=par_seen, keep_context=keep)
    return Intake(
        lang=detect_lang(original),
        phase=symptom.phase,
        model=model,
        want_ctx=estimated or want_ctx,
        want_parallel=want_parallel,
        budget=budget,
        gpu=gpus[0][2] if gpus else None,
        error=error,
        keep_context=keep,
        ctx_unset=find_ctx_unset(original),
        upgraded_from=find_upgraded_from(original),
        text=original,
        phase_cue=symptom.cue,
        when=symptom.when,
        what=symptom.what,
        budget_share=share,
        ctx_estimated=bool(estimated),
        learned=taught,
        weak=tuple(name for name, guessed in (("model", model is not None and not seen.model_sure),
                                               ("want_ctx", bool(estimated)),
                                               ("budget", "budget" in taught),
                                               ("phase", symptom.when == "unknown" or "when" in taught)) if guessed),
        evidence=classes,
        alternatives=others,
    )


def without_budget(read: Intake) -> Intake:
    """``read`` with no budget, and no mark of a learned one (``learned``,
    ``weak``): for a guess the user replaced, dropped or confirmed, or one a
    limit already in force leaves no place for."""
    return replace(_forget(read, "budget"), budget=None, budget_share=None,
                   learned=tuple(name for name in read.learned if name != "budget"),
                   weak=tuple(name for name in read.weak if name != "budget"))


def _forget(read: Intake, field: str) -> Intake:
    """``read`` with no evidence or other readings kept for ``field``."""
    return replace(read, evidence=tuple(p for p in read.evidence if p[0] != field),
                   alternatives=tuple(p for p in read.alternatives if p[0] != field))


def settle(read: Intake, field: str, value) -> Intake:
    """``read`` with ``field`` set to what the user answered (a budget in
    bytes or a :class:`~assistant.session.answers.Share`-like fraction under
    ``budget_share``): their word, sure, with no other readings left.
    ``None`` drops the field (the user does not know, or none applies)."""
    if field == "budget":
        read = without_budget(read)
        fraction = getattr(value, "fraction", None)
        changes = {"budget_share": fraction} if fraction is not None else {"budget": value}
    elif field == "phase":
        read = _forget(read, field)
        changes = dict(phase=value or "unknown", phase_cue="your answer" if value else None,
                       when=_WHEN_OF_PHASE.get(value, "unknown"), what=read.what if value else "unknown",
                       learned=tuple(n for n in read.learned if n not in ("when", "what")),
                       weak=tuple(n for n in read.weak if n != "phase"))
    else:
        read = _forget(read, field)
        changes = {field: value, "weak": tuple(n for n in read.weak if n != field)}
        if field == "want_ctx":
            changes["ctx_estimated"] = False
    read = replace(read, **changes)
    if value is None:
        return read
    return replace(read, evidence=read.evidence + ((field, confidence.USER),))


_WHEN_OF_PHASE = {"load": "load", "long_input": "long_input", "concurrent": "concurrent", "creeping": "over_time"}


def merge(base: Intake, newer: Intake) -> Intake:
    """A chat is several messages: what ``newer`` says overrides, what it leaves
    out is kept, except that a learned reading (``Intake.learned``) never
    replaces what an earlier message said in words. The language stays the one
    of the first message that had words."""
    def guess_over_said(name: str) -> bool:
        return name in newer.learned and name not in base.learned

    changes = {name: getattr(newer, name) for name in INTAKE_FIELDS if getattr(newer, name) is not None}
    if newer.want_ctx is not None:
        changes["ctx_estimated"] = newer.ctx_estimated
    if "budget" in newer.learned and (base.budget is not None or base.budget_share is not None):
        changes.pop("budget", None)
    elif newer.budget is not None:
        changes["budget_share"] = None
    elif newer.budget_share is not None:
        changes["budget"] = None
    # a phase a learned reader gave does not replace one a cue gave earlier
    phase_guessed = guess_over_said("when") or newer.when == "unknown" and guess_over_said("what")
    if newer.phase != "unknown" and not (phase_guessed and base.phase != "unknown"):
        changes.update(phase=newer.phase, phase_cue=newer.phase_cue, when=newer.when, what=newer.what)
    taken_from_newer = {"when", "what"} if "phase" in changes else set()
    if "budget" in changes:
        taken_from_newer.add("budget")
    changes["learned"] = tuple(name for name in ("when", "what", "budget")
                               if name in (newer.learned if name in taken_from_newer else base.learned))
    changes["weak"] = tuple(name for name in ("model", "want_ctx", "budget", "phase")
                            if name in (newer.weak if name in changes else base.weak))
    # each field's evidence is that of the message its value came from
    from_newer = {field for field in confidence.FIELDS if field in changes and field != "budget"}
    if changes.get("budget") is not None or changes.get("budget_share") is not None:
        from_newer.add("budget")
    for name in ("evidence", "alternatives"):
        changes[name] = tuple(p for p in getattr(base, name) if p[0] not in from_newer) + \
            tuple(p for p in getattr(newer, name) if p[0] in from_newer)
    if not has_words(base.text):
        changes["lang"] = newer.lang
    changes["text"] = "\n".join(part for part in (base.text, newer.text) if part)
    return replace(base, **changes)
