#!/usr/bin/env bash
# The whole test suite: set up (cached after the first run), then the unit and
# scenario tests, then the integration tests against the rig's real Ollama.
#
# The two phases run differently because of where their time goes (measured on
# 2 cores, see the README): unit tests are Python and simulated sessions that
# mostly wait on the simulator's timed replies, so six pytest-xdist workers on
# two cores finish them in under 4 minutes (four took 4.3, two 5.5). Integration tests are
# mostly llama-server computing with its two threads, one per core; run side by
# side, several llama-servers' threads spin-wait on each other and every test
# slows down by 3-7x (the same 101 rig tests took 35 minutes on three workers and 19 serially).
# So the rig tests run one at a time. Both phases always run; the exit status
# is the first failure's. The ten slowest rig tests are printed at the end, so
# a run's time can be read from CI.
set -uo pipefail
cd "$(dirname "$0")/.."
OOMVET_WITH_BROWSER=1 bash scripts/setup.sh || exit $?
started=$(date +%s)
# loadgroup: a module marked xdist_group keeps its expensive module fixture on one worker
.venv/bin/python -m pytest -q -n 6 --dist loadgroup -m "not integration" "$@"
unit=$?
# 5: nothing collected (a narrowed run with no test of that phase) is not a failure
[ "$unit" -eq 5 ] && unit=0
echo "unit and scenario tests: $(( $(date +%s) - started )) s"
.venv/bin/python -m pytest -q -n 0 -m integration --durations=10 "$@"
rig=$?
[ "$rig" -eq 5 ] && rig=0
echo "whole suite: $(( $(date +%s) - started )) s"
[ "$unit" -ne 0 ] && exit "$unit"
exit "$rig"
