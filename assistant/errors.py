"""Small exceptions the CLI turns into one clear line and an exit code.

Every room raises these (or a subclass) for problems a user can fix; the CLI
in :mod:`assistant.cli` is the only place that prints them. Anything else is
a bug and keeps its traceback.
"""
from __future__ import annotations

from probes.errors import ServerUnreachableError, UserError

EXIT_OK = 0          # done, config verified
EXIT_NO_FIT = 1      # no config fits; best finding reported
EXIT_USAGE = 2       # bad usage or input
EXIT_UNREACHABLE = 3  # the Ollama server cannot be reached


class OomvetError(UserError):
    """A problem the user can act on; shown as one line. Subclasses set the exit code."""

    exit_code = EXIT_USAGE


class UsageError(OomvetError):
    """Bad flags, a bad budget string, a malformed answers or scenario file."""


class ServerUnreachable(OomvetError, ServerUnreachableError):
    """The Ollama server did not answer at the host we were given (found outside
    the probes, e.g. by ``ollama create``); the probes' own is its base."""

    exit_code = EXIT_UNREACHABLE


class DependencyError(OomvetError):
    """A required library cannot be imported (e.g. durable_rules on Python 3.13+)."""


class JournalError(OomvetError):
    """The journal cannot be opened or written (full disk, read-only folder,
    a newer schema): one line, exit 2; nothing journalled before is lost."""
