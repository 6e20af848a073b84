"""Every error a user sees, and the exit codes the command line returns.

Each room raises these (or a subclass) for problems a user can fix:
``probes`` and ``oomrig`` while touching the world, ``assistant`` for flags,
files and the journal, ``rules`` when its engine cannot load. They live here,
in the leaf package, because ``probes`` never imports ``assistant`` and
``rules`` imports neither. :mod:`assistant.cli` is the only place that prints
them: one line, an optional hint, and ``exit_code``. Anything else is a bug
and keeps its traceback.
"""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What ``oomvet`` returns to the shell (and the journal records)."""

    OK = 0            # done, config verified
    NO_FIT = 1        # no config fits, or a probe failed or timed out; best finding reported
    USAGE = 2         # bad usage or input; any user error without a code of its own
    UNREACHABLE = 3   # the Ollama server cannot be reached
    INTERRUPTED = 130  # Ctrl-C or a plain kill (128 + SIGINT, as shells report it)


class UserError(Exception):
    """The root: a problem the user can act on, printed by the CLI as one line, an optional hint and its exit code."""

    exit_code: int = ExitCode.USAGE

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class UsageError(UserError):
    """Seen at the command line: bad flags, a bad budget string, a malformed answers, config or scenario file."""


class DependencyError(UserError):
    """Seen by whoever runs a feature whose library is missing (e.g. the rig without the ``rig`` extra)."""


class JournalError(UserError):
    """Seen when the journal cannot be opened or written (full disk, read-only folder, a newer schema);
    nothing journalled before is lost."""


class ProbeError(UserError):
    """Seen when touching the world fails in a way the user can fix (server, device, model, rig)."""


class ServerUnreachable(ProbeError):
    """Seen when the Ollama server does not answer at the host we were given, by a probe or by ``ollama create``."""

    exit_code = ExitCode.UNREACHABLE


class ModelNotFoundError(ProbeError):
    """Seen when the model tag is not on the server (and we never pull unless told)."""


class ProbeTimeout(ProbeError):
    """Seen when a probe runs past its timeout; what it changed has been restored."""

    exit_code = ExitCode.NO_FIT
