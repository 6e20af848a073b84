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
from probes.units import SizeError, parse_size
from rules.facts import PHASES, validate

__all__ = ["Intake", "detect_lang", "parse", "merge", "normalise_model", "phase_text", "has_words", "INTAKE_FIELDS"]


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


MSG = catalog({
    "intake.phase.load": {
        "en": "fails while loading the model (the weights may not fit)",
        "zh": "加载模型时就失败（可能是权重放不下）",
    },
    "intake.phase.long_input": {
        "en": "works with short input, fails with long input or a large context (KV cache)",
        "zh": "短输入正常，长输入或大上下文时失败（KV 缓存）",
    },
    "intake.phase.concurrent": {
        "en": "fails when several requests run at once",
        "zh": "多个请求同时运行时失败",
    },
    "intake.phase.slow": {
        "en": "runs very slowly, partly or fully on the CPU",
        "zh": "运行很慢，部分或全部跑在 CPU 上",
    },
    "intake.phase.creeping": {
        "en": "memory keeps growing over time or is not released",
        "zh": "显存随时间一直增长或不释放",
    },
    "intake.phase.crash": {
        "en": "crashes with an error not yet tied to a phase",
        "zh": "报错崩溃，尚不清楚发生在哪个阶段",
    },
    "intake.phase.unknown": {
        "en": "not clear yet when it fails",
        "zh": "还不清楚何时出问题",
    },
})


def phase_text(phase: str, lang: str | None = None) -> str:
    """One line saying what a phase means, in ``lang``."""
    return t(f"intake.phase.{phase if phase in PHASES else 'unknown'}", lang)


# the fields a message can speak to; merge() and intake_llm.combine() walk these
INTAKE_FIELDS = ("model", "want_ctx", "want_parallel", "budget", "gpu", "error", "keep_context")


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


def _tidy_model(name: str, tag: str | None = None) -> str:
    name = name.strip().rstrip(".-")
    if "/" not in name:  # Ollama library names are case-insensitive; a hf.co repo path is not
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


def _find_model(text: str) -> tuple[str | None, list[tuple[int, int]]]:
    """First model the user names: an explicit ``name:tag``, then ``ollama run X``,
    then a known family name (with a size such as ``7b`` joined as the tag)."""
    spans = []
    found = None
    for m in _TAG.finditer(text):
        name, tag = m.group(1), m.group(2)
        bare = name.rsplit("/", 1)[-1].lower()
        if bare in _NOT_MODEL_NAMES or tag.isdigit() or re.fullmatch(r"[\d.]+", name):
            continue
        if re.fullmatch(r"\d+(?:\.\d+)?\s*(?:g|gb|gib|m|mb|mib)", tag, _I):
            continue  # "VRAM:8GB"
        spans.append(m.span())
        found = found or _tidy_model(name, tag)
    if found:
        return found, spans
    m = _OLLAMA_CMD.search(text)
    if m:
        word = m.group(1).rstrip(".,")
        if ":" in word:
            n, _, tg = word.partition(":")
            return _tidy_model(n, tg), [m.span(1)]
        return _tidy_model(word), [m.span(1)]
    for m in _BARE.finditer(text):
        spans.append(m.span())
        size = m.group(2)
        return _tidy_model(m.group(1), size.lower() if size else None), spans
    return None, spans


# --------------------------------------------------------------------------- numbers

_ZH_NUM = {"一": 1, "二": 2, "两": 2, "俩": 2, "三": 3, "四": 4, "五": 5, "六": 6,
           "七": 7, "八": 8, "九": 9, "十": 10}
_EN_NUM = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a pair of": 2}
_NUMWORD = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten|[一二两俩三四五六七八九十])"


