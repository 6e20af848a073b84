"""The figures of a lower-bit model's answer, from cheap deterministic reads.

Quantization damage shows up in recognisable ways before it shows up in
benchmarks: the model loops on a phrase, stops mid-sentence, emits garbage
characters, or quietly rewrites the numbers and code it was asked to keep.
:func:`measure` reads the figures each of those shows in (shares, counts, the
last character) from the answer to a fixed task; numbers and code are counted
against the higher-bit tag's answer to the same task, when there is one. It
judges nothing: which figures make an answer incoherent is the rules' reading
(rules/coherence.py, against rules/thresholds.py).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
_CODE = re.compile(r"`([^`\n]+)`")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_LIST_MARKER = re.compile(r"^\s*(\d+)[.)]\s", re.MULTILINE)


def repeat_share(text: str, n: int = 4, exclude: str | None = None) -> float:
    """Share of word n-grams that occur more than once (0 = no loop).
    ``exclude`` (the prompt): the answer's lines quoted from it are left
    out first, so an answer that quotes its long input (a small model given
    a long document often does) is not read as a model looping on its own
    words; a loop of words the input never held still counts. Measured on
    the rig: the 135M stand-in, given 5000 tokens, answers with two copies of
    the task's last lines (0.57 of its 4-grams repeat; 0 of its own)."""
    if exclude:
        text = "\n".join(line for line in text.splitlines() if not line.strip() or line.strip() not in exclude)
    grams = _grams(text, n)
    if len(grams) < 8:
        return 0.0
    counts = Counter(grams)
    repeated = sum(c for c in counts.values() if c > 1)
    return repeated / len(grams)


def _grams(text: str, n: int) -> list[tuple]:
    words = [w.lower() for w in _WORD.findall(text)]
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def garbled_share(text: str) -> float:
    if not text:
        return 0.0
    odd = sum(1 for ch in text if not (ch.isalnum() or ch.isspace() or _is_punct(ch)))
    return odd / len(text)


def _is_punct(ch: str) -> bool:
    return ch in ".,;:!?'\"()[]{}<>-_/\\|*#@&%$+=~^`，。；：！？、（）《》“”‘’…—·"


def _numbers(text: str) -> set[str]:
    return {m.group(0).replace(",", "") for m in _NUMBER.finditer(text)}


def measure(answer: str | Sequence[str], task: str, reference: str | Sequence[str] | None = None,
            done_reason: str | None = None) -> dict:
    """The figures of ``answer`` to ``task`` (``reference``: the higher-bit
    tag's answer), in the fields of a ``quant_trial`` fact.

    ``answer`` (and ``reference``) may be several answers of one tag to the
    same task, read on different paths through the runner (see :data:`PATHS`):
    then a number or a code span counts as kept where any answer kept it, and
    a sign of breakage (a loop, garbage, an empty answer, invented numbers)
    counts where any answer shows it. ``done_reason`` and the last character
    are the first answer's."""
    answers = [a.strip() for a in ([answer] if isinstance(answer, str) else answer)]
    references = None if reference is None else [reference] if isinstance(reference, str) else list(reference)
    text = answers[0]
    task_numbers = _numbers(task)
    reference_numbers = set().union(*(_numbers(r) for r in references)) if references else set()
    # numbers and code count only where the reference (the higher-bit tag, same
    # input) kept them: the question is what the quantization broke, not what
    # the model could never do
    checked = task_numbers & reference_numbers if references is not None else task_numbers
    kept_numbers = set().union(*(_numbers(a) for a in answers))
    markers = set().union(*(set(_LIST_MARKER.findall(a)) for a in answers))
    invented = set.intersection(*(_numbers(a) - task_numbers - reference_numbers - markers for a in answers))
    spans = set(_CODE.findall(task))
    if references is not None:
        spans = {span for span in spans if any(span in r for r in references)}
    return {
        "answer_chars": min(len(a) for a in answers),
        "repeat_share": round(max(repeat_share(a) for a in answers), 4),
        "garbled_share": round(max(garbled_share(a) for a in answers), 4),
        "done_reason": done_reason,
        "last_char": text[-1] if text else "",
        "numbers_checked": len(checked),
        "numbers_lost": len(checked - kept_numbers),
        "numbers_in_task": len(task_numbers),
        "numbers_invented": len(invented),
        "code_spans": len(spans),
        "code_spans_kept": sum(1 for span in spans if any(span in a for a in answers)),
        "answers": len(answers),
    }


