"""Writing one session into the journal, each entry before it is used.

Every fact the session posts to the rules, every step, every chart, every
change a probe makes to the server and every file the session writes is
appended as one SQLite transaction: a crash, a Ctrl-C or a full disk loses at
most the entry being written. A change the session could not undo is
journalled with the exact command a person runs to put it back.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from typing import Any, Mapping

from common.catalog import t
from common.errors import JournalError, UserError
from assistant.journal.read import SessionReader
from assistant.journal.schema import first_line, now
from probes.server import DEFAULT_HOST
from rules.facts import PROBES, FactError


class SessionLog(SessionReader):
    """One session's entries: append them, read them back, replay them."""

    def append(self, kind: str, body: Mapping[str, Any]) -> int:
        """Commit one entry; returns its sequence number. Raises JournalError."""
        # key order kept: the report and config writers render dicts in the order they get them
        text = json.dumps(body, default=str, ensure_ascii=False)
        db = self.journal._db

        def insert():
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM entries WHERE session = ?",
                             (self.id,)).fetchone()[0]
            db.execute("INSERT INTO entries (session, seq, kind, body, at) VALUES (?, ?, ?, ?, ?)",
                       (self.id, seq, kind, text, now()))
            db.execute("UPDATE sessions SET updated = ? WHERE id = ?", (now(), self.id))
            return seq
        return self.journal._write(self.id, insert)

    def set_state(self, state: str, **cols: Any) -> None:
        names = ["state", "updated", "pid"] + list(cols)
        values = [state, now(), os.getpid()] + list(cols.values())
        sets = ", ".join(f"{n} = ?" for n in names)
        self.journal._write(self.id, lambda: self.journal._db.execute(
            f"UPDATE sessions SET {sets} WHERE id = ?", (*values, self.id)))

    def advising(self, advisor) -> "JournalledAdvisor":
        """``advisor`` with every fact journalled before the rules see it."""
        return JournalledAdvisor(advisor, self)

    def attach(self, advisor, session) -> tuple["JournalledAdvisor", dict | None]:
        """Called by the session loop: replay what a resumed session had, route
        the probes' server changes here, and journal every post from now on.
        Returns the journalled advisor and the next step (None: a fresh session)."""
        env = getattr(getattr(session, "world", None), "env", None)
        if env is not None:
            env.on_change = self.server_change
        step = None
        trusted = [e for e in self.trusted() if e.kind == "fact"]
        if trusted:
            print("oomvet: " + t("journal.resuming", sid=self.id, n=len(trusted)), file=sys.stderr)
            cut = self.cut_probe()
            if cut:
                name = t(f"probe.name.{cut}") if cut in PROBES else cut
                print("oomvet: " + t("journal.rerun", probe=name), file=sys.stderr)
            try:
                step = self.replay(advisor, session)
            except FactError as exc:
                # written by an oomvet whose facts held verdicts: they are not guessed into measurements
                raise JournalError(t("journal.old_facts", sid=self.id, reason=first_line(exc))) from exc
        return self.advising(advisor), step

    def server_change(self, event: str, data: Mapping[str, Any]) -> None:
        """The ProbeEnv callback (``env.journal``): a change a probe is about to
        make, or has undone, or could not undo (then the command is printed too)."""
        data = dict(data)
        if event == "restore_failed":
            data["command"] = restore_command(data)
        self.append(f"server.{event}", data)
        if event == "restore_failed":
            print("oomvet: " + t("journal.restore_cmd", reason=first_line(data.get("reason")),
                                 command=data["command"]), file=sys.stderr)

    def finished(self, result: Mapping[str, Any], exit_code: int) -> None:
        """The session's end; one the user stopped (exit code 130) is
        "stopped", and ``oomvet resume`` goes on from the probe they stopped."""
        self.append("finished", {"result": dict(result), "exit_code": exit_code})
        cause = (result.get("diagnosis") or {}).get("cause")
        stopped = any(e.kind == "user_stopped" for e in self.entries(["user_stopped", "resumed"])[-1:])
        self.set_state("stopped" if stopped else "finished", cause=cause, verified=int(bool(result.get("verified"))))

    def deliver(self, out_dir, result: Mapping[str, Any]):
        """Write the session's files, journalling what will be written first."""
        from assistant.files.deliver import deliver

        self.append("files", {"out": str(out_dir)})
        try:
            doc, paths = deliver(out_dir, result)
        except UserError as exc:
            exc.hint = exc.hint or t("journal.keep_hint", sid=self.id)
            raise
        self.append("files_written", {"out": str(out_dir), "names": [p.name for p in paths]})
        return doc, paths


class JournalledAdvisor:
    """An Advisor whose posts are journalled first, one fact per transaction.
    A batch is trusted on replay only when all its facts are in the journal."""

    def __init__(self, advisor, log: SessionLog):
        self._advisor = advisor
        self._log = log
        self._batch = max((e.body["batch"] for e in log.entries(["fact"])), default=0)

    def post(self, fact):
        return self.post_many([fact])

    def post_many(self, facts):
        from rules.facts import validate

        facts = [dict(f) for f in facts]
        for f in facts:
            validate(f)  # a fact the rules would refuse must not be journalled as if it was posted
        self._batch += 1
        for i, fact in enumerate(facts):
            self._log.append("fact", {"batch": self._batch, "i": i, "of": len(facts), "fact": fact})
        return self._advisor.post_many(facts)

    def __getattr__(self, name):
        return getattr(self._advisor, name)


# -- restoring the server: the exact commands a person would type -------------

def unload_command(host: str, model: str) -> str:
    body = json.dumps({"model": model, "keep_alive": 0})
    return f"curl -s {shlex.quote(host + '/api/generate')} -d {shlex.quote(body)}"


def load_command(host: str, model: str, num_ctx: int | None) -> str:
    body: dict = {"model": model, "keep_alive": "5m"}
    if num_ctx:
        body["options"] = {"num_ctx": num_ctx}
    return f"curl -s {shlex.quote(host + '/api/generate')} -d {shlex.quote(json.dumps(body))}"


def restore_command(change: Mapping[str, Any]) -> str:
    """What a person runs to put back what a failed restore could not."""
    host = change.get("host") or DEFAULT_HOST
    if "settings" in change:
        return restart_command(change["settings"])
    loads = [load_command(host, m["name"], m.get("context_length")) for m in change.get("models") or []]
    return " && ".join(loads) or f"curl -s {shlex.quote(host + '/api/ps')}  # nothing was loaded before: " \
                                  "unload whatever this lists with keep_alive 0"


def restart_command(settings: Mapping[str, str | None]) -> str:
    """``ollama serve`` with these settings; a None one was unset before and is
    unset again (``env -u``: an empty value is not the same to llama.cpp)."""
    unset = " ".join(f"-u {k}" for k, v in sorted(settings.items()) if v is None)
    env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(settings.items()) if v is not None)
    return " ".join(p for p in (f"env {unset}" if unset else "", env, "ollama serve") if p)
