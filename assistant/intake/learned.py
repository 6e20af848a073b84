"""Readers that learned from examples, beside the hand-written ones.

The cue lexicons (``lexicon/``) and the size grammar read the phrasings they
were given, and each new writer brings phrasings no earlier one used ("the
runner dies the instant it comes up", "一run就寄了", "两张 T4，每张16G"). Three
readers fitted on the development corpus that ships with the package
(``corpus/dev*.yaml``, every message labelled by the conventions in
``dev.yaml``'s header) generalise over spelling and
word order where a list of patterns cannot:

- *when* the trouble happens: a character n-gram logistic regression over the
  message with the quoted error and the model name blanked, asked where no
  cue said when and the message reports trouble (so a plain question is
  not placed in time by it), and overruling a cue's *when* only when ``OVER_A_CUE``
  sure of another;
- *what* happens: the same kind of model over the message with the model
  name blanked, asked where no cue said what (unless "no trouble at all" is
  ``MAX_NO_TROUBLE`` likely), overruling a cue's *what* only when very sure;
  its "no trouble" also keeps a question ("how much VRAM for 4 people at the
  same time?") from taking a time from a cue;
- the *budget*: a ranker over the sizes the message mentions
  (:mod:`budget_model`), asked where the size grammar read none, never taking
  a size the grammar knows for something else.

Each is weaker evidence than a hand-written reading: the field it filled is
listed in ``Intake.learned`` and marked weak (a chat model's reading may
override it), a later message's learned reading never replaces an earlier
message's words, and the chat confirms a learned budget before measuring
against it. Every setting was chosen on development data alone
(``bench/intake_learned.py``): each development batch read by the intake as
it stood before that batch was tuned on (a new writer's view), each reader
fitted on every other batch.

Fitting is deterministic (same corpus, same coefficients) and takes about 2 s
for all three on two cores, plus 1 s to import scikit-learn. It happens once
per corpus: the fitted readers are kept in the user's cache folder
(``platformdirs``; ``OOMVET_CACHE_DIR`` overrides), under a name drawn from
every file of this package and the library versions, so a changed corpus,
reader or scikit-learn fits again. They are kept as the arrays they compute
with (:mod:`linear`), so a later process loads them with numpy alone in a
tenth of a second, no scikit-learn. Loading or fitting happens at the first
message that needs it, or in the background from :func:`warm_up` (the chat
starts it before the user's first message). If it cannot fit, messages are
read without it.

What the readers learn from is the development batches alone. The held-out
corpus and the intake's test tables (``tests/data/intake/``) are never in the
package, so no reader ever sees a message a test scores it on
(``tests/test_intake_learned.py`` fails if one does).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml

from assistant.intake.linear import TextReader
from assistant.intake.scrub import Scrubbed, scrub

CORPUS = Path(__file__).parent / "corpus"
# libyaml's safe loader where PyYAML was built with it: a tenth of the pure-Python loader's second
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: below this a reader's guess is not used. Chosen on the development batches
#: alone (bench/intake_learned.py --sweep): over the twelve batches of rounds
#: 3-11 read as a new writer met them (940 messages), *when* at 0.4 and *what*
#: at 0.4 gained the most phases (709 -> 845 before the veto below) with the
#: most *what* readings (828 -> 865); *when* at 0.3 or 0.5 lost 1-2 phases,
#: *what* at 0.3 or 0.5 lost 1.
MIN_PROBABILITY = {"when": 0.4, "what": 0.4}
#: a cue's reading gives way to a learned one of another value this sure: cues
#: tuned on earlier writers over-fire on a new writer's words ("加载" in a story
#: of memory creeping up). On the replay (940 messages), *when*: 0.8 fixed 10
#: phases and broke 2 (854 -> 862; 0.7 +12 -3, 0.9 +6 -0, 0.6 +14 -5), 0.8
#: taken as a reading that overrules words should be very sure; *what*: 0.7
#: fixed 15 and broke 3 (880 -> 892; 0.8 +8 -1, 0.6 +16 -7).
OVER_A_CUE = {"when": 0.8, "what": 0.7}
#: a learned *what* stands only where the reader gives "no trouble at all"
#: (its "unknown") less than this; and where neither a cue nor the reader reads
#: any trouble, a message put as a question that the reader gives "no trouble"
#: this much or more asks, whatever time a cue read in it ("how much VRAM for
#: 4 people at the same time?": on the replay +6 phases, none broken; with no
#: such bar, +6 -8; every one it changed was put as a question). The corpus is nearly all trouble reports, so
#: for a plain question ("will 32k fit in 12G?", "how much VRAM for two
#: users?") the likeliest trouble can still beat 0.4 while "no trouble" is
#: 0.1-0.3. On the replay (bench/intake_learned.py --sweep, 940 messages):
#: 0.1 phase 845 -> 854, what 865 -> 880, plain questions read as such 23 -> 33
#: of 50; 0.05: phase 854, what 877; 0.2: 846; balanced class weights instead: 849.
MAX_NO_TROUBLE = 0.1
#: inverse regularisation of the logistic regressions: 30 did best of 10, 30
#: and 100 on the first replay (rounds 3-5); later replays moved by a message or two
REGULARISATION_C = 30.0
#: a message shorter than about a sentence (a CJK character counts two) is too
#: little to learn from: "it crashes" or "8k" stay with the cues
MIN_LENGTH = 40
#: only the start of a long paste is read: every training message is shorter
#: than this, and a 1 MB log would cost seconds and hundreds of MB of n-grams
MAX_CHARS = 4000
#: character n-grams within words; (1, 5), (2, 5), n-grams across words and
#: added word n-grams all did as well or worse on the replays
NGRAMS = (1, 4)
AXES = ("when", "what")


@dataclass(frozen=True)
class Guess:
    value: str | int
    probability: float

    @property
    def cue(self) -> str:
        """What ``Intake.phase_cue`` says for a learned reading."""
        return f"learned from examples ({self.probability:.0%})"


def corpus_rows(stems: tuple[str, ...] | None = None) -> list[dict]:
    """The development messages (every ``dev*.yaml``, or the batches named)."""
    files = [CORPUS / f"{stem}.yaml" for stem in stems] if stems is not None else sorted(CORPUS.glob("dev*.yaml"))
    return [row for path in files for row in yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)]


def view(axis: str, seen: Scrubbed) -> str:
    """The text a reader reads (:mod:`scrub`): *when* the message with the
    quoted error and the model name blanked, *what* with the name blanked."""
    return seen.numbers if axis == "when" else seen.unnamed


def labelled(stems: tuple[str, ...] | None = None) -> list[tuple[Scrubbed, dict]]:
    """Every development message (or those of the batches named), each
    scrubbed, with its labels."""
    return [(scrub(row["text"]), row) for row in corpus_rows(stems)]


def examples(axis: str = "when", rows: list[tuple[Scrubbed, dict]] | None = None) -> list[tuple[str, str]]:
    """``(text as the reader sees it, value)`` on ``axis`` of every labelled
    row (:func:`labelled`) whose labels say either axis (one left out is "unknown")."""
    return [(view(axis, seen), row.get(axis) or "unknown") for seen, row in (labelled() if rows is None else rows)
            if "when" in row or "what" in row]


def fit(pairs: list[tuple[str, str]]) -> TextReader:
    """A reader fitted over ``(text, value)`` pairs (:func:`pipeline`), kept
    as the arrays it computes with (:mod:`linear`)."""
    return TextReader.from_pipeline(pipeline(pairs))


def pipeline(pairs: list[tuple[str, str]]):
    """The scikit-learn pipeline fitted over ``(text, value)`` pairs. newton-cg
    reaches the same optimum as lbfgs in a tenth of the time on this data."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    texts, labels = zip(*pairs)
    model = make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=NGRAMS, sublinear_tf=True),
                          LogisticRegression(C=REGULARISATION_C, solver="newton-cg", max_iter=3000))
    return model.fit(list(texts), list(labels))


