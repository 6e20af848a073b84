"""How the learned readers (assistant/intake/learned.py, budget_model.py) were
chosen, on development data alone: each development batch read as a new writer
met it, then the readers fitted on every other batch.

For each tuning round, the batch that round tuned on is read by the intake's
cues and size grammar as they were *before* that tuning (the code taken from
git, any learned reader of that time switched off): that is what a message of
a new writer meets. Then, leaving that batch out, the three readers are fitted
on every other development batch, and asked where the
hand-written readers were silent, as the parser asks them: *what* where no cue
said what, *when* where no cue said when and the message reports trouble,
the budget where the grammar read none. The figures are how many labels each
field gets right, cues alone and with the readers. The held-out corpus is
never read here.

    .venv/bin/python bench/intake_learned.py            # the chosen settings, per batch
    .venv/bin/python bench/intake_learned.py --sweep    # thresholds around them

Needs the git history (a clone, not an sdist); about a minute on two cores.
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
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assistant.intake import budget_model, learned  # noqa: E402
from assistant.intake.phase import _OLLAMA_RUN, _PHASE_OF_WHAT, _PHASE_OF_WHEN, _QUESTION  # noqa: E402
from assistant.intake.scrub import scrub  # noqa: E402
from tests.intake_table import field_matches  # noqa: E402

#: (commit the intake stood at before the round's tuning, batch tuned on); a
#: round with two writers has two batches at one commit. Round 11 tuned no
#: cue: its batches are read by the cues as they stand since round 10.
ROUNDS = (
    ("4a80e7b", "dev3"), ("5b1dc22", "dev4"), ("a3fb82d", "dev5"), ("ed5572c", "dev6"), ("070cf92", "dev7"),
    ("a326148", "dev8"), ("a326148", "dev9"), ("65e2fae", "dev10"), ("576ea60", "dev11"), ("576ea60", "dev12"),
    ("b51608d", "dev13"), ("b51608d", "dev14"),
)
FIELDS = ("when", "what", "phase", "budget")
_READ = """
import json, sys, yaml
import assistant.intake as intake
try:  # from this round on: the learned readers off, the cues and grammar alone
    from assistant.intake import learned
    learned._FAILED.append(RuntimeError("off"))
except ImportError:
    pass
try:  # rounds 6-10: the learned reader of *when*
    from assistant.intake import phase
    if hasattr(phase, "guess_when"):
        phase.guess_when = lambda text: None
except ImportError:
    pass
rows = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
print(json.dumps([{"when": getattr(g, "when", "unknown"), "what": getattr(g, "what", "unknown"), "phase": g.phase,
                   "error": g.error, "want_parallel": g.want_parallel, "budget": g.budget, "budget_share": getattr(g, "budget_share", None)}
                  for g in (intake.parse(r["text"]) for r in rows)]))
"""


def read_with_old_intake(commit: str, batch: Path) -> list[dict]:
    """Each message of ``batch`` as the intake at ``commit`` read it, learned readers off."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "assistant", "rules", "probes"],
                             check=True, capture_output=True).stdout
    with tempfile.TemporaryDirectory() as tree:
        tarfile.open(fileobj=BytesIO(archive)).extractall(tree, filter="data")
        env = {k: v for k, v in os.environ.items() if k != "OOMVET_RAISE"}
        out = subprocess.run([sys.executable, "-c", _READ, str(batch)], cwd=tree, check=True, capture_output=True,
                             text=True, env={**env, "PYTHONPATH": tree, "PYTHONSAFEPATH": "1"}).stdout
    return json.loads(out)


def fresh_readings() -> dict[str, list[tuple[dict, dict]]]:
    """``{batch: [(row, reading as a new writer met it)]}`` for every round."""
    out = {}
    for commit, stem in ROUNDS:
        rows = learned.corpus_rows((stem,))
        out[stem] = list(zip(rows, read_with_old_intake(commit, learned.CORPUS / f"{stem}.yaml")))
        print(f"  read {stem} as the intake at {commit} did", file=sys.stderr, flush=True)
    return out


def leave_one_out(fresh: dict) -> dict[str, tuple]:
    """``{batch: (models fitted without it, [scrubbed message])}``."""
    every = tuple(p.stem for p in sorted(learned.CORPUS.glob("dev*.yaml")))
    out = {}
    for stem, pairs in fresh.items():
        out[stem] = (learned.fit_all(learned.labelled(tuple(s for s in every if s != stem))),
                     [scrub(row["text"]) for row, _ in pairs])
    return out


