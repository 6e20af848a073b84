#!/usr/bin/env bash
# The whole test suite: set up (cached after the first run), then unit,
# scenario and integration tests against the rig's real Ollama.
# Three pytest-xdist workers on 2 cores: each engine's rig tests run in one
# worker of their own (tests/conftest.py groups them), and the unit tests fill
# the time those spend waiting on llama-server and settle timers. The ten
# slowest tests are printed at the end, so a run's time can be read from CI.
set -euo pipefail
cd "$(dirname "$0")/.."
OOMVET_WITH_BROWSER=1 bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -n 3 --dist loadgroup --durations=10 "$@"
