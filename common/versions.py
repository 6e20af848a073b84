"""Ollama version strings as tuples, for every room that compares versions
(probes' engine choice, the rules' table of changes)."""
from __future__ import annotations


def parse_version(version: str | None) -> tuple[int, ...]:
    """``"0.34.4"`` / ``"v0.30.11"`` -> (0, 34, 4) / (0, 30, 11); anything unreadable -> ()."""
    parts = []
    for piece in str(version or "").strip().lstrip("vV").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)
