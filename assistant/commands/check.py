"""``oomvet check FILE``: is this oomvet.yaml valid? Read-only, one line per problem.

Bad YAML, unknown keys and impossible or inconsistent values are each named on
their own line (with the line number where the file has one) and the exit
code is 2; a valid file exits 0 with a one-line summary. ``--json`` prints one
object instead. Nothing is ever written.
"""
from __future__ import annotations

import json
import sys

from assistant.config import ConfigError, inspect_text, read_text
from common.catalog import LANGS, t
from common.errors import ExitCode


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("check", help=t("check.help", "en"), description=t("check.help", "en"))
    parser.add_argument("file", metavar="FILE", help="the oomvet.yaml to check")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--lang", choices=LANGS, default=None, help="language of the messages")
    parser.set_defaults(run=run)


def run(args, out=None) -> int:
    out = out or sys.stdout
    lang = getattr(args, "lang", None)
    path = args.file
    doc, unreadable = None, False
    try:
        text = read_text(path, lang)
    except ConfigError as exc:
        problems, unreadable = [str(exc)], True
    else:
        doc, problems = inspect_text(text, lang)
    if getattr(args, "json", False):
        print(json.dumps({
            "file": str(path), "valid": not problems, "problems": problems,
            "verified": bool(doc.get("verified")) if doc else None,
            "fits": bool(doc.get("fits", True)) if doc else None,
            "model": doc.get("model") if doc else None,
        }, ensure_ascii=False), file=out)
        return ExitCode.USAGE if problems else ExitCode.OK
    if problems:
        for problem in problems:
            # a read error already names the file
            print(problem if unreadable else f"{path}: {problem}", file=out)
        print(t("check.summary", lang, path=path, n=len(problems)), file=out)
        return ExitCode.USAGE
    if doc.get("model") and doc.get("fits", True):
        print(t("check.valid", lang, path=path, model=doc["model"], ctx=doc.get("max_context_len"),
                batch=doc.get("max_batch_size"), par=doc.get("max_concurrency"), quant=doc.get("quant_type"),
                kv=doc.get("kv_cache")), file=out)
    else:
        print(t("check.valid_nofit", lang, path=path), file=out)
    if not doc.get("verified"):
        print(t("check.unverified", lang, path=path), file=out)
    return ExitCode.OK
