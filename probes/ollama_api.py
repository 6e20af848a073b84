"""The one place oomvet talks to an Ollama server.

All traffic goes through the official ``ollama`` client; a raw request is
used only where the client lacks the call (``/api/version``) or drops a field
(``/api/show`` tensors). Server errors become small result values carrying
Ollama's own error text, because an out-of-memory answer is a finding, not a
crash; only an unreachable server is raised, as ServerUnreachableError.
"""
from __future__ import annotations


import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import httpx
import ollama

from probes.errors import ModelNotFoundError, ProbeError, ServerUnreachableError

# texts that mean memory ran out, from Ollama (v0.11.x) and the CUDA/ROCm/Metal runtimes
OOM_MARKERS = (
    "out of memory",
    "cudamalloc failed",
    "unable to allocate",
    "requires more system memory",
    "failed to allocate",
    "insufficient memory",
    "not enough memory",
    "hipmalloc",
    "kIOGPUCommandBufferCallbackErrorOutOfMemory".lower(),
    "resource limitations",
)


def is_oom_text(text: str | None) -> bool:
    """Does an error text from Ollama or the GPU runtime say memory ran out?"""
    low = (text or "").lower()
    return any(marker in low for marker in OOM_MARKERS)


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
        if self.size_vram_bytes <= 0:
            return "cpu"
        return "gpu" if self.size_vram_bytes >= self.size_bytes else "partial"


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

    @property
    def oom(self) -> bool:
        return not self.ok and is_oom_text(self.error)


@dataclass(frozen=True)
class ModelShow:
    """``ollama show`` / ``POST /api/show``: metadata the memory model needs."""

    name: str
    quantization: str | None
    family: str | None
    parameter_size: str | None
    model_info: dict = field(default_factory=dict)
    parameters: str = ""

    @property
    def context_length(self) -> int | None:
        arch = self.model_info.get("general.architecture")
        value = self.model_info.get(f"{arch}.context_length")
        return int(value) if value else None


