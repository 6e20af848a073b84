"""Optional help from a chat model for intake, and the chat transcript.

The deterministic parser in :mod:`assistant.intake` always runs. When a user
asks for it (``--llm MODEL``), a chat model -- through langchain-ollama, on
``--llm-host`` or the same Ollama -- reads the same message into the same
fields with structured output. :func:`combine` lets it fill what the parser
left empty and override what the parser read from weak evidence (a guessed
name, an estimated length, a phase from "what" alone), and says which reading
won each field. A failure of the helper (langchain-ollama missing, no server, a
model that answers nonsense) is reported in one line (:class:`LlmReading`)
and the parser's reading stands. The helper model is asked with
``keep_alive=0`` so it does not stay resident on the server being measured.
The conversation itself is kept as langchain-core messages in a
:class:`Transcript`, which the report writer stores as JSON.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from common.catalog import get_lang
from assistant.intake import INTAKE_FIELDS, Intake, confidence, detect_lang, has_words, merge, normalise_model, parse
from rules.facts import PHASES

__all__ = ["IntakeFields", "LlmReading", "llm_intake", "combine", "Transcript"]

GiB = 1 << 30
DEFAULT_TIMEOUT_S = 60.0


class IntakeFields(BaseModel):
    """What a user's message says about a local LLM running out of GPU memory.
    Use null for anything the message does not say; never guess."""

    phase: Literal["load", "long_input", "concurrent", "slow", "creeping", "crash", "unknown"] = Field(
        "unknown",
        description=(
            "When it fails: load = while loading/starting the model; long_input = only with long prompts, "
            "documents or a large context; concurrent = with several users or requests at once; slow = runs "
            "very slowly or on the CPU; creeping = memory keeps growing over time or is not released; "
            "crash = crashes with an error not tied to any of these; unknown = not said."
        ),
    )
    model: str | None = Field(None, description="Ollama model name or tag, e.g. qwen2.5:7b")
    want_ctx: int | None = Field(None, description="context length in tokens (32k = 32768)")
    want_parallel: int | None = Field(None, description="number of concurrent requests or users")
    budget_gib: float | None = Field(None, description="GPU memory the user has or may use, in GiB")
    gpu: str | None = Field(None, description="GPU name, e.g. RTX 4060, A100, M2 Max")
    error: str | None = Field(None, description="error text quoted from Ollama or CUDA, verbatim")
    keep_context: bool | None = Field(None, description="true if the context must not be reduced")


_INSTRUCTIONS = (
    "You read one message from a user whose local LLM, served by Ollama, runs out of GPU memory. "
    "Extract only what the message states into the given fields; use null for anything it does not state. "
    "The message may be in Chinese, English or both."
)
_JSON_ONLY = "Answer with one JSON object with exactly these keys and nothing else: " + ", ".join(
    IntakeFields.model_fields
)


@dataclass(frozen=True)
class LlmReading:
    """What the helper model read (``intake``), or why it read nothing (``error``, one line)."""

    model: str
    host: str
    intake: Intake | None = None
    error: str | None = None


def llm_intake(text: str, model: str, host: str, *, chat_model: Any = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> LlmReading:
    """Ask a chat model to read ``text``; a failure is an ``error`` line, never raised.

    ``chat_model`` is any langchain-core chat model (tests pass a fake); without
    it, ``langchain_ollama.ChatOllama(model=model, base_url=host, temperature=0,
    keep_alive=0)`` is built, imported only here so the package works without it.
    """
    try:
        chat = chat_model if chat_model is not None else _ollama_chat(model, host, timeout_s)
    except ImportError as exc:
        return LlmReading(model, host, error=f"langchain-ollama is not installed ({exc.name or exc}); "
                                             "pip install 'oomvet[llm]'")
    try:
        return LlmReading(model, host, intake=_to_intake(_ask(chat, text), text, model))
    except Exception as exc:  # noqa: BLE001 - optional help: reported, and the parser's reading stands
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return LlmReading(model, host, error=f"{type(exc).__name__}: {first}"[:300])


def _ollama_chat(model: str, host: str, timeout_s: float):
    from langchain_ollama import ChatOllama  # optional dependency (extra "llm")

    # keep_alive=0: the helper leaves the server as soon as it has answered, so
    # it is not counted against the limit nor reloaded after every probe
    return ChatOllama(model=model, base_url=host, temperature=0, keep_alive=0, client_kwargs={"timeout": timeout_s})


def _ask(chat, text: str) -> IntakeFields:
    messages = [SystemMessage(_INSTRUCTIONS), HumanMessage(text)]
    try:
        structured = chat.with_structured_output(IntakeFields)
    except NotImplementedError:
        structured = None  # a model without tool calling or JSON schema: ask for JSON in the reply
    if structured is not None:
        out = structured.invoke(messages)
    else:
        reply = chat.invoke([SystemMessage(_INSTRUCTIONS + " " + _JSON_ONLY), HumanMessage(text)])
        out = _json_object(reply.content if isinstance(reply, BaseMessage) else str(reply))
    if isinstance(out, IntakeFields):
        return out
    if isinstance(out, dict):
        return IntakeFields.model_validate(out)
    raise TypeError(f"structured output gave {type(out).__name__}")


def _json_object(content) -> dict:
    if isinstance(content, list):  # content blocks
        content = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    return json.loads(content[start:end + 1])


def _positive_int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _text(value) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value and value.lower() not in ("null", "none", "unknown") else None


def _to_intake(fields: IntakeFields, text: str, model: str) -> Intake:
    gib = fields.budget_gib
    budget = int(round(gib * GiB)) if isinstance(gib, (int, float)) and not isinstance(gib, bool) and gib > 0 else None
    phase = fields.phase if fields.phase in PHASES else "unknown"
    return Intake(
        lang=detect_lang(text),
        phase=phase,
        model=normalise_model(_text(fields.model)),
        want_ctx=_positive_int(fields.want_ctx),
        want_parallel=_positive_int(fields.want_parallel),
        budget=budget,
        gpu=_text(fields.gpu),
        error=_text(fields.error),
        keep_context=fields.keep_context if isinstance(fields.keep_context, bool) else None,
        text=text,
        phase_cue=f"llm {model}" if phase != "unknown" else None,
    )


#: the class of evidence of a field a chat model read (assistant.intake.confidence)
LLM_EVIDENCE = "llm.read"


def combine(parser: Intake, llm: Intake | LlmReading | None) -> tuple[Intake, dict[str, str]]:
    """The combined reading, and which reading won each field where they differ
    (``{"model": "llm", "phase": "parser", ...}``).

    The model's value is taken where the parser read nothing, and where the
    parser's evidence was weak (``parser.weak``); a field the parser read from
    strong evidence (a quoted ``name:tag``, a context in tokens, a stated
    "when") keeps the parser's value. Language and text are always the parser's.
    """
    if isinstance(llm, LlmReading):
        llm = llm.intake
    if llm is None:
        return parser, {}
    fill, won = {}, {}
    for name in (*INTAKE_FIELDS, "phase"):
        mine, theirs = getattr(parser, name), getattr(llm, name)
        empty = mine is None or name == "phase" and mine == "unknown"
        if theirs is None or name == "phase" and theirs == "unknown" or theirs == mine:
            continue
        if empty or name in parser.weak:
            fill[name] = theirs
            won[name] = "llm"
        else:
            won[name] = "parser"
    if "phase" in fill:
        fill.update(phase_cue=llm.phase_cue, when=llm.when, what=llm.what)
    if "want_ctx" in fill:
        fill["ctx_estimated"] = False
    if "budget" in fill:
        fill["budget_share"] = None
    elif "budget_share" in fill and "budget" in parser.weak:
        fill["budget"] = None  # a share the model read replaces a size the parser only guessed
    # what the chat model replaced is no longer the learned readers'
    replaced = {"when", "what"} if "phase" in fill else set()
    replaced |= {"budget"} & fill.keys()  # a budget the model read, or one a share it read replaced
    fill["learned"] = tuple(name for name in parser.learned if name not in replaced)
    # a field the chat model gave has evidence of its own: no replay has measured it, so it is unsure (asked)
    given = {"budget" if name == "budget_share" else name for name in fill} & set(confidence.FIELDS)
    fill["evidence"] = tuple(p for p in parser.evidence if p[0] not in given) + tuple((name, LLM_EVIDENCE) for name in sorted(given))
    fill["alternatives"] = tuple(p for p in parser.alternatives if p[0] not in given)
    return replace(parser, **fill), won


_ROLES = {"human": "user", "ai": "assistant", "system": "system"}
_CLASSES = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}


class Transcript:
    """The chat so far, as langchain-core messages, in order.

    The language is the one given (``--lang``), else the one of the first user
    message that has words, else the locale's.
    """

    def __init__(self, lang: str | None = None):
        self._messages: list[BaseMessage] = []
        self._lang = lang

    def add_system(self, text: str) -> SystemMessage:
        return self._add(SystemMessage(content=text))

    def add_user(self, text: str) -> HumanMessage:
        return self._add(HumanMessage(content=text))

    def add_assistant(self, text: str) -> AIMessage:
        return self._add(AIMessage(content=text))

    def _add(self, message: BaseMessage):
        self._messages.append(message)
        return message

    @property
    def messages(self) -> list[BaseMessage]:
        return list(self._messages)

    @property
    def lang(self) -> str:
        if self._lang:
            return self._lang
        for m in self._messages:
            if isinstance(m, HumanMessage) and has_words(str(m.content)):
                return detect_lang(str(m.content))
        return get_lang()

    def intake(self) -> Intake:
        """Every user message read and merged in order: later ones override."""
        merged = Intake(lang=self.lang)
        for m in self._messages:
            if isinstance(m, HumanMessage):
                merged = merge(merged, parse(str(m.content)))
        return replace(merged, lang=self.lang)

    def to_json(self) -> list[dict]:
        """``[{"role": "user" | "assistant" | "system", "content": str}, ...]`` for the report."""
        return [{"role": _ROLES.get(m.type, m.type),
                 "content": m.content if isinstance(m.content, str) else json.dumps(m.content, ensure_ascii=False)}
                for m in self._messages]

    @classmethod
    def from_json(cls, items: list[dict], lang: str | None = None) -> "Transcript":
        t = cls(lang=lang)
        for item in items:
            t._add(_CLASSES[item["role"]](content=item["content"]))
        return t

    def __len__(self) -> int:
        return len(self._messages)
