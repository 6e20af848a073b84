"""The fixed texts every probe sends, shipped with oomvet so runs compare.

The method needs the *same* input across tiers, tags and configs; these are
it. ``fill_prompt`` repeats one paragraph to reach a token count, which is
measured on the server itself (``prompt_eval_count``), not guessed.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=None)
def text(name: str) -> str:
    return resources.files("probes").joinpath("data", name).read_text(encoding="utf-8")


def stability_task() -> str:
    return text("stability_task.md")


#: the coherence tasks, by name: ``first`` for every quant trial, ``recheck``
#: (other words, other numbers, another command) when the rules re-check a
#: level whose verdict contradicts a lower level's
COHERENCE_TASKS = {"first": "coherence_task.txt", "recheck": "coherence_recheck.txt"}


def coherence_task(name: str = "first") -> str:
    return text(COHERENCE_TASKS[name])


def fill_prompt(units: int, nonce: str) -> str:
    """``units`` numbered copies of the context paragraph, then a question.
    ``nonce`` goes first so no two prompts share a cached prefix."""
    return filled(units, nonce, "Which remark appears in the records? Answer in one sentence.")


def filled(units: int, nonce: str, task: str, numbered: bool = True) -> str:
    """``task`` after ``units`` copies of the context paragraph (a long
    document before the question, as a long-input user sends), numbered as
    records or (``numbered=False``) all alike, so that each costs exactly the
    same tokens and the whole prompt's count follows from two short ones."""
    unit = text("context_unit.txt").strip()
    body = "\n\n".join(f"Record {i + 1}. {unit}" if numbered else unit for i in range(units))
    return f"Session {nonce}.\n\n{body}\n\n{task}"


@dataclass(frozen=True)
class TokenCost:
    """Tokens of a fill prompt: ``fixed + per_unit * units`` (measured)."""

    fixed: int
    per_unit: int

    def tokens(self, units: int) -> int:
        return self.fixed + self.per_unit * units

    def units_for(self, tokens: int) -> int:
        return max(1, (tokens - self.fixed) // self.per_unit)
