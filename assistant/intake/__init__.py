"""Intake: what a user's free text (Chinese, English or both) tells us, as facts.

This is the assistant's front door. A person describes the trouble the way
people do in forum posts ("4060 8G，上下文开到 32k 就报 cudaMalloc failed",
"long prompts crash on my 24GB card") and :func:`parse` turns it into an
:class:`Intake`: the symptom phase, the model tag, the context, concurrency and
memory budget asked for, the GPU, the error text quoted from Ollama or CUDA,
and whether the context may shrink. It is deterministic: regular expressions
and a fixed precedence between phase cues, no model, no I/O, so the same
message always yields the same facts and every phase comes with the cue that
decided it. It never raises for any string; text it cannot read is phase
``unknown``. Optional help from a chat model lives in :mod:`assistant.intake_llm`.
"""
from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import asdict, dataclass, replace

from assistant.i18n import catalog, t
from assistant.intake.phase import read_symptom
from probes.units import SizeError, parse_size
from rules.facts import PHASES, validate

__all__ = ["Intake", "detect_lang", "parse", "merge", "size_of", "normalise_model", "phase_text", "has_words", "INTAKE_FIELDS"]


@dataclass(frozen=True)
class Intake:
    """What one message (or a merged chat) says. Sizes in bytes, context in tokens."""

    lang: str = "en"                  # "zh" | "en"
    phase: str = "unknown"            # one of rules.facts.PHASES
    model: str | None = None          # Ollama tag or bare name, e.g. "qwen2.5:7b", "neohorse-1"
    want_ctx: int | None = None       # tokens
    want_parallel: int | None = None  # concurrent requests
    budget: int | None = None         # bytes the GPU has (or may use)
    gpu: str | None = None            # as named by the user, tidied: "RTX 4060", "M2 Max"
    error: str | None = None          # an Ollama/CUDA error text quoted by the user
    keep_context: bool | None = None  # True: the context must not shrink
    text: str = ""                    # the message(s) this came from
    phase_cue: str | None = None      # the words that decided the phase (for `why`)
    when: str = "unknown"             # load | long_input | concurrent | over_time | unknown
    what: str = "unknown"             # oom | crash | slow | hang | cut | unknown
    budget_share: float | None = None  # "80% of the GPU": a share of the device, resolved by who knows its total
    ctx_estimated: bool = False       # want_ctx came from a length in characters or words
    weak: tuple[str, ...] = ()        # fields read from weak evidence (a guessed name, an estimate, a phase
                                      # from "what" alone): a chat model's reading may override these

    def facts(self) -> list[dict]:
        """``[symptom, target]``, both valid under :func:`rules.facts.validate`."""
        symptom = {"kind": "symptom", "phase": self.phase, "text": self.text, "error": self.error}
        target = {
            "kind": "target",
            "model": self.model,
            "want_ctx": self.want_ctx,
            "want_parallel": self.want_parallel,
            "budget": self.budget,
            "keep_context": self.keep_context,
        }
        return [validate(symptom), validate(target)]

    def to_dict(self) -> dict:
        return asdict(self)


MSG = catalog("intake")


def phase_text(phase: str, lang: str | None = None) -> str:
    """One line saying what a phase means, in ``lang``."""
    return t(f"intake.phase.{phase if phase in PHASES else 'unknown'}", lang)


# the fields a message can speak to; merge() and intake_llm.combine() walk these
INTAKE_FIELDS = ("model", "want_ctx", "want_parallel", "budget", "budget_share", "gpu", "error", "keep_context")


# --------------------------------------------------------------------------- text helpers

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
# an English word of prose, standing between spaces, punctuation or ideographs;
# "level=ERROR", "sched.go:455" and "qwen2.5:7b" in a pasted log are not prose
_PROSE_WORD = re.compile(
    r"(?<![^\s(\"'“‘\u3400-\u9fff\uff00-\uffef])[A-Za-z][A-Za-z']*[A-Za-z]"
    r"(?=[\s,.!?;:)\"'”’\u3000-\u303f\u3400-\u9fff\uff00-\uffef]|$)"
)
# ASCII word boundaries: a CJK character next to "4060" or "qwen2.5" must not
# count as part of the same word, or "用4060跑qwen2.5" would yield nothing.
_I = re.IGNORECASE | re.ASCII


def _normalise(text: str) -> str:
    # NFKC folds full-width digits, letters and punctuation ("３２Ｋ", "，", "：")
    # that Chinese input methods produce into ASCII, so one set of patterns serves both.
    return unicodedata.normalize("NFKC", text)


def _blank(text: str, spans) -> str:
    """Spaces over ``spans``, keeping offsets, so later patterns skip that text."""
    chars = list(text)
    for start, end in spans:
        for i in range(start, end):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


# --------------------------------------------------------------------------- errors

# Quoted spans: code fences, backticks, straight and curly double quotes, CJK
# corner brackets. Single quotes only when they are not apostrophes ("can't").
_QUOTES = [
    re.compile(r"```[^\n`]*\n(.*?)```", re.S),
    re.compile(r"`([^`\n]{3,400})`"),
    re.compile(r'"([^"\n]{3,400})"'),
    re.compile(r"“([^”\n]{3,400})”"),
    re.compile(r"「([^」\n]{3,400})」"),
    re.compile(r"『([^』\n]{3,400})』"),
    re.compile(r"‘([^’\n]{3,400})’"),
    re.compile(r"(?<!\w)'([^'\n]{3,400})'(?!\w)", re.ASCII),
]

_ERRORISH = re.compile(
    r"error|fail|out of memory|\boom\b|terminated|unable to|cannot|can't|panic|assert|"
    r"exception|killed|segmentation|abort|timed out|not found|requires more|stopped|"
    r"exit status|exceeded|no longer running|报错|错误|失败",
    _I,
)

# Texts Ollama, llama.cpp, CUDA and PyTorch print. ``True`` = the message goes on
# after the fragment ("...has terminated: exit status 2"), so the tail is kept.
_KNOWN_ERRORS: list[tuple[re.Pattern, bool]] = [
    (re.compile(r"model requires more system memory \([^)\n]*\) than is available \([^)\n]*\)", _I), False),
    (re.compile(r"llama runner process has terminated(?::)?", _I), True),
    (re.compile(r"llama runner process no longer running(?::)?", _I), True),
    (re.compile(r"llama-server reported out-of-memory during startup(?::)?", _I), True),
    (re.compile(r"model runner has unexpectedly stopped(?:, this may be due to resource limitations "
                r"or an internal error, check ollama server logs for details)?", _I), False),
    (re.compile(r"an error was encountered while running the model(?::)?", _I), True),
    (re.compile(r"timed out waiting for llama runner to start(?:\s*-\s*progress [\d.]+)?", _I), False),
    (re.compile(r"server busy, please try again\.?\s*maximum pending requests exceeded", _I), False),
    (re.compile(r"error loading model(?::)?", _I), True),
    (re.compile(r"cudaMalloc failed: out of memory", _I), False),
    (re.compile(r"CUDA error: out of memory", _I), False),
    (re.compile(r"CUDA error:", _I), True),
    (re.compile(r"(?:torch\.)?(?:cuda\.)?OutOfMemoryError:?", _I), True),
    (re.compile(r"CUDA out of memory", _I), True),
    (re.compile(r"unable to allocate \w+ buffer", _I), False),
    (re.compile(r"ErrorOutOfDeviceMemory", _I), False),
    (re.compile(r"hipMalloc failed: out of memory|ROCm error: out of memory", _I), False),
    (re.compile(r"GGML_ASSERT\([^\n]*?\)(?: failed)?", _I), False),
    (re.compile(r"segmentation fault(?: \(core dumped\))?", _I), False),
    (re.compile(r"signal: killed", _I), False),
    (re.compile(r"exit status -?(?:0x[0-9a-f]+|\d+)", _I), False),
    # the runner's HTTP call failing: 'POST predict: Post "http://127.0.0.1:PORT/completion": EOF'
    (re.compile(r"POST predict: Post \"[^\"\n]*\":\s*[^\n\"]+?(?=[.,;]\s|[.,;]?$|\n|[\u3400-\u9fff])", _I), False),
    (re.compile(r"(?:model )?memory layout cannot be allocated(?: with num_gpu = \d+)?", _I), False),
    # a pasted log line from llama.cpp / ggml ("ggml_metal_graph_compute: command buffer 0 failed
    # with status 5"): a function name, a colon, and a message that reports a failure
    (re.compile(r"(?<![\w])(?:ggml|llama|llm|cuda|hip|vk|ggml_metal|ggml_vulkan|ggml_cuda)_\w+:\s+[^\n:]{0,80}?"
                r"(?:failed|error|cannot|unable to|out of memory)", _I), True),
]

