"""The learned readers (assistant/intake/learned.py, budget_model.py): asked
only where the hand-written readers found nothing (*when* only for a message
that reports trouble and is long enough to learn from), their readings are
weak evidence, named in ``Intake.learned``, and never replace what an earlier
message said in words."""
from __future__ import annotations

import pickle
import re
import threading

import numpy
import pytest
from pathlib import Path
import yaml

from assistant.intake import budget_model, learned, merge, parse
from assistant.intake.learned import Guess
from assistant.intake.scrub import scrub
from assistant.intake.llm import combine
from tests.intake_table import HELDOUT_CORPUS

pytestmark = pytest.mark.usefixtures("raise_errors")

GiB = 1 << 30

# No cue of lexicon/when.yaml matches these (checked below), and each reports trouble.
UNCUED_WHEN = [
    ("the runner dies the instant it comes up, every single time on my 3060", "load"),
    ("Monday it is fine, by Friday the server refuses every request with out of memory", "over_time"),
    ("第一天正常，过两天就爆显存了，重启 ollama 又好了", "over_time"),
]
# No cue of lexicon/what.yaml matches these (checked below).
UNCUED_WHAT = [
    ("llama3.1:8b 每秒只能憋出一两个字，盯着屏幕看它往外冒真是煎熬", "slow", "slow"),
    ("gemma3:12b answers arrive missing their last paragraph whenever the question is detailed", "cut", "long_input"),
]
# The size grammar reads no budget in these (checked below).
UNREAD_BUDGET = [
    ("显卡是 RTX 4070，那张卡 12 个 G，跑 qwen2.5:14b 一加载就报错", 12 * GiB),
    ("I'm on a laptop whose NVIDIA chip has 6 gigs, gemma3:12b won't load", 6 * GiB),
    ("本人 4090 一张（24g），一加载就崩", 24 * GiB),
]


@pytest.mark.parametrize("text,when", UNCUED_WHEN)
def test_a_message_no_cue_places_in_time_gets_the_learned_when_marked_weak(text, when, monkeypatch):
    with monkeypatch.context() as off:
        off.setattr(learned, "fitted", lambda: None)
        assert parse(text).when == "unknown"  # the cues leave it
    got = parse(text)
    assert got.when == when and "when" in got.learned
    assert got.phase_cue.startswith("learned from examples (") and got.phase_cue.endswith("%)")
    assert "phase" in got.weak  # a chat model's reading may override it


@pytest.mark.parametrize("text,what,phase", UNCUED_WHAT)
def test_a_message_no_cue_says_what_of_gets_the_learned_what(text, what, phase, monkeypatch):
    with monkeypatch.context() as off:
        off.setattr(learned, "fitted", lambda: None)
        assert parse(text).what == "unknown"
    got = parse(text)
    assert (got.what, got.phase) == (what, phase) and "what" in got.learned and "phase" in got.weak


@pytest.mark.parametrize("text,budget", UNREAD_BUDGET)
def test_a_budget_the_grammar_misses_is_found_by_the_ranker_and_is_weak(text, budget, monkeypatch):
    with monkeypatch.context() as off:
        off.setattr(learned, "fitted", lambda: None)
        assert parse(text).budget is None
    got = parse(text)
    assert got.budget == budget and "budget" in got.learned and "budget" in got.weak


@pytest.mark.parametrize("text", [
    "it crashes",                      # too short to learn from: the what decides (crash)
    "8k",
    "I run qwen2.5:7b",
    "显存 12G，想用 qwen2.5:14b 开 32k 上下文，够不够？",  # a question that reports no trouble
    "Budget is 6GiB on a shared A100; I must keep 32k context for neohorse-1:q8_0. What fits?",
])
def test_no_when_or_what_is_learned_for_a_short_answer_or_a_question(text):
    got = parse(text)
    assert got.when == "unknown" and not {"when", "what"} & set(got.learned), got
    assert not (got.phase_cue or "").startswith("learned")


