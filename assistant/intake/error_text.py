"""The error text a user quotes from Ollama, llama.cpp, CUDA or PyTorch, and
the quoted spans that other readers must not take numbers from. The texts the
tools print are data (``lexicon/errors.yaml``, each with an example); how a
quote or a fragment is found, and where it ends, is here."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from assistant.intake.text import ICASE


# Quoted spans: code fences, backticks, straight and curly double quotes, CJK
# corner brackets. Single quotes only when they are not apostrophes ("can't").
QUOTES = [
    re.compile(r"```[^\n`]*\n(.*?)```", re.S),
    re.compile(r"`([^`\n]{3,400})`"),
    re.compile(r'"([^"\n]{3,400})"'),
    re.compile(r"“([^”\n]{3,400})”"),
    re.compile(r"「([^」\n]{3,400})」"),
    re.compile(r"『([^』\n]{3,400})』"),
    re.compile(r"‘([^’\n]{3,400})’"),
    re.compile(r"(?<!\w)'([^'\n]{3,400})'(?!\w)", re.ASCII),
]

_ERRORISH = re.compile(
    r"error|fail|out of memory|\boom\b|terminated|unable to|cannot|can't|panic|assert|"
    r"exception|killed|segmentation|abort|timed out|not found|requires more|stopped|"
    r"exit status|exceeded|no longer running|\bEOF\b|connection (?:reset|refused)|报错|错误|失败|"
    r"\bollama:\s*50\d\b|\bHTTP(?:/[\d.]+)?\s*50\d\b|\bstatus(?:\s+code)?:?\s*50\d\b",
    ICASE,
)

@dataclass(frozen=True)
class KnownError:
    """An error text Ollama, llama.cpp, CUDA or PyTorch prints (``lexicon/errors.yaml``)."""

    pattern: re.Pattern
    keep_tail: bool            # the message goes on after the fragment ("...has terminated: exit status 2")
    examples: tuple[str, ...]  # texts the pattern must find
    generic: bool = False      # says only that a request failed ("500 Internal Server Error"): any other known text wins


def _known_errors() -> tuple[KnownError, ...]:
    data = yaml.safe_load((Path(__file__).parent / "lexicon" / "errors.yaml").read_text(encoding="utf-8"))
    return tuple(KnownError(re.compile(row["pattern"], ICASE), bool(row.get("keep_tail", False)), tuple(row["examples"]),
                            bool(row.get("generic", False)))
                 for row in data["errors"])


KNOWN_ERRORS = _known_errors()

# Where a quoted message stops when the user carries on in prose.
_TAIL_STOP = re.compile(
    r"\n|[\u3400-\u9fff]|[。，；！？\"”」』`]|,\s+(?=[a-z]+\s)(?!\s*(?:current device|in function))"
    # a comma with no space after it is a (normalised) full-width one: prose ("exit status 2，windows 系统");
    # "allocating 8,991 MiB" keeps its digits
    r"|,(?=[^\s\d])"
    r"|[.!?](?=\s|$)"
    # the model it happened with: "exit status 2 with deepseek-r1:7b"
    r"|\s+(?:with|using|for|running)\s+(?=[a-z][\w.-]*:[a-z0-9])"
    r"|\s+(?:when|whenever|after|if|while|once|as soon as|every time|each time|but|and then|and it|"
    r"so|because|on my|with my|although|though|any idea|any ideas|how|what|why|please|help|even|"
    r"anyone|thanks|on (?:windows|linux|macos|mac|ubuntu|wsl|my|our))\b",
    ICASE,
)
_ERROR_LINE = re.compile(r"(?:^|(?<=\s)|(?<=[:>]))(?:Error|错误|报错)\s*:\s*(?=[A-Za-z])", ICASE)
# an error said after "报" in Chinese prose, unquoted: "报 out of memory", "直接报错 unexpected EOF"
_ZH_SAYS = re.compile(r"报(?:错|了)?\s*:?\s*(?=[A-Za-z])")


def _tail_end(text: str, pos: int) -> int:
    m = _TAIL_STOP.search(text, pos)
    return m.start() if m else len(text)


def _clean_error(s: str) -> str:
    return s.strip().strip(" .,;:'\"").strip()


def find_error(text: str) -> tuple[str | None, list[tuple[int, int]]]:
    """The error text the user quoted, and the spans to hide from number parsing.

    A quoted span that holds a known Ollama/CUDA fragment wins; then any quoted
    span that reads like an error; then the earliest known fragment in the
    prose, with its tail; then an ``Error: ...`` line.
    """
    quoted: list[tuple[int, int, str]] = []
    for rx in QUOTES:
        for m in rx.finditer(text):
            quoted.append((m.start(), m.end(), m.group(1)))
    quoted.sort()
    spans = [(s, e) for s, e, q in quoted if _ERRORISH.search(q)]

    def known_in(s: str):
        hits = sorted(((m.start(), m, k.keep_tail, k.generic) for k in KNOWN_ERRORS for m in [k.pattern.search(s)] if m),
                      key=lambda h: h[0])
        if not hits:
            return None
        start, m, tail, generic = hits[0]
        # "a 500 Internal Server Error, and the log says CUDA error: out of memory": the specific text is
        # the error, unless it is the generic one's own tail ("500 Internal Server Error: llama runner ...")
        if generic:  # its tail is Ollama's own text only after a colon
            tail = tail and m.group(0).endswith(":")
            end = _tail_end(s, m.end()) if tail else m.end()
            specific = [h for h in hits if not h[3] and h[0] >= end]
            if specific:
                return specific[0][:3]
        return start, m, tail

    for start, end, q in quoted:
        hit = known_in(q)
        if hit:
            # inside quotes the user chose the extent: keep the rest of that line
            line_end = q.find("\n", hit[0])
            return _clean_error(q[hit[0]:line_end if line_end >= 0 else len(q)]), spans + [(start, end)]
    for _start, _end, q in quoted:
        # a bare `EOF` is all some clients print
        if _ERRORISH.search(q) and (len(q.strip()) >= 6 or q.strip().upper() == "EOF"):
            return _clean_error(q), spans

    hit = known_in(text)
    if hit:
        start, m, tail = hit
        end = _tail_end(text, m.end()) if tail else m.end()
        err = _clean_error(text[start:end])
        if err:
            return err, spans + [(start, end)]
    m = _ERROR_LINE.search(text)
    if m:
        end = _tail_end(text, m.end())
        err = _clean_error(text[m.end():end])
        if len(err) >= 4:
            return err, spans + [(m.start(), end)]
    for m in _ZH_SAYS.finditer(text):
        end = _tail_end(text, m.end())
        err = _clean_error(text[m.end():end])
        if len(err) >= 4 and _ERRORISH.search(err):
            return err, spans + [(m.end(), end)]
    return None, spans
