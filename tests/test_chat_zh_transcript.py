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
              "lang", "quit", "kv", "cache", "baseline", "context", "quant", "backend", "stability", "nvidia",
              "simulated", "sim", "batch", "parallel", "latest", "flash", "attention", "true", "false", "none",
              "html", "report", "png", "md", "oom", "cuda", "geforce", "rtx", "gtx", "radeon", "apple"}  # GPU names


def english_only_lines(screen: str) -> list[str]:
    bad = []
    for line in screen.splitlines():
        text = line.strip()
        if not text or _CJK.search(text) or text.startswith(("你>", "you>")):
            continue
        words = [w for w in _WORD.findall(text) if w.lower() not in _NOT_PROSE]
        if len(words) >= 2:
            bad.append(text)
    return bad


def test_the_english_line_detector_catches_prose_and_passes_names():
    assert english_only_lines("probe context — ok (1.0 s)\nstopped at tier long: out of memory") == [
        "stopped at tier long: out of memory"]
    assert english_only_lines("neohorse-1:q4_K_M 520.00 MiB 100% GPU ctx 4096\n模型 neohorse-1") == []


def test_a_chinese_session_prints_no_english_only_line(tmp_path):
    rc, screen = run_chat(
        ["--simulate", str(SCENARIOS / "kv_cache.yaml"), "--out", str(tmp_path), "--settle", "0.2"],
        ["4060 8G 显存，用 neohorse-1:q4_K_M，上下文开到 32k 就 OOM，短的没问题",
         "/why", "/status", "", "", "否", "", "", "", "", ""], width=80)
    assert rc == 0, screen
    assert english_only_lines(screen) == [], screen
