"""Errors raised from the world side (server, readers, probes).

``probes`` never imports ``assistant``, so its user-facing errors live here;
the CLI maps them, like :class:`assistant.errors.OomvetError`, to one line and
``exit_code``.
"""
from __future__ import annotations


class ProbeError(Exception):
    """A problem a user can act on, found while touching the world; one line."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class ServerUnreachableError(ProbeError):
    """The Ollama server did not answer; exit code 3."""

    exit_code = 3


class ModelNotFoundError(ProbeError):
    """The model tag is not on the server (and we never pull unless told)."""


class ProbeTimeout(ProbeError):
    """A probe ran past its timeout; what it changed has been restored."""

    exit_code = 1
