"""The intake's sureness (issue 33): each field read carries the class of its
evidence; conflicting evidence is unsure with the other readings; the chat
says what it read and asks the unsure fields. Messages here are written for
these tests, in words of their own (none is a training example: see
test_intake_learned)."""
from __future__ import annotations

import io

import pytest
from rich.cells import cell_len
from rich.console import Console

from assistant.intake import confidence, merge, parse, settle
from assistant.intake.learned import corpus_rows
from assistant.session import readback
from assistant.session.answers import parse_choice
from assistant.session.ui import ChatUI

GiB = 1 << 30

# a bug inside the parser surfaces instead of being read as "unknown"
pytestmark = pytest.mark.usefixtures("raise_errors")


def test_a_card_and_the_part_left_for_the_model_is_the_part_and_unsure():
    got = parse("卡是 48G 的，只准备给这个模型留 30G，其余的归别的服务。qwen2.5:14b 一启动就 OOM")
    assert got.budget == 30 * GiB
    assert "budget" in confidence.unsure(got)
    assert confidence.assess(got)["budget"].choices == (48 * GiB,)


def test_a_count_that_copes_beside_the_one_that_fails_is_the_one_that_fails_and_unsure():
    got = parse("Handles three users at the same time fine, but a fourth one makes everything crawl")
    assert got.want_parallel == 4 and got.phase == "concurrent"
    assert "want_parallel" in confidence.unsure(got)
    assert confidence.assess(got)["want_parallel"].choices == (3,)


def test_a_hang_at_loading_100_percent_is_a_load_that_hangs():
    got = parse("ollama run mistral-nemo 之后加载到 100% 就一直卡着不动，等了十分钟")
    assert (got.when, got.what, got.phase) == ("load", "hang", "load")


def test_a_context_that_spills_layers_to_the_cpu_is_a_load_problem():
    got = parse("after I set num_ctx to 65536 it does 2 tok/s and ollama ps shows 40%/60% CPU/GPU")
    assert got.phase == "load" and got.want_ctx == 65536


def test_a_plain_message_is_sure_of_everything_it_says():
    got = parse("4060 8G，用 qwen2.5:7b，上下文开到 32k 就 OOM")
    assert confidence.unsure(got) == ()
    assert set(confidence.assess(got)) == {"phase", "model", "budget", "want_ctx"}


def test_one_card_or_all_cards_is_asked():
    got = parse("two 3090s, 24GB each, and llama3.3:70b OOMs at load")
    assert got.budget == 24 * GiB and "budget" in confidence.unsure(got)
    assert confidence.assess(got)["budget"].choices == (48 * GiB,)


def test_the_lower_bound_needs_counts_to_be_sure():
    assert confidence.lower_bound(40, 40) == pytest.approx(0.912, abs=1e-3)
    assert confidence.lower_bound(602, 603) > 0.99
    assert confidence.lower_bound(0, 0) == 0.0
    assert not confidence.is_sure("a.class.never.seen")[0]


def test_every_class_the_intake_gives_on_the_corpus_is_in_the_table():
    # a class the replay never counted would be unsure at run time, silently: the table is rewritten with the code
    seen = {kind for row in corpus_rows() for _, kind in parse(row["text"]).evidence}
    assert seen <= set(confidence.table()), seen - set(confidence.table())


def test_the_users_answer_is_sure_and_ends_the_other_readings():
    got = settle(parse("卡是 48G 的，只准备给这个模型留 30G"), "budget", 48 * GiB)
    assert got.budget == 48 * GiB and confidence.unsure(got) == ()
    assert dict(got.evidence)["budget"] == confidence.USER and dict(got.alternatives).get("budget") is None


def test_a_merged_field_keeps_the_evidence_of_the_message_it_came_from():
    first = parse("qwen2.5:7b crashes with long prompts, 4 users at once")
    later = parse("actually NUM_PARALLEL=2 is fine and 6 OOMs")
    both = merge(first, later)
    assert both.want_parallel == 6 and dict(both.evidence)["want_parallel"] == "par.several"
    assert dict(both.evidence)["model"] == "model.said"


@pytest.mark.parametrize("reply,n,numbers,want", [
    ("2", 3, True, 2), ("２", 3, True, 2), ("2)", 3, True, 2), ("option 3", 3, True, 3), ("第二个", 3, True, 2),
    ("the second one", 3, True, 2), ("the last", 3, True, 3), ("最后一个", 4, True, 4), ("4", 3, True, None),
    ("2", 3, False, None), ("the first", 2, False, 1), ("30G", 3, True, None),
])
def test_a_choice_is_read_by_number_or_by_word(reply, n, numbers, want):
    assert parse_choice(reply, n, numbers=numbers) == want


@pytest.mark.parametrize("lang,text", [
    ("zh", "我们 A6000 是 48G 的，只给这个模型留 30G，qwen2.5:32b 加载到 100% 就卡住，上下文 16k 可以减少"),
    ("en", "My card has 24 GB but I can only give this model 300 MiB; three users at once are fine, a fourth "
           "crashes it; a smaller context is fine"),
])
def test_the_read_back_and_its_questions_fit_80_columns(lang, text):
    console = Console(file=io.StringIO(), width=200)
    ui = ChatUI(console, stream=io.StringIO("\n" * 8), lang=lang)
    read = parse(text)
    for line in readback.lines(read, lang):
        ui.say(line)
    readback.confirm(ui, read)
    shown = console.file.getvalue().splitlines()
    assert len(shown) > 6
    assert max(cell_len(line) for line in shown) <= 80, max(shown, key=cell_len)


def test_auto_asks_nothing_and_keeps_only_what_is_sure():
    said = []
    got = readback.only_sure(parse("卡是 48G 的，只准备给这个模型留 30G，qwen2.5:14b 一启动就 OOM"), said.append)
    assert got.budget is None and got.model == "qwen2.5:14b" and got.phase == "load"
    assert len(said) == 1 and "30.00 GiB" in said[0]


def test_each_unsure_field_is_asked_once_and_a_correction_settles_another():
    console = Console(file=io.StringIO(), width=200)
    replies = "actually the model is qwen2.5:7b\n2\n\n"  # a correction, then "all of it", then keep the count
    ui = ChatUI(console, stream=io.StringIO(replies), lang="en")
    read = parse("My card has 24 GB but I can only give the model 10 GB. llama3.1:8b copes with 2 users at once, "
                 "a third makes it time out")
    assert "model" not in confidence.unsure(read)
    assert set(confidence.unsure(read)) >= {"budget", "want_parallel"}
    got = readback.confirm(ui, read)
    out = console.file.getvalue()
    assert got.model == "qwen2.5:7b" and got.budget == 24 * GiB and got.want_parallel == 3
    assert out.count("How much memory may the model use?") == 2  # asked again after the correction only
    assert out.count("How many requests at once") == 1
    assert confidence.unsure(got) == ()
