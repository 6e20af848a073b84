#!/usr/bin/env python3
"""Issue 29's runs: the same words, both engines, both answers to "may the context shrink?".

    OOMVET_RIG_CACHE=/work/main/.cache .venv/bin/python bench/answer_wanted.py [--want 8192]

For each engine of the rig (v0.11.4, v0.34.4) and each answer (the context
must stay / may shrink) it runs ``oomvet diagnose`` on the F16 stand-in,
untagged, from one user's words ("short chats are fine, a long document runs
it out of memory"), under a budget that holds F16 at a shorter context and a
lower-bit tag at the wanted one, and prints one row per run: the config
chosen, whether it was verified, the other answer shown beside it, the
stability retest's prompt tokens against its context, and the wall time.
Several minutes per run on 2 cores (v0.11.4's CPU prompt evaluation is the
slow part); not a test: the figures go into the closing note.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: per engine, the budget (MiB) for each wanted context: F16 fits only a shorter one, Q8_0 the whole
BUDGETS = {"0.11.4": {4096: 500, 8192: 640}, "0.34.4": {4096: 400, 8192: 460}}


def run(version: str, keep: bool, want: int, out: Path) -> dict:
    answers = out / "answers.yaml"
    answers.write_text(yaml.safe_dump({"symptom": "short chats are fine, a long document runs it out of memory",
                                       "want_ctx": want, "keep_context": keep, "lang": "en"}))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "assistant", "diagnose", "--rig", "--rig-version", version,
                           "--model", "neohorse-1", "--budget", f"{BUDGETS[version][want]}MiB",
                           "--answers", str(answers), "--out", str(out / "files"), "--json"],
                          capture_output=True, text=True, cwd=ROOT)
    seconds = time.monotonic() - started
    result = json.loads(proc.stdout)
    doc = yaml.safe_load((out / "files" / "oomvet.yaml").read_text())
    retest = (doc.get("evidence") or {}).get("stability") or {}
    return {"result": result, "retest": retest, "seconds": seconds, "rc": proc.returncode}


def describe(config: dict | None) -> str:
    if not config:
        return "none"
    return f"{config.get('quant_type') or '?'} at {config.get('max_context_len')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--want", type=int, default=4096, choices=(4096, 8192))
    args = parser.parse_args()
    print(f"{'engine':8} {'context':8} {'chosen':14} {'verified':8} {'other answer':26} {'retest tokens':16} time")
    for version in ("0.11.4", "0.34.4"):
        for keep in (True, False):
            with tempfile.TemporaryDirectory() as tmp:
                got = run(version, keep, args.want, Path(tmp))
            result, retest = got["result"], got["retest"]
            others = "; ".join(f"{describe(a.get('config'))} {'verified' if a.get('verified') else 'unverified'}"
                               for a in result.get("alternatives") or []) or "none"
            tokens = f"{retest.get('prompt_tokens')}/{retest.get('num_ctx')}"
            print(f"{version:8} {'keep' if keep else 'shrink':8} {describe(result.get('config')):14} "
                  f"{str(result.get('verified')):8} {others:26} {tokens:16} {got['seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