def test_a_learned_when_very_sure_of_another_time_overrides_a_cue_and_is_weak(monkeypatch):
    # "加载" is a load cue, but the story is of memory never given back over two weekends
    text = "服务一直开着没重启，过了两个周末，显存被占满了，现在再加载任何模型都报 out of memory"
    got = parse(text)
    assert got.when == "over_time" and got.phase == "creeping" and "when" in got.learned and "phase" in got.weak
    assert got.phase_cue.startswith("learned from examples (")
    monkeypatch.setitem(learned.OVER_A_CUE, "when", 1.01)  # no learned reading is that sure: the cue stands
    assert parse(text).when == "load"


@pytest.mark.parametrize("text,cue_when", [
    ("How much VRAM would I need for qwen2.5:14b at 16k context with 4 people using it at the same time?", "concurrent"),
    ("想把一份三万字的合同整个贴进去让模型逐条审，num_ctx 要开多大才够？卡是 4090 24G", "long_input"),
])
def test_a_question_that_reports_no_trouble_gets_no_time_from_a_cue(text, cue_when, monkeypatch):
    with monkeypatch.context() as off:
        off.setattr(learned, "fitted", lambda: None)
        assert parse(text).when == cue_when  # the cue reads a time in it
    got = parse(text)
    assert (got.when, got.what, got.phase) == ("unknown", "unknown", "unknown"), got
    chance = learned.no_trouble(learned.view("what", scrub(text)))
    assert chance >= learned.MAX_NO_TROUBLE


def test_a_statement_whose_trouble_no_reader_names_keeps_the_time_a_cue_read():
    # not put as a question: the time stands even where "no trouble" is likely to the reader
    got = parse("it goes wrong in some way only with long prompts, and I need 32k context")
    assert got.when == "long_input"


def test_a_cue_wins_over_the_learned_readers_and_is_not_weak():
    got = parse("一加载就崩，qwen2.5:14b，显卡 3060 12G，不知道怎么回事，换了几个版本都一样")
    assert got.when == "load" and got.learned == () and "phase" not in got.weak


def test_the_grammar_wins_over_the_budget_ranker():
    got = parse("显卡 3060 12G，跑 qwen2.5:14b 的时候一个字一个字往外蹦，比我打字还慢")
    assert got.budget == 12 * GiB and "budget" not in got.learned


def test_a_learned_phase_in_a_later_message_does_not_replace_a_cued_one():
    first = parse("长文档一贴进去就爆显存，qwen2.5:7b")
    assert first.phase == "long_input" and "phase" not in first.weak
    later = parse(UNCUED_WHEN[0][0])
    assert later.phase == "load" and "phase" in later.weak
    both = merge(first, later)
    assert both.phase == "long_input" and "phase" not in both.weak and both.learned == ()
    # while a learned phase does fill one nobody stated, and stays weak
    filled = merge(parse("qwen2.5:7b"), later)
    assert filled.phase == "load" and "phase" in filled.weak and "when" in filled.learned
    # a phase from a learned *what* alone does not replace a cued one either
    slow = parse(UNCUED_WHAT[0][0])
    assert slow.phase == "slow" and slow.when == "unknown"
    assert merge(first, slow).phase == "long_input"


def test_a_learned_budget_in_a_later_message_does_not_replace_a_stated_one():
    first = parse("一加载就爆显存，显卡 3060 12G")
    later = parse(UNREAD_BUDGET[2][0])
    both = merge(first, later)
    assert both.budget == 12 * GiB and "budget" not in both.learned and "budget" not in both.weak
    filled = merge(parse("一加载就爆显存"), later)
    assert filled.budget == 24 * GiB and "budget" in filled.learned and "budget" in filled.weak


def test_a_later_what_only_phase_from_a_cue_still_replaces_an_earlier_one():
    assert merge(parse("一加载就爆显存"), parse("现在变得很慢")).phase == "slow"


