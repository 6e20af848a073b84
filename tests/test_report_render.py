"""The report: charts drawn by matplotlib, inline in the HTML, beside the Markdown."""
from __future__ import annotations

import base64
import io
import os
import re

import pytest

from matplotlib.image import imread

from assistant.config import build_config
from assistant.report.document import chart_png, report_files, write_report
from tests.test_config_roundtrip import GiB, MiB, sample_result

LIMIT_RED = (214, 39, 40)
CURVE_BLUE = (31, 119, 180)


def _pixels(png: bytes):
    return (imread(io.BytesIO(png))[..., :3] * 255).round()


def _has_colour(pixels, rgb, at_least=50) -> bool:
    return int((abs(pixels - rgb).sum(axis=-1) < 30).sum()) >= at_least


def test_report_writes_md_html_and_one_png_per_probe(tmp_path):
    result = sample_result()
    written = write_report(tmp_path, result, build_config(result))

    names = sorted(p.name for p in written)
    assert names == ["chart-01-baseline.png", "chart-02-context-long.png", "report.html", "report.md"]


def test_html_has_every_chart_inline_as_base64_png(tmp_path):
    result = sample_result()
    write_report(tmp_path, result, build_config(result))
    html = (tmp_path / "report.html").read_text(encoding="utf-8")

    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 2
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
    assert "<img" in html and 'src="chart-' not in html  # nothing outside the file


def test_markdown_references_the_pngs_written_beside_it(tmp_path):
    result = sample_result()
    write_report(tmp_path, result, build_config(result))
    md = (tmp_path / "report.md").read_text(encoding="utf-8")

    refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert refs == ["chart-01-baseline.png", "chart-02-context-long.png"]
    for ref in refs:
        assert (tmp_path / ref).read_bytes().startswith(b"\x89PNG")


def test_tables_of_tiers_quant_and_knob_trials_are_in_both_formats():
    result = sample_result()
    files = report_files(result, build_config(result))
    md, html = files["report.md"], files["report.html"]

    # what was measured, then the rules' reading of it (the facts hold no verdict)
    assert "| short | 2048 | 300 / 300 | 420.00 MiB | yes | tier short (2048 tokens): peak 420.0 MiB fits | — |" in md
    assert ("| long | 8192 | 7000 / 7000 | 1.15 GiB | yes | tier long (8192 tokens): out of memory, the peak 1.2 GiB "
            "passed the limit | — |") in md
    assert ("| neohorse-1:q4_1 | Q4_1 | 90.00 MiB | — | yes | neohorse-1:q4_1 (Q4_1) is not coherent: 0.9 of its "
            "4-word sequences repeat |") in md
    assert "| num_batch | 512 -> 256 | 1.07 GiB | yes | yes | num_batch = 256: peak 1.1 GiB is above the limit" in md
    assert "<td>neohorse-1:q4_1</td>" in html and "<td>512 -&gt; 256</td>" in html


def test_a_quant_trial_reads_the_memory_after_its_load_and_is_not_called_weights():
    # the reading holds the KV cache and compute buffers as well as the weights
    for lang, header in (("en", "| tag | level | after load | peak |"), ("zh", "| 标签 | 量化级别 | 加载后 | 峰值 |")):
        result = sample_result(lang=lang)
        md = report_files(result, build_config(result))["report.md"]
        assert header in md, lang


def test_why_chain_steps_and_final_config_are_in_the_report():
    result = sample_result()
    md = report_files(result, build_config(result))["report.md"]

    # the why-chain in sentences: the step in words and the rule's own sentence, no rule name, no raw fact
    assert "#1 one change, retested: short ok and long fails means the KV cache" in md
    assert "short_ok_long_fails" not in md and "answered=True" not in md
    assert "| 5 | change | num_ctx: 8192 -> 4096 | peak 1.15 GiB -> 620 MiB | yes |" in md
    assert "max_context_len: 4096" in md and "PARAMETER num_ctx 4096" in md
    assert "OLLAMA_NUM_PARALLEL=1" in md


