"""The files a set diagnosis writes: what a user applies, and the report.

- ``oomvet-set.yaml``: the set as retested (each model's tag and context,
  the server settings it needs), whether it was verified, and the figures
  measured (each model alone, the set together, the retest's peak);
- ``Modelfile.<model>``: one per model, ``FROM`` its tag with its
  ``num_ctx`` (``ollama create NAME -f Modelfile.<model>``);
- ``ollama.env``: the server settings the set needs changed, when any;
- ``report.md`` / ``report.html`` with a PNG chart of the set's memory per
  step (each model alone, the set together, every retest).

Every comment in the session's language. Written all or nothing
(:func:`assistant.files.atomic.write_files`).
"""
from __future__ import annotations

import base64
import html
import re
from typing import Any, Mapping

import yaml

from assistant.report.chart import chart_png
from common.catalog import t
from probes.units import fmt_size


def slug(model: str) -> str:
    """A file-name-safe spelling of a model tag: ``gemma3-270m:q4_k_m`` -> ``gemma3-270m-q4_k_m``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-") or "model"


def set_files(result: Mapping[str, Any]) -> dict[str, str | bytes]:
    lang = result.get("lang") or "en"
    files: dict[str, str | bytes] = {"oomvet-set.yaml": _yaml(result, lang)}
    plan = result.get("plan") or {}
    if plan.get("fits"):
        for member in plan["members"]:
            files[f"Modelfile.{slug(member['model'])}"] = _modelfile(member, result, lang)
    if result.get("server_env") or (plan.get("fits") and _keeps_unloading(result)):
        files["ollama.env"] = _env(result, lang)
    charts = {f"set-chart-{i + 1}.png": chart_png(c, lang) for i, c in enumerate(result.get("charts") or [])}
    files.update(charts)
    md, page = _report(result, lang, charts)
    files["report.md"], files["report.html"] = md, page
    return files


def _verdict(result: Mapping[str, Any], lang: str) -> str:
    return t("setfiles.verified" if result.get("verified") else "setfiles.not_verified", lang)


def _last_retest(result: Mapping[str, Any]) -> dict | None:
    return next((s["facts"][-1] for s in reversed(result.get("steps") or [])
                 if s["probe"] == "together_retest" and s["facts"]), None)


def _yaml(result: Mapping[str, Any], lang: str) -> str:
    plan = result.get("plan") or {}
    retest = _last_retest(result)
    doc = {
        "verified": bool(result.get("verified")),
        "server": {"version": result.get("version"), "engine": result.get("engine"),
                   "env": dict(result.get("server_env") or {})},
        "limit_bytes": result.get("limit"),
        "models": [{"model": m["model"], "tag": m["tag"], "num_ctx": m["num_ctx"], "was_num_ctx": m["was_ctx"],
                    "predicted_peak_bytes": m["predicted_peak"]} for m in plan.get("members") or []],
        "measured": {"retest_peak_bytes": retest.get("peak") if retest else None,
                     "retest_dropped": list(retest.get("dropped") or []) if retest else None,
                     "retest_devices": [{"device": d["label"], "name": d["name"], "held_bytes": d["held"]}
                                        for d in retest.get("devices") or []] if retest else None},
    }
    head = f"# {t('setfiles.yaml_head', lang)}\n# {_verdict(result, lang)}\n"
    return head + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _modelfile(member: Mapping[str, Any], result: Mapping[str, Any], lang: str) -> str:
    name = slug(member["model"]).split("-oomvet")[0] + "-oomvet"
    lines = [f"# {t('setfiles.modelfile_head', lang, model=member['model'])}", f"# {_verdict(result, lang)}",
             f"# ollama create {name} -f Modelfile.{slug(member['model'])}",
             f"FROM {member['tag']}", f"PARAMETER num_ctx {int(member['num_ctx'])}"]
    return "\n".join(lines) + "\n"


def _keeps_unloading(result: Mapping[str, Any]) -> bool:
    """The server, as read, unloads an idle model after a while (OLLAMA_KEEP_ALIVE not negative)."""
    value = result.get("keep_alive")
    return value is not None and not str(value).startswith("-")


def _env(result: Mapping[str, Any], lang: str) -> str:
    head = "setfiles.env_head" if result.get("server_env") else "setfiles.env_suggest_head"
    lines = [f"# {t(head, lang)}", f"# {_verdict(result, lang)}"]
    lines += [f"{k}={v}" for k, v in (result.get("server_env") or {}).items()]
    if _keeps_unloading(result):
        # commented out: a suggestion, not part of what the retest verified
        lines += [f"# {t('setfiles.keep_alive', lang, value=result['keep_alive'])}", "# OLLAMA_KEEP_ALIVE=-1"]
    return "\n".join(lines) + "\n"


def model_rows(result: Mapping[str, Any]) -> list[dict]:
    """A row per model: its context as served, measured alone, what the plan gives it."""
    plan = {m["model"]: m for m in (result.get("plan") or {}).get("members") or []}
    measured = next((s["facts"][0] for s in result.get("steps") or [] if s["probe"] == "together"), {})
    alone = {a["model"]: a["points"][0]["peak"] for a in measured.get("members") or []}
    rows = []
    for m in result.get("models") or []:
        p = plan.get(m["model"], {})
        rows.append({"model": m["model"], "served_ctx": m["num_ctx"], "alone": alone.get(m["model"]),
                     "tag": p.get("tag"), "num_ctx": p.get("num_ctx"), "predicted": p.get("predicted_peak")})
    return rows


def _size(v) -> str:
    return fmt_size(v) if isinstance(v, int) else "-"


def _report(result: Mapping[str, Any], lang: str, charts: Mapping[str, bytes]) -> tuple[str, str]:
    head = [t("setfiles.col.model", lang), t("setfiles.col.served", lang), t("setfiles.col.alone", lang),
            t("setfiles.col.tag", lang), t("setfiles.col.ctx", lang), t("setfiles.col.predicted", lang)]
    rows = [[r["model"], str(r["served_ctx"]), _size(r["alone"]), r["tag"] or "-", str(r["num_ctx"] or "-"),
             _size(r["predicted"])] for r in model_rows(result)]
    dev_head = [t("setfiles.col.device", lang), t("setfiles.col.total", lang), t("setfiles.col.held", lang)]
    held = {d["label"]: d["held"] for d in (_last_retest(result) or {}).get("devices") or []}
    devs = [[f"{d.get('label', d.get('index', 0))}: {d.get('name')}", _size(d.get("total_bytes")),
             _size(held.get(d.get("label")))] for d in result.get("devices") or []]
    chain = [c["note_zh"] if lang == "zh" else c["note"] for c in result.get("why_chain") or []]
    title = t("setfiles.title", lang, models=", ".join(m["model"] for m in result.get("models") or []))
    md = [f"# {title}", "", f"**{_verdict(result, lang)}**", ""]
    for table_head, table in ((head, rows), (dev_head, devs)):
        md += ["| " + " | ".join(table_head) + " |", "|" + "---|" * len(table_head)]
        md += ["| " + " | ".join(r) + " |" for r in table] + [""]
    md += [f"## {t('setfiles.why', lang)}", ""] + [f"{i + 1}. {line}" for i, line in enumerate(chain)] + [""]
    md += [f"![{name}]({name})" for name in charts]
    page = ["<!doctype html><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
            f"<h1>{html.escape(title)}</h1>", f"<p><b>{html.escape(_verdict(result, lang))}</b></p>"]
    for table_head, table in ((head, rows), (dev_head, devs)):
        page.append("<table border=1 cellpadding=4><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in table_head)
                    + "</tr>" + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                                        for r in table) + "</table>")
    page.append(f"<h2>{html.escape(t('setfiles.why', lang))}</h2><ol>"
                + "".join(f"<li>{html.escape(line)}</li>" for line in chain) + "</ol>")
    page += [f"<img alt='{name}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
             for name, png in charts.items()]
    return "\n".join(md) + "\n", "\n".join(page) + "\n"
