"""The pure parts of the probes: tier planning, coherence, drift, regressions."""
from __future__ import annotations

import pytest

from probes import coherence
from rules.coherence import failed_checks
from probes.baseline import drift_per_min
from probes.context import plan_tiers
from probes.ollama_api import is_oom_text
from probes.stability import options_for
from rules.record import retest_regressions as compare
from probes.texts import TokenCost, coherence_task, fill_prompt, stability_task


@pytest.mark.parametrize("context_length,want,tiers", [
    (8192, None, [2048, 4096, 8192]),            # the rig's model: capped at its trained context
    (131072, None, [2048, 8192, 32768]),
    (131072, 16384, [2048, 8192, 16384]),
    (32768, 1024, [256, 512, 1024]),              # a small wish: still three tiers, below it
    (4096, None, [1024, 2048, 4096]),
    (8192, 32768, [2048, 4096, 8192, 32768]),     # above the trained context: kept last, Ollama clamps it
    (None, 65536, [2048, 8192, 32768, 65536]),
])
def test_context_tiers_step_up_to_the_wanted_context(context_length, want, tiers):
    assert plan_tiers(context_length, want) == tiers


def test_fill_prompt_token_cost_is_linear_in_units():
    cost = TokenCost(fixed=40, per_unit=70)
    assert cost.tokens(10) == 740
    assert cost.units_for(740) == 10
    assert cost.units_for(10) == 1
    assert fill_prompt(2, "abc").startswith("Session abc.")
    assert fill_prompt(3, "x").count("Record ") == 3


def test_shipped_texts_have_the_structures_the_method_names():
    task = stability_task()
    assert "| item |" in task and "```json" in task and "```python" in task and "中文" in task
    assert "`systemctl stop worker@3`" in coherence_task()


def check(*args) -> list[str]:
    """The coherence rules an answer fails: the probe's figures, judged by rules/coherence.py."""
    return failed_checks(coherence.measure(*args))


GOOD = ("1. Stop the worker with `systemctl stop worker@3`.\n2. Wait 15 seconds and check port 8080 is free.\n"
        "3. Clear the cache folder (about 250 MB) and start the worker.\n"
        "4. If it takes longer than 90 seconds, call extension 4417.")


def test_a_faithful_answer_is_coherent():
    failed = check(GOOD, coherence_task(), None, "stop")
    assert not failed, failed


def test_a_looping_answer_is_flagged_as_repetition():
    loop = "Stop the worker and wait. " * 30
    failed = check(loop, coherence_task(), None, "length")
    assert failed
    assert "quant_repeats_itself" in failed


def test_rewritten_numbers_and_code_are_flagged():
    bad = GOOD.replace("15", "50").replace("8080", "8000").replace("4417", "4471").replace("worker@3", "worker@8")
    failed = check(bad, coherence_task(), None, "stop")
    assert {"quant_lost_numbers", "quant_invented_numbers"} & set(failed)
    assert "quant_rewrote_code" in failed


def test_garbled_and_unfinished_answers_are_flagged():
    garbled = "Stop ▒▒▒ the ◆◆◆ worker ▓▓▓ 15 8080 250 90 4417 ▒▒▒▒▒▒ `systemctl stop worker@3`"
    assert "quant_garbled" in check(garbled, coherence_task())
    unfinished = GOOD + "\n5. Then the"
    assert "quant_unfinished" in check(unfinished, coherence_task(), None, "stop")
    assert check("", coherence_task()) == ["quant_empty_answer"]


def test_drift_is_the_slope_over_the_settle_window_in_bytes_per_minute():
    timeline = [(t / 10, 1000 + int(t / 10 * 600)) for t in range(0, 50)]  # +600 B/s
    assert drift_per_min(timeline, since=1.0) == pytest.approx(36000, rel=0.02)
    flat = [(t / 10, 5000) for t in range(50)]
    assert drift_per_min(flat, since=0.0) == 0.0
    assert drift_per_min(flat[:2], since=0.0) is None


def test_stability_regressions_against_the_previous_run():
    prev = {"answered": True, "eval_count": 200, "prompt_tokens": 500, "task_tokens": 500, "repeat_share": 0.05,
            "errors": []}
    assert compare(dict(prev), prev) == []
    assert compare(dict(prev), {}) == []
    shorter = compare(dict(prev, eval_count=40), prev)
    assert shorter and shorter[0].startswith("shorter output")
    assert compare(dict(prev, prompt_tokens=250), prev) == ["the prompt was truncated at num_ctx"]
    assert compare(dict(prev, repeat_share=0.15), prev) == []      # greedy decoding wobbles a little
    assert compare(dict(prev, repeat_share=0.6), prev)[0].startswith("the output repeats itself more")
    assert compare(dict(prev, answered=False, errors=["boom"]), prev)[0] == "the run failed where the previous one passed"


def test_stability_options_come_from_the_config():
    opts = options_for({"model": "m", "max_context_len": 4096, "max_batch_size": 256})
    assert opts == {"num_predict": 128, "seed": 42, "temperature": 0, "num_ctx": 4096, "num_batch": 256}


