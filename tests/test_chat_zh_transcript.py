"""A whole Chinese chat session, scanned line by line: no line may be
English-only (every message comes from the en/zh catalog). Names, tags,
numbers, sizes, paths and what the user typed are not prose and pass."""
from __future__ import annotations

import re
from pathlib import Path

from tests.chat_driver import run_chat

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
_CJK = re.compile(r"[\u3400-\u9fff]")
# a word of English prose: letters only, not part of a name, tag, path, option or unit
_WORD = re.compile(r"(?<![\w./:_=(-])[A-Za-z]{3,}(?![\w./:_=(-])")  # "key=", "fact(" are data
_NOT_PROSE = {"ollama", "probe", "num", "ctx", "gpu", "cpu", "mib", "gib", "kib", "yaml", "json", "modelfile", "env",
              "oomvet", "neohorse", "short", "medium", "long", "longer", "longest", "why", "status", "skip", "back",
              "lang", "quit", "kv", "cache", "reproduce", "baseline", "context", "quant", "backend", "stability", "nvidia",
              "simulated", "sim", "batch", "parallel", "latest", "flash", "attention", "true", "false", "none",
              "html", "report", "png", "md", "oom", "cuda", "nvml", "geforce", "rtx", "gtx", "radeon", "apple",  # GPU names
              "token", "tokens", "runner", "llama", "server", "length", "stop", "kl"}  # engine names, done_reason values


def english_only_lines(screen: str) -> list[str]:
    bad = []
    for line in screen.splitlines():
        text = line.strip()
        if not text or _CJK.search(text) or text.startswith(("你>", "you>", "you / 你>")):
            continue
        words = [w for w in _WORD.findall(text) if w.lower() not in _NOT_PROSE]
        if len(words) >= 2:
            bad.append(text)
    return bad


def english_words_in_chinese_lines(screen: str) -> list[str]:
    """English words inside otherwise Chinese lines: a label or a note that
    was not translated ("predicted 5.22 GiB", "问题 spilled to the CPU"). The
    greeting, printed before the language is known, invites both on purpose."""
    bad = []
    for line in screen.splitlines():
        text = line.strip()
        if not _CJK.search(text) or text.startswith(("你>", "you>", "you / 你>", "oomvet — tell me", "oomvet — 请描述")):
            continue
        bad += [f"{w}: {text}" for w in _WORD.findall(text) if w.lower() not in _NOT_PROSE]
    return bad


def test_the_english_line_detector_catches_prose_and_passes_names():
    assert english_only_lines("probe context — ok (1.0 s)\nstopped at tier long: out of memory") == [
        "stopped at tier long: out of memory"]
    assert english_only_lines("neohorse-1:q4_K_M 520.00 MiB 100% GPU ctx 4096\n模型 neohorse-1") == []
    assert english_words_in_chinese_lines("通过 是 · predicted 5.22 GiB\n峰值 5.58 GiB") == [
        "predicted: 通过 是 · predicted 5.22 GiB"]


def test_a_chinese_session_prints_no_english_only_line(tmp_path):
    rc, screen = run_chat(
        ["--simulate", str(SCENARIOS / "kv_cache.yaml"), "--out", str(tmp_path), "--settle", "0.2"],
        ["4060 8G 显存，用 neohorse-1:q4_K_M，上下文开到 32k 就 OOM，短的没问题",
         "/why", "/status", "", "", "", "否", "", "", "", "", ""], width=80)
    assert rc == 0, screen
    assert english_only_lines(screen) == [], screen
    assert english_words_in_chinese_lines(screen) == [], screen


def test_a_chinese_weights_session_says_its_spill_and_quant_columns_in_chinese(tmp_path):
    rc, screen = run_chat(
        ["--simulate", str(SCENARIOS / "weights.yaml"), "--out", str(tmp_path), "--settle", "0.2"],
        ["neohorse-1:f16 一加载就爆显存，显卡 8G，上下文 8k", *[""] * 13], width=80)
    assert "溢出到 CPU" in screen and "预测" in screen, screen
    assert english_only_lines(screen) == [], screen
    assert english_words_in_chinese_lines(screen) == [], screen