def test_chart_draws_the_curve_and_the_limit_line():
    probe = sample_result()["probes"][1]
    pixels = _pixels(chart_png(probe))

    assert pixels.shape[1] > 600
    assert _has_colour(pixels, LIMIT_RED) and _has_colour(pixels, CURVE_BLUE)


def test_chart_without_a_limit_has_no_limit_line():
    probe = dict(sample_result()["probes"][0], limit=None)
    assert not _has_colour(_pixels(chart_png(probe)), LIMIT_RED)


def test_chart_without_samples_still_draws_its_lines():
    png = chart_png({"name": "context:long", "limit": GiB, "baseline": 0, "peak": None, "timeline": [],
                     "marks": []})
    assert png.startswith(b"\x89PNG") and _has_colour(_pixels(png), LIMIT_RED)


def test_report_for_nothing_fits_says_so_and_has_no_config_block():
    result = sample_result(config=None, verified=False, fits=False,
                           diagnosis={"cause": "weights", "summary": "weights exceed the budget",
                                      "advice": "use a Q4 tag"})
    md = report_files(result, build_config(result))["report.md"]

    assert md.startswith("# oomvet report: no config fits")
    assert "no config fits within the limit" in md and "Advice: use a Q4 tag" in md
    assert "```yaml" not in md


def test_report_in_chinese_uses_the_chinese_texts_and_reasons():
    result = sample_result(lang="zh")
    files = report_files(result, build_config(result))

    assert "## 诊断" in files["report.md"] and "短输入正常、长输入失败说明是 KV 缓存" in files["report.md"]
    assert '<html lang="zh-CN">' in files["report.html"]


def test_markdown_table_cells_escape_pipes():
    result = sample_result()
    result["facts"].append({"kind": "knob_trial", "knob": "num_parallel", "old": 1, "new": 2, "peak": 2 * MiB,
                            "ok": False, "error": "a | b"})
    md = report_files(result, build_config(result))["report.md"]
    assert "a \\| b" in md


def test_a_limit_far_above_the_curve_is_written_not_drawn_so_the_curve_stays_readable():
    from assistant.report.document import chart_png, chart_top

    MiB, GiB = 1 << 20, 1 << 30
    assert chart_top(400 * MiB, 22 * GiB) == (400 * MiB, True)
    assert chart_top(400 * MiB, 500 * MiB) == (500 * MiB, False)   # near the data: drawn
    assert chart_top(0, 22 * GiB) == (22 * GiB, False)             # nothing measured: the limit is all there is
    png = chart_png({"name": "s", "baseline": 0, "peak": 306 * MiB, "limit": 22 * GiB,
                     "timeline": [[0.0, 300 * MiB], [1.0, 306 * MiB]]})
    assert png.startswith(b"\x89PNG")


def test_a_chinese_chart_says_every_word_in_chinese_and_draws_the_fit_line():
    # issue 30: axis, legend, title and marks in the session's language; the line the verdicts use is drawn
    from assistant.report.chart import _cjk_font, chart_figure
    from rules.thresholds import fit_limit

    if _cjk_font() is None:  # scripts/setup.sh installs one, as CI runs it
        (pytest.fail if os.environ.get("CI") else pytest.skip)("no font with Chinese glyphs on this machine")
    probe = {"name": "context num_ctx 2048", "timeline": [(0, 100 << 20), (1, 300 << 20), (2, 250 << 20)],
             "baseline": 0, "peak": 300 << 20, "limit": 340 << 20, "marks": [(0.1, "load"), (1.0, "request 2")]}
    fig = chart_figure(probe, "zh")
    ax = fig.axes[0]
    words = [ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), *(x.get_text() for x in ax.texts),
             *(x.get_text() for x in ax.get_legend().get_texts())]
    assert ax.get_title() == "上下文 num_ctx 2048" and "加载" in words and "请求 2" in words
    assert any(w.startswith("合格线") for w in words)
    assert (fit_limit(340 << 20) / (1 << 20)) in [line.get_ydata()[0] for line in ax.get_lines()]
    english = [w for w in words if re.search(r"[A-Za-z]{3,}", re.sub(r"num_ctx|[KMG]iB", "", w))]
    assert english == []
