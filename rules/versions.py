"""What changed in Ollama's memory behaviour, version by version, and the
finding that names those changes when a user blames an upgrade.

Each row is one change with the first version that has it, checked in
Ollama's own source (the Go module of each version): the default context by
total VRAM (``server/routes.go``, absent in v0.15.4, present in v0.15.5),
flash attention unset meaning the model's default rather than off
(``envconfig``: a plain bool in v0.12.3, ``BoolWithDefault`` in v0.12.4),
and every GGUF on llama.cpp's llama-server with its fit (v0.30.0, as
shared/ollama-current.md documents for the tested v0.34.4). The finding
(``upgrade_changed_memory``) lists the rows between the version the user
says worked and the running one, and says for each what this session read
or measured of it on the running server: the proof is the user's own setup,
reproduced first.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.catalog import t
from common.versions import parse_version
from rules.moves import record_finding
from rules.sizes import format_size
from rules.rulebook import TREE, deciding_rule, state


@dataclass(frozen=True)
class Change:
    key: str              # finding.upgrade_changed_memory.<key>: its words
    since: tuple[int, ...]


CHANGES = (
    Change("flash_attention_auto", (0, 12, 4)),
    Change("vram_tier_context", (0, 15, 5)),
    Change("llama_server_engine", (0, 30, 0)),
)


def changes_between(before: str, running: str) -> list[Change]:
    """The changes a server moving from ``before`` to ``running`` went
    through; with ``before`` unknown, every change up to ``running``."""
    lo, hi = parse_version(before), parse_version(running)
    if not hi:
        return []
    return [c for c in CHANGES if c.since <= hi and (not lo or c.since > lo)]


def _seen(st: dict, change: Change, lang: str) -> str:
    """What this session read or measured of ``change`` on the running server."""
    part = f"finding.upgrade_changed_memory.seen_{change.key}"
    at = st["repro_at"]
    if change.key == "vram_tier_context":
        if st["srv_default_ctx_why"] != "vram_tier":
            return t(part + ".not_in_effect", lang)
        return t(part, lang, default=st["srv_default_ctx"], vram=format_size(st.get("srv_vram_total") or 0),
                 used="" if not st["ctx_unset"] else t(part + ".used", lang))
    if change.key == "llama_server_engine":
        if st["repro"] == "spill":
            return t(part + ".spilled", lang, ctx=at.get("num_ctx") or "?", vram=format_size(at.get("size_vram")),
                     size=format_size(at.get("size")))
        return t(part, lang, engine=st["srv_engine"] or "?")
    return t(part, lang, fa=st["srv_fa"] or "?")


def _finding(st: dict) -> tuple[str, str]:
    found = changes_between(st["upgraded_from"], st["srv_version"])
    words = {}
    for lang in ("en", "zh"):
        lines = [t(f"finding.upgrade_changed_memory.{c.key}", lang, since=".".join(map(str, c.since)))
                 + " " + _seen(st, c, lang) for c in found]
        head = t("finding.upgrade_changed_memory", lang, before=st["upgraded_from"] or t(
            "finding.upgrade_changed_memory.before_unknown", lang), running=st["srv_version"])
        tail = t("finding.upgrade_changed_memory.none", lang) if not found else " ".join(lines)
        words[lang] = f"{head} {tail}"
    return words["en"], words["zh"]


with TREE:

    # after the user's own setup was run on the running server: the proof is that run
    @deciding_rule(124, (state.found_upgrade == False) & (state.upgraded == True)  # noqa: E712
                   & (state.srv_version != "") & (state.repro != "unrun") & (state.awaiting == "none"))
    def upgrade_changed_memory(st):
        record_finding(st, "upgrade", *_finding(st))
