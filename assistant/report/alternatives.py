"""The other answers measured beside the recommended config, in either
language: the chat's last lines (session/ui.py), the report's table
(report/document.py) and oomvet.yaml's ``alternatives:`` say the same."""
from __future__ import annotations

from typing import Any, Mapping

from common.catalog import get_lang, t
from probes.units import fmt_size


def alternative_line(alt: Mapping[str, Any], want: Any, lang: str | None = None) -> str:
    """One alternative (a done step's ``alternatives`` entry) as a sentence."""
    config = alt.get("config") or {}
    if not config:
        return t("ui.alternative_none", lang, why=why_of(alt, lang))
    verified = (t("ui.alternative_verified", lang, peak=fmt_size(alt.get("peak"))) if alt.get("verified")
                else t("ui.alternative_unverified", lang, why=why_of(alt, lang)))
    meets = t("ui.alternative_short" if "max_context_len" in (alt.get("unmet") or []) else "ui.alternative_meets",
              lang, want=want or "?")
    return t("ui.alternative", lang, model=config.get("model"), ctx=config.get("max_context_len"),
             quant=config.get("quant_type") or "?", verified=verified, meets=meets)


def why_of(alt: Mapping[str, Any], lang: str | None) -> str:
    """Why an alternative is missing or not verified, in ``lang`` where the rules gave both."""
    return str((alt.get("why_zh") if (lang or get_lang()) == "zh" else None) or alt.get("why") or "?")


def alternatives_doc(alternatives: list, want: Any) -> list[dict]:
    """The ``alternatives:`` list of oomvet.yaml: each a config's values with
    whether its own retest verified it, its peak, what it leaves unmet and why."""
    out = []
    for alt in alternatives:
        config = alt.get("config") or {}
        out.append({"kind": alt.get("kind"), "model": config.get("model"), "quant_type": config.get("quant_type"),
                    "max_context_len": config.get("max_context_len"), "max_batch_size": config.get("max_batch_size"),
                    "max_concurrency": config.get("max_concurrency"), "kv_cache": config.get("kv_cache"),
                    "verified": bool(alt.get("verified")), "peak": alt.get("peak"),
                    "unmet": list(alt.get("unmet") or []), "why": alt.get("why") or None, "want_ctx": want})
    return out