# Where a quoted message stops when the user carries on in prose.
_TAIL_STOP = re.compile(
    r"\n|[\u3400-\u9fff]|[。，；！？\"”」』`]|,\s+(?=[a-z]+\s)(?!\s*(?:current device|in function))"
    r"|[.!?](?=\s|$)"
    r"|\s+(?:when|whenever|after|if|while|once|as soon as|every time|each time|but|and then|and it|"
    r"so|because|on my|with my|although|though|any idea|any ideas|how|what|why|please|help|even|"
    r"anyone|thanks|on (?:windows|linux|macos|mac|ubuntu|wsl|my|our))\b",
    _I,
)
_ERROR_LINE = re.compile(r"(?:^|(?<=\s)|(?<=[:>]))(?:Error|错误|报错)\s*:\s*(?=[A-Za-z])", _I)


def _tail_end(text: str, pos: int) -> int:
    m = _TAIL_STOP.search(text, pos)
    return m.start() if m else len(text)


def _clean_error(s: str) -> str:
    return s.strip().strip(" .,;:'\"").strip()


def _find_error(text: str) -> tuple[str | None, list[tuple[int, int]]]:
    """The error text the user quoted, and the spans to hide from number parsing.

    A quoted span that holds a known Ollama/CUDA fragment wins; then any quoted
    span that reads like an error; then the earliest known fragment in the
    prose, with its tail; then an ``Error: ...`` line.
    """
    quoted: list[tuple[int, int, str]] = []
    for rx in _QUOTES:
        for m in rx.finditer(text):
            quoted.append((m.start(), m.end(), m.group(1)))
    quoted.sort()
    spans = [(s, e) for s, e, q in quoted if _ERRORISH.search(q)]

    def known_in(s: str):
        hits = [(m.start(), m, tail) for rx, tail in _KNOWN_ERRORS for m in [rx.search(s)] if m]
        return min(hits, key=lambda h: h[0]) if hits else None

    for start, end, q in quoted:
        hit = known_in(q)
        if hit:
            # inside quotes the user chose the extent: keep the rest of that line
            line_end = q.find("\n", hit[0])
            return _clean_error(q[hit[0]:line_end if line_end >= 0 else len(q)]), spans + [(start, end)]
    for _start, _end, q in quoted:
        if _ERRORISH.search(q) and len(q.strip()) >= 6:
            return _clean_error(q), spans

    hit = known_in(text)
    if hit:
        start, m, tail = hit
        end = _tail_end(text, m.end()) if tail else m.end()
        err = _clean_error(text[start:end])
        if err:
            return err, spans + [(start, end)]
    m = _ERROR_LINE.search(text)
    if m:
        end = _tail_end(text, m.end())
        err = _clean_error(text[m.end():end])
        if len(err) >= 4:
            return err, spans + [(m.start(), end)]
    return None, spans


# --------------------------------------------------------------------------- language

def detect_lang(text: str) -> str:
    """``"zh"`` when CJK ideographs make a meaningful share of the prose, else ``"en"``.

    Quoted error texts and code are left out of the count: a Chinese user who
    pastes a long English log is still writing Chinese. Ideographs are weighed
    against English words, not letters, because one ideograph carries about
    as much as a short word.
    """
    if not isinstance(text, str) or not text:
        return "en"
    norm = _normalise(text)
    _err, spans = _find_error(norm)
    prose = _blank(norm, spans + [m.span() for rx in _QUOTES for m in rx.finditer(norm)])
    cjk = len(_CJK.findall(prose))
    words = len(_PROSE_WORD.findall(prose))
    if cjk == 0 and words == 0:  # everything was quoted or code: judge the whole text
        cjk, words = len(_CJK.findall(norm)), len(_LATIN_WORD.findall(norm))
    if cjk == 0:
        return "en"
    if words == 0:
        return "zh"
    return "zh" if cjk / (cjk + words) >= 0.35 else "en"


def has_words(text: str) -> bool:
    """Whether ``text`` says anything a language can be told from (an ideograph
    or an English word; "4060 8G" does not)."""
    return isinstance(text, str) and bool(_CJK.search(text) or _LATIN_WORD.search(text))


# --------------------------------------------------------------------------- model

_TAG = re.compile(
    r"(?<![\w./@-])((?:[a-z0-9][\w.-]*/)*[a-z][\w.-]*):([a-z0-9][\w.-]*)(?![\w/:-]|\.\w)", _I
)
_NOT_MODEL_NAMES = {
    "error", "errors", "msg", "level", "source", "time", "http", "https", "cuda", "rocm",
    "status", "warning", "info", "debug", "note", "ctx", "num_ctx", "context", "vram",
    "gpu", "cpu", "ram", "model", "models", "ollama_host", "host", "localhost", "file",
    "device", "panic", "signal", "exit", "runner", "tokens", "see", "e.g", "eg", "ps", "log",
    "nvidia-smi", "rocm-smi", "llama-server", "llama-cli", "open-webui", "keep_alive", "num_gpu", "x86-64",
}
_FAMILIES = (
    r"neohorse-\d+(?:\.\d+)?",
    r"tinyllama", r"(?:code)?llama\s?\d(?:\.\d+)?(?:-(?:vision|instruct|chinese))?",
    r"qwen\s?\d(?:\.\d+)?(?:-(?:coder|vl|math|instruct))?",
    r"qwq", r"deepseek-(?:r1|v2\.5|v2|v3|coder(?:-v2)?|llm)",
    r"gemma\s?\d?(?:n)?", r"mistral(?:-nemo|-small|-large)?", r"mixtral", r"phi\s?\d(?:\.\d+)?(?:-mini)?",
    r"yi(?:-coder)?(?=[\s:-]\d)", r"(?:chat)?glm\s?-?\d", r"internlm\d?(?:\.\d+)?", r"llava", r"command-r\+?",
    r"smollm\d?", r"gpt-oss", r"granite\d?(?:\.\d+)?(?:-code)?", r"starcoder\d?", r"olmo\d?",
    r"minicpm-?v?\d?(?:\.\d+)?", r"baichuan\d?",
)
_BARE = re.compile(
    r"(?<![\w./-])(" + "|".join(_FAMILIES) + r")(?![\w.+]|\.cpp)"
    r"(?:[\s:-]{0,2}((?:\d+x)?\d+(?:\.\d+)?b)(?![\w]))?",
    _I,
)
_OLLAMA_CMD = re.compile(r"\bollama\s+(?:run|pull|show|create|stop|push|cp|rm)\s+([a-z0-9][\w./:-]*)", _I)
# a tag the user's own model is built on (a Modelfile's "FROM qwen2.5:14b", "built on llama3.1:8b") is the
# base, not the model in trouble; the one switched to ("一 switch 到 gemma3:27b") is the one that fails
_BASE_BEFORE = re.compile(r"(?:(?-i:\bFROM)|built\s+on(?:\s+top\s+of)?|based\s+on|on\s+top\s+of|"
                          r"fine-?tuned?\s+(?:from|of|on)|基于|基座(?:是|用的是)?|底座(?:是|用的是)?)\s*[:：]?\s*$", _I)
