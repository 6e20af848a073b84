"""Shared fixtures: the rig's real Ollama for integration tests.

The ``rig`` fixture is parametrized over both engines the rig serves: ids
``current`` (Ollama v0.34.4, the model in a ``llama-server`` process) and
``legacy`` (v0.11.4, ``ollama runner``). A plain run (CI's) runs the full
integration suite on the current engine and the smoke set ``LEGACY_SMOKE``
on the legacy one; ``OOMVET_LEGACY_FULL=1`` runs everything on both, and
``OOMVET_RIG_VERSION`` (``current``, ``legacy``, or a version) runs the full
suite on that one engine only. Each engine is built once (cached across runs in
``.cache/``) and served once per test session. On a developer machine without
Go or a cached/``OLLAMA_BIN`` binary the integration tests skip with one
reason; in CI (``CI=true``) they fail instead, because a skipped integration
test there would hide a broken rig.
"""
from __future__ import annotations

import os
import shutil
import signal

import pytest

from oomrig import VERSIONS, Rig, RigError, default_paths, find_ollama, resolve_version


def pytest_configure(config):
    # a killed test run still stops the rig's server (session fixtures tear down on KeyboardInterrupt)
    def _terminate(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, _terminate)
    # a run started in the background by a shell without job control inherits SIGINT
    # ignored, and so would every oomvet the tests start and Ctrl-C; the Ctrl-C tests
    # need the default a terminal gives (children of a process that handles SIGINT
    # start with it at its default)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _engines() -> list[str]:
    """Test ids of the engines this run covers (both unless OOMVET_RIG_VERSION says one)."""
    if not os.environ.get("OOMVET_RIG_VERSION"):
        return list(VERSIONS)
    version = resolve_version()
    return [name for name, v in VERSIONS.items() if v == version]


# the legacy engine's smoke set: the rig itself, the host reader, the second model family,
# the memory model and the plan's predicted peaks, and every probe once against the real server
LEGACY_SMOKE = ("test_rig.py", "test_host_reader.py", "test_gemma_rig.py", "test_memmodel_rig.py",
                "test_plan_rig.py", "test_probes_rig.py", "test_server_settings_rig.py", "test_set_rig.py")


def _legacy_smoke_only() -> bool:
    """Full suite on the current engine and the smoke set on the legacy one
    (CI's default: both fresh builds plus two full runs do not fit its 90
    minutes on 2 cores); OOMVET_LEGACY_FULL=1 runs everything on both."""
    return os.environ.get("OOMVET_LEGACY_FULL") != "1" and not os.environ.get("OOMVET_RIG_VERSION")


def pytest_collection_modifyitems(config, items):
    # a module that pins its engine (parametrize("rig", ["current"], indirect=True)) is left out,
    # not skipped, when OOMVET_RIG_VERSION narrows the run to the other engine
    engines = set(_engines())
    smoke_only = _legacy_smoke_only()
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        engine = callspec.params.get("rig") if callspec else None
        out = engine is not None and (engine not in engines or
                                      (engine == "legacy" and smoke_only and item.path.name not in LEGACY_SMOKE) or
                                      (engine == "current" and item.get_closest_marker("legacy_only") is not None))
        (drop if out else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# Under pytest-xdist this fixture is per worker process (scripts/test.sh runs
# the rig tests serially, but `pytest -n N` works): each worker serves the
# engines its tests need on a port of its own,
# so a fault-matrix case that kills or stops its server never touches the
# server another worker is measuring on.
@pytest.fixture(scope="session", params=_engines())
def rig(request):
    version = VERSIONS[request.param]
    paths = default_paths(version)
    if find_ollama(paths) is None and shutil.which("go") is None:
        reason = f"integration: no Ollama {version} binary (OLLAMA_BIN or cached build) and no Go to build one"
        if _in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        with Rig(paths) as r:
            yield r
    except RigError as exc:
        if _in_ci():
            raise
        pytest.skip(f"integration: the {request.param} rig could not start: {exc}")


@pytest.fixture(autouse=True)
def _language_back_as_it_was():
    """A test that sets the session language (zh) must not leave it set for the next one."""
    from common import catalog

    before = catalog._current["lang"]
    yield
    catalog._current["lang"] = before


@pytest.fixture
def raise_errors(monkeypatch):
    """Under test, let UserError propagate instead of being prettified, and
    a bug inside the intake parser surface instead of reading as "unknown"."""
    monkeypatch.setenv("OOMVET_RAISE", "1")


@pytest.fixture
def cues_only(monkeypatch):
    """The intake's hand-written readers alone: the learned ones
    (assistant/intake/learned.py) are switched off, as where they cannot be fitted."""
    monkeypatch.setattr("assistant.intake.learned.fitted", lambda: None)


@pytest.fixture(autouse=True)
def _journal_in_tmp(tmp_path_factory, monkeypatch):
    """Sessions a test runs are journalled in a folder of its own, never the user's."""
    monkeypatch.setenv("OOMVET_STATE_DIR", str(tmp_path_factory.mktemp("state")))
