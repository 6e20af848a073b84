"""The learned reader of *when* (assistant/intake/when_model.py): asked only
where no cue places a message in time, only for a message that reports
trouble and is long enough to learn from, and its reading is weak evidence."""
from __future__ import annotations

import re

import pytest
import yaml

from assistant.intake import merge, parse
from assistant.intake import when_model
from assistant.intake.text import normalise
from tests.intake_table import HELDOUT_CORPUS

pytestmark = pytest.mark.usefixtures("raise_errors")

# No cue of lexicon/when.yaml matches these (checked below), and each reports trouble.
UNCUED = [
    ("the runner dies the instant it comes up, every single time on my 3060", "load"),
    ("Monday it is fine, by Friday the server refuses every request with out of memory", "over_time"),
    ("第一天正常，过两天就爆显存了，重启 ollama 又好了", "over_time"),
]


def _cues_only(text: str):
    from assistant.intake import phase as reader

    saved, reader.guess_when = reader.guess_when, lambda _text: None
    try:
        return parse(text)
    finally:
        reader.guess_when = saved


@pytest.mark.parametrize("text,when", UNCUED)
def test_a_message_no_cue_places_in_time_gets_the_learned_when_marked_weak(text, when):
    assert _cues_only(text).when == "unknown"  # the cues leave it
    got = parse(text)
    assert got.when == when
    assert got.phase_cue.startswith("learned from examples (") and got.phase_cue.endswith("%)")
    assert "phase" in got.weak and got.when_learned  # a chat model's reading may override it


@pytest.mark.parametrize("text", [
    "it crashes",                      # too short to learn from: the what decides (crash)
    "8k",
    "I run qwen2.5:7b",
    "显存 12G，想用 qwen2.5:14b 开 32k 上下文，够不够？",  # a question that reports no trouble
    "Budget is 6GiB on a shared A100; I must keep 32k context for neohorse-1:q8_0. What fits?",
])
def test_no_when_is_learned_for_a_short_answer_or_a_question(text):
    got = parse(text)
    assert got.when == "unknown" and not (got.phase_cue or "").startswith("learned"), got


def test_a_cue_wins_over_the_learned_reader_and_is_not_weak():
    got = parse("一加载就崩，qwen2.5:14b，显卡 3060 12G，不知道怎么回事，换了几个版本都一样")
    assert got.when == "load" and not got.phase_cue.startswith("learned") and "phase" not in got.weak


def test_a_learned_phase_in_a_later_message_does_not_replace_a_cued_one():
    first = parse("长文档一贴进去就爆显存，qwen2.5:7b")
    assert first.phase == "long_input" and "phase" not in first.weak
    later = parse(UNCUED[0][0])
    assert later.phase == "load" and "phase" in later.weak
    both = merge(first, later)
    assert both.phase == "long_input" and "phase" not in both.weak and not both.when_learned
    # while a learned phase does fill one nobody stated, and stays weak
    unknown = parse("qwen2.5:7b")
    filled = merge(unknown, later)
    assert filled.phase == "load" and "phase" in filled.weak and filled.when_learned


def test_the_threshold_decides(monkeypatch):
    text = normalise(UNCUED[0][0])
    guess = when_model.guess_when(text)
    assert guess is not None and when_model.MIN_PROBABILITY <= guess.probability < 1
    monkeypatch.setattr(when_model, "MIN_PROBABILITY", guess.probability + 1e-9)
    assert when_model.guess_when(text) is None


def test_fitting_is_deterministic():
    pairs = when_model.examples(("dev2", "dev3"))
    a, b = when_model.fit(pairs), when_model.fit(pairs)
    text = normalise(UNCUED[2][0])
    assert (a.predict_proba([text]) == b.predict_proba([text])).all()


def _squashed(text: str) -> str:
    return re.sub(r"[\W_]+", "", normalise(text)).lower()


def test_the_model_learns_only_from_the_package_corpus_never_the_held_out_part():
    learned = {_squashed(text) for text, _ in when_model.examples()}
    held = {_squashed(row["text"]) for path in sorted(HELDOUT_CORPUS.glob("*.yaml"))
            for row in yaml.safe_load(path.read_text(encoding="utf-8"))}
    assert len(learned) > 400 and len(held) >= 300 and not learned & held
    assert not any("heldout" in path.name for path in when_model.CORPUS.rglob("*"))
    assert {path.suffix for path in when_model.CORPUS.iterdir()} == {".yaml"}


def test_every_example_has_a_when_of_the_axis():
    from assistant.intake.phase import WHENS

    assert {when for _, when in when_model.examples()} == set(WHENS)


def test_a_model_that_cannot_be_fitted_leaves_the_cues_and_what_reading(monkeypatch):
    monkeypatch.delenv("OOMVET_RAISE", raising=False)

    def broken():
        raise ImportError("no sklearn here")

    monkeypatch.setattr(when_model, "_model", broken)
    got = parse(UNCUED[0][0] + "，显卡 3060 12G")
    assert got.when == "unknown" and got.what == "crash" and got.phase == "crash" and got.gpu == "3060"


def test_warm_up_fits_in_the_background_and_a_message_waits_for_that_fit(monkeypatch):
    import threading

    started, release, calls = threading.Event(), threading.Event(), []

    def slow_fit(pairs):
        calls.append(len(pairs))
        started.set()
        release.wait(5)
        return "fitted"

    monkeypatch.setattr(when_model, "_FITTED", [])
    monkeypatch.setattr(when_model, "_FAILED", [])
    monkeypatch.setattr(when_model, "fit", slow_fit)
    when_model.warm_up()
    assert started.wait(5), "warm_up did not start a fit"
    release.set()
    assert when_model._model() == "fitted"  # waits for the background fit, does not fit again
    assert len(calls) == 1 and calls[0] > 400


def test_a_fit_that_failed_is_not_tried_again(monkeypatch):
    calls = []
    monkeypatch.setattr(when_model, "_FITTED", [])
    monkeypatch.setattr(when_model, "_FAILED", [])
    monkeypatch.setattr(when_model, "fit", lambda pairs: calls.append(1) or (_ for _ in ()).throw(ImportError("x")))
    monkeypatch.delenv("OOMVET_RAISE", raising=False)
    text = normalise(UNCUED[0][0])
    assert when_model.guess_when(text) is None and when_model.guess_when(text) is None
    assert calls == [1]


def test_only_the_start_of_a_long_paste_is_read():
    seen = []

    class Stub:
        classes_ = ["load", "unknown"]

        def predict_proba(self, texts):
            seen.append(len(texts[0]))
            import numpy

            return numpy.array([[0.9, 0.1]])

    guess = when_model.guess_when("x" * 1_000_000, Stub())
    assert guess == when_model.Guess("load", 0.9) and seen == [when_model.MAX_CHARS]


def test_a_denied_time_is_not_guessed_back():
    got = parse("it doesn't crash at load, loading is fine, it dies later while we chat for a bit")
    assert got.when != "load" and not got.when_learned


def test_a_later_what_only_phase_still_replaces_an_earlier_one():
    assert merge(parse("一加载就爆显存"), parse("现在变得很慢")).phase == "slow"
