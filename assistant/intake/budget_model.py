"""The learned budget reader: of the sizes a message mentions, the one that is
the GPU memory the user has or may use, asked only where the size grammar
(:mod:`sizes`) read no budget.

The grammar knows the phrasings it was given ("4060 8G", "只剩 6G 可用"); a new
writer says "两张 T4，每张16G", "Are 24 gigs just not enough for a 70b?" or
"I've got a 4090 so I figured 24 gigs". Here every size in the scrubbed text
(:mod:`scrub`: not inside a quoted error or a model name, 256 MiB or more) is
a candidate unless the grammar knows it for something else (used, held, system
RAM, a model's size), described by the characters on either side of it, its unit, its
magnitude and its rank among the message's sizes, and a logistic regression
fitted on the development corpus says how likely each one is the labelled
budget. The likeliest counts at ``MIN_PROBABILITY`` or above. The settings
were chosen on development data alone (``bench/intake_learned.py``)."""
from __future__ import annotations

import math
import re

from assistant.intake.size_grammar import SIZE, to_bytes
from assistant.intake.sizes import said_not_budget
from assistant.intake.text import ICASE

#: over the ten batches of rounds 3-10 read as a new writer met them (780
#: messages), each fitted on the other batches, asked where the grammar of
#: that time read nothing: 0.8 fixed 22 budgets and broke 4; 0.7 +23 -7, 0.9
#: +21 -3. On rounds 3-11 (940, bench/intake_learned.py): 881 -> 902 right.
MIN_PROBABILITY = 0.8
#: characters on either side of a size that describe it; 10 and 20 did as well or a little worse
WINDOW = 14
#: inverse regularisation; 0.3 and 3 moved the figures by a message or two
REGULARISATION_C = 1.0
_SMALLEST = 256 << 20  # below 256 MiB it is not a GPU
_CANDIDATE = re.compile(r"(?<![\w.])" + SIZE, ICASE)


def candidates(numbers: str) -> list[tuple[int, int, int]]:
    """``(start, end, bytes)`` of every size in the scrubbed text that the
    grammar does not know to be something else (:func:`sizes.said_not_budget`)."""
    out = []
    for m in _CANDIDATE.finditer(numbers):
        value = to_bytes(m.group(1), m.group(2))
        if value and value >= _SMALLEST and not said_not_budget(numbers, m.start(), m.end()):
            out.append((m.start(), m.end(), value))
    return out


def features(numbers: str, found: list[tuple[int, int, int]], which: int) -> dict[str, float]:
    start, end, value = found[which]
    left, right = numbers[max(0, start - WINDOW):start].lower(), numbers[end:end + WINDOW].lower()
    out: dict[str, float] = {}
    for n in (1, 2, 3):
        out.update((f"L{left[i:i + n]}", 1.0) for i in range(len(left) - n + 1))
        out.update((f"R{right[i:i + n]}", 1.0) for i in range(len(right) - n + 1))
    for n in (1, 2):  # what touches the size on each side
        out[f"L{n}:{left[-n:]}"] = 1.0
        out[f"R{n}:{right[:n]}"] = 1.0
    values = sorted({v for _, _, v in found})
    out.update(log2=math.log2(value) - 30, smaller=values.index(value), larger=len(values) - 1 - values.index(value),
               sizes=len(found), first=float(which == 0))
    out["unit:" + re.sub(r"[\d.\s]", "", numbers[start:end].lower())] = 1.0
    return out


def examples(rows) -> list[tuple[dict, int]]:
    """``(features, is the budget)`` of every candidate in ``rows``
    (:func:`learned.labelled`: scrubbed messages with their labels); a budget
    given as a share has no candidate."""
    from probes.units import parse_size

    out = []
    for seen, row in rows:
        label = row.get("budget")
        wanted = parse_size(label) if label is not None and not str(label).endswith("%") else None
        found = candidates(seen.numbers)
        out += [(features(seen.numbers, found, i), int(value == wanted)) for i, (_, _, value) in enumerate(found)]
    return out


def fit(pairs: list[tuple[dict, int]]):
    """The ranker fitted over ``(features, is the budget)`` pairs (:func:`pipeline`),
    kept as the arrays it computes with (:mod:`linear`)."""
    from assistant.intake.linear import DictReader

    return DictReader.from_pipeline(pipeline(pairs))


def pipeline(pairs: list[tuple[dict, int]]):
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    found, labels = zip(*pairs)
    return make_pipeline(DictVectorizer(), LogisticRegression(C=REGULARISATION_C, max_iter=3000)).fit(list(found), list(labels))


def rank(numbers: str, model) -> tuple[int, float] | None:
    """The likeliest budget among the sizes in ``numbers`` and its probability, or None without a size."""
    found = candidates(numbers)
    if not found:
        return None
    probabilities = model.predict_proba([features(numbers, found, i) for i in range(len(found))])[:, 1]
    best = int(probabilities.argmax())
    return found[best][2], float(probabilities[best])
