"""``oomvet plan`` on the rig: no loads, and a prediction the loads then bear out.

plan predicts the buffers the server allocates (weights, KV cache, compute
buffer) and the peak of the model's process once a request fills the
context: those buffers (of the compute buffer, the part a request touches),
the CPU's f16 copy of the attention scores without flash attention, and the
process itself. Here each tag is loaded at the planned context and filled to
97 %: the measured peak is above the buffers, and within a few percent of the
predicted peak (bench/bench_predict.py --fill 0.97 measured 1 % at worst,
bench/README.md; the test allows 3 % for a busier machine).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from probes import context
from probes.base import ProbeEnv
from probes.memory.select import select_reader
from probes.ollama_api import Ollama

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CTX = 4096
TOLERANCE = 0.03    # bench_predict --fill 0.97: 1 % at worst on both engines
FILL = 0.97


def _plan(rig) -> dict:
    done = subprocess.run([sys.executable, "-m", "assistant", "plan", "--host", rig.host, "--model", "neohorse-1:f16",
                           "--ctx", str(CTX), "--budget", "2GiB", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_plan_loads_nothing_and_predicts_every_tags_measured_peak_within_the_benchs_error(rig):
    api = Ollama(rig.host)
    before = api.ps()
    result = _plan(rig)
    assert api.ps() == before  # a plan is predictions only: nothing was loaded
    assert result["predicted"] is True and result["engine"] == rig.engine
    rows = {row["model"]: row for row in result["tags"]}
    assert set(rows) == {"neohorse-1:f16", "neohorse-1:q8_0", "neohorse-1:q4_1"}

    reader = select_reader(server_pid=lambda: rig.server_pid).reader
    env = ProbeEnv(api=api, reader=reader, device=reader.info(), control=rig.server)
    for tag, row in rows.items():
        assert row["num_ctx"] == CTX
        measured = context.run(env, tag, tiers=[CTX], check_release=False, fill=FILL).facts[0]  # the peak alone
        assert measured["measured"], measured
        peak, predicted = measured["peak"], row["total"]
        assert row["buffers"] < peak, (tag, row["buffers"], peak)  # RSS holds the buffers and more
        assert abs(predicted - peak) / peak <= TOLERANCE, (tag, predicted, peak)
    assert rows["neohorse-1:f16"]["total"] > rows["neohorse-1:q8_0"]["total"] > rows["neohorse-1:q4_1"]["total"]
