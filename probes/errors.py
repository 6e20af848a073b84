"""Errors raised from the world side (server, readers, probes), and the root
of every error a user sees.

``probes`` never imports ``assistant``, so the root of the one hierarchy,
:class:`UserError`, lives here: :class:`ProbeError` (the world side) and
:class:`assistant.errors.OomvetError` (everything else) both derive from it,
and the CLI turns any ``UserError`` into one line and its ``exit_code``.
"""
from __future__ import annotations


class UserError(Exception):
    """A problem the user can act on: one line, an optional hint, an exit code."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class ProbeError(UserError):
    """A problem a user can act on, found while touching the world; one line."""


class ServerUnreachableError(ProbeError):
    """The Ollama server did not answer; exit code 3."""

    exit_code = 3


class ModelNotFoundError(ProbeError):
    """The model tag is not on the server (and we never pull unless told)."""


class ProbeTimeout(ProbeError):
    """A probe ran past its timeout; what it changed has been restored."""

    exit_code = 1
