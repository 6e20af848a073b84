"""The report's charts: memory over time for one probe, as a PNG.

Each probe gets a chart with its baseline, peak and limit lines, the part of
the curve over the limit in red and the probe's marks (load, request) as
vertical lines, drawn by matplotlib's Agg canvas (no display, no global
backend switch). :mod:`assistant.report.document` puts the PNGs beside report.md and
inline in report.html.
"""
from __future__ import annotations

import io
from functools import lru_cache
from typing import Any, Mapping

from common.catalog import t
from probes.units import fmt_size
from rules.facts import PROBES
from rules.thresholds import fit_limit


_CJK_FONTS = ("Noto Sans CJK", "Noto Serif CJK", "Source Han", "WenQuanYi", "Droid Sans Fallback",
              "AR PL", "Noto Sans SC", "SimHei", "Microsoft YaHei", "PingFang", "Heiti")
#: the same fonts as their files are named (lower case, no - or _)
_CJK_FILES = ("notosanscjk", "notoserifcjk", "sourcehan", "wqy", "droidsansfallback", "uming", "ukai", "simhei",
              "msyh", "pingfang")


#: a limit more than this many times the chart's highest value is written, not drawn
LIMIT_OFF_CHART_RATIO = 2.0


def chart_top(data_top: float, limit: float | None) -> tuple[float, bool]:
    """The y axis's top, and whether the limit is off the chart. A limit far
    above the data (a 22 GiB card under a 400 MiB curve) would flatten the
    curve to a line: the axis then follows the data and the limit is written
    at the top edge instead of drawn."""
    limit_off = limit is not None and data_top > 0 and limit > data_top * LIMIT_OFF_CHART_RATIO
    if limit is None or limit_off:
        return (data_top or 1), limit_off
    return max(data_top, limit), False


def chart_title(name: str, lang: str) -> str:
    """A chart's name ("context num_ctx 2048") with the probe's name in ``lang``."""
    first, _, rest = name.partition(" ")
    return f"{t(f'probe.name.{first}', lang)} {rest}".strip() if first in PROBES else name


def _mark(label: str, lang: str) -> str:
    """A probe's mark ("load", "check") in ``lang``."""
    word, _, n = label.partition(" ")
    return f"{t(f'chart.mark.{word}', lang)} {n}".strip() if word in MARKS else label


#: the marks the probes put on a timeline (``chart.mark.<word>`` in the catalog)
MARKS = ("load", "request", "settle", "done", "check")


