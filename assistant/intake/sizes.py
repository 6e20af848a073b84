"""Memory sizes in a message: the GPU budget the user has or may use ("4060
8G", "只剩 6G 可用", "budget 10GB"), a budget as a share of the device ("80%
of the GPU", "half the card"), and :func:`size_of` for a size said alone."""
from __future__ import annotations

import re

from assistant.intake import size_arithmetic as arithmetic
from assistant.intake.size_grammar import SIZE as _SIZE, to_bytes as _bytes
from assistant.intake.text import ICASE, normalise


_GPU_AFTER = (r"\s*(?:的)?\s*(?:显存|显卡|卡|vram|gpu|graphics card|card|video memory|of vram|of gpu memory|"
              r"of video memory|of (?:the |my |its )?(?:unified memory|vram|gpu memory|video memory)|gpu memory|unified memory|统一内存|mac|"
              r"(?:total\s+|in total\s+)?across (?:two|both|three|four|\d+|several|all|my) (?:cards|gpus|[\w-]*\d\w*s\b))")
_GPU_BEFORE = (r"(?:显存|vram|gpu memory|video memory|显卡|gpu|\bcard|unified memory|统一内存|卡(?=\s*(?:是|只有|才)))\s*(?:大小|容量|总共|一共|上限|最大)?\s*"
               r"(?:是|为|有|只有|才|仅|仅有|就|:|=|is|of|only|just|has|have|total|=)?\s*(?:only|just|about|around|大概|约)?\s*")
_FREE_AFTER = (r"\s*(?:左右|上下|多|of\s+(?:vram|gpu memory)\s+|of\s+(?:it|that|them)\s+(?:is\s+|are\s+)?|(?:is|are)\s+)?\s*(?:dedicated\s+(?:(?:gpu|video)\s+)?(?:memory\s+)?)?(?:of\s+)?(?:free|available|left|headroom|spare|"
               r"(?:is\s+|are\s+)?usable|可用|剩余|空闲|能用|可以用)")
_FREE_BEFORE = (r"(?:(?:实际|真正)?(?:能用|可以用|可用)的|剩余|可用|空闲|还剩|剩下|只剩|剩|还有|留了|留给\s*\S{0,8}?|只能给\s*\S{0,8}?用|只分给我|"
                # what is set aside for this model: "只给这个模型留 30G", "给 ollama 留出 20G"
                r"给\s*\S{0,10}?\s*留(?:了|出|下)?|"
                r"最多(?:只能)?(?:用|给|占)?|只能(?:用|占)|只用|(?:不能|不要|别|不可以)?超过|不超过|free|available|"
                r"only may use|may use|can use|at most|no more than|up to|fit (?:in|into|within|under)|"
                # "I can only give this model 300 MiB", "we give ollama 20GB of it"
                r"(?:can|could|may|will|only|just)?\s*(?:only\s+|just\s+)?give\s+(?:this|the|that|our|my)?\s*(?:model|ollama|it|service)\s+"
                r"(?:only\s+|just\s+|about\s+)?|"
                # "this model only gets 30GB", "ollama gets about 20 GB of it"
                r"(?:model|ollama|it|service|server)\s+(?:only\s+|just\s+)?gets?\s+(?:about\s+|around\s+|roughly\s+)?|"
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
    re.compile(r"(?<![\w.])" + _SIZE + _GPU_AFTER, ICASE),
    re.compile(_GPU_BEFORE + _SIZE, ICASE),
    re.compile(r"(?<![\w.])" + _SIZE + _FREE_AFTER, ICASE),
    re.compile(_FREE_BEFORE + _SIZE, ICASE),
    re.compile(_BUDGET_WORD + _SIZE, ICASE),
    re.compile(r"(?<![\w.])" + _SIZE + r"\s*(?:budget|max(?:imum)?\b|at most|的预算|以内|封顶)", ICASE),
    # the card's total as a tool reports it: "The card reports 23.6 GiB total" ("the GPU uses 10GB total" is usage)
    re.compile(r"(?:\bcard|\bgpu|\bvram|显卡|显存|nvidia-smi)[^.\n。,;]{0,20}?(?<![\w.])" + _SIZE
               + r"\s*(?:total|in total|总量|总共)", ICASE),
    # what the user has, said as not enough: "24G 都不够用", "even my 24GB isn't enough"
    re.compile(r"(?<![\w.])" + _SIZE + r"\s*(?:都|也|还)\s*不够", ICASE),
    re.compile(r"\beven\s+(?:my\s+|the\s+|all\s+)?" + _SIZE + r"\s+(?:of\s+vram\s+)?(?:isn't|is not|wasn't|was not|aren't)\s+enough",
               ICASE),
    # the card's size said against the host's RAM: "24 gigs plus system RAM", "24G 显存加上内存"
    re.compile(r"(?<![\w.])" + _SIZE + r"\s*(?:of\s+vram\s+|显存\s*)?(?:plus|\+|加上?)\s*(?:the\s+|my\s+)?(?:system\s+|host\s+)?"
               r"(?:ram\b|(?<!显)内存)", ICASE),
]
_SIZE_NEAR_GPU = re.compile(r"^\s*(?:(?:笔记本|移动|桌面|台式)(?:版|版本)?|laptop|mobile)?\s*"
                            r"(?:的|,|with|w/|\(|（|has|have|had|got|is|有|是)?\s*"
                            # Apple silicon named before the machine: "m2 的 macbook air 16G"
                            r"(?:(?:的\s*)?(?:macbook\s*(?:air|pro)?|mac\s*(?:mini|studio)|imac)\s*[,，]?\s*)?" + _SIZE, ICASE)
