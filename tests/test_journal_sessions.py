"""``oomvet sessions``, ``resume`` and ``report`` on simulated sessions.

A diagnose run against the GPU simulator is journalled; the journal is then
cut where a SIGKILL would have cut it (in the middle of the context probe's
facts, or just after it started) and ``oomvet resume`` must end with the
config the uninterrupted run found. ``oomvet report`` must write the same
bytes from the journal alone, the simulated server long gone.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from assistant.cli import main
from assistant.journal.store import DB_NAME

# one worker, one diagnosis: the fixture is session-scoped (a module fixture is torn down
# whenever the worker runs another module's test in between: three setups of 11 s each)
pytestmark = pytest.mark.xdist_group("journal_sessions")
ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "kv_cache.yaml"
ANSWERS = ROOT / "scenarios" / "kv_cache.answers.yaml"


def _sessions(capsys) -> list[dict]:
    assert main(["sessions", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["sessions"]


@pytest.fixture(scope="session")
def _journalled(tmp_path_factory):
    """One simulated diagnosis for the whole module (the tests only read it
    or cut a copy of its journal): its JSON, its journal folder, its files."""
    base = tmp_path_factory.mktemp("journalled")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OOMVET_STATE_DIR", str(base / "state"))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(["diagnose", "--simulate", str(SCENARIO), "--answers", str(ANSWERS), "--settle", "0.2",
                         "--out", str(base / "first"), "--json"])
    payload = json.loads(printed.getvalue())
    payload["exit"] = code
    return payload, base


@pytest.fixture
def finished(_journalled, tmp_path, capsys):
    """The module's diagnosis, its journal copied into this test's state folder."""
    payload, base = _journalled
    state = Path(os.environ["OOMVET_STATE_DIR"])
    state.mkdir(parents=True, exist_ok=True)
    for db in (base / "state").glob(DB_NAME + "*"):
        shutil.copy2(db, state / db.name)
    shutil.copytree(base / "first", tmp_path / "first")
    (row,) = _sessions(capsys)
    return copy.deepcopy(payload), row, tmp_path


def test_a_finished_session_is_listed_with_its_cause_and_verdict(finished):
    payload, row, _ = finished
    assert row["state"] == "finished" and row["cause"] == payload["diagnosis"]["cause"] == "kv_cache"
    assert row["verified"] is payload["verified"] is True
    assert row["model"] == "neohorse-1:q4_K_M" and row["server"].startswith("http://127.0.0.1:")


def test_report_writes_the_same_bytes_from_the_journal_alone(finished, capsys):
    payload, row, tmp = finished
    assert main(["report", row["id"], "--out", str(tmp / "again")]) == 0
    first = {p.name: p.read_bytes() for p in (tmp / "first").iterdir()}
    again = {p.name: p.read_bytes() for p in (tmp / "again").iterdir()}
    assert set(first) == set(again) and len(first) >= 8
    assert [n for n in first if first[n] != again[n]] == []


def _cut(journal: Path, sid: str, keep_through: int) -> None:
    """What a SIGKILL leaves: entries up to ``keep_through``, state still running, its pid gone."""
    db = sqlite3.connect(journal)
    db.execute("DELETE FROM entries WHERE session = ? AND seq > ?", (sid, keep_through))
    db.execute("UPDATE sessions SET state = 'running', cause = NULL, verified = NULL, pid = 2147483600 "
               "WHERE id = ?", (sid,))
    db.commit()
    db.close()


def _entries(journal: Path, sid: str) -> list[tuple[int, str, dict]]:
    db = sqlite3.connect(journal)
    rows = [(s, k, json.loads(b)) for s, k, b in
            db.execute("SELECT seq, kind, body FROM entries WHERE session = ? ORDER BY seq", (sid,))]
    db.close()
    return rows


def _cut_points(rows):
    started = next(s for s, k, b in rows if k == "probe_started" and b["probe"] == "context")
    tiers = [s for s, k, b in rows if k == "fact" and b["fact"]["kind"] == "tier" and s > started]
    return {"just after the context probe started": started, "halfway through its facts": tiers[len(tiers) // 2]}


@pytest.mark.parametrize("where", ["just after the context probe started", "halfway through its facts"])
def test_resume_after_a_cut_in_the_context_step_ends_with_the_same_config(finished, capsys, where):
    payload, row, tmp = finished
    journal = Path(os.environ["OOMVET_STATE_DIR"]) / DB_NAME
    rows = _entries(journal, row["id"])
    _cut(journal, row["id"], _cut_points(rows)[where])
    (cut,) = _sessions(capsys)
    assert cut["state"] == "cut" and cut["verified"] is None

    code = main(["resume", row["id"]])
    err = capsys.readouterr().err
    assert code == payload["exit"] == 0
    assert "resuming session" in err and "the context probe was cut in the middle" in err
    (done,) = _sessions(capsys)
    assert done["state"] == "finished" and done["verified"] is True
    again = _entries(journal, row["id"])
    result = next(b for _, k, b in reversed(again) if k == "finished")["result"]
    assert result["config"] == payload["config"]
    # the cut probe ran once more, and no step of it is counted twice
    assert [s["n"] for s in result["steps"]] == list(range(1, len(result["steps"]) + 1))
    assert [s.get("probe") for s in result["steps"]] == [s.get("probe") for s in payload["steps"]]


def test_resume_of_a_finished_session_says_so_and_exits_2(finished, capsys):
    _, row, _ = finished
    assert main(["resume", row["id"]]) == 2
    assert f"oomvet report {row['id']}" in capsys.readouterr().err


def test_unknown_session_ids_are_one_line_and_exit_2(capsys):
    for argv in (["resume", "nope"], ["report", "nope"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no session nope" in err


def test_report_of_an_unfinished_session_points_at_resume(finished, capsys):
    _, row, _ = finished
    journal = Path(os.environ["OOMVET_STATE_DIR"]) / DB_NAME
    _cut(journal, row["id"], 5)
    assert main(["report", row["id"]]) == 2
    assert f"oomvet resume {row['id']}" in capsys.readouterr().err


def test_a_file_in_place_of_the_output_folder_is_refused_before_anything_is_measured(tmp_path, capsys):
    blocker = tmp_path / "out"
    blocker.write_text("a file where the folder should be")
    code = main(["diagnose", "--simulate", str(SCENARIO), "--answers", str(ANSWERS), "--settle", "0.2",
                 "--out", str(blocker)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is not a folder" in err, err
    assert not (Path(os.environ["OOMVET_STATE_DIR"]) / DB_NAME).exists()  # no session was started
    assert blocker.read_text() == "a file where the folder should be"


def test_an_output_folder_that_breaks_during_the_session_keeps_it_for_report(tmp_path, capsys, monkeypatch):
    # the folder was fine when the session started, and became a file meanwhile
    import assistant.commands.diagnose

    monkeypatch.setattr(assistant.commands.diagnose, "check_out_dir", lambda out: None)
    blocker = tmp_path / "out"
    blocker.write_text("a file where the folder should be")
    code = main(["diagnose", "--simulate", str(SCENARIO), "--answers", str(ANSWERS), "--settle", "0.2",
                 "--out", str(blocker)])
    err = capsys.readouterr().err
    assert code == 2 and "is not a folder" in err
    (row,) = _sessions(capsys)
    assert f"hint: the session is kept: oomvet report {row['id']} --out DIR" in err
    assert row["state"] == "finished"
    assert main(["report", row["id"], "--out", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "oomvet.yaml").is_file()
    assert blocker.read_text() == "a file where the folder should be"


def test_a_session_an_older_oomvet_wrote_with_verdicts_in_its_facts_is_refused_in_one_line(finished, capsys):
    # before issue 16 a load said "ok" / "over_limit" / "oom" itself; such facts are not guessed into measurements
    payload, row, tmp = finished
    journal = Path(os.environ["OOMVET_STATE_DIR"]) / DB_NAME
    rows = _entries(journal, row["id"])
    # the baseline's load, in a batch that arrived whole (a resume trusts it)
    seq, _, body = next(r for r in rows if r[1] == "fact" and r[2]["fact"]["kind"] == "load")
    old = dict(body["fact"], ok=body["fact"].pop("answered"), over_limit=False, oom=False)
    db = sqlite3.connect(journal)
    db.execute("UPDATE entries SET body = ? WHERE session = ? AND seq = ?",
               (json.dumps(dict(body, fact=old)), row["id"], seq))
    db.commit()
    db.close()
    _cut(journal, row["id"], _cut_points(rows)["halfway through its facts"])
    assert main(["resume", row["id"]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("oomvet: ") and "cannot be resumed" in err[-1] and "older oomvet" in err[-1]