def _count(word: str) -> int | None:
    word = word.strip().lower()
    if word.isdigit():
        return int(word)
    return _ZH_NUM.get(word) or _EN_NUM.get(word)


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
    # "4 个并发", "4并发", "两个人同时用", "4 路并发", "3 个用户同时"
    re.compile(r"(?<![A-Za-z0-9_])" + _NUMWORD + r"\s*(?:个|路|位|名)?\s*(?:人|用户|请求|客户端|会话)?\s*(?:同时|并发|一起用|并行)"),
    # "并发 4", "并发数设为4", "并行请求数: 2"
    re.compile(r"(?:并发|并行)(?:请求)?(?:数|量|数量)?\s*(?:设为|设成|设置为|设置成|开到|调到|改成|是|为|=|:|到|开)?\s*"
               + _NUMWORD + r"(?!\s*(?:g|gb|k|%))(?![多下旦直点些起])", _I),
    # "4 concurrent users", "two simultaneous requests"
    re.compile(r"\b" + _NUMWORD + r"\s+(?:concurrent|simultaneous|parallel)\b", _I),
    # "4 users at once", "3 requests at the same time"
    re.compile(r"\b" + _NUMWORD + r"\s+(?:users?|requests?|clients?|sessions?|people|connections?|calls)\s+"
               r"(?:\w+\s+){0,5}?(?:at once|at the same time|simultaneously|concurrently|in parallel)", _I),
    # "concurrency of 4", "OLLAMA_NUM_PARALLEL=4", "parallel 2", "--parallel 2"
    re.compile(r"(?:concurrency|parallelism|ollama_num_parallel|num_parallel|--parallel|(?<![\w-])parallel)"
               r"\s*(?:level\s*)?(?:of|=|:|to|is|at|set to)?\s*(\d+)\b(?!\s*(?:g|gb|k|%))", _I),
    re.compile(r"\b(a couple of|a pair of)\s+(?:concurrent|simultaneous|parallel)\b", _I),
]


def _find_parallel(text: str) -> int | None:
    seen = []
    for rx in _PAR_PATTERNS:
        for m in rx.finditer(text):
            n = _count(m.group(1))
            if n and 1 <= n <= 1024:
                seen.append(n)
    return max(seen) if seen else None


# --------------------------------------------------------------------------- GPU and budget

_GPU_PATTERNS = [
    # NVIDIA consumer with prefix: "RTX 4060 Ti", "GTX1080ti", "RTX A6000"
    re.compile(r"(?<![\w])(rtx|gtx)\s*-?\s*(a?\d{3,4})\s*(ti\s*super|ti|super)?(?![\w])", _I),
    # datacenter / workstation: "A100", "H100 80G", "Tesla T4", "L40S"
    re.compile(r"(?<![\w])(?:tesla\s+)?(a100|a800|h100|h200|h800|h20|v100|a10g?|a30|a40|a6000|a5000|a4000|"
               r"l40s?|l4|t4|p40|p100|k80)(?![\w])", _I),
    # AMD: "RX 7900 XTX", "7900xtx", "MI300X"
    re.compile(r"(?<![\w])(?:rx\s*)?(\d{4})\s*(xtx|xt)(?![\w])|(?<![\w])(rx)\s*(\d{4})(?![\w])"
               r"|(?<![\w])(mi\d{3}x?)(?![\w])", _I),
    # Apple silicon (unified memory): "M2 Max", "M3 Ultra", "Mac mini M4"
    re.compile(r"(?<![\w])(m[1-4])\s*(pro|max|ultra)(?![\w])"
               r"|(?:mac\s*(?:book\s*(?:pro|air)?|mini|studio)?|apple)\s*(m[1-4])(?![\w])", _I),
    # Intel Arc
    re.compile(r"(?<![\w])arc\s*(a\d{3})(?![\w])", _I),
    # bare NVIDIA numbers: "4060", "3090ti", "2080 super" (not 4096: only real models)
    re.compile(r"(?<![\w.])((?:10[5-8]|16[56]|20[6-8]|30[5-9]|40[6-9]|50[6-9])0)\s*(ti\s*super|ti|super)?(?!\w|\.\d)"
               r"(?!\s*(?:k\b|tokens?|mib|mb|个|人))", _I),
]


def _suffix(word: str | None) -> str:
    if not word:
        return ""
    word = word.lower()
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
        return g[2].upper()
    if i == 4:
        return f"Arc {g[0].upper()}"
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