# "3060 12G×2": that many cards of that size
_TIMES = re.compile(r"\s*[×xX*]\s*([2-8])(?![\d.])")
#: the patterns above that say what is free or allowed, not what the card has
_FREE_PATTERNS = (2, 3, 4, 5)
_SIZE_BEFORE_GPU = re.compile(r"(?<![\w.])" + _SIZE + r"\s*(?:的|版|版本|(?:of\s+vram\s+)?(?:on|in)\s+(?:my|the|a|an|this|our)\s+)?\s*$",
                              ICASE)
# "用了 7G 显存", "needs 10GB VRAM": usage or a requirement, not what the card has
_USAGE_BEFORE = re.compile(
    r"(?:占用|用了|使用了?|占了|占着|吃了|吃掉|涨到|需要|要|uses|using|used|tak(?:es|ing)|took|eat(?:s|ing)|hold(?:s|ing)|needs?|requires?|allocat\w*|"
    r"shows?|显示|loads?|of)\s*(?:了)?\s*(?:about|around|大概|约|almost|nearly)?\s*$",
    ICASE,
)
# "nvidia-smi shows 7400MiB free": a reading of what is free is the budget, though "shows 7G" alone is usage
_SHOWN_BEFORE = re.compile(r"(?:shows?|showed|显示|reports?)\s*(?:about|around|大概|约|almost|nearly)?\s*$", ICASE)
_HELD_AFTER = re.compile(r"\s*(?:一直|还|都|全都)\s*(?:被[^，。,\n]{0,8}?)?占(?:着|用着)", ICASE)
_RAM_NEAR = re.compile(r"(?<!显)(?:\bram\b|内存|system memory|系统内存)", ICASE)
# "a 4090 with 64GB of system RAM": the size beside the card is the host's
_RAM_AFTER = re.compile(r"\s*(?:of\s+)?(?:(?:system\s+|host\s+|cpu\s+|ddr\d\s+)?(?:ram\b|(?<!显)内存)|(?:system|host)\s+memory)", ICASE)


# the size of something other than the card: a model's or a file's ("I only use 8GB models", "5G 的模型"),
# or one request's share ("每个请求 2G 左右")
_OF_SOMETHING_ELSE_AFTER = re.compile(r"\s*(?:的)?\s*(?:models?\b|模型|weights?\b|files?\b|文件|gguf\b|权重|on disk\b|download\b|"
                                      r"to download\b|in size\b)", ICASE)
_PER_BEFORE = re.compile(r"(?:每(?:个|一个|条|次)?|单个|\bper|\beach)\s*(?:请求|并发|槽位?|slots?|requests?|users?|用户|会话|sessions?|workers?)"
                         r"\s*(?:大概|大约|约|about|around|~)?\s*$", ICASE)
_SOMETHING_ELSE_BEFORE = re.compile(r"(?:\bmodels?|模型|\bfiles?|文件|\bgguf|\bweights?|权重)(?:\s*file)?\s*(?:size\s*|大小\s*)?"
                                    r"(?:is|are|was|是|有|只有|就|:|=)?\s*(?:only|just|about|around|大概|约|才)?\s*$", ICASE)
# `ollama ps` lists loaded models: a size read off it ("ollama ps says 14.9 GB") is a model's
_OLLAMA_PS_BEFORE = re.compile(r"ollama\s+ps\b[^.\n。;；!?！？]{0,30}$", ICASE)
_GPU_WORD_AFTER = re.compile(r"\s*(?:的)?\s*(?:显存|vram|gpu memory|video memory)?", ICASE)
_RAM_BEFORE = re.compile(r"(?:\bram\b|(?<!显)内存|system memory|系统内存)\s*(?:是|有|只有|:|=|of|only|just|is)?\s*$", ICASE)


