"""The session journal: facts on disk before the rules see them, the schema and
its migrations, what a resume may trust, and the server changes it records."""
from __future__ import annotations

import json
import sqlite3

import pytest

from assistant.journal.store import (MIGRATIONS, SCHEMA_VERSION, Journal, JournalError, restore_command, state_dir)
from probes.base import ProbeEnv, restoring, server_settings
from probes.ollama_api import Loaded


def test_state_folder_is_the_platform_one_unless_overridden(monkeypatch, tmp_path):
    monkeypatch.setenv("OOMVET_STATE_DIR", str(tmp_path / "s"))
    assert state_dir() == tmp_path / "s"
    monkeypatch.delenv("OOMVET_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "oomvet"


def test_a_new_journal_is_wal_at_the_current_schema(tmp_path):
    with Journal(tmp_path / "j.sqlite3") as j:
        assert j.version == SCHEMA_VERSION
        assert j._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_each_entry_is_committed_on_its_own(tmp_path):
    path = tmp_path / "j.sqlite3"
    j = Journal(path)
    log = j.begin({"model": "m:1", "host": "http://h"})
    log.append("step", {"n": 1})
    # another connection (another process after a SIGKILL) sees it at once
    other = sqlite3.connect(path)
    kinds = [k for (k,) in other.execute("SELECT kind FROM entries WHERE session = ? ORDER BY seq", (log.id,))]
    assert kinds == ["start", "step"]
    other.close()
    j.close()


def _v1_journal(path):
    db = sqlite3.connect(path, isolation_level=None)
    MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO sessions VALUES ('old-1', '2026-01-01T00:00:00Z', 'finished')")
    db.execute("INSERT INTO entries VALUES ('old-1', 1, 'start', ?)",
               (json.dumps({"model": "neohorse-1:q8_0", "host": "http://127.0.0.1:11434"}),))
    db.execute("INSERT INTO entries VALUES ('old-1', 2, 'finished', ?)",
               (json.dumps({"result": {"diagnosis": {"cause": "kv_cache"}, "verified": True}}),))
    db.close()


def test_a_version_1_journal_is_migrated_in_place_keeping_its_sessions(tmp_path):
    path = tmp_path / "j.sqlite3"
    _v1_journal(path)
    with Journal(path) as j:
        assert j.version == 2
        (row,) = j.sessions()
        assert row == {"id": "old-1", "started": "2026-01-01T00:00:00Z", "model": "neohorse-1:q8_0",
                       "server": "http://127.0.0.1:11434", "cause": "kv_cache", "verified": True,
                       "state": "finished"}
        log = j.session("old-1")
        assert [e.kind for e in log.entries()] == ["start", "finished"]
        log.append("step", {"n": 1})  # and it takes new entries in the new shape
        assert log.entries()[-1].at is not None


def test_a_migration_that_fails_leaves_the_old_version(tmp_path):
    path = tmp_path / "j.sqlite3"
    _v1_journal(path)

    def broken(db):
        db.execute("ALTER TABLE sessions ADD COLUMN model TEXT")
        raise sqlite3.OperationalError("disk I/O error")
    with pytest.raises(JournalError, match="cannot open the session journal"):
        Journal(path, migrations=[MIGRATIONS[0], broken])
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "model" not in [r[1] for r in db.execute("PRAGMA table_info(sessions)")]
    db.close()


def test_a_journal_from_a_newer_oomvet_is_refused_with_one_line(tmp_path):
    path = tmp_path / "j.sqlite3"
    sqlite3.connect(path).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    with pytest.raises(JournalError, match="written by a newer oomvet") as info:
        Journal(path)
    assert info.value.exit_code == 2 and "\n" not in str(info.value)


def test_a_journal_that_cannot_be_created_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(JournalError, match="cannot open the session journal"):
        Journal(blocker / "j.sqlite3")


class _Recorder:
    """An Advisor stand-in that checks, on every post, what the journal already holds."""

    def __init__(self, log):
        self.log, self.seen = log, []

    def post_many(self, facts):
        journalled = [e.body["fact"] for e in self.log.entries(["fact"])]
        for f in facts:
            assert f in journalled, "a fact reached the rules before the journal"
        self.seen.append(list(facts))
        return {"action": "done"}


def test_every_fact_is_journalled_before_the_rules_see_it(tmp_path):
    with Journal(tmp_path / "j.sqlite3") as j:
        log = j.begin({})
        rec = _Recorder(log)
        adv = log.advising(rec)
        adv.post({"kind": "symptom", "phase": "load", "text": "oom"})
        adv.post_many([{"kind": "symptom", "phase": "slow", "text": "a"},
                       {"kind": "answer", "question": "model", "value": "m:1"}])
        rows = log.entries(["fact"])
        assert [(e.body["batch"], e.body["i"], e.body["of"]) for e in rows] == [(1, 0, 1), (2, 0, 2), (2, 1, 2)]
        assert len(rec.seen) == 2


def test_a_fact_the_rules_would_refuse_is_not_journalled(tmp_path):
    from rules.facts import FactError
    with Journal(tmp_path / "j.sqlite3") as j:
        log = j.begin({})
        with pytest.raises(FactError):
            log.advising(_Recorder(log)).post({"kind": "symptom", "phase": "nonsense"})
        assert log.entries(["fact"]) == []


def test_resume_trusts_only_whole_batches_and_what_came_before_them(tmp_path):
    with Journal(tmp_path / "j.sqlite3") as j:
        log = j.begin({})
        log.append("fact", {"batch": 1, "i": 0, "of": 1, "fact": {"kind": "x"}})
        log.append("probe_started", {"probe": "baseline"})
        log.append("charts", {"charts": [{"name": "a"}]})
        log.append("step", {"n": 1})
        log.append("fact", {"batch": 2, "i": 0, "of": 2, "fact": {"kind": "y"}})
        log.append("fact", {"batch": 2, "i": 1, "of": 2, "fact": {"kind": "z"}})
        log.append("probe_started", {"probe": "context"})
        log.append("charts", {"charts": [{"name": "b"}]})
        log.append("step", {"n": 2})
        log.append("fact", {"batch": 3, "i": 0, "of": 3, "fact": {"kind": "tier"}})  # killed here
        kept = [(e.kind, e.body.get("batch") or e.body.get("n") or e.body.get("probe")) for e in log.trusted()]
        assert kept == [("start", None), ("fact", 1), ("probe_started", "baseline"), ("charts", None),
                        ("step", 1), ("fact", 2), ("fact", 2)]
        assert log.cut_probe() == "context"


class _FakeApi:
    """/api/ps and load/unload as a server would answer them."""

    host = "http://127.0.0.1:1"

    def __init__(self, loaded):
        self.loaded_ = list(loaded)
        self.down = False

    def ps(self):
        if self.down:
            from common.errors import ServerUnreachable
            raise ServerUnreachable("no Ollama server answers at http://127.0.0.1:1")
        return list(self.loaded_)

    def unload(self, name):
        self.loaded_ = [m for m in self.loaded_ if m.name != name]

    def load(self, name, options):
        self.loaded_.append(Loaded(name, 1, 0, options.get("num_ctx"), None))


class _Control:
    def __init__(self):
        self.settings, self.fail_next = {}, False

    def env(self):
        return dict(self.settings)

    def can_restart(self):
        return True

    def restart(self, changes):
        if self.fail_next:
            raise RuntimeError("the server did not come back")
        for key, value in changes.items():  # None unsets, as ManagedServer.restart does
            if value is None:
                self.settings.pop(key, None)
            else:
                self.settings[key] = value


def test_a_probe_change_is_journalled_before_it_and_its_undo_after(tmp_path):
    with Journal(tmp_path / "j.sqlite3") as j:
        log = j.begin({})
        api = _FakeApi([Loaded("keep:1", 1, 0, 4096, None)])
        env = ProbeEnv(api=api, reader=None, control=_Control(), on_change=log.server_change)
        with restoring(env):
            assert [e.kind for e in log.entries()][-1] == "server.loaded_before"
            assert log.unrestored()[0]["models"] == [{"name": "keep:1", "context_length": 4096}]
            api.unload("keep:1")
            api.load("probe:1", {"num_ctx": 8192})
        assert [(m.name, m.context_length) for m in api.ps()] == [("keep:1", 4096)]
        assert log.entries()[-1].kind == "server.restored" and log.unrestored() == []
        with server_settings(env, {"OLLAMA_NUM_PARALLEL": "4"}):
            assert log.unrestored()[0]["settings"] == {"OLLAMA_NUM_PARALLEL": None}  # unset before
        assert log.unrestored() == [] and env.control.settings == {}


def test_a_restore_that_cannot_happen_prints_and_journals_the_command(tmp_path, capsys):
    with Journal(tmp_path / "j.sqlite3") as j:
        log = j.begin({})
        api = _FakeApi([Loaded("keep:1", 1, 0, 4096, None)])
        env = ProbeEnv(api=api, reader=None, control=_Control(), on_change=log.server_change)
        with pytest.raises(Exception, match="no Ollama server answers"):
            with restoring(env):
                api.down = True
        failed = log.entries(["server.restore_failed"])[-1].body
        assert failed["command"] == ("curl -s http://127.0.0.1:1/api/generate -d "
                                     "'{\"model\": \"keep:1\", \"keep_alive\": \"5m\", \"options\": {\"num_ctx\": 4096}}'")
        err = capsys.readouterr().err
        assert failed["command"] in err and err.count("\n") == 1
        with pytest.raises(RuntimeError):
            with server_settings(env, {"OLLAMA_KV_CACHE_TYPE": "q8_0"}):
                env.control.fail_next = True  # it went to q8_0, and cannot come back
        assert log.entries(["server.restore_failed"])[-1].body["command"] == "env -u OLLAMA_KV_CACHE_TYPE ollama serve"


def test_restore_command_for_nothing_loaded_says_so():
    cmd = restore_command({"host": "http://h:1", "models": []})
    assert cmd.startswith("curl -s http://h:1/api/ps") and "nothing was loaded before" in cmd


def test_a_full_disk_while_journalling_is_one_line_and_keeps_what_was_written(tmp_path):
    with Journal(tmp_path / "j.sqlite3") as j:
        log = j.begin({})
        log.append("step", {"n": 1})
        j._db.execute(f"PRAGMA max_page_count = {j._db.execute('PRAGMA page_count').fetchone()[0]}")
        with pytest.raises(JournalError, match=rf"cannot write the session journal .*full.*oomvet resume {log.id}"):
            log.append("step", {"n": 2, "pad": "x" * 200_000})
    with Journal(tmp_path / "j.sqlite3") as j:
        assert [e.kind for e in j.session(log.id).entries()] == ["start", "step"]


def test_sessions_are_listed_newest_first_and_a_dead_running_one_shows_cut(tmp_path):
    with Journal(tmp_path / "j.sqlite3") as j:
        a = j.begin({"model": "a:1", "host": "http://x"})
        b = j.begin({"model": "b:1", "host": "http://y"})
        j._db.execute("UPDATE sessions SET pid = 2147483600 WHERE id = ?", (a.id,))
        rows = j.sessions()
        assert [r["id"] for r in rows] == [b.id, a.id]
        assert rows[0]["state"] == "running" and rows[1]["state"] == "cut"
        assert set(rows[0]) == {"id", "started", "model", "server", "cause", "verified", "state"}
