#!/usr/bin/env bash
# The whole test suite: set up (cached after the first run), then unit,
# scenario and integration tests against the rig's real Ollama.
set -euo pipefail
cd "$(dirname "$0")/.."
OOMVET_WITH_BROWSER=1 bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
