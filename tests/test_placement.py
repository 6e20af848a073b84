"""Where a model's layers land on several GPUs, worked out by hand from Ollama's
own code with round numbers: blocks of 100 MiB (weights and KV together), an
output layer of 100 MiB, a graph of 200 MiB, cards of 24 GiB and 12 GiB.

Legacy (v0.11.4 ``llm/memory.go`` EstimateGPULayers): every GPU that may take
layers first holds the 457 MiB minimum and one spare layer (557 MiB); a
layer fits while ``free > used + graph + layer``, so the 12 GiB card takes
115 blocks (557 + 115 x 100 + 200 + 100 = 12357 > 12288 stops the 116th) and
the 24 GiB card 238. Block ``i`` goes to GPU ``i % (GPUs with room)``, largest
free first, so the blocks alternate until the small card is full.
Current (v0.30+): one GPU when ``PredictServerVRAM`` is at most 80% of its
free memory, else llama.cpp's split in proportion to free memory (2:1 here),
else its fit back to front with 1024 MiB kept free per card.
"""
from __future__ import annotations

import pytest

from probes import memmodel as m
from probes.memmodel import GIB, MIB

CARDS = [24 * GIB, 12 * GIB]


def layers(blocks: int) -> m.Layers:
    return m.Layers(tuple([100 * MIB] * blocks), 100 * MIB, 200 * MIB, 200 * MIB)