_SIZE = r"(\d+(?:\.\d+)?)\s*(?:个\s*)?(gib|gb|g|mib|mb|m|tib|tb)(?![a-z])"
_GPU_AFTER = (r"\s*(?:的)?\s*(?:显存|显卡|卡|vram|gpu|graphics card|card|video memory|of vram|of gpu memory|"
              r"of video memory|gpu memory|unified memory|统一内存|mac)")
_GPU_BEFORE = (r"(?:显存|vram|gpu memory|video memory|显卡|gpu|unified memory|统一内存)\s*(?:大小|容量|总共|一共)?\s*"
               r"(?:是|为|有|只有|才|仅|仅有|就|:|=|is|of|only|just|has|total|=)?\s*(?:only|just|about|around|大概|约)?\s*")
_FREE_AFTER = r"\s*(?:of\s+(?:vram|gpu memory)\s+)?(?:free|available|left|可用|剩余|空闲)"
_FREE_BEFORE = r"(?:剩余|可用|空闲|free|available)\s*(?:显存|vram)?\s*(?:只有|有|是|:|=|only|just|is)?\s*"
_BUDGET_WORD = r"(?:--budget|budget|预算|限制在|限制为|limit(?:ed)? to|cap(?:ped)? at)\s*(?:of|to|is|=|:)?\s*"
_BUDGET_PATTERNS = [
    re.compile(r"(?<![\w.])" + _SIZE + _GPU_AFTER, _I),
    re.compile(_GPU_BEFORE + _SIZE, _I),
    re.compile(r"(?<![\w.])" + _SIZE + _FREE_AFTER, _I),
    re.compile(_FREE_BEFORE + _SIZE, _I),
    re.compile(_BUDGET_WORD + _SIZE, _I),
]
_SIZE_NEAR_GPU = re.compile(r"^\s*(?:的|,|with|w/|\(|（)?\s*" + _SIZE, _I)
_SIZE_BEFORE_GPU = re.compile(r"(?<![\w.])" + _SIZE + r"\s*(?:的|版|版本)?\s*$", _I)
# "用了 7G 显存", "needs 10GB VRAM": usage or a requirement, not what the card has
_USAGE_BEFORE = re.compile(
    r"(?:占用|用了|使用了?|占了|吃了|吃掉|需要|要|uses|using|used|takes|took|eats|needs?|requires?|allocat\w*|"
    r"shows?|显示|loads?|of)\s*(?:了)?\s*(?:about|around|大概|约|almost|nearly)?\s*$",
    _I,
)
_RAM_NEAR = re.compile(r"(?<!显)(?:\bram\b|内存|system memory|系统内存)", _I)


def _bytes(number: str, unit: str) -> int | None:
    try:
        return parse_size(f"{number}{unit}")
    except SizeError:
        return None


def _find_budget(text: str, gpus) -> int | None:
    """GPU memory the user has, or may use: the smallest amount they name next
    to a GPU word, a GPU name, "free" or "budget" (system RAM is not a budget)."""
    seen = []
    for i, rx in enumerate(_BUDGET_PATTERNS):
        for m in rx.finditer(text):
            if i in (0, 2) and _USAGE_BEFORE.search(text[max(0, m.start() - 14):m.start()]):
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


# --------------------------------------------------------------------------- keep context

