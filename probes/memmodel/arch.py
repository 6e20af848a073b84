"""A model's shape as far as memory goes: :class:`Arch`, read from
``/api/show``'s ``model_info`` (``ollama show --verbose``), and the context
clamp both engines apply to it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from common.errors import ProbeError

MIB = 1 << 20
GIB = 1 << 30


#: llama.cpp's default sliding-window period per architecture (``load_swa_pattern``
#: in src/models/*.cpp, b11076) and whether the first layer of a period is the
#: global one; used when the GGUF has a sliding window but no pattern of its own
SWA_DEFAULT_PERIOD = {
    "gemma2": (2, False), "gemma3": (6, False), "gemma3n": (5, False), "gemma-embedding": (6, False),
    "cohere2": (4, False), "exaone4": (4, False), "olmo2": (4, False), "llama4": (4, False),
    "gpt-oss": (2, False), "gptoss": (2, False), "smallthinker": (4, True), "plamo3": (8, False),
}


class ModelInfoError(ProbeError, ValueError):
    """``/api/show`` model_info lacks a key the memory model needs."""


@dataclass(frozen=True)
class Arch:
    """The GGUF shape of a model, as far as memory goes (``ollama show --verbose``)."""

    arch: str
    block_count: int
    head_count: int
    head_count_kv: int
    embedding_length: int
    context_length: int
    vocab_size: int | None = None
    key_length: int | None = None
    value_length: int | None = None
    sliding_window: int | None = None
    feed_forward_length: int | None = None
    expert_count: int = 0
    expert_used_count: int = 0
    expert_feed_forward_length: int | None = None
    #: ``<arch>.attention.sliding_window_pattern`` when the GGUF states it:
    #: one flag per layer (True = sliding), or an int period
    swa_pattern: tuple | int | None = None

    def swa_layer(self, i: int) -> bool:
        """Whether layer ``i`` keeps only a sliding window of KV cells, as
        llama.cpp decides: the GGUF's own per-layer pattern or period when it
        has one, else the architecture's default period (the last layer of
        each period is global); an architecture llama.cpp gives no sliding
        window keeps every layer global, whatever its metadata says."""
        if not self.sliding_window:
            return False
        pattern = self.swa_pattern
        if isinstance(pattern, tuple):
            return bool(pattern[i]) if i < len(pattern) else False
        period, dense_first = (pattern, False) if isinstance(pattern, int) and pattern > 0 \
            else SWA_DEFAULT_PERIOD.get(self.arch, (None, False))
        if period is None:
            return False
        return (i % period != 0) if dense_first else (i % period < period - 1)

    @property
    def swa_layers(self) -> int:
        return sum(1 for i in range(self.block_count) if self.swa_layer(i))

    @property
    def head_dim_k(self) -> int:
        return self.key_length or self.embedding_length // max(self.head_count, 1)

    @property
    def head_dim_v(self) -> int:
        return self.value_length or self.embedding_length // max(self.head_count, 1)

    @property
    def supports_flash_attention(self) -> bool:
        # Ollama turns flash attention off for a model whose K and V heads differ
        return self.head_dim_k == self.head_dim_v

    @classmethod
    def from_model_info(cls, model_info: Mapping[str, Any]) -> "Arch":
        """Build from ``/api/show``'s ``model_info`` (every GGUF key of the model).

        Per-layer arrays (``head_count_kv`` on some models) count by their
        largest value, as Ollama's estimate does. The vocabulary comes from
        ``<arch>.vocab_size`` or the length of ``tokenizer.ggml.tokens`` when
        the server sent the list (it sends null for long arrays unless asked
        with ``"verbose": true``).
        """
        info = dict(model_info or {})
        arch = info.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise ModelInfoError("model_info has no general.architecture",
                                 hint="is this an Ollama /api/show response for a GGUF model?")

        def get(key: str, required: bool = True) -> int | None:
            value = info.get(f"{arch}.{key}")
            if isinstance(value, (list, tuple)):
                numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
                value = max(numbers) if numbers else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                value = None
            if value is None and required:
                raise ModelInfoError(f"model_info has no usable {arch}.{key}")
            return None if value is None else int(value)

        vocab = get("vocab_size", required=False)
        tokens = info.get("tokenizer.ggml.tokens")
        if vocab is None and isinstance(tokens, (list, tuple)) and tokens:
            vocab = len(tokens)
        head_count = get("attention.head_count")
        pattern = info.get(f"{arch}.attention.sliding_window_pattern")
        if isinstance(pattern, (list, tuple)) and pattern:
            pattern = tuple(bool(x) for x in pattern)
        elif isinstance(pattern, bool) or not isinstance(pattern, int):
            pattern = None
        return cls(
            arch=arch,
            block_count=get("block_count"),
            head_count=head_count,
            # a model without GQA may leave head_count_kv out: it equals head_count
            head_count_kv=get("attention.head_count_kv", required=False) or head_count,
            embedding_length=get("embedding_length"),
            context_length=get("context_length", required=False) or 0,
            vocab_size=vocab,
            key_length=get("attention.key_length", required=False),
            value_length=get("attention.value_length", required=False),
            sliding_window=get("attention.sliding_window", required=False),
            feed_forward_length=get("feed_forward_length", required=False),
            expert_count=get("expert_count", required=False) or 0,
            expert_used_count=get("expert_used_count", required=False) or 0,
            expert_feed_forward_length=get("expert_feed_forward_length", required=False),
            swa_pattern=pattern,
        )


def clamp_ctx(arch: Arch, num_ctx: int) -> int:
    """num_ctx after Ollama's clamp to the training context (and its minimum of 4)."""
    ctx = max(int(num_ctx), 4)
    if arch.context_length and ctx > arch.context_length:
        ctx = arch.context_length
    return ctx