def test_a_chat_models_reading_replaces_a_learned_one_and_is_no_longer_called_learned():
    parser = parse(UNREAD_BUDGET[2][0] + "，跑的时候一个字一个字往外蹦")
    assert "budget" in parser.learned
    llm = parse("一加载就爆显存，显卡 4090，预算 20G")
    combined, won = combine(parser, llm)
    assert combined.budget == 20 * GiB and won["budget"] == "llm" and "budget" not in combined.learned


def test_the_threshold_decides(monkeypatch):
    text = learned.view("when", scrub(UNCUED_WHEN[0][0]))
    guess = learned.guess("when", text)
    assert guess is not None and learned.MIN_PROBABILITY["when"] <= guess.probability < 1
    assert learned.guess("when", text, threshold=guess.probability + 1e-9) is None
    monkeypatch.setitem(learned.MIN_PROBABILITY, "when", guess.probability + 1e-9)
    assert learned.guess("when", text) is None


class _Stub:
    """A fitted model's shape: fixed probabilities per class."""

    def __init__(self, **probabilities):
        self.classes_ = list(probabilities)
        self._row = numpy.array([list(probabilities.values())])
        self.seen = []

    def predict_proba(self, texts):
        self.seen.append(texts[0])
        return self._row


def test_a_learned_what_stands_only_where_no_trouble_at_all_is_unlikely():
    text = "a message long enough to be read by the learned readers, about forty characters or more"
    assert learned.guess("what", text, _Stub(oom=0.6, crash=0.3, unknown=0.1)) is None  # at the veto: refused
    assert learned.guess("what", text, _Stub(oom=0.6, crash=0.32, unknown=0.08)) == learned.Guess("oom", 0.6)
    # *when* has no such veto: its "unknown" means "no time said", not "no trouble"
    assert learned.guess("when", text, _Stub(load=0.6, unknown=0.4)) == learned.Guess("load", 0.6)


def test_fitting_is_deterministic():
    rows = learned.labelled(("dev2", "dev3"))
    a, b = learned.fit_all(rows), learned.fit_all(rows)
    seen = scrub(UNCUED_WHEN[2][0])
    for axis in learned.AXES:
        text = learned.view(axis, seen)
        assert (getattr(a, axis).predict_proba([text]) == getattr(b, axis).predict_proba([text])).all()
    assert budget_model.rank(scrub(UNREAD_BUDGET[0][0]).numbers, a.budget) == \
        budget_model.rank(scrub(UNREAD_BUDGET[0][0]).numbers, b.budget)


def _squashed(text: str) -> str:
    return re.sub(r"[\W_]+", "", text).lower()


def test_the_readers_learn_only_from_the_package_corpus_never_the_held_out_part():
    taught = {_squashed(seen.norm) for seen, _ in learned.labelled()}
    held = {_squashed(scrub(row["text"]).norm) for path in sorted(HELDOUT_CORPUS.glob("*.yaml"))
            for row in yaml.safe_load(path.read_text(encoding="utf-8"))}
    assert len(taught) > 1000 and len(held) >= 450 and not taught & held
    assert not any("heldout" in path.name for path in learned.CORPUS.rglob("*"))
    assert {path.suffix for path in learned.CORPUS.iterdir()} == {".yaml"}


def test_every_example_has_a_value_of_its_axis_and_every_value_is_taught():
    from assistant.intake.phase import WHATS, WHENS

    assert {value for _, value in learned.examples("when")} == set(WHENS)
    assert {value for _, value in learned.examples("what")} == set(WHATS)


def test_the_when_reader_sees_no_quoted_error_or_model_name_and_the_what_reader_no_model_name():
    seen = scrub("ollama run qwen2.5:14b 报 `llama runner process has terminated: exit status 2`")
    when, what = learned.view("when", seen), learned.view("what", seen)
    assert "qwen2.5" not in when and "terminated" not in when
    assert "qwen2.5" not in what and "terminated" in what
    assert len(when) == len(what) == len(seen.norm)  # blanked, not cut: positions stay


