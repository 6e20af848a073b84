"""Reading one session back from the journal: its entries, what of them a
resume may trust, and the replay that rebuilds the session from them.

A probe whose facts did not all reach the journal is never trusted: a resume
builds on the last fact batch that arrived whole and runs the cut probe
again. What a killed run left changed on the server is found here too, so
``oomvet resume`` can put it back. :class:`~assistant.journal.write.SessionLog`
adds the writing side to :class:`SessionReader`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from assistant.journal.store import Journal


@dataclass(frozen=True)
class Entry:
    """One journalled entry: ``kind`` says what ``body`` (plain JSON data) is."""

    seq: int
    kind: str
    body: dict
    at: str | None = None


class SessionReader:
    """One session's entries, read back."""

    def __init__(self, journal: "Journal", sid: str):
        self.journal = journal
        self.id = sid

    def entries(self, kinds: Iterable[str] | None = None) -> list[Entry]:
        rows = self.journal._db.execute("SELECT seq, kind, body, at FROM entries WHERE session = ? ORDER BY seq",
                                        (self.id,)).fetchall()
        wanted = set(kinds) if kinds is not None else None
        return [Entry(seq, kind, json.loads(body), at) for seq, kind, body, at in rows
                if wanted is None or kind in wanted]

    @property
    def info(self) -> dict:
        start = self.entries(["start"])
        return start[0].body if start else {}

    @property
    def result(self) -> dict | None:
        done = self.entries(["finished"])
        return done[-1].body["result"] if done else None

    def trusted(self) -> list[Entry]:
        """The entries a resume may build on: everything up to the last fact batch
        that reached the journal whole. A step or chart recorded after it
        belongs to a probe that was cut, whose readings are not trusted."""
        entries = _live(self.entries())
        batches: dict[int, list[Entry]] = {}
        for e in entries:
            if e.kind == "fact":
                batches.setdefault(e.body["batch"], []).append(e)
        complete = {b for b, rows in batches.items() if len(rows) == rows[0].body["of"]}
        last = max((rows[-1].seq for b, rows in batches.items() if b in complete), default=0)
        return [e for e in entries if e.seq <= last and (e.kind != "fact" or e.body["batch"] in complete)]

    def cut_probe(self) -> str | None:
        """The probe that was running when the session stopped, if its facts
        never arrived whole or the user stopped it."""
        trusted = {e.seq for e in self.trusted()}
        started = [e for e in self.entries(["probe_started"]) if e.seq not in trusted]
        return started[-1].body.get("probe") if started else None

    @property
    def state(self) -> str | None:
        row = self.journal._db.execute("SELECT state FROM sessions WHERE id = ?", (self.id,)).fetchone()
        return row[0] if row else None

    def unrestored(self) -> list[dict]:
        """Server changes recorded with no matching restore: what a killed session left behind."""
        open_: dict[str, dict] = {}
        for e in self.entries():
            if not e.kind.startswith("server."):
                continue
            key = e.body.get("key", "")
            if e.kind in ("server.loaded_before", "server.settings_before"):
                open_[key] = dict(e.body, event=e.kind)
            elif e.kind in ("server.restored", "server.settings_restored"):
                open_.pop(key, None)
        return list(open_.values())

    def replay(self, advisor, session) -> dict | None:
        """Post the trusted facts into a fresh ``advisor`` batch by batch, as the
        session first posted them, and give ``session`` back its steps and
        charts. Returns the next step the rules ask for."""
        step = None
        batch: list[dict] = []
        for e in self.trusted():
            if e.kind == "fact":
                batch.append(e.body["fact"])
                if len(batch) == e.body["of"]:
                    step = advisor.post_many(batch)
                    for fact in batch:
                        if fact.get("kind") == "answer" and fact.get("question") == "model" and fact.get("value"):
                            session.model = str(fact["value"])
                        if fact.get("kind") == "stability":
                            session.last_stability = fact
                    batch = []
            elif e.kind == "step":
                session.steps.append(e.body)
            elif e.kind == "charts":
                session.charts.extend(e.body["charts"])
        return step


def _live(entries: list[Entry]) -> list[Entry]:
    """The entries less each stretch a user's stop left: from the start of
    the probe they stopped to the resume after it (the stop's own facts, its
    conclusion and its files are not evidence, and that probe runs again)."""
    out: list[Entry] = []
    skipping = False
    for e in entries:
        if skipping:
            skipping = e.kind != "resumed"
            if skipping:
                continue
        elif e.kind == "user_stopped":
            started = [i for i, x in enumerate(out) if x.kind == "probe_started"]
            del out[started[-1] if started else len(out):]
            skipping = True
            continue
        out.append(e)
    return out
