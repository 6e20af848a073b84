"""The rules' sentences, read once from ``sentences.yaml`` beside this module.

Every rule's sentence (English and Chinese) is keyed by the rule's name there,
the findings by the rule that records them, and every piece of advice by its
key; the rule modules hold no sentence themselves. A rule the catalog lacks
fails the import (:func:`sentence` raises).
"""
from __future__ import annotations

from pathlib import Path

import yaml

_CATALOG = yaml.safe_load((Path(__file__).with_name("sentences.yaml")).read_text(encoding="utf-8"))

#: rule name -> (en, zh)
SENTENCES: dict[str, tuple[str, str]] = {name: (s["en"], s["zh"]) for name, s in _CATALOG["rules"].items()}
#: what to do instead, when the answer is not (only) a config: advice key -> (en, zh)
ADVICE: dict[str, tuple[str, str]] = {key: (s["en"], s["zh"]) for key, s in _CATALOG["advice"].items()}
#: rule name -> the templates of the finding it records: the finding itself
#: (``finding(rule)``) and the parts it is put together from (``finding(rule, part)``)
FINDINGS: dict[str, dict] = _CATALOG["findings"]


def sentence(rule: str) -> tuple[str, str]:
    """``(en, zh)`` for ``rule``; a rule the catalog lacks is a defect here."""
    try:
        return SENTENCES[rule]
    except KeyError:
        raise KeyError(f"rules/sentences.yaml has no sentence for rule {rule!r}") from None


def finding(rule: str, part: str | None = None) -> tuple[str, str]:
    """``(en, zh)`` templates of the finding ``rule`` records, or of one ``part`` of it."""
    entry = FINDINGS[rule] if part is None else FINDINGS[rule][part]
    return entry["en"], entry["zh"]
