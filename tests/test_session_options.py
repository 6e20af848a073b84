"""The session's options are read from the command line once: the budget is
typed where it enters (``--budget``, the answers file, the user's words) and
keeps where it came from, so the limit note names it as the user gave it, and
no command writes onto the parsed flags."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from assistant.cli import build_parser, main
from common.errors import UsageError
from assistant.intake import parse as parse_intake
from assistant.session.answers import answer_facts, load_answers
from assistant.session.args import SessionOptions
from probes.budget import ANSWERS, FLAG, MESSAGE, resolve_limit
from probes.memory.base import DeviceInfo, Reading

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
GiB = 1 << 30
GPU = DeviceInfo("RTX 4060", "nvidia", 8 * GiB, False, "nvml")


class Sealed(argparse.Namespace):
    """Parsed flags that refuse every assignment once parsing is over, as a
    command must leave them: its options are its own frozen value."""

    def seal(self) -> Sealed:
        object.__setattr__(self, "_sealed", True)
        return self

    def __setattr__(self, name, value):
        if getattr(self, "_sealed", False):
            raise AssertionError(f"a command assigned args.{name} after parsing")
        super().__setattr__(name, value)


def sealed(*argv: str) -> Sealed:
    return build_parser().parse_args(list(argv), namespace=Sealed()).seal()


def test_diagnose_names_a_budget_from_the_symptom_by_its_size_and_source_and_leaves_the_flags_alone(tmp_path):
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump({"symptom": "neohorse-1:q4_K_M 上下文开到 32k 就 OOM，短的没问题，显存只剩 5G 能用",
                                       "lang": "zh"}, allow_unicode=True), encoding="utf-8")
    args = sealed("diagnose", "--simulate", str(SCENARIOS / "kv_cache.yaml"), "--answers", str(answers),
                  "--model", "neohorse-1:q4_K_M", "--settle", "0.2", "--out", str(tmp_path / "out"))
    assert args.run(args) in (0, 1)
    evidence = yaml.safe_load((tmp_path / "out" / "oomvet.yaml").read_text())["evidence"]
    assert evidence["limit"] == 5 * GiB
    assert evidence["limit_note"].startswith("5.00 GiB from your message (")
    assert "--budget" not in evidence["limit_note"]


def test_devices_and_a_backend_probe_run_without_writing_onto_the_flags(capsys):
    args = sealed("devices", "--simulate", str(SCENARIOS / "kv_cache.yaml"), "--budget", "50%", "--json")
    assert args.run(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["budget"] == "50%" and report["limit"]["note"].startswith("4.00 GiB from --budget 50% (")
    # the knob's value was checked by assigning it back onto args
    args = sealed("probe", "backend", "--simulate", str(SCENARIOS / "kv_cache.yaml"), "--model",
                  "neohorse-1:q4_K_M", "--knob", "num_batch", "--value", "256", "--json")
    assert args.run(args) in (0, 1)
    assert json.loads(capsys.readouterr().out)["probe"] == "backend"


def test_a_bad_budget_flag_is_one_line_and_exit_2_before_the_answers_file_is_read(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OOMVET_RAISE", raising=False)
    rc = main(["diagnose", "--answers", str(tmp_path / "missing.yaml"), "--budget", "lots",
               "--host", "http://127.0.0.1:9"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.splitlines() == ["oomvet: --budget 'lots': not a size; use a size like 6GiB, 600MiB, 7.5G, "
                                "or a share of the device like 80%"]


def test_budget_flag_wins_over_the_answers_file_and_the_words(tmp_path):
    answers = tmp_path / "answers.yaml"
    answers.write_text("budget: 6 gigs\n")  # the answer grammar, not the flag's
    loaded = load_answers(answers)
    assert (loaded["budget"].bytes, loaded["budget"].origin, loaded["budget"].text) == (6 * GiB, ANSWERS, "6 gigs")
    words = parse_intake("my 4060 has only 5G free and crashes at 32k context")

    flagged = SessionOptions.from_args(build_parser().parse_args(["diagnose", "--budget", "7GiB"]), answers=loaded)
    assert (flagged.budget.bytes, flagged.budget.origin) == (7 * GiB, FLAG)
    assert flagged.with_words(words) is flagged

    from_file = SessionOptions.from_args(build_parser().parse_args(["diagnose"]), answers=loaded)
    assert from_file.with_words(words).budget is loaded["budget"]

    from_words = SessionOptions.from_args(build_parser().parse_args(["diagnose"])).with_words(words)
    assert (from_words.budget.bytes, from_words.budget.origin) == (5 * GiB, MESSAGE)


@pytest.mark.parametrize("words,en,zh", [
    ("my 4060 has only 5G free and crashes at 32k context",
     "5.00 GiB from your message (RTX 4060 can give 7.00 GiB)", "5.00 GiB，来自你的消息（RTX 4060可用 7.00 GiB）"),
    ("只能用 50% 的显存，上下文开到 32k 就 OOM",
     "4.00 GiB from 50% in your message (RTX 4060 can give 7.00 GiB)",
     "4.00 GiB，来自你消息里的 50%（RTX 4060可用 7.00 GiB）"),
])
def test_the_limit_note_names_a_budget_from_words_in_both_languages(words, en, zh):
    options = SessionOptions.from_args(build_parser().parse_args(["chat"])).with_words(parse_intake(words))
    limit = resolve_limit(options.budget, GPU, Reading(0.0, GiB, 8 * GiB, 7 * GiB))
    assert (limit.text("en"), limit.text("zh")) == (en, zh)


@pytest.mark.parametrize("budget", ["-1G", "''", "lots"])
def test_an_answers_file_budget_the_flag_would_refuse_is_refused_on_loading(tmp_path, budget):
    answers = tmp_path / "answers.yaml"
    answers.write_text(f"budget: {budget}\n")
    with pytest.raises(UsageError) as caught:
        load_answers(answers)
    assert "budget = " in str(caught.value) and "\n" not in str(caught.value)


def test_an_answers_file_budget_over_what_the_device_gives_is_named_as_written(tmp_path):
    answers = tmp_path / "answers.yaml"
    answers.write_text("budget: 80%\n")
    budget = load_answers(answers)["budget"]
    limit = resolve_limit(budget, GPU, Reading(0.0, 4 * GiB, 8 * GiB, 4 * GiB))
    assert limit.note == "budget: 80% in the answers file (6.40 GiB) is more than RTX 4060 can give; the limit is 4.00 GiB"
    assert limit.text("zh").startswith("答案文件中的 budget: 80%（6.40 GiB）超过了")
    # asked as a question, the typed budget answers like the words it was read from
    assert answer_facts("budget", budget, device_total=10 * GiB)[0]["value"] == 8 * GiB