def said_not_budget(text: str, start: int, end: int) -> bool:
    """Whether the size at ``text[start:end]`` is said as something other than
    the GPU memory the user has: what something uses or holds ("is using
    11GB", "38G 显存一直被占着"), system RAM ("16G 内存", "64GB of system RAM"),
    a model's, a file's or one request's size ("8GB models", "the model file is
    only 4.7GB", "ollama ps says 14.9 GB", "每个请求 2G"). The learned
    budget ranker never picks such a size: what the grammar knows is not a
    budget stays not one."""
    before = text[max(0, start - 14):start]
    held_at = end + _GPU_WORD_AFTER.match(text, end).end() - end  # "38G 显存一直被占着": past the card's word
    return bool(_USAGE_BEFORE.search(before) or _PER_BEFORE.search(before) or _RAM_BEFORE.search(before)
                or _SOMETHING_ELSE_BEFORE.search(before) or _OLLAMA_PS_BEFORE.search(text[max(0, start - 40):start])
                or _HELD_AFTER.match(text, held_at) or _RAM_AFTER.match(text, end) or _OF_SOMETHING_ELSE_AFTER.match(text, end))


_LONE_SIZE = re.compile(r"^\s*(?:about|around|大概|约|只有|有)?\s*" + _SIZE + r"\s*(?:左右|上下)?\s*$", ICASE)


def size_of(text: str) -> int | None:
    """Bytes of a size said on its own, as people write it ("8 gigs", "500 兆",
    "2 个 G"); None when ``text`` is not just a size."""
    m = _LONE_SIZE.match(normalise(str(text)))
    return _bytes(m.group(1), m.group(2)) if m else None


_APPLE = ("M1", "M2", "M3", "M4")  # Apple silicon: "内存" beside the chip is the unified memory the GPU uses


def find_budget(text: str, gpus) -> int | None:
    """GPU memory the user has, or may use. What is said free or allowed (or
    follows from a total and what something else holds) comes first, then a
    total ("一共 32G", "nvidia-smi 181MiB / 4096MiB"), then the size named next
    to a GPU word or name; within a kind the smallest counts (system RAM is
    never a budget)."""
    for kind in budget_sizes(text, gpus).values():
        if kind:
            return min(kind)
    return None


def budget_sizes(text: str, gpus) -> dict[str, list[int]]:
    """The sizes said as the user's GPU memory, by kind, in the order
    :func:`find_budget` ranks them: ``free`` (free, allowed, left after what
    others hold), ``total``, ``card``."""
    free, total, card = [], [], []
    for i, rx in enumerate(_BUDGET_PATTERNS):
        for m in rx.finditer(text):
            before = text[max(0, m.start(1) - 14):m.start(1)]  # before the size, not the card word
            if i == 0 and _HELD_AFTER.match(text, m.end()):
                continue  # "38G 显存一直被占着": what is held, not what the card has
            if i in (0, 2, 6) and _USAGE_BEFORE.search(before) and not (i in (2, 6) and _SHOWN_BEFORE.search(before)):
                continue
            if i in (2, 3, 7, 8) and _RAM_NEAR.search(text[max(0, m.start() - 16):m.end() + 8]):
                continue
            (free if i in _FREE_PATTERNS else total if i == 6 else card).append(_bytes(m.group(1), m.group(2)))
    for start, end, _name in gpus:
        after = _SIZE_NEAR_GPU.match(text[end:end + 30])
        if after and (_name.startswith(_APPLE) or not _RAM_AFTER.match(text, end + after.end())):
            size = _bytes(after.group(1), after.group(2))
            cards = _TIMES.match(text, end + after.end())
            (total if cards else card).append(size * int(cards.group(1)) if cards and size else size)
        before = _SIZE_BEFORE_GPU.search(text[max(0, start - 30):start])
        if before:
            card.append(_bytes(before.group(1), before.group(2)))
    arithmetic.readings(text, free, total, card)
    # below 256 MiB it is not a GPU
    return {name: [v for v in kind if v and v >= 256 << 20] for name, kind in (("free", free), ("total", total), ("card", card))}


