"""The reading of a message: :class:`Intake`, the fields a message can speak
to, and the sentence that says what each phase means (``messages/intake.yaml``,
registered by the package). Every reader in this package fills one field of
it; :func:`assistant.intake.parse` puts them together."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from common.catalog import t
from rules.facts import PHASES, validate


@dataclass(frozen=True)
class Intake:
    """What one message (or a merged chat) says. Sizes in bytes, context in tokens."""

    lang: str = "en"                  # "zh" | "en"
    phase: str = "unknown"            # one of rules.facts.PHASES
    model: str | None = None          # Ollama tag or bare name, e.g. "qwen2.5:7b", "neohorse-1"
    want_ctx: int | None = None       # tokens
    want_parallel: int | None = None  # concurrent requests
    budget: int | None = None         # bytes the GPU has (or may use)
    gpu: str | None = None            # as named by the user, tidied: "RTX 4060", "M2 Max"
    error: str | None = None          # an Ollama/CUDA error text quoted by the user
    keep_context: bool | None = None  # True: the context must not shrink
    ctx_unset: bool | None = None     # True: the app sends no num_ctx (the server's default applies)
    upgraded_from: str | None = None  # an upgrade the user blames: the version it worked on, "" if unnamed
    text: str = ""                    # the message(s) this came from
    phase_cue: str | None = None      # the words that decided the phase (for `why`)
    when: str = "unknown"             # load | long_input | concurrent | over_time | unknown
    what: str = "unknown"             # oom | crash | slow | hang | cut | unknown
    budget_share: float | None = None  # "80% of the GPU": a share of the device, resolved by who knows its total
    ctx_estimated: bool = False       # want_ctx came from a length in characters or words
    weak: tuple[str, ...] = ()        # fields read from weak evidence (a guessed name, an estimate, a phase
                                      # from "what" alone or from a learned reader, a learned budget): a chat
                                      # model's reading may override these
    learned: tuple[str, ...] = ()     # what the learned readers gave (assistant.intake.learned) where no cue
                                      # or grammar did, or overruling a cue: any of "when", "what", "budget"
    evidence: tuple[tuple[str, str], ...] = ()  # (field, class of its evidence), for each field read
                                                # (assistant.intake.confidence: how sure that class is)
    alternatives: tuple[tuple[str, tuple], ...] = ()  # (field, other values the message supports)

    def facts(self) -> list[dict]:
        """``[symptom, target]``, both valid under :func:`rules.facts.validate`."""
        symptom = {"kind": "symptom", "phase": self.phase, "text": self.text, "error": self.error}
        target = {
            "kind": "target",
            "model": self.model,
            "want_ctx": self.want_ctx,
            "want_parallel": self.want_parallel,
            "budget": self.budget,
            "keep_context": self.keep_context,
        }
        if self.ctx_unset is not None:
            target["ctx_unset"] = self.ctx_unset
        if self.upgraded_from is not None:
            target["upgraded_from"] = self.upgraded_from
        return [validate(symptom), validate(target)]

    def to_dict(self) -> dict:
        return asdict(self)


def phase_text(phase: str, lang: str | None = None) -> str:
    """One line saying what a phase means, in ``lang``."""
    return t(f"intake.phase.{phase if phase in PHASES else 'unknown'}", lang)


# the fields a message can speak to; merge() and intake_llm.combine() walk these
INTAKE_FIELDS = ("model", "want_ctx", "want_parallel", "budget", "budget_share", "gpu", "error", "keep_context",
                 "ctx_unset", "upgraded_from")