_WORKS_AFTER = re.compile(r"^[^,.;:!?。，；！？\n]{0,16}?(?:就好了|好了|没问题|正常|就行|\bworks|\bis fine|\bfine\b|\bok\b)", _I)
_SWITCH_BEFORE = re.compile(r"(?:switch(?:ed|es|ing)?|swap(?:ped|s|ping)?)\s+(?:over\s+)?(?:from\s+\S+\s+)?(?:to|到)\s*$"
                            r"|(?:切换|切|换|改用)(?:到|成)?\s*$", _I)


def _tidy_model(name: str, tag: str | None = None, keep_case: bool = False) -> str:
    name = name.strip().rstrip(".-")
    if "/" not in name and not keep_case:  # Ollama library names are case-insensitive; a hf.co repo path is not
        name = name.lower()
    name = re.sub(r"\s+", "", name)
    if tag:
        return f"{name}:{tag.rstrip('.-')}"
    return name


def normalise_model(name: str | None) -> str | None:
    """A model name as Ollama resolves it: ``"NeoHorse-1"`` -> ``"neohorse-1"``,
    ``"Qwen2.5:7B-instruct-q4_K_M"`` -> ``"qwen2.5:7B-instruct-q4_K_M"`` (the tag keeps its case)."""
    if not isinstance(name, str) or not name.strip():
        return None
    n, _sep, tag = name.strip().partition(":")
    return _tidy_model(n, tag or None)


# a name people give their own models: "qwen-finetune-v2", "my-law-assistant",
# "nomic-embed-text", a GGUF file name. Hyphenated words that are English
# compounds ("out-of-memory", "multi-turn") are not names: a name has a digit or
# a part that is not a common word.
_TYPED = re.compile(r"(?<![\w./@:-])([a-z][a-z0-9_]*(?:[-.][a-z0-9_]+)*-[a-z0-9_.-]*[a-z0-9])(?:\.gguf)?(?![\w/@:-])", _I)
_GGUF = re.compile(r"(?<![\w./@:-])([a-z][\w.-]*?)\.gguf\b", _I)
_COMMON_PARTS = {
    "out", "of", "memory", "multi", "turn", "load", "loading", "test", "real", "time", "open", "webui", "half", "way",
    "non", "negotiable", "one", "two", "three", "word", "words", "built", "in", "long", "short", "term", "context",
    "window", "token", "tokens", "core", "dumped", "pre", "re", "self", "hosted", "end", "to", "full", "size", "side",
    "by", "well", "known", "server", "client", "high", "low", "page", "pages", "mid", "sentence", "up", "down",
    "step", "user", "users", "api", "e", "g", "i", "ie", "eg", "so", "called", "follow", "follows", "on", "off",
    "the", "a", "an", "and", "or", "not", "no", "yes", "fine", "tune", "tuned", "run", "runs", "start", "started",
    "state", "art", "cut", "first", "second", "third", "top", "bottom", "left", "right", "back", "front", "set",
    "day", "days", "hour", "hours", "minute", "minutes", "go", "gone", "at", "all", "over", "under", "after",
    "box", "wide", "based", "free", "like", "kind", "sort", "able", "ish", "co", "worker", "workers", "llama", "cpp",
    "ollama", "lm", "studio", "docker", "compose", "cuda", "rocm", "metal", "vulkan", "gpu", "cpu", "ram", "vram",
    "rtx", "gtx", "x86", "amd64", "arm64", "sha256", "utf", "json", "http", "https", "www", "com", "org", "io",
}
_NAME_BEFORE = re.compile(
    r"(?:\bmodel\s+(?:is|called|named)|模型(?:是|为|叫|用的是)?|导入的|自己的模型|my own model|custom model|fine-?tune)"
    r"\s*[:：]?\s*$", _I)
_PLAIN_NAME = re.compile(r"(?<![\w./@:-])([a-z][a-z0-9_]{2,}(?:\.[a-z0-9_]+)*)(?![\w/@:-])", _I)
_NOT_NAMES_AFTER_MODEL = {"is", "was", "works", "loads", "runs", "crashes", "file", "files", "size", "and", "with",
                          "that", "which", "it", "the", "a", "an", "on", "in", "from", "but", "fine", "gets"}


def _name_like(token: str) -> bool:
    low = token.lower()
    if low in _NOT_MODEL_NAMES or re.fullmatch(r"v?\d[\d.x-]*", low):
        return False
    parts = [p for p in re.split(r"[-._]", low) if p]
    if len(parts) < 2:
        return False
    if any(re.fullmatch(r"(?:rtx|gtx|rx|cuda|rocm|sha\d*|x86|amd64|arm64|win|windows|ubuntu|linux)", p) for p in parts[:1]):
        return False
    return any(ch.isdigit() for ch in low) or any(p not in _COMMON_PARTS for p in parts)


def _server_tag(text: str, tags: tuple[str, ...]) -> tuple[str, tuple[int, int]] | None:
    """The server's tag the message names: ``qwen2.5:7b`` or a bare
    ``nomic-embed-text`` for ``nomic-embed-text:latest``; the longest, then the first."""
    best = None
    for tag in tags:
        name, _sep, version = tag.partition(":")
        forms = [tag] + ([name] if version in ("", "latest") else [])
        for form in forms:
            m = re.search(r"(?<![\w./:-])" + re.escape(form) + r"(?![\w/:-]|\.\w)", text, _I)
            if m and (best is None or (len(form), -m.start()) > (best[2], -best[1][0])):
                best = (tag, m.span(), len(form))
    return (best[0], best[1]) if best else None


