"""Is a lower-bit model's answer still sound? Cheap, deterministic checks.

Quantization damage shows up in recognisable ways before it shows up in
benchmarks: the model loops on a phrase, stops mid-sentence, emits garbage
characters, or quietly rewrites the numbers and code it was asked to keep.
Each check here looks for one of those in the answer to a fixed task. Numbers
and code are compared with the answer of the higher-bit tag to the same
task, when there is one: only what it kept can be held against a lower bit. Limits are module constants so the rules' thresholds doc can cite them.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

# share of repeated word 4-grams above which an answer "loops"
REPEAT_NGRAM_LIMIT = 0.35
# share of characters that are neither letters, digits, CJK, punctuation nor space
GARBLE_CHAR_LIMIT = 0.08
# share of the numbers the reference kept that the answer may lose; more is a rewrite
LOST_NUMBERS_LIMIT = 0.5

_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
_CODE = re.compile(r"`([^`\n]+)`")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_LIST_MARKER = re.compile(r"^\s*(\d+)[.)]\s", re.MULTILINE)
_SENTENCE_END = re.compile(r"[.!?。！？:：)\]`\"'*|]\s*$")


@dataclass(frozen=True)
class Coherence:
    coherent: bool
    issues: tuple[str, ...] = field(default_factory=tuple)
    repeat_share: float = 0.0

    def to_dict(self) -> dict:
        return {"coherent": self.coherent, "issues": list(self.issues), "repeat_share": round(self.repeat_share, 3)}


def repeat_share(text: str, n: int = 4) -> float:
    """Share of word n-grams that occur more than once (0 = no loop)."""
    words = [w.lower() for w in _WORD.findall(text)]
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    if len(grams) < 8:
        return 0.0
    counts = Counter(grams)
    repeated = sum(c for c in counts.values() if c > 1)
    return repeated / len(grams)


def garbled_share(text: str) -> float:
    if not text:
        return 0.0
    odd = sum(1 for ch in text if not (ch.isalnum() or ch.isspace() or _is_punct(ch)))
    return odd / len(text)


def _is_punct(ch: str) -> bool:
    return ch in ".,;:!?'\"()[]{}<>-_/\\|*#@&%$+=~^`，。；：！？、（）《》“”‘’…—·"


def _numbers(text: str) -> set[str]:
    return {m.group(0).replace(",", "") for m in _NUMBER.finditer(text)}


def check(answer: str, task: str, reference: str | None = None, done_reason: str | None = None) -> Coherence:
    """Check ``answer`` to ``task``; ``reference`` is the higher-bit tag's answer."""
    issues: list[str] = []
    text = answer.strip()
    if not text:
        return Coherence(False, ("empty answer",))
    share = repeat_share(text)
    if share > REPEAT_NGRAM_LIMIT:
        issues.append(f"repetition: {share:.0%} of 4-word sequences repeat")
    garbled = garbled_share(text)
    if garbled > GARBLE_CHAR_LIMIT:
        issues.append(f"garbled text: {garbled:.0%} odd characters")
    if done_reason == "stop" and not _SENTENCE_END.search(text):
        issues.append("unfinished sentence at the end")
    # Numbers and code are held against the answer only where the reference
    # (the higher-bit tag, same input) kept them: the question is what the
    # quantization broke, not what the model could never do.
    task_numbers = _numbers(task)
    kept_by_reference = task_numbers & _numbers(reference) if reference is not None else task_numbers
    answer_numbers = _numbers(text)
    if kept_by_reference:
        lost = kept_by_reference - answer_numbers
        if len(lost) / len(kept_by_reference) > LOST_NUMBERS_LIMIT:
            issues.append(f"numbers rewritten or lost: {', '.join(sorted(lost)[:5])}")
    markers = set(_LIST_MARKER.findall(text))
    invented = answer_numbers - task_numbers - (_numbers(reference) if reference else set()) - markers
    if len(invented) > max(2, len(task_numbers) // 2):
        issues.append(f"numbers not in the input: {', '.join(sorted(invented)[:5])}")
    spans = set(_CODE.findall(task))
    if reference is not None:
        spans = {span for span in spans if span in reference}
    if spans and not any(span in text for span in spans):
        issues.append("code span rewritten: " + ", ".join(sorted(spans)[:3]))
    return Coherence(not issues, tuple(issues), share)