class Models(NamedTuple):
    when: object
    what: object
    budget: object


def fit_all(rows: list[tuple[Scrubbed, dict]] | None = None) -> Models:
    """The three readers fitted on ``rows`` (default: the package corpus, :func:`labelled`)."""
    from assistant.intake import budget_model

    rows = labelled() if rows is None else rows
    # the ranker learns from the development batches alone, the rows its settings were chosen on
    corpus = [pair for pair in rows if "when" in pair[1] or "what" in pair[1]]
    return Models(fit(examples("when", rows)), fit(examples("what", rows)), budget_model.fit(budget_model.examples(corpus)))


def _wide(ch: str) -> bool:
    return "\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af"


def long_enough(text: str) -> bool:
    return sum(2 if _wide(ch) else 1 for ch in text.strip()) >= MIN_LENGTH


def cache_path() -> Path:
    """Where the readers fitted on the package corpus are kept: the name is a
    digest of every file of this package (corpus, lexicons, the readers' own
    code) and the versions that shape a fit or a pickle."""
    from importlib.metadata import version

    digest = hashlib.sha256()
    package = Path(__file__).parent
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in ("scikit-learn", "numpy", "scipy"):
        digest.update(f"{dist}={version(dist)};".encode())
    digest.update(sys.version.encode())
    folder = os.environ.get("OOMVET_CACHE_DIR")
    if not folder:
        import platformdirs

        folder = platformdirs.user_cache_dir("oomvet", appauthor=False)
    return Path(folder) / f"intake-readers-{digest.hexdigest()[:20]}.pickle"


def _load_or_fit() -> Models:
    """The readers fitted on the package corpus: loaded from :func:`cache_path`
    (the user's own folder, written by this function alone), or fitted and
    kept there. A cache that cannot be read or written costs a fit, nothing else."""
    try:
        path = cache_path()
    except Exception:  # noqa: BLE001 - no cache folder to name: fit every time
        return fit_all()
    try:
        with path.open("rb") as f:
            bundle = pickle.load(f)
        if isinstance(bundle, Models):
            return bundle
    except Exception:  # noqa: BLE001 - missing, half-read or from another pickle: fit below
        pass
    bundle = fit_all()
    _keep(bundle, path)
    return bundle