def _find_model(text: str, tags: tuple[str, ...] = ()) -> tuple[str | None, list[tuple[int, int]], bool]:
    """The model the user names: a server tag found in the message (when the
    server's list is known), an explicit ``name:tag``, ``ollama run X``, then the
    first of a name the user typed (hyphenated, a GGUF file, the word after
    "model"/"模型") or a known family name (with a size such as ``7b`` joined
    as the tag)."""
    spans = []
    if tags:
        hit = _server_tag(text, tags)
        if hit:
            return hit[0], [hit[1]], True
    picks = []  # (rank, position, name): 0 switched to, 1 named, 2 a base
    for m in _TAG.finditer(text):
        name, tag = m.group(1), m.group(2)
        bare = name.rsplit("/", 1)[-1].lower()
        if bare in _NOT_MODEL_NAMES or tag.isdigit() or re.fullmatch(r"[\d.]+", name):
            continue
        if re.fullmatch(r"\d+(?:\.\d+)?\s*(?:g|gb|gib|mb|mib)", tag, _I):
            continue  # "VRAM:8GB" (a bare "m" is a model size: smollm2:360m, gemma3:270m)
        spans.append(m.span())
        before = text[max(0, m.start() - 30):m.start()]
        # (one switched to that then works, "换成 qwen2.5:7b 就好了", is the way out, not the trouble)
        switched = _SWITCH_BEFORE.search(before) and not _WORKS_AFTER.search(text[m.end():m.end() + 24])
        rank = 2 if _BASE_BEFORE.search(before) else 0 if switched else 1
        picks.append((rank, m.start(), _tidy_model(name, tag)))
    picks.sort()
    if picks and picks[0][0] < 2:
        return picks[0][2], spans, True
    base = picks[0][2] if picks else None  # only a base is named: the user's model is, when it has a name
    m = _OLLAMA_CMD.search(text)
    if m:
        word = m.group(1).rstrip(".,")
        if ":" in word:
            n, _, tg = word.partition(":")
            return _tidy_model(n, tg), spans + [m.span(1)], True
        return _tidy_model(word), spans + [m.span(1)], True
    candidates = []  # (start, end, name)
    for m in _GGUF.finditer(text):
        # a GGUF file name is spelled as on disk ("Qwen2.5-Coder-14B-Instruct-Q5_K_M.gguf")
        candidates.append((m.start(), m.end(), _tidy_model(m.group(1), keep_case=True)))
    for m in _TYPED.finditer(text):
        if _name_like(m.group(1)) and not any(s <= m.start() < e for s, e, _ in candidates):
            candidates.append((m.start(), m.end(), _tidy_model(m.group(1))))
    for m in _PLAIN_NAME.finditer(text):
        word = m.group(1)
        if (word.lower() not in _NOT_NAMES_AFTER_MODEL and word.lower() not in _NOT_MODEL_NAMES
                and _NAME_BEFORE.search(text[max(0, m.start() - 16):m.start()])
                and not any(s <= m.start() < e for s, e, _ in candidates)):
            candidates.append((m.start(), m.end(), _tidy_model(word)))
    for m in _BARE.finditer(text):
        inside = [c for c in candidates if c[0] <= m.start() and m.end() <= c[1]]
        if inside:
            # "qwen2.5-7b-instruct-q4_k_m": the whole typed name, unless it is
            # just the family and its size ("llama3.1-8b" is llama3.1:8b)
            s, e, _name = inside[0]
            if e - s <= m.end() - m.start() + 1:
                candidates.remove(inside[0])
            else:
                continue
        if any(s <= m.start() < e for s, e, _ in candidates):
            continue
        size = m.group(2)
        candidates.append((m.start(), m.end(), _tidy_model(m.group(1), size.lower() if size else None)))
    candidates = [c for c in candidates if not any(s <= c[0] < e for s, e in spans)]  # inside a base's tag
    if not candidates:
        return (base, spans, True) if base else (None, spans, False)
    candidates.sort()
    first = candidates[0]
    return first[2], spans + [(first[0], first[1])], False


# --------------------------------------------------------------------------- numbers

_ZH_NUM = {"一": 1, "二": 2, "两": 2, "俩": 2, "三": 3, "四": 4, "五": 5, "六": 6,
           "七": 7, "八": 8, "九": 9, "十": 10}
# counts and sizes people spell out ("two dozen agents", "eight gigs", "sixteen users")
_EN_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
             "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "sixteen": 16, "twenty": 20, "twenty-four": 24,
             "thirty": 30, "thirty-two": 32, "forty": 40, "forty-eight": 48, "fifty": 50, "eighty": 80,
             "a dozen": 12, "half a dozen": 6, "two dozen": 24, "three dozen": 36}
_EN_NUM = {**_EN_WORDS, "a couple of": 2, "a pair of": 2}
_EN_ALT = "|".join(sorted((re.escape(w) for w in _EN_WORDS), key=len, reverse=True))
# Chinese numerals run together: "二十", "十五", "一百"; "两三" (a range) counts as its larger end
_NUMWORD = r"(\d+|" + _EN_ALT + r"|[一二两俩三四五六七八九十百]+)"


def _zh_int(word: str) -> int | None:
    total, digit = 0, 0
    for ch in word:
        if ch in "十百":
            total += (digit or 1) * (10 if ch == "十" else 100)
            digit = 0
        elif ch in _ZH_NUM:
            digit = max(digit, _ZH_NUM[ch])
        else:
            return None
    return total + digit or None


def _count(word: str) -> int | None:
    word = re.sub(r"\s+", " ", word.strip().lower())
    if word.isdigit():
        return int(word)
    return _EN_NUM.get(word) or _zh_int(word)


_K = r"(\d+(?:\.\d+)?)\s?(k|K)?"
_CTX_WORD = (r"(?:ollama_context_length|context_length|num_ctx|n_ctx|ctx[-_ ]?size|--ctx-size|"
             r"context(?:[-_ ](?:window|length|size|len))?|上下文(?:长度|窗口)?|ctx)")
_NOT_TOKENS_AFTER = (r"(?!\s*(?:%|g\b|gb|gib|m\b|mb|mib|t\b|tb|个?\s*(?:人|用户|并发|请求)|"
                     r"users?\b|people\b|requests?\b|b\b|bit|层|layers?\b|[/／]s))")
_CTX_PATTERNS = [
    # "num_ctx 16384", "上下文开到 32k", "context of 8192", "context window to 32k"
    re.compile(_CTX_WORD + r"[^\d\n。.,;；!?]{0,14}?(?<![\w.])" + _K + r"(?!\w|\.\d)" + _NOT_TOKENS_AFTER, _I),
    # "32k 上下文", "8K context", "16k tokens of context", "128k 的上下文窗口"
    re.compile(r"(?<![\w.])" + _K + r"\s*(?:tokens?\s*(?:of\s*)?)?(?:的\s*)?(?:上下文|context|ctx)", _I),
    # "6000-token prompt", "32k tokens" (not speeds: "5 tokens/s", "每秒 3 个 token")
    re.compile(r"(?<![\w.])" + _K + r"[\s-]*(?:个\s*)?tokens?\b(?!\s*(?:/|per\b|每))", _I),
    # a bare "128k", "超过 8k": in this room a k-number is a context size
    re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(k|K)(?![a-zA-Z\d])(?!\s*(?:requests|users|downloads|stars|次|条))", _I),
    # llama.cpp's "-c 32768"
    re.compile(r"(?<![\w-])-c\s+(\d+)()\b"),
]
_WAN = re.compile(r"(\d+(?:\.\d+)?)\s*万\s*(?:个\s*)?(?:token|上下文)", _I)


def _ctx_value(number: str, k: str | None) -> int:
    value = float(number)
    return int(round(value * 1024)) if k else int(round(value))


def _find_ctx(text: str) -> int | None:
    """The largest context size named: the one that fails or the one wanted.
    ``k`` is 1024 (``32k`` -> 32768), as Ollama users mean it."""
    seen = []
    for i, rx in enumerate(_CTX_PATTERNS):
        for m in rx.finditer(text):
            if i == 2 and re.search(r"每秒\s*(?:只有|才|就)?\s*$", text[max(0, m.start() - 6):m.start()]):
                continue
            value = _ctx_value(m.group(1), m.group(2))
            if i == 0 and value >= 1 or value >= 128:
                seen.append(value)
    for m in _WAN.finditer(text):
        seen.append(int(round(float(m.group(1)) * 10000)))
    seen = [v for v in seen if v <= 10_000_000]
    return max(seen) if seen else None