def shares(split: m.Split) -> list[tuple[int, int, int, bool]]:
    """``(card, layers, MiB, output here)`` per card that holds layers."""
    return [(s.card, s.layers, s.bytes // MIB, s.output) for s in split.shares]


def test_a_model_that_fits_on_the_larger_card_stays_on_it_alone():
    split = m.legacy_split(layers(40), CARDS)
    # 457 minimum + 100 spare + 40 x 100 + 100 output + 200 graph
    assert shares(split) == [(0, 41, 4857, True)]
    assert split.mode == "one" and not split.slow and split.slow_reason is None


def test_the_larger_card_is_chosen_whatever_the_order_the_server_lists_them():
    split = m.legacy_split(layers(40), [12 * GIB, 24 * GIB])
    assert shares(split) == [(1, 41, 4857, True)]


def test_a_model_too_big_for_one_card_alternates_until_the_small_card_is_full():
    split = m.legacy_split(layers(300), CARDS)
    # blocks 299..70 alternate (115 each), block 69 finds the 12 GiB card full,
    # the 70 left go to the 24 GiB card (185 blocks), then the output layer
    assert shares(split) == [(0, 186, 557 + 18500 + 100 + 200, True), (1, 115, 557 + 11500 + 200, False)]
    assert split.mode == "spread" and not split.slow and split.cpu_layers == 0


def test_sched_spread_spreads_a_model_that_would_fit_on_one_card():
    split = m.legacy_split(layers(40), CARDS, spread=True)
    # 20 blocks each; the output layer goes to GPU (40 placed) % 2 = the first
    assert shares(split) == [(0, 21, 557 + 2000 + 100 + 200, True), (1, 20, 557 + 2000 + 200, False)]


def test_layers_that_fit_nowhere_run_on_the_cpu_and_are_flagged_slow():
    split = m.legacy_split(layers(400), CARDS)
    # 115 on the small card, 238 on the large one, blocks 46..0 (47) and the output on the CPU
    assert shares(split) == [(0, 238, 557 + 23800 + 200, False), (1, 115, 557 + 11500 + 200, False)]
    assert split.cpu_layers == 47 and split.output_on_cpu
    assert split.cpu_bytes == 48 * 100 * MIB
    assert split.slow and split.slow_reason == "layers_on_cpu"
    assert split.to_dict()["slow"] is True and split.to_dict()["layers_total"] == 401


def test_only_the_output_layer_on_the_cpu_is_slow_too():
    # one card: 557 + 114 x 100 + 200 + 100 < 12288 but the output (300 MiB) does not fit after block 0
    big_out = m.Layers(tuple([100 * MIB] * 114), 300 * MIB, 200 * MIB, 200 * MIB)
    split = m.legacy_split(big_out, [12 * GIB])
    assert split.cpu_layers == 0 and split.output_on_cpu
    assert split.slow and split.slow_reason == "output_on_cpu"


def test_a_card_too_small_for_the_minimum_takes_nothing():
    split = m.legacy_split(layers(40), [24 * GIB, 600 * MIB], spread=True)
    assert [s.card for s in split.shares] == [0]


def test_nothing_on_any_card_is_all_cpu():
    split = m.legacy_split(layers(40), [512 * MIB])
    assert split.mode == "cpu" and split.cpu_layers == 40 and split.output_on_cpu and split.slow


ARCH = m.Arch(arch="llama", block_count=32, head_count=32, head_count_kv=8, embedding_length=4096,
              context_length=32768, vocab_size=128256)
WEIGHTS = int(4.58 * GIB)


@pytest.mark.parametrize("free_mib", [8192, 5120, 3072, 1024])
def test_one_card_places_what_runner_place_places(free_mib):
    # the single-GPU estimate stays the one runner.place() makes: same layers, same bytes
    one = m.place(ARCH, WEIGHTS, 8192, 1, 512, "f16", free_mib * MIB)
    split = m.legacy_split(m.model_layers(ARCH, WEIGHTS, 8192), [free_mib * MIB])
    assert sum(s.layers for s in split.shares) == one.layers_gpu
    assert sum(s.bytes for s in split.shares) == one.size_vram_bytes
    assert split.cpu_bytes == one.cpu_bytes


def test_model_layers_add_up_to_the_weights_and_the_kv_cache():
    cut = m.model_layers(ARCH, WEIGHTS, 8192, estimate_min_ctx=0)
    assert sum(cut.blocks) + cut.output == WEIGHTS + m.kv_cache_bytes(ARCH, 8192)
    assert cut.output == m.output_layer_bytes(ARCH, WEIGHTS)


# --- the current engine -----------------------------------------------------------------------------------


def test_current_engine_keeps_a_model_on_one_card_when_its_estimate_is_under_80_percent():
    split = m.current_split(layers(40), CARDS, predicted_bytes=4100 * MIB)
    assert shares(split) == [(0, 41, 4100 + 200, True)]


def test_current_engine_splits_in_proportion_to_free_memory_when_every_card_keeps_its_margin():
    # 30100 MiB > 80% of 24 GiB: both cards; layer il goes to card 0 while il / 301 < 2/3 (il <= 200)
    split = m.current_split(layers(300), CARDS, predicted_bytes=30100 * MIB)
    assert shares(split) == [(0, 201, 20100 + 200, False), (1, 100, 9900 + 100 + 200, True)]
    assert not split.slow


def test_current_engine_fills_back_to_front_and_leaves_the_first_blocks_and_output_on_the_cpu():
    # the proportional split would put 268 layers (27 GiB) on the 24 GiB card: fit instead;
    # card 2 (last) keeps 1024 MiB free: 100 x 110 + 200 <= 11264; card 1: 100 x 233 + 200 <= 23552
    split = m.current_split(layers(400), CARDS, predicted_bytes=40100 * MIB)
    assert shares(split) == [(0, 233, 23500, False), (1, 110, 11200, False)]
    assert split.cpu_layers == 57 and split.output_on_cpu and split.slow_reason == "layers_on_cpu"


def test_current_engine_sched_spread_skips_the_single_card_choice():
    split = m.current_split(layers(40), CARDS, predicted_bytes=4100 * MIB, spread=True)
    assert [s.card for s in split.shares] == [0, 1] and not split.slow


def test_the_fit_target_is_the_margin_kept_free():
    tight = m.current_split(layers(90), [10 * GIB], predicted_bytes=0, margin_bytes=0)
    loose = m.current_split(layers(90), [10 * GIB], predicted_bytes=0, margin_bytes=4 * GIB)
    # 90 x 100 + 100 + 200 fits 10 GiB whole; with 4 GiB kept free, 59 blocks (5900 + 200 <= 6144)
    assert not tight.slow and loose.slow and shares(loose) == [(0, 59, 6100, False)]


def test_server_vram_prediction_is_the_file_and_an_f16_cache():
    assert m.server_vram_prediction(ARCH, WEIGHTS, 4096) == WEIGHTS + 4096 * 128 * 1024
    assert m.server_vram_prediction(ARCH, WEIGHTS, 4096, 2) == WEIGHTS + 2 * 4096 * 128 * 1024
