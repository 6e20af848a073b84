"""The message files under common/messages/ and the one catalog that reads
them: each file names the modules that say its messages, every message has
both languages, one key lives in one file, and a message is said in the
language asked for."""
import re
from pathlib import Path

import pytest
import yaml

from common import catalog

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = ROOT / "common" / "messages"
FILES = sorted(str(p.relative_to(MESSAGES)) for p in MESSAGES.rglob("*.yaml"))


def test_there_are_message_files_for_every_room_that_speaks():
    assert {"assistant/report.yaml", "assistant/ui.yaml", "rules/sentences.yaml", "probes/notes.yaml",
            "probes/budget.yaml"} <= set(FILES)


@pytest.mark.parametrize("name", FILES)
def test_each_message_file_names_the_modules_that_say_it(name):
    lines = (MESSAGES / name).read_text(encoding="utf-8").splitlines()
    header = " ".join(line for line in lines[:next(i for i, line in enumerate(lines) if not line.startswith("#"))])
    named = re.findall(r"(?<![\w/])((?:assistant|rules|probes)/[\w/]*(?:\.py|/))", header)
    assert named, f"{name}: the first comment says whose messages these are"
    assert [path for path in named if not (ROOT / path).exists()] == []


@pytest.mark.parametrize("name", FILES)
def test_each_message_file_is_in_the_catalog_in_both_languages(name):
    loaded = yaml.safe_load((MESSAGES / name).read_text(encoding="utf-8"))
    registered = catalog.all_messages()
    for key, texts in loaded.items():
        assert set(texts) == {"en", "zh"} and all(texts.values()), key
        assert registered[key] == texts, key


def test_the_catalog_holds_what_the_files_say_and_nothing_else():
    keys = [key for name in FILES for key in yaml.safe_load((MESSAGES / name).read_text(encoding="utf-8"))]
    assert sorted(keys) == sorted(catalog.all_messages())


def test_the_loader_refuses_a_message_without_both_languages_or_in_two_files(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "a.yaml").write_text("x.one:\n  en: one\n  zh: 一\n", encoding="utf-8")
    assert catalog.load(tmp_path) == {"x.one": {"en": "one", "zh": "一"}}
    (tmp_path / "rules" / "b.yaml").write_text("x.one:\n  en: one\n  zh: 一\n", encoding="utf-8")
    with pytest.raises(ValueError, match="'x.one' is in both a.yaml and rules/b.yaml"):
        catalog.load(tmp_path)
    (tmp_path / "rules" / "b.yaml").write_text("x.two:\n  en: two\n", encoding="utf-8")
    with pytest.raises(ValueError, match="'x.two' in rules/b.yaml lacks zh"):
        catalog.load(tmp_path)


def test_a_message_is_said_in_the_language_asked_for_and_both_when_a_pair_is_wanted():
    assert catalog.t("cli.interrupted", "en") == "interrupted"
    assert catalog.t("cli.interrupted", "zh") == "已中断"
    assert catalog.pair("budget.host", can_give="4.00 GiB") == (
        "no GPU and no --budget: the limit is the host's available memory, 4.00 GiB",
        "没有 GPU 且未指定 --budget：上限为主机可用内存 4.00 GiB")
    assert catalog.templates("rule.note_symptom") == ("symptom: {phase} ({text})", "症状：{phase}（{text}）")
    with pytest.raises(KeyError, match="no message 'no.such.key'"):
        catalog.t("no.such.key", "en")


def test_the_current_language_is_the_one_set_then_the_environment(monkeypatch):
    monkeypatch.setenv("OOMVET_LANG", "zh_CN.UTF-8")
    catalog.set_lang(None)
    assert catalog.get_lang() == "zh" and catalog.t("cli.interrupted") == "已中断"
    assert catalog.set_lang("en") == "en" and catalog.t("cli.interrupted") == "interrupted"
    with pytest.raises(ValueError):
        catalog.set_lang("fr")
