"""Issue 30: every line of a Chinese session in Chinese. Whole zh chats
against the GPU simulator, one per path of the method (the KV cache and the
context, the weights and quantization, concurrency and the backend), must
print no English word outside what stays as it is in any language: model
and file names, commands, keys, units, acronyms and the names of programs.

The greeting and the first prompt come before the language is known and
are printed in both; the count starts at the first message."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.chat_driver import run_chat

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

#: what is written the same in a Chinese sentence: names, commands, keys, units
ALLOWED = [
    r"[\w.-]+\.(?:png|yaml|md|html|env|conf|txt)\b",    # file names
    r"neohorse-1(?::[\w.]+)?",                          # the model and its tags
    r"Modelfile", r"\bout\b",                           # the files' folder
    r"\b[a-z]+(?:_[a-z0-9]+)+\b",                       # keys: num_ctx, max_context_len, kv_cache_type
    r"\bOLLAMA_[A-Z_]+\b",                              # server settings
    r"\b(?:ollama ps|ollama|Ollama|oomvet|nvml|runner|llama-server|systemctl|Ctrl-C)\b",  # programs, commands
    r"\b(?:[KMG]iB|GPU|CPU|OOM|KV|token)\b",            # units, acronyms, the word Chinese writes as is
    r"\b(?:Q\d\w*|F16|BF16|F32|f16|q8_0|q4_0)\b",      # quantization levels and cache types
]
#: and in the comments of the ready-to-apply files: commands, flags, file syntax, other programs' names
IN_FILES = [
    r"`[^`]*`", r"\bsudo [^\n]*", r"set -a;[^\n]*", r"EnvironmentFile=\S+", r"/path/to/\S+",
    r"(?<![\w-])--?[a-z][\w-]*(?: [a-z0-9][\w./|]*)?",      # flags, with the value they take
    r"\bollama create [^\n]*",
    r"\b(?:systemd|shell|Linux|macOS|GGUF|vLLM|llama\.cpp|Hugging Face|AWQ|GPTQ|fp8|flash attention|on/off/auto|FROM)\b",
]
#: and in the report: the server's address, the device's name, a config as key=value, an image's file
IN_REPORT = [r"https?://\S+", r"NVIDIA GeForce RTX \d+|\bnvidia\b", r"\b\w+=", r"\]\([^)]*\)"]
WORD = re.compile(r"[A-Za-z]{2,}")
FILES = ("Modelfile", "ollama.env", "oomvet-ollama.conf", "llama-server.txt", "vllm.txt")

CHATS = [
    ("kv_cache", "4060 8G 显存，用 neohorse-1:q4_K_M，上下文开到 32k 就 OOM，短的没问题", ["好"] * 4 + ["否"]),
    ("weights", "neohorse-1:f16 太慢了，ollama ps 显示一部分在 CPU 上，8k 上下文就够了", []),
    ("concurrency", "neohorse-1:q4_K_M 四个人同时用就爆显存，8G 显卡，上下文 4k 就行", ["好"] * 3 + ["是"]),
]


def _masked(text: str, extra: tuple[str, ...] = ()) -> str:
    """``text`` with everything allowed blanked out, each character kept in place."""
    for pattern in (*extra, *ALLOWED):
        text = re.sub(pattern, lambda m: " " * len(m.group()), text)
    return text


def english_words(text: str) -> list[str]:
    """The English words of ``text`` once everything allowed is taken out."""
    return WORD.findall(_masked(text))


def test_the_allowed_list_takes_out_names_not_sentences():
    assert english_words("已写入 2 个文件到 out：oomvet.yaml, chart-01-a.png；num_ctx 4096，7.00 GiB，ollama ps") == []
    assert english_words("错误 spilled to the CPU: only 7.21 GiB of 8.34 GiB on the GPU") == [
        "spilled", "to", "the", "only", "of", "on", "the"]


@pytest.mark.parametrize("scenario,first,replies", CHATS, ids=[c[0] for c in CHATS])
def test_a_zh_chat_prints_no_english_word(tmp_path, monkeypatch, scenario, first, replies):
    monkeypatch.chdir(tmp_path)  # the files' folder is "out": a path of the test's own is no sentence
    rc, screen = run_chat(["--simulate", str(SCENARIOS / f"{scenario}.yaml"), "--out", "out", "--settle", "0.2"],
                          [first, *replies, *["好"] * 12], width=80)
    body = re.sub(r"\s*\n\s*", " ", screen.split(first, 1)[1])  # from the first message on, unwrapped
    found = [body[max(0, m.start() - 30):m.end() + 30] for m in WORD.finditer(_masked(body))]
    assert found == [], screen
    assert rc in (0, 1), screen
    # the files the chat wrote: every comment a person reads before applying them
    comments = [line for name in FILES if (tmp_path / "out" / name).exists()
                for line in (tmp_path / "out" / name).read_text(encoding="utf-8").splitlines()
                if line.startswith("#") and not re.match(r"#\s*(?:Environment=|[A-Z_]+=)", line)]  # a setting, off
    assert len(comments) >= 15, comments
    in_files = [f"{line}: {WORD.findall(_masked(line, tuple(IN_FILES)))}" for line in comments
                if WORD.findall(_masked(line, tuple(IN_FILES)))]
    assert in_files == []
    # the report, less its code blocks (the config and the files, checked above)
    report = re.sub(r"```.*?```", "", (tmp_path / "out" / "report.md").read_text(encoding="utf-8"), flags=re.S)
    masks = (*IN_REPORT, *IN_FILES)
    in_report = [f"{line[:90]}: {WORD.findall(_masked(line, masks))}" for line in report.splitlines()
                 if WORD.findall(_masked(line, masks))]
    assert in_report == []
    _no_tofu((tmp_path / "out" / "report.html").read_text(encoding="utf-8"))


def _no_tofu(html: str) -> None:
    """Every character of the page is drawn by a font the page's CSS names
    and this machine has: no boxes where Chinese should be."""
    from fontTools.ttLib import TTCollection, TTFont
    from matplotlib import font_manager

    from assistant.report.chart import _cjk_font

    family = _cjk_font()
    if family is None:  # scripts/setup.sh installs one, as CI runs it
        (pytest.fail if os.environ.get("CI") else pytest.skip)("no font with Chinese glyphs on this machine")
    css = re.search(r"font-family:([^;]+);", html).group(1)
    assert f'"{family}"' in css, (family, css)
    path = font_manager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False)
    fonts = TTCollection(path).fonts if path.lower().endswith(".ttc") else [TTFont(path)]
    covered = set().union(*(set(f.getBestCmap()) for f in fonts))
    text = re.sub(r"<[^>]+>|data:image/png;base64,[A-Za-z0-9+/=]+", " ", html)
    missing = sorted({ch for ch in text if ord(ch) > 0x2E80 and ord(ch) not in covered})
    assert missing == [], "".join(missing)
