#!/usr/bin/env bash
# The whole test suite: set up (cached after the first run), then unit,
# scenario and integration tests against the rig's real Ollama.
# Three pytest-xdist workers on 2 cores, each with its own rig servers
# (tests/conftest.py): a rig test spends part of its wall time waiting on
# llama-server, a settle timer or a subprocess, and another worker's test
# fills it. --dist loadgroup with no groups hands a worker one more test each
# time it finishes one (plain --dist load sends chunks up front, which can pile
# the long rig tests onto one worker). The ten slowest tests are printed at
# the end, so a run's time can be read from CI.
set -euo pipefail
cd "$(dirname "$0")/.."
OOMVET_WITH_BROWSER=1 bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -n 3 --dist loadgroup --durations=10 "$@"
