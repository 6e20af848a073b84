"""``oomvet diagnose``: the whole method, unattended.

Answers come from ``--answers FILE`` (or are left unknown); every probe runs
without asking. Prints progress on stderr and, with ``--json``, one JSON
object on stdout. Exit codes: 0 verified config, 1 no config fits, 2 bad
usage or input, 3 server unreachable.
"""
from __future__ import annotations

import json
import sys

from rich.console import Console

from assistant.session.answers import load_answers
from assistant.files.atomic import check_out_dir
from common.catalog import set_lang, t
from assistant.journal.store import open_log, tracking
from assistant.intake import parse as parse_intake, without_budget
from assistant.intake import settle as settle_field
from assistant.session.loop import Session
from assistant.session.args import SessionOptions, add_session_args
from assistant.session import readback
from assistant.session.ui import AutoUI
from assistant.session.world import open_world


def add_parser(sub) -> None:
    p = sub.add_parser("diagnose", help="run the whole method unattended and write a verified config",
                       description="Run the whole method with no terminal input: baseline, context tiers, "
                                   "quantization, backend knobs, stability retests; write the config and report.")
    add_session_args(p, auto="no questions, no consent prompts (always on for diagnose)", auto_default=True,
                     out="folder for oomvet.yaml, Modelfile, report (default oomvet-out)")
    p.add_argument("--answers", metavar="FILE", help="YAML answers: symptom, want_ctx, want_parallel, "
                                                     "keep_context, budget, lang")
    p.add_argument("--also", metavar="MODEL", action="append", default=[],
                   help="another model that must stay loaded beside --model (repeat for more): the set is "
                        "measured alone and together, evictions are caught, and the set is retested at once")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout and nothing else")
    p.set_defaults(run=run)


def run(args, *, resume_log=None) -> int:
    """``resume_log``: the journal's log of a cut session that ``oomvet resume`` runs on."""
    options = SessionOptions.from_args(args, answers=load_answers(args.answers), resume_log=resume_log)
    answers = options.answers
    lang = set_lang(args.lang or answers.get("lang"))
    model = args.model or answers.get("model")
    if not model:
        from common.errors import UsageError
        raise UsageError(t("diagnose.model"))
    check_out_dir(options.out)  # a folder the files cannot go to is refused before minutes of measuring
    err = Console(stderr=True)
    if args.also:
        return run_set(args, options, [model, *args.also], lang, err)
    ui = AutoUI(answers, console=err, quiet=False)
    intake = parse_intake(answers.get("symptom") or "")
    if options.budget is not None:
        intake = without_budget(intake)  # --budget is the limit
    # unattended, as chat --auto: a field the words do not make sure of is left open, and said so
    intake = settle_field(intake, "model", model)  # the model measured is --model's, whatever the words guessed
    intake = readback.only_sure(intake, lambda line: err.print(line, highlight=False, markup=False))
    options = options.with_words(intake)  # after --budget and the answers file's budget
    with open_world(options.world, log=lambda m: err.print(m, markup=False, highlight=False)) as world:
        settle = options.settle_for(world)
        log = open_log(options, world, model=model, lang=lang, settle_s=settle, answers=answers)
        session = Session(world=world, ui=ui, intake=intake, model=model, lang=lang, settle_s=settle,
                          answers=answers, journal=log)
        if answers.get("symptom"):
            session.transcript.add_user(answers["symptom"])
        with tracking(log):
            outcome = session.run()
    doc, paths = log.deliver(options.out, outcome.result)
    err.print(t("diagnose.wrote", n=len(paths), out=options.out, names=", ".join(p.name for p in paths)),
              highlight=False, markup=False)
    if args.json:
        payload = {"diagnosis": outcome.result["diagnosis"], "config": outcome.result["config"],
                   "verified": outcome.result["verified"], "unverified": outcome.result["unverified"],
                   "fits": outcome.result["fits"], "unmet": outcome.result["unmet"],
                   "alternatives": outcome.result.get("alternatives") or [],
                   "steps": outcome.result["steps"], "out": str(options.out),
                   "files": [str(p) for p in paths]}
        sys.stdout.write(json.dumps(payload, default=str, ensure_ascii=False) + "\n")
    return outcome.exit_code


def run_set(args, options, models: list[str], lang: str, err: Console) -> int:
    """``--also``: several models that must stay loaded together (assistant/session/together.py)."""
    from assistant.session.together import diagnose_set, summary
    from common.errors import UsageError
    from probes.ollama_api import canonical_name

    if len({canonical_name(m) for m in models}) < len(models):  # before any server is reached
        raise UsageError(t("diagnose.set_twice", lang, models=", ".join(models)))
    say = lambda line: err.print(line, markup=False, highlight=False)  # noqa: E731
    with open_world(options.world, log=say) as world:
        result, code, paths = diagnose_set(world, models, lang, say, options.out)
    if args.json:
        payload = {"set": summary(result), "devices": result["devices"], "verified": result["verified"],
                   "out": str(options.out), "files": [str(p) for p in paths]}
        sys.stdout.write(json.dumps(payload, default=str, ensure_ascii=False) + "\n")
    return code
