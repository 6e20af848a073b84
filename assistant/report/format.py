"""How the report is written: its blocks, as Markdown, and that Markdown as HTML.

The report is a list of small blocks (headings, paragraphs, tables, charts,
code). :func:`render_markdown` writes them once, as the ``report.md`` that
references the chart PNGs beside it; :func:`render_html` turns that same
Markdown into the self-contained ``report.html`` with markdown-it-py (the
CommonMark parser rich already brings), putting each chart inline as base64
so the page opens anywhere with nothing else. One renderer, so the two files
cannot say different things.
"""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from markdown_it.renderer import RendererHTML



@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Table:
    headers: tuple
    rows: tuple


@dataclass(frozen=True)
class Chart:
    file_name: str
    png: bytes
    alt: str
    caption: str


@dataclass(frozen=True)
class Code:
    text: str
    lang: str = ""


@dataclass(frozen=True)
class Items:
    items: tuple
    ordered: bool = True


@dataclass(frozen=True)
class Quote:
    """Lines quoted as they were said (the transcript)."""
    items: tuple


def render_markdown(blocks: Iterable) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {_md_inline(block.text)}")
        elif isinstance(block, Para):
            out.append(_md_inline(block.text))
        elif isinstance(block, Table):
            lines = ["| " + " | ".join(_md_cell(h) for h in block.headers) + " |",
                     "|" + "|".join("---" for _ in block.headers) + "|"]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            out.append("\n".join(lines))
        elif isinstance(block, Chart):
            out.append(f"![{_md_inline(block.alt)}]({block.file_name})\n\n*{_md_inline(block.caption)}*")
        elif isinstance(block, Code):
            fence = "````" if "```" in block.text else "```"
            out.append(f"{fence}{block.lang}\n{block.text.rstrip()}\n{fence}")
        elif isinstance(block, Items):
            out.append("\n".join(f"{i}. {_md_inline(x)}" if block.ordered else f"- {_md_inline(x)}"
                                 for i, x in enumerate(block.items, 1)))
        elif isinstance(block, Quote):
            out.append("\n".join(f"> {_md_inline(x)}  " for x in block.items))
    return "\n\n".join(out) + "\n"


def render_html(markdown: str, charts: Mapping[str, bytes], title: str, lang: str = "en") -> str:
    """``markdown`` as a whole HTML page; an image whose source is a key of
    ``charts`` gets that PNG inline instead of the file name."""
    from markdown_it import MarkdownIt  # here, not at import: only a written report needs it

    # raw HTML off: whatever a user typed into the transcript stays text
    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    parser.add_render_rule("image", _inline_image)
    body = parser.render(markdown, {"charts": charts})
    html_lang = "zh-CN" if lang == "zh" else "en"
    return (f'<!DOCTYPE html>\n<html lang="{html_lang}">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + body + "</body>\n</html>\n")


def _inline_image(self: "RendererHTML", tokens, idx: int, options, env: dict[str, Any]) -> str:
    token = tokens[idx]
    png = (env.get("charts") or {}).get(token.attrGet("src"))
    if png is not None:
        token.attrSet("src", "data:image/png;base64," + base64.b64encode(png).decode("ascii"))
    return self.image(tokens, idx, options, env)  # the renderer's own image rule, on the new src


def _md_inline(text: str) -> str:
    return str(text).replace("\n", " ").replace("<", "&lt;")


def _md_cell(value: Any) -> str:
    return _md_inline(str(value)).replace("|", "\\|")


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", "Noto Sans", "Noto Sans CJK SC", "Source Han Sans SC",
       "PingFang SC", "Microsoft YaHei", "WenQuanYi Micro Hei", "Droid Sans Fallback", sans-serif;
       max-width: 1040px; margin: 2em auto; padding: 0 1em; color: #1b1b1b; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #eee; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: .92em; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f3f4f6; }
tr:nth-child(even) td { background: #fafafa; }
pre { background: #f6f8fa; padding: .8em 1em; overflow-x: auto; border-radius: 4px; }
img { max-width: 100%; border: 1px solid #e5e5e5; }
p:has(> img) + p > em { color: #555; font-size: .9em; font-style: normal; }
blockquote { margin: .5em 0; padding: 0 1em; border-left: 3px solid #ddd; color: #333; }
""".strip()
