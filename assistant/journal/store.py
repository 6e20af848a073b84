"""The session journal: everything a diagnosis learned, on disk before it is used.

A diagnosis is minutes of loads on somebody's server; a crash, a Ctrl-C, a
restart or a full disk must not throw those minutes away. Every fact the
session posts to the rules, every step it records, every chart, every change
a probe makes to the server and every file it writes is appended here first,
one SQLite transaction per entry (stdlib ``sqlite3``, WAL), in the user's
state folder (``platformdirs``; ``OOMVET_STATE_DIR`` overrides). From that
record :mod:`assistant.commands.sessions` lists sessions, resumes one from its last
complete fact (a probe whose facts did not all reach the journal is run again,
never trusted) and re-renders a finished session's files with no server.
This module is the front door: :class:`Journal` opens the database
(:mod:`assistant.journal.schema`: where, which tables, migrations), begins and
lists sessions; a session's log writes (:mod:`assistant.journal.write`) and
reads back (:mod:`assistant.journal.read`); the commands open a log with
:func:`open_log` and keep its state true with :func:`tracking`.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from common.catalog import t
from common.errors import JournalError
from assistant.journal.read import Entry, SessionReader
from assistant.journal.schema import (DB_NAME, MIGRATIONS, SCHEMA_VERSION, Migration, connect, first_line, now,
                                      state_dir, user_version)
from assistant.journal.write import (JournalledAdvisor, SessionLog, load_command, restart_command, restore_command,
                                     unload_command)

__all__ = ["DB_NAME", "MIGRATIONS", "SCHEMA_VERSION", "Entry", "Journal", "JournalError", "JournalledAdvisor",
           "SessionLog", "SessionReader", "load_command", "open_log", "restart_command", "restore_command",
           "state_dir", "tracking", "undo_cut_changes", "unload_command"]


class Journal:
    """The journal database. ``Journal()`` opens (and creates or migrates) the
    one in the state folder; ``Journal(path)`` another one."""

    def __init__(self, path: str | os.PathLike | None = None,
                 migrations: list[Migration] | None = None):
        self.path = Path(path) if path is not None else state_dir() / DB_NAME
        self._db = connect(self.path, MIGRATIONS if migrations is None else migrations)

    @property
    def version(self) -> int:
        return user_version(self._db)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- sessions ------------------------------------------------------------

    def begin(self, info: Mapping[str, Any]) -> SessionLog:
        """A new session; ``info`` (argv, model, host, world...) is its first entry."""
        sid = f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        self._write(sid, lambda: self._db.execute(
            "INSERT INTO sessions (id, started, state, model, server, pid, updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (sid, now(), "running", info.get("model"), info.get("host"), os.getpid(), now())))
        log = SessionLog(self, sid)
        log.append("start", dict(info))
        return log

    def session(self, sid: str) -> SessionLog:
        row = self._db.execute("SELECT id FROM sessions WHERE id = ?", (sid,)).fetchone()
        if row is None:
            raise JournalError(t("journal.unknown", sid=sid))
        return SessionLog(self, sid)

    def sessions(self) -> list[dict]:
        """Every session, newest first: id, started, model, server, cause, verified, state."""
        rows = self._db.execute("SELECT id, started, model, server, cause, verified, state, pid FROM sessions "
                                "ORDER BY started DESC, id DESC").fetchall()
        out = []
        for sid, started, model, server, cause, verified, state, pid in rows:
            if state == "running" and not _alive(pid):
                state = "cut"  # killed with no chance to say so (SIGKILL, power loss)
            out.append({"id": sid, "started": started, "model": model, "server": server, "cause": cause,
                        "verified": None if verified is None else bool(verified), "state": state})
        return out

    def _write(self, sid: str, work: Callable[[], Any]) -> Any:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                value = work()
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            return value
        except (sqlite3.Error, OSError) as exc:
            raise JournalError(t("journal.cannot_write", path=self.path, reason=first_line(exc), sid=sid)) from exc


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the commands' side: opening a session's log, keeping its state ----------

def open_log(options, world, **info: Any) -> SessionLog:
    """The log for this run (``options``: the session's
    :class:`assistant.session.args.SessionOptions`): a new session, or
    (``oomvet resume``) the one being resumed, after putting back what its cut
    run left changed."""
    log = options.resume_log
    if log is None:
        argv = None if options.argv is None else list(options.argv)
        return Journal().begin({"argv": argv, "command": options.command, "host": world.host,
                                "world": world.kind, "out": str(options.out), **info})
    log.append("resumed", {"host": world.host, "pid": os.getpid()})
    log.set_state("running")
    undo_cut_changes(log, world.env)
    return log


def undo_cut_changes(log: SessionLog, env) -> None:
    """Models a killed session had loaded go back to what was loaded before it."""
    from probes.base import restore
    from probes.ollama_api import Loaded

    for change in log.unrestored():
        if change["event"] != "server.loaded_before":
            continue  # settings: the server was restarted by whoever restarted it
        before = [Loaded(name=m["name"], size_bytes=0, size_vram_bytes=0,
                         context_length=m.get("context_length"), quantization=None)
                  for m in change.get("models") or []]
        what = ", ".join(m.name for m in before) or "-"
        print("oomvet: " + t("journal.undo", what=what), file=sys.stderr)
        restore(env.api, before)
        log.append("server.restored", {"key": change.get("key"), "by": "resume"})


@contextlib.contextmanager
def tracking(log: SessionLog, quits: tuple[type[BaseException], ...] = ()):
    """Keep the session's state column true to how the run ended; ``quits``:
    the exceptions that are the user leaving (the chat's /quit), interrupted
    like Ctrl-C."""
    try:
        yield log
    except (KeyboardInterrupt, *quits):
        _quietly(log, "interrupted", "interrupted")
        raise
    except JournalError:
        raise  # the journal itself cannot take it
    except BaseException as exc:
        _quietly(log, "failed", first_line(exc))
        raise


def _quietly(log: SessionLog, state: str, why: str) -> None:
    try:
        log.append("stopped", {"state": state, "why": why})
        log.set_state(state)
    except JournalError:
        pass  # the error already on its way out says more than this one would
