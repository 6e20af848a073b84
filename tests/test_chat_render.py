"""The chat's drawing of probe results, notes, the server and /why, on a rich
console writing to a string, in both languages and both widths."""
from __future__ import annotations

import re

import io

import pytest
from rich.console import Console

from assistant.session import render
from common.catalog import set_lang
from probes.result import ProbeResult
from probes.ollama_api import Loaded


@pytest.fixture(params=["en", "zh"])
def lang(request):
    set_lang(request.param)
    yield request.param
    set_lang(None)


def _screen(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def _stability() -> ProbeResult:
    return ProbeResult("stability", True, rows=[{"model": "neohorse-1:latest", "num_ctx": 4096, "parallel": 1,
                                                 "tokens": 200, "peak": 475136, "errors": 0}],
                       notes=["not measured: the memory source could not see the model"], wall_s=3.2)


def _context() -> ProbeResult:
    rows = [{"tier": name, "num_ctx": ctx, "sent tokens": ctx - 100, "after load": 300 << 20, "peak": peak,
             "error": None}
            for name, ctx, peak in (("short", 2048, 310 << 20), ("medium", 8192, 420 << 20), ("long", 32768, 900 << 20))]
    return ProbeResult("context", True, rows=rows, notes=["stopped at tier long (num_ctx 32768): out of memory"],
                       wall_s=61.0)


def test_a_small_peak_is_formatted_never_raw(lang):
    screen = _screen(render.probe_result(_stability(), 100), 100)
    assert "475136" not in screen and "464.00 KiB" in screen


def test_a_one_row_result_has_no_empty_header_row(lang):
    screen = _screen(render.probe_result(_stability(), 100), 100)
    lines = [line for line in screen.splitlines() if line.strip()]
    assert lines[1].split()[0] in ("model", "模型")  # straight after the title: the first key, no blank header


def test_labels_and_notes_speak_the_session_language(lang):
    screen = _screen(render.probe_result(_context(), 120), 120)
    if lang == "zh":
        assert "探测 上下文 — 已完成" in screen and "峰值" in screen and "档位" in screen
        assert "在档位 long（num_ctx 32768）停止：显存不足" in screen
        assert "sent tokens" not in screen and "out of memory" not in screen
    else:
        assert "probe context — ran" in screen and "sent tokens" in screen
        assert "stopped at tier long (num_ctx 32768): out of memory" in screen


def test_the_rules_reading_of_each_measurement_follows_the_table_in_the_language(lang):
    readings = [{"rule": "tier_fits", "note": "tier short (2048 tokens): peak 310 MiB fits",
                 "note_zh": "档位 short（2048 token）：峰值 310 MiB，在上限内"}]
    screen = _screen(render.probe_result(_context(), 120, readings), 120)
    if lang == "zh":
        assert "判读：档位 short（2048 token）：峰值 310 MiB，在上限内" in screen and "fits" not in screen
    else:
        assert "read as: tier short (2048 tokens): peak 310 MiB fits" in screen


def test_below_100_columns_each_row_is_one_line_not_a_folded_table(lang):
    screen = _screen(render.probe_result(_context(), 80), 80)
    lines = screen.splitlines()
    start = next(i for i, line in enumerate(lines) if "8192" in line)
    row = " ".join(lines[start:start + 2])  # a long row wraps like prose, keeping "key value" pairs whole
    assert "420.00 MiB" in row.replace(" \n", "") or "420.00 MiB" in "".join(lines[start:start + 2])
    assert "│" not in screen and max(len(line) for line in lines) <= 80


def test_the_server_in_one_line_like_ollama_ps(lang):
    loaded = [Loaded(name="neohorse-1:latest", size_bytes=600 << 20, size_vram_bytes=300 << 20,
                     context_length=4096, quantization="F16")]
    line = render.ps_line(loaded)
    assert "neohorse-1:latest" in line and "600.00 MiB" in line and "50%/50% CPU/GPU" in line and "4096" in line
    assert render.ps_line([]) == ("ollama ps（探测已把服务器恢复原状之后）：没有加载任何模型" if lang == "zh"
                                  else "ollama ps, now that the probe has put the server back: nothing loaded")


def test_why_speaks_sentences_not_rule_names_or_raw_facts(lang):
    # issue 30: /why says each step in words with the rule's sentence and the method's reason
    from assistant.report.why import why_lines
    from rules.engine import Advisor

    with Advisor() as advisor:
        advisor.post_many([
            {"kind": "symptom", "phase": "long_input", "text": "long prompts crash"},
            {"kind": "target", "model": "m:1b", "want_ctx": 32768, "want_parallel": None, "budget": None},
            {"kind": "device", "name": "sim", "vendor": "nvidia", "total": 8 << 30, "used_idle": 0, "unified": False},
        ])
        chain = advisor.why()
        lines = why_lines(chain, lang)
    text = "\n".join(lines)
    assert lines[0].startswith("#1 ")
    rule = chain[0]["rule"]
    assert rule not in text and "=" not in text and "→" not in text  # no rule name, no key=value, no arrows
    sentence = chain[0]["reason_zh" if lang == "zh" else "reason"]
    assert sentence and sentence in lines[0]
    assert ("为什么这样做：" if lang == "zh" else "why this step: ") in text
    if lang == "zh":
        assert not re.search(r"[A-Za-z]{4,}", re.sub(r"KV|num_ctx|m:1b", "", text)), text


def test_every_probe_note_key_is_in_the_catalog_and_says_something_in_chinese():
    import ast
    from pathlib import Path

    import yaml

    from common.catalog import all_messages

    messages = all_messages()
    root = Path(__file__).resolve().parents[1]
    written = {node.args[0].value for path in (root / "probes").rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Note"
               and node.args and isinstance(node.args[0], ast.Constant)}
    assert "ctx.default" in written and written - set(messages) == set()
    for name in ("notes.yaml", "budget.yaml"):
        for key in yaml.safe_load((root / "common" / "messages" / "probes" / name).read_text(encoding="utf-8")):
            assert messages[key]["zh"] != messages[key]["en"], key


def test_a_keyed_note_is_said_in_chinese_with_its_inner_note_too():
    from common.catalog import set_lang
    from assistant.session.render import note
    from probes.notes import Note

    set_lang("zh")
    try:
        text = note(Note("search.best", limit="7.04 GiB", best=10240, why=Note("search.why.converged", fail=10496),
                         loads=3))
    finally:
        set_lang("en")
    assert text == "在 7.04 GiB 以内实测可行的最大 num_ctx：10240（num_ctx 10496 实测超出；共 3 次加载）"
