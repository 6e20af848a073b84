"""The only import of durable_rules, and the one name of the ruleset.

Both :mod:`rules.engine` (which runs sessions) and :mod:`rules.rulebook` (which
defines the rules) load the engine from here, so neither imports the other.
On a Python where durable_rules cannot load (3.13+), :func:`load_durable`
raises :class:`RulesUnavailable` with one line the CLI prints as it is.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

from common.errors import UserError

#: the process-global durable_rules ruleset that holds the whole tree
RULESET = "oomvet_tree"


class RulesUnavailable(UserError, ImportError):
    """Seen by whoever runs oomvet on a Python where durable_rules cannot be
    imported (3.13+): one line, exit 2. Still an ImportError for code that
    guards an import."""


def load_durable(import_module: Callable[[str], Any] = importlib.import_module):
    """``durable.lang``, or :class:`RulesUnavailable` with one clear line."""
    try:
        return import_module("durable.lang")
    except ImportError as exc:
        v = sys.version_info
        raise RulesUnavailable(
            f"durable_rules cannot be imported on Python {v.major}.{v.minor}; "
            f"oomvet needs Python 3.11 or 3.12: {exc}") from exc