def with_readers(reading: dict, seen, models, when_at: float | None, what_at: float | None,
                 budget_at: float | None, over_at: float | None = learned.OVER_A_CUE["when"],
                 what_over_at: float | None = learned.OVER_A_CUE["what"]) -> dict:
    """``reading`` with the learned readers asked where the parser asks them
    (a threshold of None leaves that reader out; ``over_at`` and
    ``what_over_at`` are how sure a learned *when* or *what* must be to
    override a cue's). The parser also drops a
    learned reading of a time or a what the message denies; the replay keeps
    no denials, so this one does not."""
    got = dict(reading)
    if what_at is not None and got["what"] == "unknown":
        guess = learned.guess("what", learned.view("what", seen), models.what, what_at)
        got["what"] = guess.value if guess else "unknown"
    elif what_at is not None and what_over_at is not None:
        guess = learned.guess("what", learned.view("what", seen), models.what, what_over_at)
        got["what"] = guess.value if guess else got["what"]
    if got["what"] != reading["what"] and got["when"] == "unknown":  # the parser's rules on a learned what
        failed = got["what"] not in ("unknown", "slow") or bool(got["error"])
        if (failed or got["what"] == "slow") and (got.get("want_parallel") or 0) > 1:
            got["when"] = "concurrent"
        elif _OLLAMA_RUN.search(seen.norm) and got["what"] in ("oom", "crash", "hang"):
            got["when"] = "load"
    if what_at is not None and got["what"] == "unknown" and not got["error"] and got["when"] != "unknown" \
            and _QUESTION.search(seen.norm):
        chance = learned.no_trouble(learned.view("what", seen), models.what)
        if chance is not None and chance >= learned.MAX_NO_TROUBLE:
            got["when"] = "unknown"  # a question, not a symptom
    if when_at is not None and got["when"] == "unknown" and (got["what"] != "unknown" or got["error"]):
        guess = learned.guess("when", learned.view("when", seen), models.when, when_at)
        got["when"] = guess.value if guess else "unknown"
    elif when_at is not None and over_at is not None and got["when"] != "unknown":
        guess = learned.guess("when", learned.view("when", seen), models.when, over_at)
        got["when"] = guess.value if guess else got["when"]
    got["phase"] = _PHASE_OF_WHEN.get(got["when"]) or _PHASE_OF_WHAT.get(got["what"], "unknown")
    if budget_at is not None and got["budget"] is None and got["budget_share"] is None:
        guess = learned.guess_budget(seen.numbers, models.budget, budget_at)
        got["budget"] = guess.value if guess else None
    return got


def right(row: dict, got: dict) -> dict[str, int]:
    ns = SimpleNamespace(**got)
    return {f: int(field_matches(f, row.get(f) or ("unknown" if f in ("when", "what") else None), ns)) for f in FIELDS}


def tally(fresh: dict, fitted: dict, when_at, what_at, budget_at, per_batch: bool = False,
          over_at: float | None = learned.OVER_A_CUE["when"],
          what_over_at: float | None = learned.OVER_A_CUE["what"]) -> dict[str, int]:
    total = dict.fromkeys(FIELDS, 0)
    for stem, pairs in fresh.items():
        models, seen = fitted[stem]
        batch = dict.fromkeys(FIELDS, 0)
        before = dict.fromkeys(FIELDS, 0)
        for (row, reading), scrubbed in zip(pairs, seen):
            for f, ok in right(row, with_readers(reading, scrubbed, models, when_at, what_at, budget_at, over_at,
                                                 what_over_at)).items():
                batch[f] += ok
            for f, ok in right(row, with_readers(reading, scrubbed, models, None, None, None, None, None)).items():
                before[f] += ok
        for f in FIELDS:
            total[f] += batch[f]
        if per_batch:
            print(f"  {stem:6s} ({len(pairs)}): " + ", ".join(f"{f} {before[f]} -> {batch[f]}" for f in FIELDS))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description="replay the intake's rounds with the learned readers, each batch left out")
    parser.add_argument("--sweep", action="store_true", help="try thresholds around the chosen ones")
    args = parser.parse_args()
    started = time.monotonic()
    learned.fit_all()
    print(f"fit of the three readers on the whole package corpus: {time.monotonic() - started:.2f} s "
          f"(with the scikit-learn import)")
    fresh = fresh_readings()
    fitted = leave_one_out(fresh)
    n = sum(len(pairs) for pairs in fresh.values())
    chosen = (learned.MIN_PROBABILITY["when"], learned.MIN_PROBABILITY["what"], budget_model.MIN_PROBABILITY)
    print(f"\n{n} messages in {len(fresh)} batches, cues alone -> with the readers at when {chosen[0]} "
          f"(over a cue {learned.OVER_A_CUE['when']}), what {chosen[1]} (over a cue {learned.OVER_A_CUE['what']}, "
          f"no-trouble veto {learned.MAX_NO_TROUBLE}), "
          f"budget {chosen[2]}:")
    alone = tally(fresh, fitted, None, None, None)
    total = tally(fresh, fitted, *chosen, per_batch=True)
    print("  all:    " + ", ".join(f"{f} {alone[f]} -> {total[f]} ({100 * total[f] / n:.1f}%)" for f in FIELDS))
    if args.sweep:
        print("\nhow sure a learned when must be to override a cue's (phase, when):")
        for over_at in (0.6, 0.7, 0.8, 0.9, None):
            t = tally(fresh, fitted, *chosen, over_at=over_at)
            print(f"  {over_at}: {t['phase']} {t['when']}")
        print("how sure a learned what must be to override a cue's (phase, what):")
        for what_over_at in (0.6, 0.7, 0.8, 0.9, None):
            t = tally(fresh, fitted, *chosen, what_over_at=what_over_at)
            print(f"  {what_over_at}: {t['phase']} {t['what']}")
        saved = learned.MAX_NO_TROUBLE
        print("\nthe no-trouble veto of a learned what (phase, when, what):")
        for veto in (0.05, 0.1, 0.2, 0.3, 1.0):
            learned.MAX_NO_TROUBLE = veto
            t = tally(fresh, fitted, *chosen[:2], None)
            print(f"  {veto}: {t['phase']} {t['when']} {t['what']}")
        learned.MAX_NO_TROUBLE = saved
        print("\nwhen / what thresholds (phase, when, what):")
        for when_at in (0.3, 0.4, 0.5, 0.6):
            row = []
            for what_at in (0.3, 0.4, 0.5, 0.6, 0.7, None):
                t = tally(fresh, fitted, when_at, what_at, None)
                row.append(f"what {what_at}: {t['phase']} {t['when']} {t['what']}")
            print(f"  when {when_at}: " + " | ".join(row))
        print("budget threshold (budget right):")
        print("  " + " | ".join(f"{b}: {tally(fresh, fitted, None, None, b)['budget']}" for b in (0.6, 0.7, 0.8, 0.85, 0.9)))


if __name__ == "__main__":
    main()
