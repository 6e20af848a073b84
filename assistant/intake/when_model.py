"""A second reader for *when* that learned from examples, asked only where no
cue of ``lexicon/when.yaml`` said when a message's trouble happens.

The cue lexicon reads the phrasings it was given, and each new writer brings
phrasings no earlier one used ("the runner dies the instant it comes up",
"一贴进去就没了"). This reader is a character n-gram logistic regression
(scikit-learn) fitted on the development corpus that ships with the package
(``corpus/dev*.yaml``, every message labelled with its *when*, and the pinned
intake tables, ``corpus/pinned_*.yaml``, where the phase implies it). It generalises
over spelling and word order where a list of patterns cannot, but it is weaker
evidence than a cue: it is consulted only when the lexicon found none, its
answer counts only at ``MIN_PROBABILITY`` or above and for a message of
``MIN_LENGTH`` or more, and a phase it decided is
marked weak (a chat model's reading may override it).

Fitting is deterministic (same corpus, same coefficients) and takes about
6-7 s on two cores with the import, for about 1,000 examples (more on a busy machine); it happens once per process, at the first
message that needs it, or in the background from :func:`warm_up` (the chat
starts it before the user's first message). If it cannot fit, the message is
read without it. The held-out corpus (``tests/data/intake/``) is never in the
package, so it stays unseen by this model too. ``bench/intake_when_model.py``
prints how the choices below were measured.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from assistant.intake.text import normalise

CORPUS = Path(__file__).parent / "corpus"
# libyaml's safe loader where PyYAML was built with it: a tenth of the pure-Python loader's second
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: below this the guess is not used. Chosen on the development batches alone
#: (bench/intake_when_model.py --sweep): replaying rounds 3-8 (each batch read
#: by the cues as they stood before that batch was tuned on, this model fitted
#: on the batches before it and the pinned tables), 0.4 gained the most phases
#: net (+50 over 540 messages; 0.35: +48, 0.45 and 0.5: +46). It was first
#: 0.5, chosen when only rounds 3-5 existed (docs/intake-corpus.md).
MIN_PROBABILITY = 0.4
#: inverse regularisation of the logistic regression: 30 did best of 10, 30
#: and 100 on the first replay (rounds 3-5, threshold 0.5); on rounds 3-7 at
#: 0.4: 10: +31, 30: +34, 100: +36, within a message or two, so it stayed
REGULARISATION_C = 30.0
#: a message shorter than about a sentence (a CJK character counts two) is too
#: little to learn from: "it crashes" or "8k" stay with the cues. Every message
#: the replay moved was longer than this.
MIN_LENGTH = 40
#: only the start of a long paste is read: every training message is shorter
#: than this, and a 1 MB log would cost seconds and hundreds of MB of n-grams
MAX_CHARS = 4000
#: character n-grams within words; on the rounds 3-7 replay at 0.4 none of
#: (1, 5) +31, (2, 5) +30, n-grams across words (1, 4) +31, or these plus word
#: uni- and bigrams +25 beat this one's +34
NGRAMS = (1, 4)


@dataclass(frozen=True)
class Guess:
    when: str
    probability: float

    @property
    def cue(self) -> str:
        """What ``Intake.phase_cue`` says for a learned reading."""
        return f"learned from examples ({self.probability:.0%})"


#: the *when* a pinned table's phase implies; a long_input phase may come from a
#: cut answer alone (no *when*), so those rows teach nothing and are left out
_WHEN_OF_PINNED_PHASE = {"load": "load", "concurrent": "concurrent", "creeping": "over_time",
                         "crash": "unknown", "slow": "unknown", "unknown": "unknown"}


def examples(stems: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """``(text, when)`` of every development message (or of the batches named),
    and of the pinned tables (``pinned_*.yaml``) whose phase says its *when*."""
    if stems is not None:
        files = [CORPUS / f"{stem}.yaml" for stem in stems]
    else:
        files = sorted(CORPUS.glob("dev*.yaml")) + sorted(CORPUS.glob("pinned_*.yaml"))
    out = []
    for path in files:
        for row in yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER):
            if "when" in row or "what" in row:
                out.append((normalise(row["text"]), row.get("when") or "unknown"))
            elif row["phase"] in _WHEN_OF_PINNED_PHASE:
                out.append((normalise(row["text"]), _WHEN_OF_PINNED_PHASE[row["phase"]]))
    return out


def fit(pairs: list[tuple[str, str]]):
    """A fitted scikit-learn pipeline over ``(text, when)`` pairs."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    texts, labels = zip(*pairs)
    model = make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=NGRAMS, sublinear_tf=True),
                          LogisticRegression(C=REGULARISATION_C, max_iter=3000))
    return model.fit(list(texts), list(labels))


def _wide(ch: str) -> bool:
    return "\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af"


_LOCK = threading.Lock()
_FITTED: list = []   # the fitted model, once there is one
_FAILED: list = []   # why it could not be fitted: not tried again in this process


def _model():
    # a timed wait, not a plain acquire: Ctrl-C must reach the chat while the
    # background fit holds the lock (a plain acquire cannot be interrupted on Windows)
    while not _LOCK.acquire(timeout=0.2):
        pass
    try:  # one fit per process, whichever thread asks first
        if _FAILED:
            raise _FAILED[0]
        if not _FITTED:
            try:
                _FITTED.append(fit(examples()))
            except Exception as exc:  # noqa: BLE001 - kept, so each later message skips the model at once
                _FAILED.append(exc)
                raise
        return _FITTED[0]
    finally:
        _LOCK.release()


def warm_up() -> None:
    """Fit in the background: the chat starts this while the user types, so
    the first message does not wait for it (about 6 s on two cores)."""
    def fit_quietly():
        try:
            _model()
        except Exception:  # noqa: BLE001 - the message's own call reports it
            pass
    threading.Thread(target=fit_quietly, name="oomvet-when-model", daemon=True).start()


def guess_when(text: str, model=None) -> Guess | None:
    """The learned *when* of ``text`` (already normalised), or None when the
    model says "unknown", is not sure enough, or the text is too short."""
    text = text[:MAX_CHARS]
    if sum(2 if _wide(ch) else 1 for ch in text.strip()) < MIN_LENGTH:
        return None
    if model is None:
        try:
            model = _model()
        except Exception:  # noqa: BLE001 - without the model the cues and "what" still read the message
            if os.environ.get("OOMVET_RAISE"):
                raise
            return None
    probabilities = model.predict_proba([text])[0]
    best = int(probabilities.argmax())
    when, probability = str(model.classes_[best]), float(probabilities[best])
    if when == "unknown" or probability < MIN_PROBABILITY:
        return None
    return Guess(when, probability)
