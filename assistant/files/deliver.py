"""Turning a finished session into the files a user leaves with.

The config, the ready-to-apply files and the report are written in one go,
all or nothing, so a crash or Ctrl-C never leaves half a set behind.
"""
from __future__ import annotations

from pathlib import Path

from assistant.files.atomic import write_files
from assistant.config import build_config
from assistant.files.outputs import render_files
from assistant.report.document import report_files


def deliver(out_dir: str | Path, result: dict) -> tuple[dict, list[Path]]:
    """Write oomvet.yaml, Modelfile, env files, report.md/html and charts."""
    doc = build_config(result)
    lang = result.get("lang")
    files = dict(render_files(doc, lang))
    files.update(report_files(result, doc))
    return doc, write_files(out_dir, files, lang=lang)