@pytest.mark.parametrize("text,oom", [
    ("llama runner process has terminated: cudaMalloc failed: out of memory", True),
    ("model requires more system memory (12.3 GiB) than is available (8.0 GiB)", True),
    ("llama runner process has terminated: error loading model: unable to allocate CUDA0 buffer", True),
    # the generic text alone is not OOM: it needs a marker in the error or the log (tests/test_oomtext.py)
    ("model runner has unexpectedly stopped, this may be due to resource limitations or an internal error, "
     "check ollama server logs for details", False),
    ("model 'x' not found", False),
    ("llama runner process has terminated: GGML_ASSERT(n_dims == 2) failed", False),
    (None, False),
])
def test_oom_texts_from_ollama_and_cuda_are_recognised(text, oom):
    assert is_oom_text(text) is oom


def test_numbers_the_reference_lost_are_not_held_against_a_lower_bit_tag():
    reference = "Stop the worker with `systemctl stop worker@3` and check port 8080."
    answer = "Stop the worker with `systemctl stop worker@3` and check port 8080 again."
    assert not check(answer, coherence_task(), reference, "stop")
    lost = "Stop the worker and check the port."
    figures = coherence.measure(lost, coherence_task(), reference, "stop")
    assert (figures["numbers_lost"], figures["numbers_checked"]) == (2, 2)  # 3 and 8080, the two the reference kept
    assert (figures["code_spans_kept"], figures["code_spans"]) == (0, 1)    # `systemctl stop worker@3`
    assert {"quant_lost_numbers", "quant_rewrote_code"} <= set(failed_checks(figures))


def test_list_numbering_is_not_an_invented_number():
    answer = GOOD + "\n5. Done.\n6. Log it.\n7. Close the ticket."
    assert not check(answer, coherence_task(), None, "stop")


def test_sizes_in_probe_tables_are_always_formatted_even_small_ones():
    from probes.result import _cell

    assert _cell(475136, "peak") == "464.00 KiB"     # a raw 475136 once reached the chat
    assert _cell(4096, "num_ctx") == "4096"          # counts stay counts
    assert _cell(None, "peak") == "—"                # unmeasured is shown as such, never 0


def test_two_answers_on_two_paths_lose_a_number_only_where_both_lose_it():
    # the legacy runner's near-tie: the first answer (new prompt) wanders off,
    # the second (the same prompt, cached) keeps everything (probes/coherence.py PATHS)
    reference = "Stop the worker with `systemctl stop worker@3`, wait 15 seconds and check port 8080."
    wandered = "To Restart: 1. **Stop the worker** - a common method on Linux."
    kept = "Stop the worker with `systemctl stop worker@3`, wait 15 seconds, then check port 8080."
    one = coherence.measure(wandered, coherence_task(), reference, "length")
    assert one["numbers_lost"] == 3 and "quant_lost_numbers" in failed_checks(one)
    both = coherence.measure([wandered, kept], coherence_task(), [reference, reference], "length")
    assert (both["numbers_lost"], both["code_spans_kept"], both["answers"]) == (0, 1, 2)
    assert "quant_lost_numbers" not in failed_checks(both)
    # damage from fewer bits shows on every path: both answers lose it, so it counts
    assert coherence.measure([wandered, wandered], coherence_task(), reference, "stop")["numbers_lost"] == 3


def test_a_loop_or_garbage_in_either_answer_counts():
    loop = "check the port check the port check the port check the port check the port check the port " * 2
    figures = coherence.measure([GOOD, loop], coherence_task(), None, "stop")
    assert "quant_repeats_itself" in failed_checks(figures)
    assert coherence.measure([GOOD, ""], coherence_task(), None, "stop")["answer_chars"] == 0


def test_quoting_the_long_input_is_not_a_loop_but_a_loop_of_new_words_is():
    prompt = ("Appendix: the valves were checked on the night shift.\n" * 3
              + "Summary request\nExplain why the flow fell from 455 to 412 litres per second.")
    quoted = ("Summary request\nExplain why the flow fell from 455 to 412 litres per second.\n"
              "Summary request\nExplain why the flow fell from 455 to 412 litres per second.\n")
    assert coherence.repeat_share(quoted) > 0.5
    assert coherence.repeat_share(quoted, exclude=prompt) == 0.0
    looping = quoted + "the pump the pump the pump the pump the pump the pump the pump the pump\n"
    assert coherence.repeat_share(looping, exclude=prompt) > 0.5


def test_a_context_point_touches_as_many_tokens_as_the_long_input_retest_at_that_context():
    # issue 29: the search must prove the load the retest then sends: the retest's prompt fills
    # 85% and it answers 128 tokens; a point answers 16, so its prompt is longer by the difference
    from probes import context, stability
    for num_ctx in (2048, 2560, 8192, 32768):
        point = context.fill_tokens(num_ctx, context.FILL) + context.NUM_PREDICT
        assert point == int(num_ctx * context.FILL) + stability.NUM_PREDICT
    # never pushed past the context: the point's own answer still fits behind its prompt
    assert context.fill_tokens(256, context.FILL) + context.NUM_PREDICT < 256
    # a fill past the context on purpose (the truncation test's 1.6) is sent as asked
    assert context.fill_tokens(512, 1.6) == int(512 * 1.6)
