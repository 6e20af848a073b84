"""Shared fixtures: the rig's real Ollama for integration tests.

The rig is built once per test session (cached across runs in ``.cache/``).
On a developer machine without Go or a cached/``OLLAMA_BIN`` binary the
integration tests skip with one reason; in CI (``CI=true``) they fail instead,
because a skipped integration test there would hide a broken rig.
"""
from __future__ import annotations

import os
import shutil
import signal

import pytest

from probes.rig import Rig, RigError, default_paths, find_ollama


def pytest_configure(config):
    # a killed test run still stops the rig's server (session fixtures tear down on KeyboardInterrupt)
    def _terminate(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, _terminate)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def rig():
    paths = default_paths()
    if find_ollama(paths) is None and shutil.which("go") is None:
        reason = "integration: no Ollama binary (OLLAMA_BIN or cached build) and no Go to build one"
        if _in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        with Rig(paths) as r:
            yield r
    except RigError as exc:
        if _in_ci():
            raise
        pytest.skip(f"integration: the rig could not start: {exc}")


@pytest.fixture
def raise_errors(monkeypatch):
    """Under test, let OomvetError propagate instead of being prettified."""
    monkeypatch.setenv("OOMVET_RAISE", "1")


@pytest.fixture(autouse=True)
def _journal_in_tmp(tmp_path_factory, monkeypatch):
    """Sessions a test runs are journalled in a folder of its own, never the user's."""
    monkeypatch.setenv("OOMVET_STATE_DIR", str(tmp_path_factory.mktemp("state")))
