"""How sure the intake may be of each field: the figures behind
``assistant/intake/confidence.yaml``, and the confusion table per field.

Replay (the default): each development batch is read by the intake with the
learned readers fitted on every *other* batch (a new writer's view: the
readers never saw those messages). Every field the intake reads has a class
of evidence (:mod:`assistant.intake.confidence`); the replay counts, per
class, how many readings were right. ``--write`` keeps those counts in
``confidence.yaml``, which is what decides sure or unsure at run time.

Then, per field, on the replay or on a part of the corpus (``--part heldout``,
read by the readers as shipped, which never saw it):

- right: the value read is the label (both none counts);
- asked: wrong but unsure, so the chat asks it (or the field was not read
  and the rules ask it when they need it);
- confidently wrong: wrong and sure, which nobody asks about.

    .venv/bin/python bench/intake_confidence.py              # replay of the dev batches
    .venv/bin/python bench/intake_confidence.py --write      # and keep the class counts
    .venv/bin/python bench/intake_confidence.py --part heldout [--batch heldout11]

About a minute on two cores (a fit per development batch).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from assistant.intake import confidence, learned, parse  # noqa: E402
from tests.intake_table import PARTS, field_matches, load_batch  # noqa: E402

#: the fields scored, and the label each is held to
FIELDS = ("phase", "when", "what", "model", "budget", "want_ctx", "want_parallel", "keep_context")
#: the field whose sureness a scored field takes (when and what are the phase's two halves)
SURENESS_OF = {"when": "phase", "what": "phase"}


def _label(row: dict, field: str):
    label = row.get(field)
    return "unknown" if label is None and field in ("when", "what", "phase") else label


def _right(field: str, row: dict, got) -> bool:
    label = _label(row, field)
    if field == "want_ctx" and label is not None:
        return got.want_ctx == label and bool(got.ctx_estimated) == bool(row.get("ctx_estimated"))
    return field_matches(field, label, got)


def read_rows(rows: list[dict]) -> list[tuple[dict, object]]:
    return [(row, parse(row["text"])) for row in rows]


def replay() -> list[tuple[dict, object]]:
    """Every development message, read with readers fitted on the other batches."""
    stems = [p.stem for p in sorted(learned.CORPUS.glob("dev*.yaml"))]
    out = []
    for i, stem in enumerate(stems):
        started = time.monotonic()
        learned._FITTED[:] = [learned.fit_all(learned.labelled(tuple(s for s in stems if s != stem)))]
        out += read_rows(load_batch(stem))
        print(f"  {stem:6s} read ({i + 1}/{len(stems)}, {time.monotonic() - started:.1f} s)", file=sys.stderr)
    learned._FITTED.clear()
    return out


def class_counts(read: list[tuple[dict, object]]) -> dict[str, dict[str, int]]:
    counts: dict = defaultdict(lambda: {"n": 0, "right": 0})
    for row, got in read:
        for field, kind in got.evidence:
            counts[kind]["n"] += 1
            counts[kind]["right"] += int(_right(field, row, got))
    return dict(sorted(counts.items()))


def field_table(read: list[tuple[dict, object]]) -> dict[str, Counter]:
    out = {field: Counter() for field in FIELDS}
    for row, got in read:
        unsure = set(confidence.unsure(got))
        held = {field for field, _ in got.evidence}
        for field in FIELDS:
            own = SURENESS_OF.get(field, field)
            if _right(field, row, got):
                out[field]["right"] += 1
                out[field]["right, asked anyway"] += own in unsure
            elif own in unsure or own not in held:
                out[field]["asked"] += 1
            else:
                out[field]["confidently wrong"] += 1
    return out


def show(table: dict[str, Counter], n: int) -> None:
    print(f"\n{'field':14s} {'right':>12s} {'asked':>12s} {'conf. wrong':>12s} {'asked though right':>19s}")
    total = Counter()
    for field, c in table.items():
        total.update(c)
        print(f"{field:14s} {c['right']:4d} {100 * c['right'] / n:6.1f}% {c['asked']:4d} {100 * c['asked'] / n:6.1f}% "
              f"{c['confidently wrong']:4d} {100 * c['confidently wrong'] / n:6.1f}% {c['right, asked anyway']:10d}")
    m = n * len(table)
    print(f"{'all fields':14s} {total['right']:4d} {100 * total['right'] / m:6.1f}% {total['asked']:4d} {100 * total['asked'] / m:6.1f}% "
          f"{total['confidently wrong']:4d} {100 * total['confidently wrong'] / m:6.1f}% {total['right, asked anyway']:10d}")


def main() -> None:
    ap = argparse.ArgumentParser(description="the intake's sureness per class of evidence, and per field")
    ap.add_argument("--part", choices=("replay", "dev", "heldout"), default="replay",
                    help="replay: dev batches read by readers fitted without them (default); dev / heldout: a part "
                         "of the corpus read by the readers as shipped")
    ap.add_argument("--batch", action="append", help="only these batches of the part (e.g. heldout11)")
    ap.add_argument("--write", action="store_true", help="keep the replay's class counts in confidence.yaml")
    args = ap.parse_args()
    started = time.monotonic()
    if args.part == "replay":
        read = replay()
    else:
        read = read_rows([row for stem in (args.batch or PARTS[args.part]) for row in load_batch(stem)])
    counts = class_counts(read)
    print(f"{args.part}: {len(read)} messages, {time.monotonic() - started:.0f} s")
    print(f"\n{'class':26s} {'n':>5s} {'right':>6s} {'share':>7s} {'at least':>7s}  sure")
    for kind, c in counts.items():
        low = confidence.lower_bound(c["right"], c["n"])
        sure = kind not in confidence.CONFLICTS and low >= confidence.SURE_SHARE
        print(f"{kind:26s} {c['n']:5d} {c['right']:6d} {100 * c['right'] / c['n']:6.1f}% {100 * low:6.1f}%  "
              f"{'yes' if sure else 'no (conflict)' if kind in confidence.CONFLICTS else 'no'}")
    if args.write:
        header = ("# Written by bench/intake_confidence.py --write: per class of evidence, how many readings the\n"
                  "# replay saw (each development batch read by readers fitted on the others) and how many were right.\n")
        confidence.TABLE.write_text(header + yaml.safe_dump({"classes": counts}, sort_keys=True), encoding="utf-8")
        confidence.table.cache_clear()
        print(f"\nwrote {confidence.TABLE.relative_to(ROOT)}")
    show(field_table(read), len(read))


if __name__ == "__main__":
    main()
