"""Where the session journal lives and what its tables are.

The journal is one SQLite file (stdlib ``sqlite3``, WAL) in the user's state
folder (``platformdirs``; ``OOMVET_STATE_DIR`` overrides). Its schema carries
a version (``PRAGMA user_version``); :data:`MIGRATIONS` brings an older
journal forward in place, one transaction per step, and a journal newer than
this code is refused rather than guessed at. :mod:`assistant.journal.store` opens
it; :mod:`assistant.journal.write` and :mod:`assistant.journal.read` use it.
"""
from __future__ import annotations

import json
import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from common.catalog import t
from common.errors import JournalError


#: the schema this code writes; older journals are migrated up to it
SCHEMA_VERSION = 2
DB_NAME = "journal.sqlite3"

Migration = Callable[[sqlite3.Connection], None]


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
MIGRATIONS: list[Migration] = [_v1, _v2]
assert len(MIGRATIONS) == SCHEMA_VERSION


def state_dir() -> Path:
    """``$OOMVET_STATE_DIR``, else the platform's user state folder
    (``~/.local/state/oomvet`` on Linux)."""
    override = os.environ.get("OOMVET_STATE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_state_dir("oomvet", appauthor=False))


def connect(path: Path, migrations: list[Migration]) -> sqlite3.Connection:
    """The journal at ``path``, created or migrated to ``len(migrations)``.
    Raises JournalError with one line when it cannot be opened."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed entry survives the machine losing power, not only oomvet dying
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        migrate(db, path, migrations)
        return db
    except JournalError:
        raise
    except (sqlite3.Error, OSError) as exc:
        raise JournalError(t("journal.cannot_open", path=path, reason=first_line(exc))) from exc


def user_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate(db: sqlite3.Connection, path: Path, migrations: list[Migration]) -> None:
    found, known = user_version(db), len(migrations)
    if found > known:
        raise JournalError(t("journal.newer", path=path, found=found, known=known))
    for n in range(found, known):
        # one transaction per step: a migration cut halfway leaves the old version intact
        db.execute("BEGIN IMMEDIATE")
        try:
            migrations[n](db)
            db.execute(f"PRAGMA user_version = {n + 1}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


def now() -> str:
    """The time an entry is written, UTC to the microsecond."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def first_line(text) -> str:
    """The first line of an error or a message ("" for none); an exception
    with no text gives its type's name."""
    if isinstance(text, BaseException):
        text = str(text) or type(text).__name__
    return (str(text or "").splitlines() or [""])[0]