def _keep(bundle: Models, path: Path) -> None:
    """Write ``bundle`` to ``path`` whole or not at all: a process reading it
    meanwhile sees the old file or none. A read-only or full folder is left as it is."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=".intake-", delete=False) as f:
            tmp = f.name
            pickle.dump(bundle, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


_LOCK = threading.Lock()
_FITTED: list = []   # the fitted models, once there are
_FAILED: list = []   # why they could not be fitted: not tried again in this process


def models() -> Models:
    """The three fitted readers; fitted at the first call in this process."""
    # a timed wait, not a plain acquire: Ctrl-C must reach the chat while the
    # background fit holds the lock (a plain acquire cannot be interrupted on Windows)
    while not _LOCK.acquire(timeout=0.2):
        pass
    try:  # one load or fit per process, whichever thread asks first
        if _FAILED:
            raise _FAILED[0]
        if not _FITTED:
            try:
                _FITTED.append(_load_or_fit())
            except Exception as exc:  # noqa: BLE001 - kept, so each later message skips the models at once
                _FAILED.append(exc)
                raise
        return _FITTED[0]
    finally:
        _LOCK.release()


def fitted():
    """:func:`models`, or None where they cannot be fitted (then the
    hand-written readers read the message alone)."""
    try:
        return models()
    except Exception:  # noqa: BLE001 - without the models the cues and the grammar still read the message
        if os.environ.get("OOMVET_RAISE"):
            raise
        return None


def warm_up() -> None:
    """Fit in the background: the chat starts this while the user types, so
    the first message does not wait for it."""
    def fit_quietly():
        try:
            models()
        except Exception:  # noqa: BLE001 - the message's own call reports it
            pass
    threading.Thread(target=fit_quietly, name="oomvet-learned-readers", daemon=True).start()


def top(axis: str, text: str, model=None) -> Guess | None:
    """The likeliest value on ``axis`` of ``text`` (that reader's :func:`view`)
    and how likely, whatever it is ("unknown" too) and however unsure; None
    where the text is too short to read or the reader cannot be had. A cue's
    reading is weighed against it (:mod:`confidence`)."""
    text = text[:MAX_CHARS]
    if not long_enough(text):
        return None
    bundle = fitted() if model is None else None
    if model is None and bundle is None:
        return None
    model = model or getattr(bundle, axis)
    probabilities = model.predict_proba([text])[0]
    best = int(probabilities.argmax())
    return Guess(str(model.classes_[best]), float(probabilities[best]))


def guess(axis: str, text: str, model=None, threshold: float | None = None) -> Guess | None:
    """The learned value on ``axis`` ("when" or "what") of ``text`` (that
    reader's :func:`view` of a message), or None when the model says
    "unknown", is less sure than ``threshold`` (default
    ``MIN_PROBABILITY[axis]``), or the text is too short."""
    text = text[:MAX_CHARS]
    if not long_enough(text):
        return None
    if model is None:
        bundle = fitted()
        if bundle is None:
            return None
        model = getattr(bundle, axis)
    probabilities = model.predict_proba([text])[0]
    best = int(probabilities.argmax())
    value, probability = str(model.classes_[best]), float(probabilities[best])
    if value == "unknown" or probability < (MIN_PROBABILITY[axis] if threshold is None else threshold):
        return None
    if axis == "what" and float(probabilities[list(model.classes_).index("unknown")]) >= MAX_NO_TROUBLE:
        return None
    return Guess(value, probability)


def no_trouble(text: str, model=None) -> float | None:
    """How likely the *what* reader finds it that ``text`` (its :func:`view`)
    reports no trouble at all; None where the text is too short to read or
    the reader cannot be had."""
    text = text[:MAX_CHARS]
    if not long_enough(text):
        return None
    if model is None:
        bundle = fitted()
        if bundle is None:
            return None
        model = bundle.what
    probabilities = model.predict_proba([text])[0]
    return float(probabilities[list(model.classes_).index("unknown")])


def guess_budget(numbers: str, model=None, threshold: float | None = None) -> Guess | None:
    """The learned budget in bytes among the sizes of ``numbers`` (the scrubbed
    text, :mod:`scrub`), or None when it has none or is less sure than
    ``threshold`` (default ``budget_model.MIN_PROBABILITY``)."""
    from assistant.intake import budget_model

    numbers = numbers[:MAX_CHARS]
    if not budget_model.candidates(numbers):
        return None  # nothing to rank: no fit is paid for "8k" or a plain question
    if model is None:
        bundle = fitted()
        if bundle is None:
            return None
        model = bundle.budget
    best = budget_model.rank(numbers, model)
    if best is None or best[1] < (budget_model.MIN_PROBABILITY if threshold is None else threshold):
        return None
    return Guess(best[0], best[1])