def test_a_size_inside_an_error_or_a_model_name_is_no_budget_candidate():
    seen = scrub("phi3:3.8b-mini-128k gives `model requires more system memory (44.8 GiB) than is available "
                 "(30.1 GiB)` on my 3060 with 12 gigs")
    assert [value for _, _, value in budget_model.candidates(seen.numbers)] == [12 * GiB]


def test_a_model_that_cannot_be_fitted_leaves_the_cues_and_grammar(monkeypatch):
    monkeypatch.delenv("OOMVET_RAISE", raising=False)

    def broken():
        raise ImportError("no sklearn here")

    monkeypatch.setattr(learned, "models", broken)
    got = parse(UNCUED_WHEN[0][0] + "，显卡 3060 12G")
    assert got.when == "unknown" and got.what == "crash" and got.phase == "crash" and got.gpu == "3060"
    assert got.budget == 12 * GiB and got.learned == ()


def test_warm_up_fits_in_the_background_and_a_message_waits_for_that_fit(monkeypatch, tmp_path):
    started, release, calls = threading.Event(), threading.Event(), []

    def slow_fit():
        calls.append(1)
        started.set()
        release.wait(5)
        return "fitted"

    monkeypatch.setenv("OOMVET_CACHE_DIR", str(tmp_path))  # no fit kept from another run
    monkeypatch.setattr(learned, "_FITTED", [])
    monkeypatch.setattr(learned, "_FAILED", [])
    monkeypatch.setattr(learned, "fit_all", slow_fit)
    learned.warm_up()
    assert started.wait(5), "warm_up did not start a fit"
    release.set()
    assert learned.models() == "fitted"  # waits for the background fit, does not fit again
    assert calls == [1]


