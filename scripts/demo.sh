#!/usr/bin/env bash
# Set everything up (cached after the first run), then run oomvet's main job
# on the embedded default: an unattended diagnosis of NeoHorse-1 on the rig's
# local Ollama, under a memory budget that the F16 tag does not fit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/oomvet diagnose --rig --model neohorse-1:f16 --auto \
    --answers examples/neohorse-1.answers.yaml --out oomvet-out "$@"
