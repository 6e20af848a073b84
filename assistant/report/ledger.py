"""The memory ledger's rows, in either language: the chat (session/render.py)
and the report (report/document.py) show the same table."""
from __future__ import annotations

from common.catalog import t
from probes.units import fmt_size


def ledger_rows(fact: dict, lang: str | None = None) -> list[tuple[str, str]]:
    """The memory ledger (a ``ledger`` fact, probes/ledger.py) as (what, size)
    pairs in ``lang`` (None: the session's); a figure its source does not give
    says so."""
    def size(n) -> str:
        if n is None:
            return t("ledger.not_given", lang)
        return ("-" + fmt_size(-n)) if n < 0 else fmt_size(n)

    rows = [(t("ledger.total", lang), size(fact.get("total"))),
            (t("ledger.in_use", lang), size(fact.get("in_use")))]
    for other in fact.get("others") or []:
        what = (t("ledger.other_programs", lang) if other.get("pid") is None
                else t("ledger.other_process", lang, name=other.get("name") or "?", pid=other["pid"]))
        rows.append((what, size(other.get("bytes"))))
    if not fact.get("others") and fact.get("others_total") is None:
        rows.append((t("ledger.other_processes", lang), size(None)))
    for m in fact.get("models") or []:
        key = "ledger.this_model" if m.get("this") else "ledger.other_model"
        rows.append((t(key, lang, name=m.get("name")), size(m.get("bytes"))))
        if m.get("this"):
            for part, n in (fact.get("buffers") or {}).items():
                named = t(f"ledger.part.{part}", lang) if part in _PARTS else part
                rows.append((t("ledger.part", lang, part=named), size(n)))
    if not fact.get("models"):
        rows.append((t("ledger.no_models", lang), "—"))
    rows.append((t("ledger.ollama_seen", lang, source=fact.get("source") or "?"), size(fact.get("ollama_seen"))))
    rows.append((t("ledger.unaccounted", lang), size(fact.get("unaccounted"))))
    rows.append((t("ledger.free", lang), size(fact.get("free"))))
    for d in fact.get("devices") or []:
        rows.append((t("ledger.device", lang, label=d.get("label"), name=d.get("name") or "?"),
                     t("ledger.device_use", lang, used=size(d.get("used")), total=size(d.get("total")))))
    return rows


_PARTS = ("weights", "kv_cache", "compute", "output")


def others_note(fact: dict, lang: str | None = None, auto: bool = False) -> str | None:
    """What the other loaded models hold and that oomvet leaves them loaded
    (with ``--auto``: what it would free, and that it does not); None when
    ``ollama ps`` listed no other model."""
    others = [m for m in fact.get("models") or [] if not m.get("this")]
    if not others:
        return None
    names = ", ".join(f"{m.get('name')} ({fmt_size(m['bytes'])})" if m.get("bytes") is not None
                      else str(m.get("name")) for m in others)
    size = fmt_size(sum(m.get("bytes") or 0 for m in others))
    return t("ledger.others_auto" if auto else "ledger.others_left", lang, size=size, names=names)