def test_a_fit_that_failed_is_not_tried_again(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setenv("OOMVET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(learned, "_FITTED", [])
    monkeypatch.setattr(learned, "_FAILED", [])
    monkeypatch.setattr(learned, "fit_all", lambda: calls.append(1) or (_ for _ in ()).throw(ImportError("x")))
    monkeypatch.delenv("OOMVET_RAISE", raising=False)
    text = learned.view("when", scrub(UNCUED_WHEN[0][0]))
    assert learned.guess("when", text) is None and learned.guess("when", text) is None
    assert learned.guess_budget("on my 12 gigs card") is None
    assert calls == [1]


def test_the_fitted_readers_are_kept_and_a_later_process_loads_them_without_fitting(monkeypatch, tmp_path):
    monkeypatch.setenv("OOMVET_CACHE_DIR", str(tmp_path))
    fitted = learned._load_or_fit()
    assert list(tmp_path.iterdir()) == [learned.cache_path()]  # whole, and no temporary file left
    monkeypatch.setattr(learned, "fit_all", lambda: pytest.fail("fitted again although a kept fit was there"))
    loaded = learned._load_or_fit()
    text = learned.view("when", scrub(UNCUED_WHEN[1][0]))
    assert numpy.array_equal(loaded.when.predict_proba([text]), fitted.when.predict_proba([text]))
    assert learned.guess("when", text, loaded.when) == learned.guess("when", text, fitted.when)


def test_a_damaged_kept_fit_is_fitted_again_and_replaced(monkeypatch, tmp_path):
    monkeypatch.setenv("OOMVET_CACHE_DIR", str(tmp_path))
    learned.cache_path().write_bytes(b"half a pickle")
    monkeypatch.setattr(learned, "fit_all", lambda: learned.Models("when", "what", "budget"))
    assert learned._load_or_fit() == ("when", "what", "budget")
    assert pickle.loads(learned.cache_path().read_bytes()) == ("when", "what", "budget")


def test_a_cache_folder_that_cannot_be_written_costs_a_fit_and_nothing_else(monkeypatch, tmp_path):
    (tmp_path / "taken").write_text("a file where the folder should be")
    monkeypatch.setenv("OOMVET_CACHE_DIR", str(tmp_path / "taken"))
    monkeypatch.setattr(learned, "fit_all", lambda: learned.Models("when", "what", "budget"))
    assert learned._load_or_fit() == ("when", "what", "budget")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_the_kept_fit_is_named_by_the_corpus_the_readers_and_the_libraries(monkeypatch, tmp_path):
    package = tmp_path / "intake"
    (package / "corpus").mkdir(parents=True)
    (package / "corpus" / "dev.yaml").write_text("- {text: a, phase: load}\n")
    monkeypatch.setattr(learned, "__file__", str(package / "learned.py"))
    monkeypatch.setenv("OOMVET_CACHE_DIR", str(tmp_path))
    first = learned.cache_path()
    assert first == learned.cache_path()  # the same files, the same name
    (package / "corpus" / "dev.yaml").write_text("- {text: a, phase: crash}\n")
    relabelled = learned.cache_path()
    (package / "learned.py").write_text("# the reader's code changed\n")
    recoded = learned.cache_path()
    assert len({first, relabelled, recoded}) == 3 and first.parent == tmp_path


def test_only_the_start_of_a_long_paste_is_read():
    stub = _Stub(load=0.9, unknown=0.1)
    assert learned.guess("when", "x" * 1_000_000, stub) == learned.Guess("load", 0.9)
    assert [len(text) for text in stub.seen] == [learned.MAX_CHARS]


def test_a_denied_time_is_not_guessed_back():
    got = parse("it doesn't crash at load, loading is fine, it dies later while we chat for a bit")
    assert got.when != "load" and "when" not in got.learned


def test_the_corpus_fit_takes_every_dev_batch_and_nothing_else():
    def count(stem: str) -> int:
        return len(yaml.safe_load((learned.CORPUS / f"{stem}.yaml").read_text(encoding="utf-8")))

    stems = {path.stem for path in learned.CORPUS.glob("*.yaml")}
    assert {"dev", *(f"dev{n}" for n in range(2, 16))} <= stems  # none left behind
    assert all(stem.startswith("dev") for stem in stems)  # a test table is not training data
    rows = learned.labelled()
    assert len(rows) == sum(count(stem) for stem in stems)
    assert len(learned.examples("when", rows)) == len(learned.examples("what", rows)) == len(rows)


def _said(text: str) -> str:
    """A message as the readers would take it apart from spacing and case."""
    return " ".join(str(text).lower().split())


def _test_tables() -> dict[str, list[str]]:
    """Every message a test scores the intake on from a table: the held-out
    batches and the pinned tables (tests/data/intake/), the blind reply set."""
    folder = Path(__file__).parent / "data" / "intake"
    tables = {path.name: [row["text"] for row in yaml.safe_load(path.read_text(encoding="utf-8"))]
              for path in sorted(folder.glob("*.yaml"))}
    assert len(tables) >= 12 and sum(map(len, tables.values())) > 600  # the tables are where this looks
    return tables


def test_no_test_table_row_is_a_training_example():
    taught = {_said(row["text"]) for row in learned.corpus_rows()}
    for name, texts in _test_tables().items():
        shared = [text for text in texts if _said(text) in taught]
        assert not shared, f"{name}: {len(shared)} rows are also training examples, e.g. {shared[0]!r}"


def test_no_message_a_test_reads_is_a_training_example():
    """Every string of a dozen characters or more in the tests (the inline
    tables of messages) is new to the readers."""
    import ast

    taught = {_said(row["text"]) for row in learned.corpus_rows()}
    found = []
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= 12:
                if _said(node.value) in taught:
                    found.append(f"{path.name}:{node.lineno}")
    assert not found, f"messages the readers were fitted on: {found}"


def test_the_overlap_check_sees_an_overlap():
    # the check above is only worth something if it can fail: a dev message copied into a table is caught
    taught = {_said(row["text"]) for row in learned.corpus_rows(("dev",))}
    first = learned.corpus_rows(("dev",))[0]["text"]
    assert _said("  " + first.upper() + " ") in taught


@pytest.mark.parametrize("text", [
    "my 3060 is using 11GB and then crashes",        # what something uses
    "38G 显存一直被占着，别的模型加载不上",              # what something holds
    "报错说内存不够，我的 16G 内存 是不是太小",           # system RAM
    "a 4090 with 64GB of system RAM, and llama3.1:70b crawls",
    "I only use 8GB models on my 3060, and they crash",  # a model's size
    "the model file is only 4.7GB yet it will not load",
    "it answers at two tokens a second and ollama ps says 14.9 GB, part of it on the CPU",
    "after a few days nvidia-smi shows ollama holding 22GB with nothing loaded, and new loads fail",
    "每个请求 2G 左右，并发一多就崩",                      # one request's share
])
def test_a_size_the_grammar_knows_for_something_else_is_no_budget_candidate(text):
    assert budget_model.candidates(scrub(text).numbers) == []
    assert "budget" not in parse(text).learned


@pytest.mark.parametrize("text,when,cue", [
    ("after I set OLLAMA_NUM_PARALLEL=4 the whole thing goes sideways for me", "concurrent", "parallel 4"),
    ("ollama run neohorse-1 and the whole thing goes sideways for me right away", "load", "ollama run"),
])
def test_the_rules_that_follow_from_trouble_also_follow_from_trouble_only_the_learned_what_read(text, when, cue,
                                                                                                 monkeypatch):
    # several requests at once, or straight after `ollama run`, plus trouble: that is the time. Here no
    # cue reads the trouble; the learned *what* does (a stand-in sure of an OOM, a *when* reader unsure)
    monkeypatch.setattr(learned, "guess", lambda axis, text, model=None, threshold=None:
                        Guess("oom", 0.9) if axis == "what" else None)
    got = parse(text)
    assert (got.what, got.when, got.phase_cue) == ("oom", when, cue)
    assert got.learned == ("what",)


def test_a_message_with_nothing_for_a_reader_to_read_pays_for_no_fit(monkeypatch):
    def no_fit():
        raise AssertionError("fitted for nothing")
    monkeypatch.setattr(learned, "fitted", no_fit)
    assert learned.guess_budget(scrub("上下文开到 32k 就崩，怎么办").numbers) is None  # no size to rank
    assert learned.no_trouble("够不够？") is None  # too short to read, so no question rule either
    assert learned.guess("what", "8k") is None
    assert parse("8k").want_ctx == 8192  # a short answer: cues alone, no fit


@pytest.mark.parametrize("axis", ["when", "what"])
def test_the_array_reader_computes_what_the_pipeline_does(axis):
    # fitted on three batches, read on every development message (most of them unseen by this fit)
    from assistant.intake.linear import TextReader

    pipe = learned.pipeline(learned.examples(axis, learned.labelled(("dev", "dev2", "dev3"))))
    reader = TextReader.from_pipeline(pipe)
    texts = [text for text, _ in learned.examples(axis)]
    assert list(reader.classes_) == list(pipe.classes_)
    numpy.testing.assert_allclose(reader.predict_proba(texts), pipe.predict_proba(texts), rtol=0, atol=1e-9)


def test_the_array_ranker_computes_what_the_pipeline_does():
    from assistant.intake.linear import DictReader

    pipe = budget_model.pipeline(budget_model.examples(learned.labelled(("dev", "dev2", "dev3"))))
    reader = DictReader.from_pipeline(pipe)
    rows = [features for features, _ in budget_model.examples(learned.labelled())]
    assert len(rows) > 500
    numpy.testing.assert_allclose(reader.predict_proba(rows), pipe.predict_proba(rows), rtol=0, atol=1e-9)