#: how many answers each tag gives to the coherence task, and why more than
#: one. Greedy decoding is deterministic for one path through the runner, but
#: not across paths: on Ollama 0.11.4's runner (CPU) a quantized tag's first
#: answer to a new prompt (evaluated in one batch) and its answer to the same
#: prompt again (cached, its last token evaluated alone) take different
#: kernels, and at a near-tie a small model parts ways for good. Measured on
#: the rig (neohorse-1 Q8_0, num_ctx 8192, seed 11): the first answer dropped
#: all five numbers, the repeat kept every one, word for word Q4_1's answer;
#: with num_batch 1 a third answer. F16, and every tag on llama-server
#: (0.34.4), gave one answer on every path. So each tag answers twice (new,
#: then cached) and a loss counts only where both answers show it: damage
#: from fewer bits shows on every path, a near-tie on one.
PATHS = ("new", "cached")


# -- a measured signal where the server has one: token log-probabilities -----
#
# Ollama's /api/generate takes ``logprobs: true`` and ``top_logprobs: N``
# (api/types.go: GenerateRequest.Logprobs / TopLogprobs, 0-20) and answers
# with ``logprobs: [{token, logprob, top_logprobs: [{token, logprob}]}]``
# per generated token; older servers ignore the fields. With greedy decoding
# both tags follow the same text until they first choose differently, so the
# comparison runs over that shared prefix (and the position where they part).

TOP_LOGPROBS = 5


def logprob_steps(api, model: str, task: str, options: dict, top: int = TOP_LOGPROBS) -> list[dict] | None:
    """The per-token log-probabilities of ``model``'s answer to ``task``, or
    None when the server does not return them (``curl HOST/api/generate -d
    '{"model": M, "prompt": P, "logprobs": true, "top_logprobs": 5}'``)."""
    try:
        steps = api.logprobs(model, task, options, top)
    except Exception:  # noqa: BLE001  (a server that refuses the fields has no signal to give)
        return None
    return steps or None


def compare_logprobs(reference: list[dict], candidate: list[dict]) -> dict:
    """Raw agreement of a candidate with the reference (the rules judge it):
    ``agreement`` the share of the reference's positions where the candidate
    chose the same token before the two first parted, ``kl`` the mean KL
    divergence KL(reference || candidate) of the top-N distributions over
    the positions compared (renormalised on the reference's top tokens; a
    token missing from the candidate's top list gets its lowest logprob),
    ``positions`` how many positions were compared."""
    compared = 0
    same = 0
    kls = []
    for ref, cand in zip(reference, candidate):
        compared += 1
        kls.append(_kl(ref["top"] or {ref["token"]: ref["logprob"]}, cand["top"] or {cand["token"]: cand["logprob"]}))
        if ref["token"] != cand["token"]:
            break  # past here the two condition on different text
        same += 1
    return {"agreement": same / len(reference) if reference else None,
            "kl": sum(kls) / len(kls) if kls else None, "positions": compared}


def _kl(p_log: dict, q_log: dict) -> float:
    floor = min(q_log.values())
    p = {t: math.exp(v) for t, v in p_log.items()}
    q = {t: math.exp(q_log.get(t, floor)) for t in p_log}
    zp, zq = sum(p.values()), sum(q.values())
    return sum((pv / zp) * math.log((pv / zp) / (q[t] / zq)) for t, pv in p.items() if pv > 0)
