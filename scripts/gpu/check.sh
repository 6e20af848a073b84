#!/usr/bin/env bash
# The one command a GPU session runs on the device machine (docs/gpu-check.md):
#
#   bash scripts/gpu/check.sh            # with carry [".gpu-bundle"], timeout_s 600
#
# Installs the carried wheels for the image's python3 (3.12, PyTorch beside),
# then hands over to gpu_check.py with what is left of the time budget. All
# output also goes to $OUT/console.log; gpu_check.py writes summary.json and
# part1.tar.gz / part2.tar.gz there. Extra arguments go to gpu_check.py
# (--parts 2 for a rerun of part 2 on a still-warm machine, --dry-run here).
set -u
T0=$(date +%s)
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/.gpu-work/out}
BUDGET_S=${GPU_CHECK_BUDGET_S:-590}   # the run call's timeout_s (600) less a margin for the last lines
PY=${PYTHON:-python3}
SITE=${GPU_CHECK_SITE:-/tmp/site}
mkdir -p "$OUT" .gpu-work
exec > >(tee -a "$OUT/console.log") 2>&1

echo "[check.sh] $(date -u +%FT%TZ) start on $(hostname): $(nproc) cores, $($PY --version 2>&1)"
nvidia-smi -L 2>&1 | head -4
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    .gpu-bundle/wheels/*.whl || echo "[check.sh] wheel install failed: the steps that import oomvet will say why"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH" PYTHONUNBUFFERED=1
# what the image's packages and the carried ones make together; read, never fatal
mkdir -p .gpu-work/part1
$PY -m pip check > .gpu-work/part1/pip-check.txt 2>&1; echo "[check.sh] pip check: $(tail -1 .gpu-work/part1/pip-check.txt)"
echo "[check.sh] wheels in $(( $(date +%s) - T0 ))s"

LEFT=$(( BUDGET_S - ($(date +%s) - T0) ))
$PY scripts/gpu/gpu_check.py run --budget-s "$LEFT" --out "$OUT" "$@"
RC=$?
echo "[check.sh] $(date -u +%FT%TZ) done in $(( $(date +%s) - T0 ))s, gpu_check exit $RC"
exit $RC
