"""The session journal: everything a diagnosis learned, on disk before it is used.

A diagnosis is minutes of loads on somebody's server; a crash, a Ctrl-C, a
restart or a full disk must not throw those minutes away. Every fact the
session posts to the rules, every step it records, every chart, every change
a probe makes to the server and every file it writes is appended here first,
one SQLite transaction per entry (stdlib ``sqlite3``, WAL), in the user's
state folder (``platformdirs``; ``OOMVET_STATE_DIR`` overrides). From that
record :mod:`assistant.cmd_sessions` lists sessions, resumes one from its last
complete fact (a probe whose facts did not all reach the journal is run again,
never trusted) and re-renders a finished session's files with no server.
The schema carries a version (``PRAGMA user_version``); :data:`MIGRATIONS`
brings an older journal forward in place.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from assistant.errors import OomvetError
from assistant.i18n import catalog, t

MSG = catalog("journal")

#: the schema this code writes; older journals are migrated up to it
SCHEMA_VERSION = 2
DB_NAME = "journal.sqlite3"


class JournalError(OomvetError):
    """The journal cannot be opened or written (full disk, read-only folder,
    a newer schema): one line, exit 2; nothing journalled before is lost."""


def _v1(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, started TEXT NOT NULL, state TEXT NOT NULL)")
    db.execute("CREATE TABLE entries (session TEXT NOT NULL REFERENCES sessions(id), seq INTEGER NOT NULL, "
               "kind TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session, seq))")


def _v2(db: sqlite3.Connection) -> None:
    # the columns `oomvet sessions` shows, so listing does not parse every entry;
    # filled for old sessions from their start and finish entries
    for col in ("model TEXT", "server TEXT", "cause TEXT", "verified INTEGER", "pid INTEGER", "updated TEXT"):
        db.execute(f"ALTER TABLE sessions ADD COLUMN {col}")
    db.execute("ALTER TABLE entries ADD COLUMN at TEXT")
    for sid, body in db.execute("SELECT session, body FROM entries WHERE kind = 'start'").fetchall():
        info = json.loads(body)
        db.execute("UPDATE sessions SET model = ?, server = ? WHERE id = ?", (info.get("model"), info.get("host"), sid))
    for sid, body in db.execute("SELECT session, body FROM entries WHERE kind = 'finished'").fetchall():
        result = json.loads(body).get("result") or {}
        db.execute("UPDATE sessions SET cause = ?, verified = ? WHERE id = ?",
                   ((result.get("diagnosis") or {}).get("cause"), int(bool(result.get("verified"))), sid))


#: MIGRATIONS[n] takes a journal from version n to n + 1
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2]
assert len(MIGRATIONS) == SCHEMA_VERSION


def state_dir() -> Path:
    """``$OOMVET_STATE_DIR``, else the platform's user state folder
    (``~/.local/state/oomvet`` on Linux)."""
    override = os.environ.get("OOMVET_STATE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_state_dir("oomvet", appauthor=False))


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]


@dataclass(frozen=True)
class Entry:
    """One journalled entry: ``kind`` says what ``body`` (plain JSON data) is."""

    seq: int
    kind: str
    body: dict
    at: str | None = None


class Journal:
    """The journal database. ``Journal()`` opens (and creates or migrates) the
    one in the state folder; ``Journal(path)`` another one."""

    def __init__(self, path: str | os.PathLike | None = None,
                 migrations: list[Callable[[sqlite3.Connection], None]] | None = None):
        self._migrations = MIGRATIONS if migrations is None else migrations
        self.path = Path(path) if path is not None else state_dir() / DB_NAME
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed entry survives the machine losing power, not only oomvet dying
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except JournalError:
            raise
        except (sqlite3.Error, OSError) as exc:
            raise JournalError(t("journal.cannot_open", path=self.path, reason=_reason(exc))) from exc

    @property
    def version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        found = self.version
        known = len(self._migrations)
        if found > known:
            raise JournalError(t("journal.newer", path=self.path, found=found, known=known))
        for n in range(found, known):
            # one transaction per step: a migration cut halfway leaves the old version intact
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._migrations[n](self._db)
                self._db.execute(f"PRAGMA user_version = {n + 1}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- sessions ------------------------------------------------------------

    def begin(self, info: Mapping[str, Any]) -> "SessionLog":
        """A new session; ``info`` (argv, model, host, world...) is its first entry."""
        now = datetime.now(timezone.utc)
        sid = f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        self._write(sid, lambda: self._db.execute(
            "INSERT INTO sessions (id, started, state, model, server, pid, updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (sid, _now(), "running", info.get("model"), info.get("host"), os.getpid(), _now())))
        log = SessionLog(self, sid)
        log.append("start", dict(info))
        return log

    def session(self, sid: str) -> "SessionLog":
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
            raise JournalError(t("journal.cannot_write", path=self.path, reason=_reason(exc), sid=sid)) from exc


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


class SessionLog:
    """One session's entries: append them, read them back, replay them."""

    def __init__(self, journal: Journal, sid: str):
        self.journal = journal
        self.id = sid

    # -- writing ---------------------------------------------------------------

    def append(self, kind: str, body: Mapping[str, Any]) -> int:
        """Commit one entry; returns its sequence number. Raises JournalError."""
        # key order kept: the report and config writers render dicts in the order they get them
        text = json.dumps(body, default=str, ensure_ascii=False)
        db = self.journal._db

        def insert():
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM entries WHERE session = ?",
                             (self.id,)).fetchone()[0]
            db.execute("INSERT INTO entries (session, seq, kind, body, at) VALUES (?, ?, ?, ?, ?)",
                       (self.id, seq, kind, text, _now()))
            db.execute("UPDATE sessions SET updated = ? WHERE id = ?", (_now(), self.id))
            return seq
        return self.journal._write(self.id, insert)

    def set_state(self, state: str, **cols: Any) -> None:
        names = ["state", "updated", "pid"] + list(cols)
        values = [state, _now(), os.getpid()] + list(cols.values())
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
            import sys

            print("oomvet: " + t("journal.resuming", sid=self.id, n=len(trusted)), file=sys.stderr)
            cut = self.cut_probe()
            if cut:
                print("oomvet: " + t("journal.rerun", probe=cut), file=sys.stderr)
            step = self.replay(advisor, session)
        return self.advising(advisor), step

    def server_change(self, event: str, data: Mapping[str, Any]) -> None:
        """The ProbeEnv callback (``env.journal``): a change a probe is about to
        make, or has undone, or could not undo (then the command is printed too)."""
        data = dict(data)
        if event == "restore_failed":
            data["command"] = restore_command(data)
        self.append(f"server.{event}", data)
        if event == "restore_failed":
            import sys

            print("oomvet: " + t("journal.restore_cmd", reason=_first_line(data.get("reason")),
                                 command=data["command"]), file=sys.stderr)

    def finished(self, result: Mapping[str, Any], exit_code: int) -> None:
        self.append("finished", {"result": dict(result), "exit_code": exit_code})
        cause = (result.get("diagnosis") or {}).get("cause")
        self.set_state("finished", cause=cause, verified=int(bool(result.get("verified"))))

    def deliver(self, out_dir, result: Mapping[str, Any]):
        """Write the session's files, journalling what will be written first."""
        from assistant.deliver import deliver

        self.append("files", {"out": str(out_dir)})
        try:
            doc, paths = deliver(out_dir, result)
        except OomvetError as exc:
            exc.hint = exc.hint or t("journal.keep_hint", sid=self.id)
            raise
        self.append("files_written", {"out": str(out_dir), "names": [p.name for p in paths]})
        return doc, paths

    # -- reading ---------------------------------------------------------------

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
        entries = self.entries()
        batches: dict[int, list[Entry]] = {}
        for e in entries:
            if e.kind == "fact":
                batches.setdefault(e.body["batch"], []).append(e)
        complete = {b for b, rows in batches.items() if len(rows) == rows[0].body["of"]}
        last = max((rows[-1].seq for b, rows in batches.items() if b in complete), default=0)
        return [e for e in entries if e.seq <= last and (e.kind != "fact" or e.body["batch"] in complete)]

    def cut_probe(self) -> str | None:
        """The probe that was running when the session stopped, if its facts never arrived whole."""
        trusted = {e.seq for e in self.trusted()}
        started = [e for e in self.entries(["probe_started"]) if e.seq not in trusted]
        return started[-1].body.get("probe") if started else None

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


