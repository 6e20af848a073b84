"""Intake accuracy on the labelled corpus: per-field accuracy and the phase
confusion table (rows: labelled phase, columns: what the parser read).

    .venv/bin/python bench/intake_confusion.py            # held-out part
    .venv/bin/python bench/intake_confusion.py dev        # development part
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tests.intake_table import CORPUS_FIELDS, confusion, load_corpus, score  # noqa: E402


def main(part: str = "heldout") -> None:
    rows = load_corpus(part)
    print(f"corpus part: {part} ({len(rows)} messages)")
    result = score(rows)
    for name in CORPUS_FIELDS:
        right, total, _ = result[name]
        print(f"  {name:14s} {right:3d}/{total}  {100 * right / total:5.1f}%")
    for field in ("phase", "when", "what"):
        labels, table = confusion(rows, field)
        width = max(len(x) for x in labels) + 1
        print(f"\n{field} confusion (row = labelled, column = read):")
        print(" " * width + "".join(f"{x[:10]:>11s}" for x in labels))
        for want in labels:
            print(f"{want:<{width}s}" + "".join(f"{table.get((want, got), 0):>11d}" for got in labels))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="intake accuracy and phase confusion on the labelled corpus")
    parser.add_argument("part", nargs="?", default="heldout", choices=("heldout", "dev"),
                        help="heldout (every held-out batch, the default) or dev")
    main(parser.parse_args().part)
