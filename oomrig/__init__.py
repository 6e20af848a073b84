"""oomvet's test rig: a real Ollama on loopback serving the NeoHorse-1 stand-ins.

Test-and-demo infrastructure, not part of a diagnosis: installed with the
``rig`` extra (``pip install 'oomvet[rig]'``), which brings ``gguf`` and
``numpy`` for making the stand-in files. Importing this package without them
raises ModuleNotFoundError (``oomvet diagnose --rig`` turns that into one
line). One job per module: :mod:`oomrig.paths` (versions and the cache),
:mod:`oomrig.build` (building Ollama), :mod:`oomrig.models` (the stand-in
GGUFs), :mod:`oomrig.serve` (the server and its tags, :class:`Rig`).
"""
from __future__ import annotations

from oomrig.build import check_engine, engine_binary, find_ollama
from oomrig.models import GEMMA_LEVEL, GEMMA_TAG, MODEL, TAGS, source_gguf
from oomrig.paths import (CURRENT_VERSION, LEGACY_VERSION, VERSIONS, RigError, RigPaths, default_paths,
                          default_root, resolve_version)
from oomrig.serve import Rig

__all__ = ["Rig", "RigError", "RigPaths", "CURRENT_VERSION", "LEGACY_VERSION", "VERSIONS", "TAGS", "MODEL",
           "GEMMA_TAG", "GEMMA_LEVEL", "default_paths", "default_root", "resolve_version", "find_ollama",
           "check_engine", "engine_binary", "source_gguf"]