def _first_line(text) -> str:
    return (str(text or "").splitlines() or [""])[0]


def restore_command(change: Mapping[str, Any]) -> str:
    """What a person runs to put back what a failed restore could not."""
    host = change.get("host") or "http://127.0.0.1:11434"
    if "settings" in change:
        return restart_command(change["settings"])
    loads = [load_command(host, m["name"], m.get("context_length")) for m in change.get("models") or []]
    return " && ".join(loads) or f"curl -s {shlex.quote(host + '/api/ps')}  # nothing was loaded before: " \
                                  "unload whatever this lists with keep_alive 0"


def restart_command(settings: Mapping[str, str]) -> str:
    env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(settings.items()))
    return f"{env} ollama serve".strip()


# -- the commands' side: opening a session's log, keeping its state ----------

def open_log(args, world, **info: Any) -> SessionLog:
    """The log for this run: a new session, or (``oomvet resume``) the one
    being resumed, after putting back what its cut run left changed."""
    log = getattr(args, "resume_log", None)
    if log is None:
        return Journal().begin({"argv": getattr(args, "argv", None), "command": getattr(args, "command", None),
                                "host": world.host, "world": world.kind, "out": str(getattr(args, "out", "")),
                                **info})
    log.append("resumed", {"host": world.host, "pid": os.getpid()})
    log.set_state("running")
    undo_cut_changes(log, world.env)
    return log


def undo_cut_changes(log: SessionLog, env) -> None:
    """Models a killed session had loaded go back to what was loaded before it."""
    import sys

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
def tracking(log: SessionLog):
    """Keep the session's state column true to how the run ended."""
    try:
        yield log
    except KeyboardInterrupt:
        _quietly(log, "interrupted", "interrupted")
        raise
    except JournalError:
        raise  # the journal itself cannot take it
    except BaseException as exc:
        _quietly(log, "failed", _first_line(exc) or type(exc).__name__)
        raise


def _quietly(log: SessionLog, state: str, why: str) -> None:
    try:
        log.append("stopped", {"state": state, "why": why})
        log.set_state(state)
    except JournalError:
        pass  # the error already on its way out says more than this one would