def chart_png(probe: Mapping[str, Any], lang: str = "en") -> bytes:
    """A PNG of memory over time for one probe, with baseline, peak, limit and fit lines."""
    fig = chart_figure(probe, lang)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def chart_figure(probe: Mapping[str, Any], lang: str = "en"):
    """The chart as a matplotlib Figure (on an Agg canvas), every word in
    ``lang`` when a font with its glyphs is here."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    font = _cjk_font() if lang == "zh" else None
    if lang == "zh" and font is None:
        lang = "en"  # no CJK glyphs here: English labels beat empty boxes
    timeline = [(float(p[0]), float(p[1])) for p in (probe.get("timeline") or []) if p and len(p) >= 2]
    baseline, peak, limit = probe.get("baseline"), probe.get("peak"), probe.get("limit")
    if peak is None and timeline:
        peak = max(v for _, v in timeline)
    data = [v for _, v in timeline] + [x for x in (baseline, peak) if x is not None]
    top, limit_off = chart_top(max(data) if data else 0, limit)
    unit, scale = ("GiB", float(1 << 30)) if top >= 2 * (1 << 30) else ("MiB", float(1 << 20))

    fig = Figure(figsize=(9.5, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    text_kw = {"fontfamily": font} if font else {}
    if timeline:
        xs = [x for x, _ in timeline]
        ys = [y / scale for _, y in timeline]
        ax.plot(xs, ys, color="#1f77b4", linewidth=1.6, label=t("chart.used", lang))
        ax.fill_between(xs, ys, color="#1f77b4", alpha=0.12)
        if limit is not None:  # the part over the limit is the finding: make it red
            ax.fill_between(xs, ys, limit / scale, where=[y > limit / scale for y in ys],
                            color="#d62728", alpha=0.25, interpolate=True)
        # the dot sits on the counted peak (a release check after it may draw higher, uncounted)
        i_peak = (min(range(len(timeline)), key=lambda i: abs(timeline[i][1] - peak)) if peak is not None
                  else max(range(len(timeline)), key=lambda i: timeline[i][1]))
        ax.plot([xs[i_peak]], [ys[i_peak]], marker="o", color="#ff7f0e", markersize=6)
        x_end = xs[-1] if xs[-1] > xs[0] else xs[0] + 1.0
        ax.set_xlim(xs[0], x_end)
    else:
        ax.text(0.5, 0.5, t("chart.no_samples", lang), transform=ax.transAxes, ha="center",
                va="center", color="#777777", **text_kw)
        ax.set_xlim(0, 1)
    if baseline is not None:
        ax.axhline(baseline / scale, color="#555555", linestyle="--", linewidth=1.1,
                   label=t("chart.baseline", lang, size=fmt_size(baseline)))
    if peak is not None:
        ax.axhline(peak / scale, color="#ff7f0e", linestyle=":", linewidth=1.6,
                   label=t("chart.peak", lang, size=fmt_size(peak)))
    if limit is not None and not limit_off:
        ax.axhline(limit / scale, color="#d62728", linestyle="-", linewidth=1.6,
                   label=t("chart.limit", lang, size=fmt_size(limit)))
        # the line the verdicts use: a peak must stay under the limit less the margin
        line = fit_limit(int(limit))
        ax.axhline(line / scale, color="#d62728", linestyle="--", linewidth=1.0, alpha=0.8,
                   label=t("chart.fit_line", lang, size=fmt_size(line)))
    elif limit_off:
        ax.annotate(t("chart.limit_above", lang, size=fmt_size(limit)), xy=(0.99, 0.985), xycoords="axes fraction",
                    ha="right", va="top", fontsize=8, color="#d62728", **text_kw)
    x_lo, x_hi = ax.get_xlim()
    span = (x_hi - x_lo) or 1.0
    last_x, level = None, 0
    for mark in sorted((m for m in probe.get("marks") or [] if m and len(m) >= 2), key=lambda m: float(m[0])):
        x = float(mark[0])
        ax.axvline(x, color="#999999", linewidth=0.8, alpha=0.8)
        # marks close together (load, then request) get their labels on separate rows
        level = level + 1 if last_x is not None and (x - last_x) < 0.08 * span else 0
        last_x = x
        near_right = (x - x_lo) > 0.92 * span
        ax.annotate(_mark(str(mark[1]), lang), xy=(x, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(-2 if near_right else 2, -10 - 10 * (level % 3)), textcoords="offset points",
                    ha="right" if near_right else "left", fontsize=8, color="#444444", **text_kw)
    ax.set_ylim(0, (top / scale) * 1.12 if top else 1)
    ax.set_xlabel(t("chart.time", lang), **text_kw)
    # probes chart the model's own usage (reading minus the idle one): baseline 0
    ylabel = "chart.memory_above_idle" if baseline == 0 else "chart.memory"
    ax.set_ylabel(t(ylabel, lang, unit=unit), **text_kw)
    ax.set_title(chart_title(str(probe.get("name") or "probe"), lang), fontsize=11, **text_kw)
    ax.grid(True, alpha=0.25)
    legend_kw = {"prop": {"family": font}} if font else {}
    # beside the plot, so it never hides the curve
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.9, **legend_kw)
    fig.tight_layout()
    return fig


@lru_cache(maxsize=1)
def _cjk_font() -> str | None:
    """A font family with Chinese glyphs, if the machine has one: one
    matplotlib knows, else a system font file it has not listed (its font
    cache may predate the font's install), added by path."""
    from matplotlib import font_manager
    for entry in font_manager.fontManager.ttflist:
        if any(name.lower() in entry.name.lower() for name in _CJK_FONTS):
            return entry.name
    for path in sorted(font_manager.findSystemFonts()):
        if any(part in path.lower().replace("-", "").replace("_", "") for part in _CJK_FILES):
            try:
                font_manager.fontManager.addfont(path)
                return font_manager.FontProperties(fname=path).get_name()
            except (OSError, RuntimeError, ValueError):
                continue  # a file it cannot read: the next one
    return None
