"""How the learned *when* reader (assistant/intake/when_model.py) was chosen,
on development data alone: replay the tuning rounds as a new writer met them.

For each round, the batch that round tuned on is read by the intake's cues as
they were *before* that tuning (its code taken from git, its own learned reader
switched off where it had one), and where they found no *when* the learned
reader is asked, fitted only on the batches before it and
the pinned tables. The figure is how many phases it changes from wrong to
right and from right to wrong. The held-out corpus is never read here.

    .venv/bin/python bench/intake_when_model.py             # the chosen settings
    .venv/bin/python bench/intake_when_model.py --sweep     # thresholds 0.3-0.7

Needs the git history (a clone, not an sdist).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from assistant.intake import when_model  # noqa: E402
from assistant.intake.phase import _PHASE_OF_WHEN  # noqa: E402  (the phase a learned *when* gives)
from assistant.intake.text import normalise  # noqa: E402

#: (commit the intake stood at before the round's tuning, batch tuned on, batches before it)
ROUNDS = (
    ("4a80e7b", "dev3", ("dev", "dev2")),
    ("5b1dc22", "dev4", ("dev", "dev2", "dev3")),
    ("a3fb82d", "dev5", ("dev", "dev2", "dev3", "dev4")),
    ("ed5572c", "dev6", ("dev", "dev2", "dev3", "dev4", "dev5")),
    ("070cf92", "dev7", ("dev", "dev2", "dev3", "dev4", "dev5", "dev6")),
    # round 8 had two batches from two writers, both tuned on at once
    ("a326148", "dev8", ("dev", "dev2", "dev3", "dev4", "dev5", "dev6", "dev7")),
    ("a326148", "dev9", ("dev", "dev2", "dev3", "dev4", "dev5", "dev6", "dev7")),
)
_READ = """
import json, sys, yaml
from assistant.intake import parse
from assistant.intake import phase
if hasattr(phase, "guess_when"):  # from round 6 on: the cues alone, as the rounds before had them
    phase.guess_when = lambda text: None
rows = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
print(json.dumps([{"when": getattr(g, "when", "unknown"), "what": getattr(g, "what", "unknown"), "phase": g.phase,
                   "error": g.error}
                  for g in (parse(r["text"]) for r in rows)]))
"""


def read_with_old_intake(commit: str, batch: Path) -> list[dict]:
    """Each message of ``batch`` as the intake at ``commit`` read it."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "assistant", "rules", "probes"],
                             check=True, capture_output=True).stdout
    with tempfile.TemporaryDirectory() as tree:
        tarfile.open(fileobj=BytesIO(archive)).extractall(tree, filter="data")
        out = subprocess.run([sys.executable, "-c", _READ, str(batch)], cwd=tree, check=True, capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": tree, "PYTHONSAFEPATH": "1"}).stdout
    return json.loads(out)


def replay(threshold: float, pinned: bool = True) -> list[tuple[str, int, int, int, int, int]]:
    """Per round: (batch, messages, right before, fixed, broken, asked)."""
    extra = when_model.examples(("pinned_en", "pinned_zh")) if pinned else []
    out = []
    for commit, stem, before in ROUNDS:
        path = when_model.CORPUS / f"{stem}.yaml"
        rows = yaml.safe_load(path.read_text(encoding="utf-8"))
        old = read_with_old_intake(commit, path)
        model = when_model.fit(when_model.examples(before) + extra)
        saved, when_model.MIN_PROBABILITY = when_model.MIN_PROBABILITY, threshold
        try:
            right = fixed = broken = asked = 0
            for row, got in zip(rows, old):
                phase = got["phase"]
                if got["when"] == "unknown" and (got["what"] != "unknown" or got["error"]):
                    guess = when_model.guess_when(normalise(row["text"]), model)
                    if guess is not None:
                        asked += 1
                        new = _PHASE_OF_WHEN[guess.when]
                        fixed += phase != row["phase"] and new == row["phase"]
                        broken += phase == row["phase"] and new != row["phase"]
                        phase = new
                right += got["phase"] == row["phase"]
        finally:
            when_model.MIN_PROBABILITY = saved
        out.append((stem, len(rows), right, fixed, broken, asked))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="replay the intake's tuning rounds with the learned when reader")
    parser.add_argument("--sweep", action="store_true", help="try thresholds 0.3 to 0.7, with and without the pinned tables")
    args = parser.parse_args()
    started = time.monotonic()
    model = when_model.fit(when_model.examples())
    print(f"fit on the whole package corpus ({len(when_model.examples())} examples): "
          f"{time.monotonic() - started:.2f} s, classes {', '.join(map(str, model.classes_))}")
    settings = [(t, p) for t in (0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7) for p in (True, False)] if args.sweep \
        else [(when_model.MIN_PROBABILITY, True)]
    for threshold, pinned in settings:
        print(f"\nthreshold {threshold}, pinned tables {'in' if pinned else 'out'}:")
        for stem, n, right, fixed, broken, asked in replay(threshold, pinned):
            print(f"  {stem}: phase {right}/{n} -> {right + fixed - broken}/{n} "
                  f"(asked {asked}, fixed {fixed}, broke {broken})")


if __name__ == "__main__":
    main()
