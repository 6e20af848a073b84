"""The views of a message its readers see.

- ``numbers``: the message in its normal form with the quoted error, digit
  runs no size could have (hashes, pasted tensors) and the model name
  blanked, so "phi3:3.8b-mini-128k" or "(44.8 GiB)" inside an error is not
  read as a context or a budget. The cues, the learned *when* (an error text
  says what failed, not when: read whole, "runner process has terminated"
  taught it "at load") and the learned budget ranker read this.
- ``unnamed``: the message with only the model name blanked (a name says
  neither when nor what happened); the learned *what* reads it, error and all.

The parser and the learned readers' training both read messages through
:func:`scrub`, so each reader learns from the view it will be asked about."""
from __future__ import annotations

import re
from typing import NamedTuple

from assistant.intake.error_text import find_error
from assistant.intake.model_names import find_model
from assistant.intake.text import blank, normalise

# no size, context or count has 16 digits; hiding such runs also keeps every
# number pattern linear in the length of a paste
_LONG_DIGITS = re.compile(r"\d{16,}")


class Scrubbed(NamedTuple):
    norm: str                 # the whole message, normalised
    error: str | None         # the quoted error text
    model: str | None
    model_sure: bool          # the name was quoted, tagged or known to the server
    numbers: str              # norm with the error, long digit runs and the model name blanked
    unnamed: str              # norm with the model name blanked


def scrub(original: str, tags: tuple[str, ...] = ()) -> Scrubbed:
    norm = normalise(original)
    error, error_spans = find_error(norm)
    scrubbed = blank(norm, error_spans + [m.span() for m in _LONG_DIGITS.finditer(norm)])
    model, model_spans, model_sure = find_model(scrubbed, tags)
    return Scrubbed(norm, error, model, model_sure, blank(scrubbed, model_spans), blank(norm, model_spans))