_PAR_PATTERNS = [
    # "4 个并发", "4并发", "两个人同时用", "4 路并发", "二十多个人同时"; after a measure word any
    # short noun ("八个客服同时", "5 个分支并发", "两个 API client（n8n 和 Continue）同时"), but not
    # models or cards loaded together
    re.compile(r"(?<![A-Za-z0-9_])" + _NUMWORD + r"\s*(?:(?:多|几|来)?(?:个|路|位|名)\s*"
               r"(?:(?!(?:models?|gpus?|cards?)\b)[A-Za-z]+\s*){0,2}"
               r"(?:(?!模型|小时)[\u4e00-\u9fff]){0,3}?|(?:[A-Za-z]+\s*)?(?:人|用户|请求|客户端|会话|同事|应用|窗口)?)"
               r"\s*(?:[(（][^)）\n]{0,40}[)）])?\s*(?:同时|并发|一起(?!加载|载入|load)|并行)", _I),
    # "同时开 3 个会话", "同时 2 个请求"
    re.compile(r"同时\s*(?:开|发|跑|用)?\s*" + _NUMWORD + r"\s*(?:个|路)\s*(?:会话|请求|窗口|用户|人)"),
    # "3 users", "two browser tabs", "4 people", "4 at once", "two dozen agent workers", "two of us":
    # in this room a count of users is concurrency
    re.compile(r"\b" + _NUMWORD + r"\s+(?:concurrent\s+|parallel\s+|simultaneous\s+)?(?:[a-z]+\s+)?(?:users|people|ppl|folks|"
               r"clients|agents|workers|browser tabs|tabs|sessions|chats)\b|\b" + _NUMWORD + r"\s+(?:at once|of us)\b", _I),
    # "并发 4", "并发数设为4", "并行请求数: 2"
    re.compile(r"(?:并发|并行)(?:请求)?(?:数|量|数量)?\s*(?:设为|设成|设置为|设置成|开到|调到|改成|是|为|=|:|到|开)?\s*"
               + _NUMWORD + r"(?!\s*(?:g|gb|k|%))(?![多下旦直点些起上])", _I),
    # "4 concurrent users", "two simultaneous requests", "16 concurrency"
    re.compile(r"\b" + _NUMWORD + r"\s+(?:concurrent|simultaneous|parallel|concurrency)\b", _I),
    # "4 users at once", "3 requests at the same time", "12 threads at once" (threads alone are CPU threads)
    re.compile(r"\b" + _NUMWORD + r"\s+(?:users?|requests?|clients?|sessions?|people|ppl|folks|connections?|calls|threads|"
               r"workers|agents|processes)\s+"
               r"(?:\w+\s+){0,5}?(?:at once|at the same time|simultaneously|concurrently|in parallel)", _I),
    # "concurrency of 4", "OLLAMA_NUM_PARALLEL=4", "parallel 2", "--parallel 2"
    re.compile(r"(?:concurrency|parallelism|ollama_num_parallel|num_parallel|--parallel|(?<![\w-])parallel)"
               r"\s*(?:level\s*)?(?:of|=|:|to|is|at|set to|设成|设为|设置为|设置成|设到|改成|改为|调到|开到|是|为)?\s*(\d+)\b"
               r"(?!\s*(?:g|gb|k|%))", _I),
    re.compile(r"\b(a couple of|a pair of)\s+(?:concurrent|simultaneous|parallel)\b", _I),
    # "a second request while the first is still streaming": the second one makes two
    re.compile(r"\b(?:a|the)\s+(second|third|fourth)\s+(?:request|prompt|call|chat|user|client)"
               r"(?=[^.\n]{0,40}\bwhile\b)", _I),
]
_ORDINALS = {"second": 2, "third": 3, "fourth": 4}


def _find_parallel(text: str) -> int | None:
    seen = []
    for rx in _PAR_PATTERNS:
        for m in rx.finditer(text):
            word = next(g for g in m.groups() if g)
            n = _ORDINALS.get(word.lower()) or _count(word)
            if n and 1 <= n <= 1024:
                seen.append(n)
    return max(seen) if seen else None


# --------------------------------------------------------------------------- GPU and budget

_GPU_PATTERNS = [
    # NVIDIA consumer with prefix: "RTX 4060 Ti", "GTX1080ti", "RTX A6000", "RTX 6000 Ada", "RTX 4090D"
    re.compile(r"(?<![\w])(rtx|gtx)\s*-?\s*(a?\d{3,4})\s*(ti\s*super|ti|super|ada|d)?(?![\w])", _I),
    # datacenter / workstation: "A100", "H100 80G", "Tesla T4", "L40S"; a plural counts ("two A6000s")
    re.compile(r"(?<![\w])(?:tesla\s+)?(a100|a800|h100|h200|h800|h20|v100|a10g?|a30|a40|a6000|a5500|a5000|a4500|"
               r"a4000|a2000|l40s?|l4|t4|p40|p100|k80)s?(?![\w])", _I),
    # AMD: "RX 7900 XTX", "7900xtx", "MI300X"
    re.compile(r"(?<![\w])(?:rx\s*)?(\d{4})\s*(xtx|xt)(?![\w])|(?<![\w])(rx)\s*(\d{4})(?![\w])"
               r"|(?<![\w])(mi\d{3}x?)(?![\w])", _I),
    # Apple silicon (unified memory): "M2 Max", "M3 Ultra", "Mac mini M4", "Mac mini M4 Pro"
    re.compile(r"(?<![\w])(m[1-4])\s*(pro|max|ultra)(?![\w])"
               r"|(?:mac\s*(?:book\s*(?:pro|air)?|mini|studio)?|apple)\s*(m[1-4])(?:\s*(pro|max|ultra))?(?![\w])", _I),
    # Intel Arc, with the brand or (the desktop cards) without: "Arc A770", "A770 16G"
    re.compile(r"(?<![\w])arc\s*(a\d{3})(?![\w])|(?<![\w])(a(?:770|750|580|380|310))(?![\w])", _I),
    # bare NVIDIA numbers: "4060", "3090ti", "2080 super", "4090D" (not 4096: only real models)
    re.compile(r"(?<![\w.])((?:10[5-8]|16[56]|20[6-8]|30[5-9]|40[6-9]|50[6-9])0)\s*(ti\s*super|ti|super|d)?s?(?!\w|\.\d)"
               r"(?!\s*(?:k\b|tokens?|mib|mb|个|人))", _I),
]


# laptop and embedded NVIDIA parts, tidied as written ("MX450", "Jetson Orin")
_GPU_PATTERNS.append(re.compile(r"(?<![\w])(mx\d{3}|jetson(?:\s+(?:orin|nano|xavier|agx|tx2))*)(?![\w])", _I))
# AMD integrated graphics and workstation cards named with "Radeon": "Radeon 780M", "Radeon Pro W7900"
_GPU_PATTERNS.append(re.compile(r"(?<![\w])radeon\s+(\d{3}m|(?:pro\s+)?w\d{4}|vii)(?![\w])", _I))


def _suffix(word: str | None) -> str:
    if not word:
        return ""
    word = word.lower()
    if word == "ada":
        return " Ada"
    if word == "d":  # the China-market "4090D" is one word
        return "D"
    return " Ti Super" if word.startswith("ti") and word.endswith("super") else " Super" if word == "super" else " Ti"


def _tidy_gpu(i: int, m: re.Match) -> str:
    g = m.groups()
    if i == 0:
        return f"{g[0].upper()} {g[1].upper()}{_suffix(g[2])}"
    if i == 1:
        return m.group(1).upper()
    if i == 2:
        if g[0]:
            return f"RX {g[0]} {g[1].upper()}"
        if g[2]:
            return f"RX {g[3]}"
        return g[4].upper()
    if i == 3:
        if g[0]:
            return f"{g[0].upper()} {g[1].capitalize()}"
        return g[2].upper() + (f" {g[3].capitalize()}" if g[3] else "")
    if i == 4:
        return f"Arc {g[0].upper()}" if g[0] else g[1].upper()
    if i == 6:
        return g[0].upper() if g[0].lower().startswith("mx") else " ".join(w.capitalize() for w in g[0].split())
    if i == 7:
        return "Radeon " + " ".join(w.capitalize() if w.lower() == "pro" else w.upper() for w in g[0].split())
    return g[0] + _suffix(g[1])


def _find_gpus(text: str) -> list[tuple[int, int, str]]:
    hits = []
    for i, rx in enumerate(_GPU_PATTERNS):
        for m in rx.finditer(text):
            if any(s <= m.start() < e for s, e, _ in hits):
                continue
            hits.append((m.start(), m.end(), _tidy_gpu(i, m)))
    hits.sort()
    return hits


