"""Sizes as the rules' words show them, for every module of the rules
(the deciding rules and the moves they make alike)."""
from __future__ import annotations


def format_size(n: int | float | None, digits: int = 1) -> str:
    """Bytes as the notes show them: ``12.0 GiB``, ``512.0 MiB``; ``?`` unknown.
    ``digits``: decimals (two where a peak and a limit a few MiB apart are compared)."""
    if not n:
        return "?"
    n = int(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.{digits}f} {unit}"
    return f"{n} B"
