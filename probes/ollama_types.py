"""What Ollama's API answers, as oomvet's values: a model's one spelling
(:func:`canonical_name`), a row of ``/api/ps`` (:class:`Loaded`), the outcome
of a request (:class:`Generation`) and ``/api/show`` (:class:`ModelShow`).
Plain data, so every room can hold them; :mod:`probes.ollama_api` makes them
(and re-exports them, as callers import them from there).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from probes.oomtext import Failure, classify, is_oom_text


def canonical_name(name: str) -> str:
    """The one spelling of a model name every comparison uses: ``llama3.2`` is
    ``llama3.2:latest``, and the default registry's prefix is dropped
    (``registry.ollama.ai/library/qwen3:8b`` is ``qwen3:8b``), as Ollama itself
    resolves names. Case is folded: Ollama treats names case-insensitively."""
    text = (name or "").strip().lower()
    for prefix in ("registry.ollama.ai/library/", "registry.ollama.ai/"):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    last = text.rsplit("/", 1)[-1]
    return text if ":" in last else f"{text}:latest"


@dataclass(frozen=True)
class Loaded:
    """One row of ``ollama ps`` / ``GET /api/ps``: an estimate on the legacy
    runner, llama-server's own buffer totals on the current engine."""

    name: str
    size_bytes: int
    size_vram_bytes: int
    context_length: int | None
    quantization: str | None
    digest: str | None = None

    @property
    def placement(self) -> str:
        return placement_of(self.size_bytes, self.size_vram_bytes)


def placement_of(size_bytes: int, size_vram_bytes: int) -> str:
    """``ollama ps``'s PROCESSOR column in a word: "gpu" (100% GPU), "partial"
    (spilled to the CPU: a memory shortage too) or "cpu"."""
    if size_vram_bytes <= 0:
        return "cpu"
    return "gpu" if size_vram_bytes >= size_bytes else "partial"


@dataclass(frozen=True)
class Generation:
    """The outcome of one request (``ollama run`` / ``POST /api/generate``)."""

    ok: bool
    text: str = ""
    done_reason: str | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None
    duration_s: float = 0.0
    status: int | None = 200  # HTTP status; -1 for an error inside a 200 stream
    error: str | None = None
    #: seconds the server spent loading the model for this request (its ``load_duration``):
    #: near zero when the model was already resident, so a large one is a (re)load
    load_s: float | None = None

    @property
    def oom(self) -> bool:
        """The error text alone says memory ran out (see :meth:`failure` to add log lines)."""
        return not self.ok and is_oom_text(self.error)

    def failure(self, log_lines=(), phase: str | None = None) -> Failure | None:
        """What kind of failure this was, with the server log lines of this
        load or request as evidence; None when it succeeded."""
        return None if self.ok else classify(self.error, log_lines, phase)


@dataclass(frozen=True)
class ModelShow:
    """``ollama show`` / ``POST /api/show``: metadata the memory model needs."""

    name: str
    quantization: str | None
    family: str | None
    parameter_size: str | None
    model_info: dict = field(default_factory=dict)
    parameters: str = ""
    tensors: list = field(default_factory=list)  # ``{name, type, shape}`` rows; only from a verbose show
    #: what the model can do (``completion``, ``embedding``, ``vision`` ...); empty when the server does not say
    capabilities: tuple = ()

    @property
    def embedding_only(self) -> bool:
        """An embedding model: it answers ``/api/embed``, and ``/api/generate`` refuses it."""
        return "embedding" in self.capabilities and "completion" not in self.capabilities

    @property
    def context_length(self) -> int | None:
        arch = self.model_info.get("general.architecture")
        value = self.model_info.get(f"{arch}.context_length")
        return int(value) if value else None
