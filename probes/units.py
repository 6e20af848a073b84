"""Sizes as people write them, and back.

One parser for every size a user or a scenario file gives (``6GiB``,
``600MiB``, ``7.5G``, ``4.58GiB``, ``123456`` bytes) so that ``--budget``,
answers files and simulator scenarios agree on what a number means. ``G`` and
``GB`` are read as GiB, as nvidia-smi and Ollama print them.
"""
from __future__ import annotations

import re

from common.errors import ProbeError

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]*)\s*$")


class SizeError(ProbeError, ValueError):
    """A size string that cannot be read; the CLI shows it as one line."""


def parse_size(text: str | int | float) -> int:
    """``"7.5G"`` -> 8053063680. Plain numbers are bytes. Raises SizeError."""
    if isinstance(text, bool):
        raise SizeError(f"not a size: {text!r}")
    if isinstance(text, (int, float)):
        if text < 0:
            raise SizeError(f"a size cannot be negative: {text!r}")
        return int(text)
    m = _SIZE.match(str(text))
    if not m:
        raise SizeError(f"not a size: {text!r} (try 6GiB, 600MiB, 7.5G)")
    number, unit = float(m.group(1)), m.group(2).lower()
    if unit not in _UNITS:
        raise SizeError(f"unknown size unit {m.group(2)!r} in {text!r} (use KiB, MiB, GiB)")
    value = int(round(number * _UNITS[unit]))
    if value <= 0:
        raise SizeError(f"a size must be more than zero: {text!r}")
    return value


def fmt_size(n: int | float | None, digits: int = 2) -> str:
    """Bytes -> ``"1.25 GiB"`` (``digits`` decimals; Ollama's own log lines
    use one, ``"1.2 GiB"``); None -> ``"n/a"``."""
    if n is None:
        return "n/a"
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.{digits}f} {unit}"
        n /= 1024
    return f"{sign}{n:.2f} TiB"  # pragma: no cover - loop always returns