class Ollama:
    """A thin wrapper over :class:`ollama.Client` for one server."""

    def __init__(self, host: str, timeout_s: float = 600.0, client: ollama.Client | None = None):
        self.host = host.rstrip("/")
        self.client = client or ollama.Client(host=self.host, timeout=timeout_s)

    # -- reading -------------------------------------------------------------
    def version(self) -> str:
        """``curl HOST/api/version``; raises ServerUnreachableError."""
        return self._call(lambda: self.client._request_raw("GET", "/api/version").json()["version"])

    def tags(self) -> list[str]:
        """``ollama list``: every model name on the server."""
        return [m.model for m in self._call(self.client.list).models]

    def digests(self) -> dict[str, str]:
        """``ollama list``'s ID column: canonical name -> digest."""
        return {canonical_name(m.model): m.digest for m in self._call(self.client.list).models if m.digest}

    def file_size(self, model: str) -> int | None:
        """``ollama list``'s SIZE column for ``model``: the weights file's bytes."""
        want = canonical_name(model)
        return next((int(m.size) for m in self._call(self.client.list).models
                     if canonical_name(m.model) == want and m.size), None)

    def same_model(self, a: str, b: str, digests: dict[str, str] | None = None) -> bool:
        """One model under two names: the same canonical name, or two tags of
        one digest (``neohorse-1:latest`` copied from ``neohorse-1:f16``)."""
        ca, cb = canonical_name(a), canonical_name(b)
        if ca == cb:
            return True
        digests = self.digests() if digests is None else digests
        return ca in digests and digests.get(ca) == digests.get(cb)

    def show(self, model: str) -> ModelShow:
        """``ollama show MODEL``; raises ModelNotFoundError."""
        try:
            resp = self._call(lambda: self.client.show(model))
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise ModelNotFoundError(f"model {model!r} is not on the server at {self.host}",
                                         hint=f"ollama pull {model}  (oomvet never pulls on its own)") from None
            raise ProbeError(f"ollama show {model}: {exc.error}") from None
        details = resp.details
        return ModelShow(name=model, quantization=details.quantization_level if details else None,
                         family=details.family if details else None,
                         parameter_size=details.parameter_size if details else None,
                         model_info=dict(resp.modelinfo or {}), parameters=resp.parameters or "")

    def ps(self) -> list[Loaded]:
        """``ollama ps``: loaded models with Ollama's size / size_vram estimate."""
        out = []
        for m in self._call(self.client.ps).models:
            out.append(Loaded(name=m.model, size_bytes=int(m.size or 0), size_vram_bytes=int(m.size_vram or 0),
                              context_length=getattr(m, "context_length", None),
                              quantization=m.details.quantization_level if m.details else None,
                              digest=getattr(m, "digest", None) or None))
        return out

    def loaded(self, model: str) -> Loaded | None:
        """The ``/api/ps`` row of ``model`` under any of its names (a bare name,
        its ``:latest``, or another tag of the same digest)."""
        rows = self.ps()
        want = canonical_name(model)
        row = next((m for m in rows if canonical_name(m.name) == want), None)
        if row is not None or not rows:
            return row
        digest = self.digests().get(want)
        return next((m for m in rows if digest and m.digest == digest), None)

    # -- loading -------------------------------------------------------------
    def load(self, model: str, options: Mapping[str, Any] | None = None, keep_alive: str | float = "10m") -> Generation:
        """Load without generating: ``POST /api/generate`` with no prompt."""
        started = time.monotonic()
        try:
            resp = self._call(lambda: self.client.generate(model=model, options=dict(options or {}),
                                                           keep_alive=keep_alive))
        except ollama.ResponseError as exc:
            return Generation(ok=False, status=exc.status_code, error=exc.error,
                              duration_s=time.monotonic() - started)
        return Generation(ok=True, done_reason=resp.done_reason, duration_s=time.monotonic() - started)

    def unload(self, model: str, wait_s: float = 30.0) -> None:
        """``ollama stop MODEL``; waits until ``/api/ps`` no longer lists it
        (the real unload is asynchronous)."""
        try:
            self._call(lambda: self.client.generate(model=model, keep_alive=0))
        except ollama.ResponseError:
            pass  # not loaded, or gone: either way it is not in memory
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.loaded(model) is None:
                return
            time.sleep(0.05)
        raise ProbeError(f"{model} was still loaded {wait_s:.0f}s after asking Ollama to unload it",
                         hint="check `ollama ps`; a request still running keeps a model loaded")

    def unload_all(self, wait_s: float = 30.0) -> None:
        for m in self.ps():
            self.unload(m.name, wait_s)

    # -- generating ------------------------------------------------------------
    def generate(self, model: str, prompt: str, options: Mapping[str, Any] | None = None,
                 keep_alive: str | float = "10m", on_token: Callable[[str], None] | None = None) -> Generation:
        """One streamed request; an error before or inside the stream becomes a
        failed Generation with Ollama's text and status."""
        started = time.monotonic()
        parts: list[str] = []
        last = None
        try:
            stream: Iterable = self._call(lambda: self.client.generate(
                model=model, prompt=prompt, options=dict(options or {}), keep_alive=keep_alive, stream=True))
            for chunk in stream:
                if chunk.response:
                    parts.append(chunk.response)
                    if on_token:
                        on_token(chunk.response)
                last = chunk
        except ollama.ResponseError as exc:
            return Generation(ok=False, text="".join(parts), status=exc.status_code, error=exc.error,
                              duration_s=time.monotonic() - started)
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            return Generation(ok=False, text="".join(parts), status=None, error=f"connection dropped: {exc}",
                              duration_s=time.monotonic() - started)
        return Generation(ok=True, text="".join(parts), done_reason=last.done_reason if last else None,
                          prompt_eval_count=last.prompt_eval_count if last else None,
                          eval_count=last.eval_count if last else None, duration_s=time.monotonic() - started)

    def siblings(self, model: str) -> list[str]:
        """Other tags of the same model name on the server (``ollama list | grep NAME:``)."""
        own = canonical_name(model)
        base = own.rsplit(":", 1)[0]
        digests = self.digests()
        return [n for n in self.tags()
                if canonical_name(n).rsplit(":", 1)[0] == base and not self.same_model(n, model, digests)]

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ServerUnreachableError(f"no Ollama server answers at {self.host}",
                                         hint="start it with `ollama serve`, or pass --host URL") from exc


