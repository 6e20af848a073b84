"""Simulated answers: coherent ones pass oomvet's coherence checks, the two
broken kinds fail them, and token counts behave like a tokenizer's."""
from __future__ import annotations

from probes import coherence
from rules.coherence import failed_checks
from rules.thresholds import COHERENCE
from oomsim import text as simtext
from probes.texts import coherence_task, fill_prompt, stability_task


def first(answer: str, tokens: int) -> str:
    return "".join(simtext.pieces(answer)[:tokens])


def test_coherent_answer_passes_the_coherence_check_and_keeps_numbers_and_code():
    task = coherence_task()
    answer = simtext.coherent(task, seed=11)
    failed = failed_checks(coherence.measure(first(answer, 160), task, None, "length"))
    assert not failed, failed
    assert "4417" in answer and "`systemctl stop worker@3`" in answer


def test_garbled_answer_fails_the_coherence_check():
    task = coherence_task()
    reference = simtext.coherent(task, seed=11)
    failed = failed_checks(coherence.measure(first(simtext.garbled(task, 11), 160), task, reference, "stop"))
    assert failed
    assert "quant_garbled" in failed
    assert {"quant_lost_numbers", "quant_invented_numbers"} & set(failed)


def test_repetitive_answer_loops_to_the_limit():
    task = stability_task()
    text = simtext.answer(task, 42, "repetitive", limit_tokens=256)
    assert simtext.count_tokens(text) >= 256
    assert coherence.repeat_share(first(text, 256)) > COHERENCE.max_repeat_share


def test_the_stability_task_answer_does_not_loop():
    answer = simtext.coherent(stability_task(), seed=42)
    assert coherence.repeat_share(answer) < COHERENCE.max_repeat_share
    assert answer.endswith(".")


def test_answers_depend_on_seed_and_prompt_only():
    assert simtext.coherent("abc 1", 1) == simtext.coherent("abc 1", 1)
    assert simtext.coherent("abc 1", 1) != simtext.coherent("abc 1", 2)


def test_chinese_prompts_get_chinese_answers_counted_per_character():
    answer = simtext.coherent("请总结这份报告，保留数字 42。", seed=3)
    assert "42" in answer and "。" in answer
    assert simtext.count_tokens("显存不够") == 4


def test_token_count_grows_linearly_with_the_fill_prompt():
    one, three, hundred = (simtext.count_tokens(fill_prompt(n, "abcd1234")) for n in (1, 3, 100))
    per_unit = (three - one) / 2
    assert hundred == one + 99 * per_unit
    assert 60 < per_unit < 130  # ~360 characters of English prose


def test_pieces_join_back_to_the_text():
    text = "Hello,   world! `code` 12,500 and 显存"
    assert "".join(simtext.pieces(text)) == text