_CARD_COUNT = re.compile(
    r"([两俩二三四五六七八2-8])\s*(?:张|块)\s*(?:卡|显卡|gpu)?"
    r"|\b(two|three|four|five|six|seven|eight|[2-8])\s+(?:\w+\s+)?(?:cards|gpus)\b"
    r"|\b(two|three|four|five|six|seven|eight|[2-8])\s+(?:rtx\s+|gtx\s+|tesla\s+)?[a-z]{0,2}\d{2,4}(?:\s*ti)?s\b"
    r"|\b([2-8])\s*[x×]\s*(?:rtx\s+|gtx\s+|tesla\s+)?[a-z]{0,2}\d{2,4}", ICASE)


def card_count(text: str) -> int | None:
    """How many cards the message says the machine has ("两张 P40", "two 3090s",
    "3x 3090"), or None where it names no count: a size said per card is
    then either the budget of one card or a part of their sum."""
    from assistant.intake.numbers import count

    for m in _CARD_COUNT.finditer(text):
        n = count(next(g for g in m.groups() if g))
        if n and 2 <= n <= 8:
            return n
    return None


_SHARE = re.compile(
    r"(?<![\d.])(\d{1,3}(?:\.\d+)?)\s*%\s*(?:的)?\s*(?:of\s+(?:the\s+|my\s+)?)?(?:显存|显卡|vram|gpu|card|device|memory)"
    r"|(?:只能用|只用|最多用|可以用|may use|can use|only (?:may )?use|use at most|limit(?:ed)? to|budget(?: of| is)?)"
    r"\s*(?:the\s+)?(\d{1,3}(?:\.\d+)?)\s*%"
    # a fraction in words: "lets me use half the card", "只能用一半显存"
    r"|(?:(?:use|using|get|have|spare|give|allot|dedicate)\s+|用\s*)(?:it\s+|ollama\s+)?(?:only\s+|at most\s+)?(half|a third|a quarter)\s+"
    r"(?:of\s+)?(?:the\s+|my\s+|this\s+)?(?:card|gpu|vram|device|gpu memory|\d+(?:\.\d+)?\s*(?:gb|gib|g)\b)"
    r"|(?:只能|最多|只|可以|(?:只)?(?:想|要)让\s*(?:它|ollama)\s*(?:只)?)(?:用|占|分到)\s*(一半|三分之一|四分之一)\s*(?:的)?\s*(?:显存|显卡)"
    r"|(?:显存|显卡|卡)\s*(?:我|我们|ollama)?\s*(?:只能|最多|只)(?:用|占|分到)\s*(一半|三分之一|四分之一)"
    # the card first, then the share: "最多只能占整张 A100 的 40%"
    r"|(?:只能|最多|只|可以)(?:只能)?(?:用|占|使用|分到)\s*[^,。;\n%]{0,14}?的\s*(\d{1,3}(?:\.\d+)?)\s*%"
    # what someone hands the user: "只分给我一半显存", "分配给 ollama 三分之一的显存"
    r"|(?:只|最多|只能)?分(?:给|配给)\s*(?:我|我们|ollama)?\s*(一半|三分之一|四分之一)\s*(?:的)?\s*(?:显存|显卡|卡)", ICASE)
# "ollama ps showed phi4 at 11 GB, 100% GPU": a reading of where a model runs, not a share to keep to
_READING_BEFORE = re.compile(r"ollama\s+ps|processor|nvidia-smi|shows?\b|showed|显示|reports?\b", ICASE)
_STATE_BEFORE = re.compile(r"\b(?:was|were|is|it's|ran|runs|running|at)\s*$", ICASE)
_FRACTIONS = {"half": 50, "a third": 100 / 3, "a quarter": 25, "一半": 50, "三分之一": 100 / 3, "四分之一": 25}


def find_share(text: str) -> tuple[float | None, bool]:
    """A budget given as a share of the device ("只能用 80% 的显存", "60% of the GPU"),
    and whether it was said as what the user may use ("use half the card"): that
    share is of the card, so it outranks the card's own size."""
    for m in _SHARE.finditer(text):
        if m.group(1) and _READING_BEFORE.search(re.split(r"[.。;；\n]", text[max(0, m.start() - 60):m.start()])[-1]):
            continue
        if m.group(1) and (float(m.group(1)) >= 100 or _STATE_BEFORE.search(text[max(0, m.start() - 12):m.start()])):
            continue  # "it was 100% GPU", "runs 70% GPU": where a model ran, not a share to keep to
        word = m.group(3) or m.group(4) or m.group(5) or m.group(7)
        value = _FRACTIONS[word.lower()] if word else float(m.group(1) or m.group(2) or m.group(6))
        if 0 < value <= 100:
            return value / 100, m.group(1) is None
    return None, False