# "8G", "8 GB", "8 gigs", "eight gigs", "2 个 G", "十一个G", "500 兆", "350M": one unit word per spelling
_SIZE = (r"(\d+(?:\.\d+)?|(?<![a-z])(?:" + _EN_ALT + r")(?=[\s-])|[一二两三四五六七八九十百]+)[\s-]*(?:个\s*)?"
         r"(gib|gigabytes?|gigs?|gb|g|mib|megabytes?|megs?|mb|m|兆|tib|tb)(?![a-z])")
_UNIT_WORDS = {"gigabyte": "g", "gigabytes": "g", "gig": "g", "gigs": "g", "megabyte": "m", "megabytes": "m",
               "meg": "m", "megs": "m", "兆": "m"}
_GPU_AFTER = (r"\s*(?:的)?\s*(?:显存|显卡|卡|vram|gpu|graphics card|card|video memory|of vram|of gpu memory|"
              r"of video memory|of (?:the |my |its )?(?:unified memory|vram|gpu memory|video memory)|gpu memory|unified memory|统一内存|mac|across (?:two|both|\d+|several) (?:cards|gpus))")
_GPU_BEFORE = (r"(?:显存|vram|gpu memory|video memory|显卡|gpu|\bcard|unified memory|统一内存)\s*(?:大小|容量|总共|一共|上限|最大)?\s*"
               r"(?:是|为|有|只有|才|仅|仅有|就|:|=|is|of|only|just|has|have|total|=)?\s*(?:only|just|about|around|大概|约)?\s*")
_FREE_AFTER = (r"\s*(?:左右|上下|多|of\s+(?:vram|gpu memory)\s+)?\s*(?:of\s+)?(?:free|available|left|headroom|spare|"
               r"(?:is\s+|are\s+)?usable|可用|剩余|空闲|能用|可以用)")
_FREE_BEFORE = (r"(?:剩余|可用|空闲|还剩|剩下|只剩|剩|还有|留了|留给\s*\S{0,8}?|只能给\s*\S{0,8}?用|只分给我|"
                r"最多(?:只能)?(?:用|给|占)?|只能(?:用|占)|只用|(?:不能|不要|别|不可以)?超过|不超过|free|available|"
                r"only may use|may use|can use|at most|no more than|up to|fit (?:in|into|within|under)|"
                # what someone hands ollama: "给 ollama 分了 6G", "ollama is allowed 30GB", "should only use 18GB"
                # ("I only use 8GB models" is not one)
                r"给\s*\S{0,10}?\s*分(?:配)?了|分(?:给|配给)\s*\S{0,8}?|(?:should|may|can|could|will)\s+only\s+use|"
                r"only\s+gets?\s+to\s+use|allowed(?:\s+to\s+use)?|(?:is|are|was|were|been)\s+given|allotted|"
                r"(?:keep|stay|stays|kept)\s+(?:it\s+|ollama\s+|the model\s+)?(?:under|below|within))"
                r"\s*(?:显存|vram)?\s*(?:只有|有|是|大概|约|:|=|only|just|is|about)?\s*")
# a MIG slice, a quota: the part of a shared card that is the user's
_BUDGET_WORD = (r"(?:--budget|budget|预算|限制在|限制为|limit(?:ed)? to|cap(?:ped)? at|capped to|\bslice|\bquota|"
                r"\bpartition|配额|份额)\s*(?:of|to|is|=|:|是|为|有)?\s*")
_BUDGET_PATTERNS = [
    re.compile(r"(?<![\w.])" + _SIZE + _GPU_AFTER, _I),
    re.compile(_GPU_BEFORE + _SIZE, _I),
    re.compile(r"(?<![\w.])" + _SIZE + _FREE_AFTER, _I),
    re.compile(_FREE_BEFORE + _SIZE, _I),
    re.compile(_BUDGET_WORD + _SIZE, _I),
    re.compile(r"(?<![\w.])" + _SIZE + r"\s*(?:budget|max(?:imum)?\b|at most|的预算|以内|封顶)", _I),
    # the card's total as a tool reports it: "The card reports 23.6 GiB total" ("the GPU uses 10GB total" is usage)
    re.compile(r"(?:\bcard|\bgpu|\bvram|显卡|显存|nvidia-smi)[^.\n。,;]{0,20}?(?<![\w.])" + _SIZE
               + r"\s*(?:total|in total|总量|总共)", _I),
]
_SIZE_NEAR_GPU = re.compile(r"^\s*(?:的|,|with|w/|\(|（|has|have|had|got|is|有|是)?\s*" + _SIZE, _I)
_SIZE_BEFORE_GPU = re.compile(r"(?<![\w.])" + _SIZE + r"\s*(?:的|版|版本)?\s*$", _I)
# "用了 7G 显存", "needs 10GB VRAM": usage or a requirement, not what the card has
_USAGE_BEFORE = re.compile(
    r"(?:占用|用了|使用了?|占了|占着|吃了|吃掉|涨到|需要|要|uses|using|used|takes|took|eats|holds|needs?|requires?|allocat\w*|"
    r"shows?|显示|loads?|of)\s*(?:了)?\s*(?:about|around|大概|约|almost|nearly)?\s*$",
    _I,
)
# "nvidia-smi shows 7400MiB free": a reading of what is free is the budget, though "shows 7G" alone is usage
_SHOWN_BEFORE = re.compile(r"(?:shows?|showed|显示|reports?)\s*(?:about|around|大概|约|almost|nearly)?\s*$", _I)
_RAM_NEAR = re.compile(r"(?<!显)(?:\bram\b|内存|system memory|系统内存)", _I)


def _bytes(number: str, unit: str) -> int | None:
    if not number[0].isdigit():
        number = str(_EN_NUM.get(number.lower()) or _zh_int(number) or "")
    try:
        return parse_size(f"{number}{_UNIT_WORDS.get(unit.lower(), unit)}")
    except SizeError:
        return None


_LONE_SIZE = re.compile(r"^\s*(?:about|around|大概|约|只有|有)?\s*" + _SIZE + r"\s*(?:左右|上下)?\s*$", _I)


def size_of(text: str) -> int | None:
    """Bytes of a size said on its own, as people write it ("8 gigs", "500 兆",
    "2 个 G"); None when ``text`` is not just a size."""
    m = _LONE_SIZE.match(_normalise(str(text)))
    return _bytes(m.group(1), m.group(2)) if m else None


def _find_budget(text: str, gpus) -> int | None:
    """GPU memory the user has, or may use: the smallest amount they name next
    to a GPU word, a GPU name, "free" or "budget" (system RAM is not a budget)."""
    seen = []
    for i, rx in enumerate(_BUDGET_PATTERNS):
        for m in rx.finditer(text):
            before = text[max(0, m.start(1) - 14):m.start(1)]  # before the size, not the card word
            if i in (0, 2, 6) and _USAGE_BEFORE.search(before) and not (i in (2, 6) and _SHOWN_BEFORE.search(before)):
                continue
            if i in (2, 3) and _RAM_NEAR.search(text[max(0, m.start() - 16):m.end() + 8]):
                continue
            seen.append(_bytes(m.group(1), m.group(2)))
    for start, end, _name in gpus:
        after = _SIZE_NEAR_GPU.match(text[end:end + 16])
        if after:
            seen.append(_bytes(after.group(1), after.group(2)))
        before = _SIZE_BEFORE_GPU.search(text[max(0, start - 14):start])
        if before:
            seen.append(_bytes(before.group(1), before.group(2)))
    seen = [v for v in seen if v and v >= 256 << 20]  # below 256 MiB it is not a GPU
    return min(seen) if seen else None


