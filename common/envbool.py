"""How Ollama reads a boolean server variable (``envconfig.Bool`` on v0.11.4
and v0.34.4 alike), for every room that must read one as the server does."""
from __future__ import annotations

#: the spellings Go's ``strconv.ParseBool`` reads as false
FALSE_WORDS = ("0", "f", "F", "false", "False", "FALSE")


def env_on(value) -> bool:
    """Whether a boolean server variable is on: unset or empty is off; a value
    ``strconv.ParseBool`` reads as false is off; anything else is on, "off"
    and "no" included (Ollama counts a value ParseBool cannot read as true).
    Spaces and quotes around the value are dropped first, as ``envconfig.Var``
    does."""
    text = str(value if value is not None else "").strip().strip("\"'")
    return text != "" and text not in FALSE_WORDS