_CTX_OBJ = r"(?:上下文|context|num_ctx|ctx|context window|context length)"
_KEEP_TRUE = [
    re.compile(r"(?:不能|不可以|不想|不愿意|没法|无法|不允许|不可能)(?:再)?(?:减少|降低|缩小|减小|调小|调低|砍|减|降|牺牲)\s*(?:掉)?\s*" + _CTX_OBJ, _I),
    re.compile(_CTX_OBJ + r"(?:长度|大小)?\s*(?:是)?(?:不能|不可以|不想|没法|无法|不允许|不能再)(?:再)?(?:减少|降低|缩小|减小|调小|调低|少|小|减|降|低于|动|改)", _I),
    re.compile(r"(?:必须|一定要|至少要?|起码|不能少于|不能低于|(?<!不)需要)\s*(?:保持|保留|要|是|用|有|开到)?\s*"
               r"(?:\d+(?:\.\d+)?\s*[kK万]\s*(?:的)?\s*)?" + _CTX_OBJ, _I),
    re.compile(_CTX_OBJ + r"\s*(?:必须|一定要|至少|起码|不能少于|不能低于)", _I),
    re.compile(r"(?:can't|cannot|can not|couldn't|won't|don't want to|do not want to|unable to|not allowed to|"
               r"must not|mustn't)\s+(?:go\s+)?(?:reduce|lower|decrease|shrink|cut|drop|sacrifice|touch|change)\s+"
               r"(?:the\s+|my\s+|our\s+)?" + _CTX_OBJ, _I),
    re.compile(r"(?:can't|cannot|can not|won't|must not)\s+go\s+(?:below|under|lower than)\s+\d", _I),
    re.compile(r"must\s+(?:keep|have|stay at|retain|use|be)\s+(?:the\s+|a\s+|at least\s+|full\s+)*"
               r"(?:\d+(?:\.\d+)?k\s+)?(?:tokens?\s+(?:of\s+)?)?" + _CTX_OBJ, _I),
    re.compile(r"(?:need|needs|require|requires|really need)\s+(?:the\s+|a\s+)?(?:full\s+|at least\s+|all\s+)?"
               r"(?:\d+(?:\.\d+)?k|\d{4,})\b"
               r"(?!\s*(?:users|people|requests|gb|g\b|gib))", _I),
    re.compile(r"(?:need|needs|require|requires)\s+(?:the\s+|a\s+)?(?:full|long|large|big)\s+" + _CTX_OBJ, _I),
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


# --------------------------------------------------------------------------- phase

def _rx(*parts: str) -> re.Pattern:
    return re.compile("|".join(parts), _I)


_CREEPING = _rx(
    r"一直(?:在)?(?:涨|增加|增长|上升|升高|变大|往上(?:走|涨)|占着|不降)",
    r"持续(?:增长|上涨|升高|增加|上升)", r"越来越(?:多|高|大)", r"越(?:用|跑)越(?:多|高|大)",
    r"(?:不|没有?|无法|不会|不能)(?:自动)?(?:释放|回收|回落|降下来|下降|归还)", r"释放不(?:掉|了)",
    r"降不下来|下不来|不回落", r"(?:内存|显存)?泄[漏露]",
    r"(?:空闲|闲置|不用的时候|放着不动|没有请求)[^。,.!?\n]{0,10}(?:涨|增加|上升|变多|变大|不降|占用)",
    r"(?:跑|运行|开|用)(?:了)?(?:几|一段|很长|好几|十几)(?:个)?(?:小时|天|时间)(?:之?后|以后)",
    r"过(?:了)?一?(?:段|会儿|阵)(?:时间)?(?:之?后|以后)",
    r"keeps?\s+(?:on\s+)?(?:growing|increasing|climbing|going up|rising|creeping)",
    r"(?:grows?|growing|creeps?|creeping|climbs?|climbing|increases?|increasing|goes up|going up|rises|rising)\s+"
    r"(?:\w+\s+)?(?:over time|steadily|gradually|while idle|when idle|even when idle|with every request|"
    r"after every request|each request)",
    r"creep(?:s|ing)?\s+up", r"memory\s+leak|\bleak(?:s|ing)?\b",
    r"(?:never|not|n't|no longer)\s+(?:\w+\s+){0,2}?"
    r"(?:released|release[sd]?|freed|frees?|goes?\s+(?:back\s+)?down|drops?|reclaimed|returned)\b",
    r"(?:after|over)\s+(?:a few|several|many|some|\d+)\s+(?:hours|days)", r"after\s+(?:running\s+for\s+)?a\s+while",
    r"\bover\s+time\b", r"(?:while|when|even when)\s+(?:it'?s\s+|it\s+is\s+)?idle|sitting idle|stays? high",
)
_CONCURRENT = _rx(
    r"并发", r"多(?:个)?人(?:同时|一起)", r"(?:\d+|几|两|俩|[三四五六七八九十])\s*个?\s*人\s*(?:同时|一起)",
    r"同时(?:用|使用|请求|访问|调用|发|跑|提问|问|连)", r"多(?:个)?(?:请求|用户|客户端|会话)(?:同时)?", r"多用户",
    r"并行(?:请求|处理)?", r"压测",
    r"concurren(?:t|cy)", r"simultaneous(?:ly)?", r"at the same time", r"in parallel", r"parallel requests",
    r"(?:multiple|several|many|\d+|two|three|four|five|six|eight|ten|a few)\s+"
    r"(?:users|clients|requests|people|sessions|connections)\s+"
    r"(?:at once|at the same time|simultaneously|concurrently|in parallel|hit|hitting|using)",
    r"(?:multiple|several|many)\s+(?:users|clients|requests|sessions|connections)",
    r"load[- ]test(?:ing)?", r"under (?:heavy )?load", r"server busy|maximum pending requests",
)
_EVEN_SHORT = _rx(
    r"even\s+(?:with\s+)?(?:a\s+|the\s+|very\s+)*(?:short|tiny|small|one-word|simple)\s+(?:prompt|input|message|question|query)",
    r"even\s+(?:just\s+)?(?:saying\s+|typing\s+|sending\s+)?[\"']?(?:hi|hello)\b",
    r"(?:连|哪怕|就算|即使|即便)(?:是)?(?:很短|一句|一个字|简单|短)", r"(?:再短|多短)(?:的)?(?:\w{0,4})?也",
    r"(?:随便)?(?:问|说|发)(?:一句|个|了个)\s*(?:hi|hello|你好)",
)
_LONG = _rx(
    r"长(?:文本|文档|上下文|输入|对话|提示词?|prompt|篇|文章|问题|内容|消息|代码|报告|材料|资料|论文|邮件|小说)",
    r"长的\s*(?:文本|文档|输入|prompt|问题|内容|提示|报告|文章|材料|资料|论文|pdf|邮件|代码|小说|书)",
    r"大(?:文件|文档|段文本|段文字|量文本)",
    r"(?:文本|文档|输入|prompt|提示词|内容|上下文|对话|问题)(?:一|稍微|比较|太|很|特别|变)长",
    r"多轮(?:对话)?", r"(?:聊|对话|问)(?:了)?(?:几|多|十几|好几|\d+)\s*轮", r"超过\s*\d+(?:\.\d+)?\s*(?:k|万|个?\s*token)",
    r"大于\s*\d+(?:\.\d+)?\s*k", r"\d+(?:\.\d+)?\s*万字", r"整本书|整篇|长篇",
    r"短(?:的|一点的|一些的)?\s*(?:文本|输入|问题|对话|提示词?|prompt|内容|句子)?\s*(?:都|就|还|倒)?(?:没问题|正常|可以|能跑|ok|没事|没毛病)",
    r"(?:(?:context|num_ctx|ctx|上下文)\s*(?:of\s+|=\s*|:\s*)?\d+(?:\.\d+)?k?|\d+(?:\.\d+)?k)\s*"
    r"(?:(?:and|,|和|/)\s*\d+(?:\.\d+)?k?\s*)?"
    r"(?:works|worked|is fine|was fine|runs fine|are fine|fine|ok|没问题|正常|可以|能跑)",
    r"\d+[- ]?pages?\b|\d+\s*页",
    r"输入[^。,.!?\n]{0,6}(?:一长|变长|太长)", r"上下文(?:一|稍微)?(?:大|长)(?:一点|些)?就",
    r"\blong(?:er)?\s+(?:prompts?|inputs?|documents?|docs?|texts?|contexts?|conversations?|chats?|files?|pdfs?|"
    r"articles?|messages?|queries|questions?|sessions?|transcripts?|code ?bases?|threads?)\b",
    r"\b(?:large|big|huge)\s+(?:prompts?|inputs?|documents?|contexts?|files?|pdfs?|chunks?)\b",
    r"(?:prompts?|inputs?|contexts?|conversations?|documents?|chats?)\s+(?:gets?|is|are|grows?|becomes?)\s+"
    r"(?:too\s+|very\s+)?(?:long|longer|big|large)",
    r"\bshort\s+(?:prompts?|inputs?|questions?|messages?|ones|queries|texts?|chats?)\b",
    r"(?:more|longer) than\s+\d+(?:\.\d+)?k?\s*tokens?",
    r"(?:above|over|beyond|past|exceeds?|exceeding|greater than|>)\s*\d+(?:\.\d+)?k\b",
    r"after\s+(?:a few|several|some|many|\d+)\s+(?:turns|rounds|messages|exchanges)", r"multi-?turn",
    r"fills?\s+(?:up\s+)?the\s+context|context\s+fills",
    r"(?:summari[sz]\w*|paste|feed)\s+(?:it\s+)?(?:a\s+|an\s+|the\s+)?(?:long|big|large|whole|entire)",
)
_SLOW = _rx(
    r"(?:很|特别|非常|超级|巨|太|极其|贼|好|有点)慢", r"慢(?:得|死|到)", r"速度(?:很|特别|非常)?(?:慢|低)", r"越来越慢",
    r"卡顿|很卡", r"每秒(?:只有|才|就)?\s*[\d一二三四五六七八九十几]+\s*个?\s*(?:token|字)",
    r"(?:跑|用|走|跑在|运行在|全在|都在)(?:的)?\s*cpu\s*(?:上)?", r"cpu\s*(?:占用|使用率)?\s*(?:100|满|跑满|拉满)",
    r"100\s*%\s*cpu", r"gpu\s*(?:没|没有|不)(?:用上|被使用|使用|工作|跑)", r"没(?:有)?用(?:上|到)\s*(?:gpu|显卡)",
    r"显卡(?:没|不)(?:工作|跑|用)", r"部分(?:卸载|offload)", r"一半(?:在|跑在)\s*cpu",
    r"\d+\s*%\s*/\s*\d+\s*%\s*cpu\s*/\s*gpu", r"cpu/gpu", r"回退到\s*cpu",
    r"\bslow(?:ly|er|down|s)?\b", r"sluggish", r"\bcrawl(?:s|ing)?\b", r"takes? (?:forever|ages|minutes)",
    r"waits? forever", r"takes?\s+(?:about\s+|over\s+)?\d+\s*(?:s|secs?|seconds|minutes|mins)\b",
    r"gpu\s+(?:usage|util\w*|load)\s+(?:\w+\s+){0,2}0\s*%",
    r"\d+(?:\.\d+)?\s*(?:tokens?|tok|t)\s*(?:/|per)\s*(?:s|sec|second)\b",
    r"(?:\d+|one|two|three|four|five|a few)\s+tokens?\s+(?:a|per|each)\s+second",
    r"(?:runs?|running|ran|fall(?:s|ing)? back|fell back|spills?|spilling|spilled|offload(?:s|ed|ing)?|goes|went)\s+"
    r"(?:over\s+)?(?:on|to|onto)\s+(?:the\s+)?cpu",
    r"(?:not|isn't|doesn't|never|barely)\s+(?:using|use|utiliz\w+|touch\w*)\s+(?:the\s+|my\s+)?gpu",
    r"gpu\s+(?:is\s+)?(?:not|never|barely)\s+(?:being\s+)?(?:used|utilized)", r"partial(?:ly)?\s+offload(?:ed|ing)?",
    r"offloaded\s+\d+/\d+\s+layers", r"cpu fallback",
)
_LOAD = _rx(
    r"(?:一|刚|才)(?:加载|载入|启动|运行|跑|打开|ollama run)", r"加载", r"载入", r"启动(?:不了|失败|就|时|报错|不起来)",
    r"起不来", r"(?:跑|运行)不起来", r"根本(?:跑|运行|用)不了", r"(?:装|放|塞)不下",
    r"(?:还没|没来得及)(?:开始|输入|提问|对话|说话|发)",
    r"(?:fail(?:s|ed|ing)?|unable|won't|wont|can't|cannot|can not|doesn't|does not|didn't|couldn't)\s+"
    r"(?:to\s+)?(?:even\s+)?(?:load|start)\b",
    r"(?:when|while|during|at|on)\s+(?:the\s+)?(?:model\s+)?(?:load|loading|startup|start-?up)\b",
    r"\bloading\s+(?:the\s+)?model\b",
    r"error loading", r"\bloading\b",
    r"(?:as soon as|right after|immediately after|right when|the moment)\s+(?:i\s+)?(?:run|start|launch|load)\b",
    r"before\s+(?:i\s+|it\s+)?(?:even\s+)?(?:type|send|ask|generat)", r"(?:doesn't|does not|won't|will not)\s+fit",
    r"too\s+(?:big|large)\s+(?:for|to)", r"requires more system memory", r"timed out waiting for llama runner to start",
    r"at load time",
)
_LOAD_OK = _rx(
    r"load(?:s|ed)?\s+(?:fine|ok|okay|successfully|without|just fine|normally)", r"load is fine",
    r"加载(?:正常|没问题|成功|完|都正常)", r"(?:能|可以)(?:正常)?加载",
)
_CRASH = _rx(
    r"崩(?:溃|了|掉)?", r"闪退", r"挂(?:了|掉)", r"死掉|卡死", r"(?:进程|服务|runner)?(?:直接)?(?:退出|终止|被杀|被kill)",
    r"段错误", r"\bcrash(?:es|ed|ing)?\b", r"segfault", r"segmentation fault", r"core dumped", r"terminated",
    r"exit status", r"\bpanic", r"\bkilled\b", r"unexpectedly stopped", r"\bdie[sd]?\b", r"\babort(?:s|ed)?\b",
    r"ggml_assert", r"error (?:was )?encountered",
)
# saying there is an error is weaker than saying it crashed: "报错如下" introduces a paste
_ERROR_SAID = _rx(
    r"报错|出错|错误", r"(?:throws?|gives?|get|got|getting|see|seeing)\s+(?:an?\s+|this\s+|the\s+)?error",
    r"errors?\s+out",
)
_CTX_RAISE = _rx(
    _CTX_WORD + r"[^\n。,;；!?\d]{0,10}?(?:开到|调到|设到|设成|设置为|设置成|设为|改成|改为|拉到|加到|提到|提高到|增加到|\bto|\bat)(?=\s*\d)",
    r"(?:set|setting|increased?|increasing|raised?|raising|bump(?:ed|ing)?)\s+(?:the\s+|my\s+)?" + _CTX_WORD,
    r"\bwith\s+(?:a\s+)?" + _CTX_WORD, r"\bat\s+\d+(?:\.\d+)?k\b", r"\d+(?:\.\d+)?\s*k\s*(?=就|的时候|时)", r"在\s*\d+k",
)
_OOM = _rx(
    r"\boom(?:ed|s|ing)?\b", r"out of memory", r"爆显存|显存(?:爆|溢出|不足|不够|炸)|显存[^。,.\n]{0,4}(?:爆|炸)",
    r"ran out of|runs? out of|running out of|out-of-memory",
)
_OLLAMA_RUN = re.compile(r"ollama\s+run\b", _I)
_NEGATION_BEFORE = re.compile(
    r"(?:没有|没|不是|并非|并不是|无|不|no|not|without|never|isn't|aren't|wasn't|don't|doesn't|no\s+more)\s*(?:\w+\s+)?$", _I
)


def _first_cue(rx: re.Pattern, text: str, negatable: bool = False) -> str | None:
    for m in rx.finditer(text):
        if negatable:
            clause = re.split(r"[。,，.;；!?！？\n]", text[max(0, m.start() - 14):m.start()])[-1]
            if _NEGATION_BEFORE.search(clause):
                continue
        return m.group(0).strip()
    return None


def _find_phase(full: str, scrubbed: str, error: str | None, want_parallel: int | None) -> tuple[str, str | None]:
    """Phase by fixed precedence: the most specific cue wins.

    A specific trigger (memory creeping, several users, "even a short prompt",
    long input, running slowly on the CPU, failing at load) beats a generic
    crash, and a generic "OOM" or a quoted CUDA error is only a crash when
    nothing says when it happened. Cues are read in the prose (``scrubbed``);
    a quoted error speaks for itself through its own words (``error``).
    """
    err = error or ""
    load_ok = _first_cue(_LOAD_OK, scrubbed)
    failed = _failure_said(scrubbed, error)
    ladder = (
        ("creeping", lambda: _first_cue(_CREEPING, scrubbed)),
        ("concurrent", lambda: _first_cue(_CONCURRENT, scrubbed, negatable=True) or _first_cue(_CONCURRENT, err)),
        ("load", lambda: _first_cue(_EVEN_SHORT, scrubbed)),
        ("long_input", lambda: _first_cue(_LONG, scrubbed, negatable=True)),
        ("slow", lambda: _first_cue(_SLOW, scrubbed, negatable=True)),
        ("load", lambda: None if load_ok else (_first_cue(_LOAD, scrubbed) or _first_cue(_LOAD, err))),
        # "I want num_ctx 32k" is a wish; "set num_ctx to 32k and it crashes" a symptom
        ("long_input", lambda: _first_cue(_CTX_RAISE, scrubbed) if failed else None),
        ("concurrent", lambda: f"parallel {want_parallel}" if failed and want_parallel and want_parallel > 1 else None),
        ("crash", lambda: _first_cue(_CRASH, scrubbed)),
        # an error straight after `ollama run` came from loading the model
        ("load", lambda: "ollama run" if _OLLAMA_RUN.search(full) and (error or _OOM.search(scrubbed)) else None),
        ("crash", lambda: _first_cue(_CRASH, err) or _first_cue(_ERROR_SAID, scrubbed)),
        ("crash", lambda: _first_cue(_OOM, scrubbed) or error),
    )
    for phase, find in ladder:
        cue = find()
        if cue:
            return phase, cue
    return "unknown", None


def _failure_said(text: str, error: str | None) -> bool:
    return bool(error or _first_cue(_CRASH, text) or _first_cue(_ERROR_SAID, text) or _first_cue(_OOM, text)
                or re.search(r"fail|不行|出错|失败|爆|炸|不够|error", text, _I))


# --------------------------------------------------------------------------- parse / merge

def parse(text: str) -> Intake:
    """Read one message. Never raises for a ``str``; anything else is read as empty."""
    if not isinstance(text, str):
        text = ""
    original = text
    try:
        return _parse(original)
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


def _parse(original: str) -> Intake:
    norm = _normalise(original)
    error, error_spans = _find_error(norm)
    # no size, context or count has 16 digits; hiding such runs (hashes, pasted
    # tensors) also keeps every number pattern linear in the length of a paste
    scrubbed = _blank(norm, error_spans + [m.span() for m in _LONG_DIGITS.finditer(norm)])
    model, model_spans = _find_model(scrubbed)
    numbers = _blank(scrubbed, model_spans)  # "phi3:3.8b-mini-128k" is a name, not a context
    gpus = _find_gpus(numbers)
    want_ctx = _find_ctx(_blank(numbers, [(s, e) for s, e, _ in gpus]))
    want_parallel = _find_parallel(numbers)
    budget = _find_budget(numbers, gpus)
    phase, cue = _find_phase(norm, numbers, error, want_parallel)
    return Intake(
        lang=detect_lang(original),
        phase=phase,
        model=model,
        want_ctx=want_ctx,
        want_parallel=want_parallel,
        budget=budget,
        gpu=gpus[0][2] if gpus else None,
        error=error,
        keep_context=_find_keep_context(numbers),
        text=original,
        phase_cue=cue,
    )


def merge(base: Intake, newer: Intake) -> Intake:
    """A chat is several messages: what ``newer`` says overrides, what it leaves
    out is kept. The language stays the one of the first message that had words."""
    changes = {name: getattr(newer, name) for name in INTAKE_FIELDS if getattr(newer, name) is not None}
    if newer.phase != "unknown":
        changes["phase"] = newer.phase
        changes["phase_cue"] = newer.phase_cue
    if not has_words(base.text):
        changes["lang"] = newer.lang
    changes["text"] = "\n".join(part for part in (base.text, newer.text) if part)
    return replace(base, **changes)