_SHARE = re.compile(
    r"(?<![\d.])(\d{1,3}(?:\.\d+)?)\s*%\s*(?:的)?\s*(?:of\s+(?:the\s+|my\s+)?)?(?:显存|显卡|vram|gpu|card|device|memory)"
    r"|(?:只能用|只用|最多用|可以用|may use|can use|only (?:may )?use|use at most|limit(?:ed)? to|budget(?: of| is)?)"
    r"\s*(?:the\s+)?(\d{1,3}(?:\.\d+)?)\s*%"
    # a fraction in words: "lets me use half the card", "只能用一半显存"
    r"|(?:use|using|get|have)\s+(?:only\s+|at most\s+)?(half|a third|a quarter)\s+(?:of\s+)?(?:the\s+|my\s+|this\s+)?"
    r"(?:card|gpu|vram|device|gpu memory)\b"
    r"|(?:只能|最多|只|可以)(?:用|占|分到)\s*(一半|三分之一|四分之一)\s*(?:的)?\s*(?:显存|显卡)"
    r"|(?:显存|显卡)\s*(?:只能|最多|只)(?:用|占|分到)\s*(一半|三分之一|四分之一)"
    # the card first, then the share: "最多只能占整张 A100 的 40%"
    r"|(?:只能|最多|只|可以)(?:只能)?(?:用|占|使用|分到)\s*[^,。;\n%]{0,14}?的\s*(\d{1,3}(?:\.\d+)?)\s*%", _I)
# "ollama ps showed phi4 at 11 GB, 100% GPU": a reading of where a model runs, not a share to keep to
_READING_BEFORE = re.compile(r"ollama\s+ps|processor|nvidia-smi|shows?\b|showed|显示|reports?\b", _I)
_FRACTIONS = {"half": 50, "a third": 100 / 3, "a quarter": 25, "一半": 50, "三分之一": 100 / 3, "四分之一": 25}


def _find_share(text: str) -> tuple[float | None, bool]:
    """A budget given as a share of the device ("只能用 80% 的显存", "60% of the GPU"),
    and whether it was said as what the user may use ("use half the card"): that
    share is of the card, so it outranks the card's own size."""
    for m in _SHARE.finditer(text):
        if m.group(1) and _READING_BEFORE.search(re.split(r"[.。;；\n]", text[max(0, m.start() - 60):m.start()])[-1]):
            continue
        word = m.group(3) or m.group(4) or m.group(5)
        value = _FRACTIONS[word.lower()] if word else float(m.group(1) or m.group(2) or m.group(6))
        if 0 < value <= 100:
            return value / 100, m.group(1) is None
    return None, False


_ZH_DIGITS = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10, "半": 0.5}
# Tokens per unit of length, for a context given as a length of text. An
# estimate, and meant to err high (running out is worse than reserving more):
# a CJK character is about one token in Llama/Qwen tokenizers; English runs
# about four characters or three quarters of a word per token.
TOKENS_PER_ZH_CHAR = 1.0
CHARS_PER_EN_TOKEN = 4.0
TOKENS_PER_EN_WORD = 4 / 3
_ZH_CHARS = re.compile(r"([\d.]+|[一二两三四五六七八九十半]+)\s*(万|千)?(?:\s*([\d一二两三四五六七八九])\s*(?:千|百)?)?"
                       r"\s*(?:多)?\s*(?:个)?\s*字")
_EN_LENGTH = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s*(k)?[- ]?(characters?|chars|words?)\b", _I)


def _zh_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        pass
    if text == "十":
        return 10
    if len(text) == 1:
        return _ZH_DIGITS.get(text)
    if len(text) == 2 and text[0] == "十":
        return 10 + _ZH_DIGITS.get(text[1], 0)
    if len(text) == 2 and text[1] == "十":
        return _ZH_DIGITS.get(text[0], 0) * 10
    return None


def _estimate_ctx(text: str) -> int | None:
    """Tokens estimated from a length of text ("三万字的报告", "a 50,000 character
    log", "a 20k-word transcript"); None when no length is given."""
    seen = []
    for m in _ZH_CHARS.finditer(text):
        n = _zh_number(m.group(1))
        if n:
            n *= {"万": 10000, "千": 1000}.get(m.group(2), 1)
            if m.group(2) and m.group(3):  # the next place down: "一万五千" 15000, "三千五" 3500
                n += _zh_number(m.group(3)) * {"万": 1000, "千": 100}[m.group(2)]
            if n >= 500:
                seen.append(n * TOKENS_PER_ZH_CHAR)
    for m in _EN_LENGTH.finditer(text):
        n = float(m.group(1).replace(",", "")) * (1000 if m.group(2) else 1)
        tokens = n / CHARS_PER_EN_TOKEN if m.group(3).lower().startswith("char") else n * TOKENS_PER_EN_WORD
        if tokens >= 128:
            seen.append(tokens)
    return int(round(max(seen))) if seen else None


# --------------------------------------------------------------------------- keep context

