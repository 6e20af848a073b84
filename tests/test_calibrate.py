"""Calibration: measured peaks correct the memory model's prediction."""
from __future__ import annotations

import pytest

from probes import memmodel as m
from probes.calibrate import Calibration

MIB = 1 << 20
SMOL = m.Arch.from_model_info({"general.architecture": "llama", "llama.block_count": 30,
                               "llama.attention.head_count": 9, "llama.attention.head_count_kv": 3,
                               "llama.embedding_length": 576, "llama.context_length": 8192,
                               "llama.vocab_size": 49152})


def model(ctx, parallel=1):
    return m.footprint(m.ENGINE_LLAMA_SERVER, SMOL, int(256.63 * MIB), ctx, parallel, num_batch=512)


def truth(ctx):
    """A source that sees 22 MiB of runtime and a fixed compute buffer on top,
    and 3% more per KV byte than the model says."""
    f = model(ctx)
    return int(f.weights + f.output + 22 * MIB + model(2048).compute + 1.03 * f.kv)


def test_without_points_the_prediction_is_the_models_own():
    cal = Calibration(model)
    assert cal.predict(4096) == cal.uncalibrated(4096) == model(4096).peak
    assert cal.fit()[2] is None


def runner(ctx, parallel=1):
    return m.footprint(m.ENGINE_RUNNER, SMOL, int(256.63 * MIB), ctx, parallel, num_batch=512)


def test_two_points_follow_the_kv_cache_not_the_legacy_estimates_compute_jumps():
    # the legacy engine's compute estimate is a maximum of two formulas: flat to
    # 4096, then steep; the runner's measured peak grows in a straight line with
    # the tokens (bench_predict on v0.11.4: 422, 512, 615, 705 MiB at 2048..8192)
    assert runner(8192).compute - runner(4096).compute > 10 * (runner(4096).compute - runner(2048).compute)

    def measured(ctx):
        return int(390 * MIB + 2.1 * runner(ctx).kv)

    cal = Calibration(runner)
    cal.add(2048, measured(2048))
    cal.add(8192, measured(8192))
    assert cal.fit()[1] == pytest.approx(2.1, rel=1e-6)
    for ctx in (4096, 6144):
        assert cal.predict(ctx) == pytest.approx(measured(ctx), rel=1e-4)
    assert cal.per_token_bytes(runner(1).kv) == pytest.approx(2.1 * runner(1).kv, rel=1e-6)
    assert cal.to_dict()["basis"] == "kv"
    one = Calibration(runner)
    one.add(2048, measured(2048))
    assert one.to_dict()["basis"] == "kv+compute"  # one point: the model's own growth


def test_one_point_moves_the_intercept_and_keeps_the_models_slope():
    cal = Calibration(model)
    cal.add(2048, truth(2048))
    assert cal.predict(2048) == truth(2048)
    assert cal.fit()[1] == 1.0
    assert cal.predict(8192) - cal.predict(2048) == model(8192).total - model(2048).total


def test_two_points_recover_intercept_and_slope_exactly():
    cal = Calibration(model)
    cal.add(2048, truth(2048))
    cal.add(8192, truth(8192))
    intercept, slope, residual = cal.fit()
    assert slope == pytest.approx(1.03, rel=1e-6) and residual is None
    for ctx in (3072, 5120, 6400):
        assert cal.predict(ctx) == pytest.approx(truth(ctx), abs=2)
    assert cal.uncalibrated(6400) != cal.predict(6400)


def test_the_residual_reports_how_far_points_are_from_a_line():
    cal = Calibration(model)
    for ctx, off in ((2048, 0), (4096, 4 * MIB), (8192, 0)):
        cal.add(ctx, truth(ctx) + off)
    residual = cal.fit()[2]
    assert 1 * MIB < residual < 4 * MIB


def test_an_unmeasured_peak_is_not_a_point():
    cal = Calibration(model)
    cal.add(2048, None)
    assert cal.points == [] and cal.predict(2048) == model(2048).peak


def test_a_slope_the_points_cannot_support_is_refused():
    cal = Calibration(model)
    cal.add(2048, 400 * MIB)
    cal.add(4096, 380 * MIB)   # less memory at a larger context: a bad reading, not physics
    assert cal.fit()[1] == 1.0


def test_largest_ctx_and_parallel_use_the_fit():
    cal = Calibration(model)
    cal.add(2048, truth(2048))
    cal.add(8192, truth(8192))
    limit = truth(6144)
    assert cal.largest_ctx(limit, 256, 8192) == 6144
    assert cal.largest_parallel(truth(2048) + 50 * MIB, 2048, 8) == 2
    assert cal.to_dict()["points"] == [[2048, 1, truth(2048)], [8192, 1, truth(8192)]]