_CTX_OBJ = r"(?:上下文|context|num_ctx|ctx|context window|context length)"
_KEEP_TRUE = [
    re.compile(r"(?:不能|不可以|不想|不愿意|没法|无法|不允许|不可能)(?:再)?(?:减少|降低|缩小|缩短|缩减|减小|调小|调低|砍|减|降|牺牲)\s*(?:掉)?\s*"
               + _CTX_OBJ, _I),
    # "上下文一点都不能少": a degree word may sit between the context and the refusal
    re.compile(_CTX_OBJ + r"(?:长度|大小)?\s*(?:是)?(?:一点|一丁点|半点|一个\s*token)?\s*(?:都|也)?"
               r"(?:不能|不可以|不想|没法|无法|不允许|不能再)(?:再)?(?:减少|降低|缩小|缩短|减小|调小|调低|少|小|减|降|低于|动|改)", _I),
    re.compile(r"(?:必须|一定要|至少要?|起码|不能少于|不能低于|(?<!不)需要)\s*(?:保持|保留|要|是|用|有|开到)?\s*"
               r"(?:\d+(?:\.\d+)?\s*[kK万]\s*(?:的)?\s*)?" + _CTX_OBJ, _I),
    re.compile(_CTX_OBJ + r"\s*(?:必须|一定要|至少|最少|起码|不能少于|不能低于)", _I),
    re.compile(r"(?:必须|一定要)\s*(?:保持|保留|要|用)\s*\d+(?:\.\d+)?\s*[kK万]|不能再(?:少|小|低|减|降)", _I),
    re.compile(r"(?:can't|cannot|can not|couldn't|won't|don't want to|do not want to|unable to|not allowed to|"
               r"must not|mustn't)\s+(?:go\s+)?(?:reduce|lower|decrease|shrink|cut|drop|sacrifice|touch|change)\s+"
               r"(?:the\s+|my\s+|our\s+)?" + _CTX_OBJ, _I),
    re.compile(r"(?:can't|cannot|can not|won't|must not)\s+go\s+(?:below|under|lower than)\s+\d", _I),
    re.compile(r"must\s+(?:keep|have|stay at|retain|use|be)\s+(?:the\s+|a\s+|at least\s+|full\s+)*"
               r"(?:\d+(?:\.\d+)?k\s+)?(?:tokens?\s+(?:of\s+)?)?" + _CTX_OBJ, _I),
    re.compile(r"(?:need|needs|require|requires|really need)\s+(?:the\s+|a\s+)?(?:full\s+|at least\s+|all\s+)?"
               r"(?:\d+(?:\.\d+)?k|\d{4,})\b"
               r"(?!\s*(?:users|people|requests|gb|g\b|gib))", _I),
    re.compile(r"(?:need|needs|require|requires)\s+(?:the\s+|a\s+)?(?:full|long|large|big)\s+(?:window\b|" + _CTX_OBJ + ")", _I),
    # "不想再往小了调", "能不能保持 128k 不降": the size it has now must stay
    re.compile(r"(?:不想|不能|不愿意|不可以|没法)(?:再)?往(?:小|低|下)(?:了|里)?(?:调|改|降|减|砍)", _I),
    re.compile(r"(?:保持|维持|保住)\s*(?:在)?\s*(?:\d+(?:\.\d+)?\s*[kK万]?\s*(?:的)?\s*)?(?:上下文|context)?\s*不(?:降|减|变|动|缩)", _I),
    re.compile(_CTX_OBJ + r"\s+(?:must|has to|needs to|should)\s+(?:stay|remain|be kept|be at least)", _I),
    re.compile(r"\bat least\s+\d+(?:\.\d+)?k\b", _I),
    re.compile(r"keep\s+(?:the\s+|my\s+)?(?:full\s+)?(?:\d+k\s+)?" + _CTX_OBJ, _I),
    re.compile(_CTX_OBJ + r"\s+is\s+non-negotiable", _I),
]
_KEEP_FALSE = [
    re.compile(r"(?<![不没无])(?:可以|能|愿意|允许)(?:适当)?(?:减少|降低|缩小|减小|调小|调低|牺牲|减|降)(?:一点|一些|些)?\s*" + _CTX_OBJ, _I),
    re.compile(_CTX_OBJ + r"(?:长度)?\s*(?:可以|能|也可以)(?:适当)?(?:减|降|小|少|调|缩)", _I),
    re.compile(r"(?:不需要|用不到|不用|用不着)\s*(?:那么长|\d+\s*[kK])", _I),
    re.compile(r"\d+\s*[kK]\s*(?:的上下文)?\s*(?:就)?(?:够了|够用|足够)", _I),
    re.compile(_CTX_OBJ + r"\s*(?:无所谓|不重要|短一点也行|小一点也行)", _I),
    # "context 短一点没关系"
    re.compile(_CTX_OBJ + r"\s*(?:短|小)(?:一点|一些|点|些)?\s*(?:也)?(?:没关系|没事|无所谓|行|可以|ok|没问题|能接受)", _I),
    # "I'd happily take a smaller context"
    re.compile(r"(?:take|accept|live with|settle for|go with|use)\s+(?:a\s+)?(?:smaller|shorter|lower|reduced)\s+"
               + _CTX_OBJ, _I),
    # "context 降到 8k 也 OK", "上下文减到 4k 也可以": a smaller size the user accepts
    re.compile(_CTX_OBJ + r"\s*(?:可以)?(?:降到|减到|缩到|调到|改成|改到|设成|砍到)\s*\d+(?:\.\d+)?\s*[kK]?\s*(?:的话)?\s*"
               r"(?:也|都)?\s*(?:ok|okay|行|可以|没问题|没事|无所谓|能接受|接受)", _I),
    re.compile(r"(?:can|could|happy to|willing to|ok to|okay to|fine to|don't mind to|free to)\s+(?:\w+\s+)?"
               r"(?:reduce|lower|decrease|shrink|cut|drop)\b", _I),
    re.compile(r"(?:don't|do not|doesn't|does not)\s+(?:really\s+)?need\s+"
               r"(?:\d+k|the full|that much|a long|long|a big|big|large)", _I),
    re.compile(r"\d+k\s+(?:is|would be|will be)\s+(?:enough|fine|plenty|ok|okay)", _I),
    re.compile(r"(?:smaller|shorter|less)\s+" + _CTX_OBJ + r"\s+(?:is|would be)\s+(?:fine|ok|okay|acceptable)", _I),
    re.compile(_CTX_OBJ + r"\s+(?:doesn't|does not)\s+matter", _I),
]


def _find_keep_context(text: str) -> bool | None:
    if any(rx.search(text) for rx in _KEEP_TRUE):
        return True
    if any(rx.search(text) for rx in _KEEP_FALSE):
        return False
    return None


# --------------------------------------------------------------------------- parse / merge

def parse(text: str, tags: list[str] | None = None) -> Intake:
    """Read one message. ``tags`` are the models the server has (``/api/tags``
    names), when one is reachable: a name from that list found in the message
    is the model, as the server spells it. Never raises for a ``str``; anything
    else is read as empty."""
    if not isinstance(text, str):
        text = ""
    original = text
    try:
        return _parse(original, tuple(tags or ()))
    except Exception:  # noqa: BLE001 - the contract: intake never fails the chat
        if os.environ.get("OOMVET_RAISE"):  # tests: see the real bug, as the CLI does
            raise
        return Intake(lang=_safe_lang(original), text=original)


def _safe_lang(text: str) -> str:
    try:
        return detect_lang(text)
    except Exception:  # noqa: BLE001
        return "en"


_LONG_DIGITS = re.compile(r"\d{16,}")


def _parse(original: str, tags: tuple[str, ...] = ()) -> Intake:
    norm = _normalise(original)
    error, error_spans = _find_error(norm)
    # no size, context or count has 16 digits; hiding such runs (hashes, pasted
    # tensors) also keeps every number pattern linear in the length of a paste
    scrubbed = _blank(norm, error_spans + [m.span() for m in _LONG_DIGITS.finditer(norm)])
    model, model_spans, model_sure = _find_model(scrubbed, tags)
    numbers = _blank(scrubbed, model_spans)  # "phi3:3.8b-mini-128k" is a name, not a context
    gpus = _find_gpus(numbers)
    no_gpus = _blank(numbers, [(s, e) for s, e, _ in gpus])
    want_ctx = _find_ctx(no_gpus)
    estimated = None
    if want_ctx is None:
        estimated = _estimate_ctx(no_gpus)
    else:
        guess = _estimate_ctx(no_gpus)
        if guess and guess > want_ctx:
            estimated = guess
    want_parallel = _find_parallel(numbers)
    budget = _find_budget(numbers, gpus)
    share, allowed = _find_share(numbers)
    if allowed:
        budget = None
    elif budget is not None:
        share = None
    when, what, phase, cue = read_symptom(norm, numbers, error, want_parallel)
    return Intake(
        lang=detect_lang(original),
        phase=phase,
        model=model,
        want_ctx=estimated or want_ctx,
        want_parallel=want_parallel,
        budget=budget,
        gpu=gpus[0][2] if gpus else None,
        error=error,
        keep_context=_find_keep_context(numbers),
        text=original,
        phase_cue=cue,
        when=when,
        what=what,
        budget_share=share,
        ctx_estimated=bool(estimated),
        weak=tuple(name for name, guessed in (("model", model is not None and not model_sure),
                                               ("want_ctx", bool(estimated)),
                                               ("phase", when == "unknown")) if guessed),
    )


def merge(base: Intake, newer: Intake) -> Intake:
    """A chat is several messages: what ``newer`` says overrides, what it leaves
    out is kept. The language stays the one of the first message that had words."""
    changes = {name: getattr(newer, name) for name in INTAKE_FIELDS if getattr(newer, name) is not None}
    if newer.want_ctx is not None:
        changes["ctx_estimated"] = newer.ctx_estimated
    if newer.budget is not None:
        changes["budget_share"] = None
    elif newer.budget_share is not None:
        changes["budget"] = None
    if newer.phase != "unknown":
        changes.update(phase=newer.phase, phase_cue=newer.phase_cue, when=newer.when, what=newer.what)
    if not has_words(base.text):
        changes["lang"] = newer.lang
    changes["text"] = "\n".join(part for part in (base.text, newer.text) if part)
    return replace(base, **changes)
