"""Budgets people give as sums: what is free when a message says the card's
size and what something else already holds ("3090 显存 24 个 G 已经被占了 20
个", "6 of my 8 GB are taken by the desktop", "nvidia-smi shows 181MiB /
4096MiB before I start anything"), a total across cards or as a tool reports
it ("一共32G", "4096MiB total", "2x 24GB"), a size said without its unit after one that
had it ("12 gigs total, nvidia-smi says ~10.8 free"), and the card's size said
as a belief ("Thought 24GB would be plenty", "按说 24G 够了吧").

:func:`readings` adds to the three kinds :func:`sizes.find_budget` ranks:
free first, then totals, then the size of a card."""
from __future__ import annotations

import re

from assistant.intake.size_grammar import SIZE, to_bytes
from assistant.intake.text import ICASE

_NUMBER = r"(?<![\w.])(\d+(?:\.\d+)?)"
_UNIT = r"(gib|gb|g|mib|mb|m)\b"
# nvidia-smi's "used / total" column ("5.1/16 GB": the unit said once, after the total)
_SMI = re.compile(_NUMBER + r"\s*(?:" + _UNIT + r")?\s*/\s*" + _NUMBER + r"\s*" + _UNIT, ICASE)
# the same reading in words: "1.4GB used of 11GB", "2 GB in use out of 16"
_USED_OF = re.compile(_NUMBER + r"\s*(?:" + _UNIT + r")?\s*(?:used|in use|taken|occupied)\s*(?:of|out of)\s*(?:the\s+|my\s+)?"
                      + _NUMBER + r"\s*" + _UNIT, ICASE)
# what others hold, said in English after the card's size: "ComfyUI holds about 9 of it", "OBS and Discord
# sit on roughly 2 GB"; the unit may be the card's
_HOLDS_EN = re.compile(r"(?:^|[,;.(]\s*|\b(?:but|and|while|since|because)\s+)((?:[A-Za-z][\w.+-]*\s+){1,4}?)"
                       r"(?:holds?|hold on to|uses?|sits?\s+on|eats?|takes?|occupies|grabs?|hogs?|reserves?|keeps?|already\s+(?:uses?|has|takes?))\s+"
                       r"(?:about\s+|around\s+|roughly\s+|~\s*|like\s+|another\s+)?(\d+(?:\.\d+)?)\s*" + r"(?:" + _UNIT + r")?"
                       r"(?=\s*(?:of it|of that|of the card|of vram|permanently|all the time|while|when|$|[,;.)]))", ICASE)
# "只给我 6 of it", "i only let ollama have 6 of it": the part the user hands the model, unit from the card
_LET_HAVE = re.compile(r"\b(?:let|allow|give)\s+(?:ollama|it|the model|the server|\w+)\s+(?:have|use|take|get)?\s*"
                       r"(?:only\s+|just\s+|about\s+|around\s+)?(\d+(?:\.\d+)?)\s*(?:" + _UNIT + r")?\s*(?:of it|of them|of that)", ICASE)
# "显存 12G，其中 0.8G 是桌面占的": a part of the card that something else holds
_OF_WHICH_HELD_ZH = re.compile(r"其中\s*(?:有\s*)?" + _NUMBER + r"\s*(?:" + _UNIT + r")?\s*(?:左右|多)?\s*(?:是|被|给|让)\s*"
                               r"([^,，。;；\n\d]{0,12}?)(?:占|用|吃)(?:的|掉|了|着)", ICASE)
# what is not someone else's: the model's own use, the cache or context it grows
_NOT_OTHERS = re.compile(r"ollama|model|it\b|llama|qwen|gemma|mistral|phi|deepseek|cache|kv|context|weights?|layers?|"
                         r"the runner|the server|that|this|which|each|every", ICASE)
# the reading was taken before the model went on, so what it shows used is someone else's
_BEFORE_START = re.compile(r"before\b|idle|nothing (?:else )?(?:running|loaded|open)|empty|fresh boot|after (?:a )?(?:reboot|boot)|"
                           r"开始前|之前|启动前|加载前|还没|空载|刚开机|没跑|开机后", ICASE)
# "(被 ComfyUI) 占了大概 9G": what something holds; the unit may be the card's ("被占了 20 个")
_HELD_ZH = re.compile(r"(?:(?:已经|已)\s*)?(?:被|让)?([^,，。;；!?！？\n\d]{0,14}?)(?:占|吃)(?:用)?(?:了|掉|掉了|着)\s*"
                      r"(?:大概|大约|约|差不多|将近|快|近|有)?\s*" + r"(\d+(?:\.\d+)?|[一二两三四五六七八九十]+(?![些点下会直样]))\s*(?:个)?\s*"
                      + r"(gib|gb|g|mib|mb|m|兆)?(?![a-z\d])", ICASE)
_HELD_EN = re.compile(_NUMBER + r"\s*(?:" + _UNIT + r")?\s*(?:of|out of)\s*(?:the\s+|my\s+|its\s+|an?\s+)?" + SIZE
                      + r"\s*(?:of\s+vram\s+)?(?:are\s+|is\s+|were\s+|was\s+)?(?:already\s+)?(?:used|taken|in use|occupied|gone|eaten)", ICASE)
_HELD_BY_EN = re.compile(r"\b(?:with|and|but)\s+(?:about\s+|around\s+|~\s*)?" + SIZE
                         + r"\s+(?:already\s+)?(?:used|taken|eaten|in use|held)\s+by\s+(?!ollama|the model|it\b)", ICASE)
# the model's own use is not someone else's
_OWN = re.compile(r"ollama|模型|model|它|gpu|显卡|跑|加载|载入|推理|qwen|llama|gemma|deepseek|mistral|phi", ICASE)
_TOTAL = [re.compile(r"(?:一共|总共|合计|加起来|共计|(?<![公一总])共|in total|a total of|total of|combined)\s*(?:有|是|:)?\s*" + SIZE, ICASE),
          re.compile(r"(?<![\w.])" + SIZE + r"\s*(?:in total|total|combined|altogether|总共|总量)(?!\s*(?:ram|内存|system))", ICASE)]
_USED_BEFORE = re.compile(r"(?:占用|用了|使用了?|占了|吃了|uses|using|used|takes|took|needs?|requires?|allocat\w*)\s*(?:about|around|大概|约)?\s*$",
                          ICASE)
_UNITLESS_FREE = re.compile(r"(?:~\s*)?" + _NUMBER + r"\s*(?:free|available|left|可用|剩余)\b"
                            r"(?!\s+(?:slots?|gpus?|cards?|cores?|ram|内存))", ICASE)
_BELIEF = [re.compile(r"(?:thought|figured|assumed|expected|以为|本以为|还以为|按说|按理说|照理说|理论上)\s*(?:that\s+)?"
                      r"(?:my\s+|the\s+|a\s+)?" + SIZE, ICASE),
           re.compile(r"(?<![\w.])" + SIZE + r"\s+(?:would|should|will)\s+(?:be\s+)?(?:plenty|enough|fine)", ICASE),
           re.compile(r"(?:are|is|were|was)\s+" + SIZE + r"\s+(?:just\s+|simply\s+|really\s+)?not\s+enough", ICASE)]
# "21G of 24G", "~1GB of 96GB on the H20": a reading against the card's size, which is the total
_OF_TOTAL = re.compile(_NUMBER + r"\s*(?:" + _UNIT + r")?\s*(?:of|out of)\s*(?:the\s+|my\s+|its\s+)?" + SIZE, ICASE)
# "两张 T4，每张16G": the size of each card
_EACH_CARD = re.compile(r"(?:每(?:一)?(?:张|块)(?:卡|显卡)?|每(?:一)?个(?:卡|显卡|gpu))\s*(?:都|是|有|都是|都有)?\s*" + SIZE, ICASE)
# "for 2x 24GB": that many cards of that size, said before it (as "3060 12G×2" says it after)
_COUNT_TIMES = re.compile(r"(?<![\w.])([2-8])\s*[x×*]\s*" + SIZE, ICASE)
_RAM_AFTER = re.compile(r"^\s*(?:of\s+)?(?:system\s+|host\s+)?(?:ram\b|(?<!显)内存)", ICASE)
_ANY_SIZE = re.compile(r"(?<![\w.])" + SIZE, ICASE)


def _last_size(text: str, end: int, reach: int = 60):
    """The last size said in the ``reach`` characters before ``end``, as (bytes, unit)."""
    found = None
    for m in _ANY_SIZE.finditer(text, max(0, end - reach), end):
        if not _USED_BEFORE.search(text[max(0, m.start() - 12):m.start()]):
            found = (to_bytes(m.group(1), m.group(2)), m.group(2))
    return found


def _add_left(free: list, text: str, at: int, number: str, unit: str | None, reach: int = 60) -> None:
    """What is left of the card whose size was said last before ``at`` once
    something else holds ``number`` (in ``unit``, else the card's), added to
    ``free``; nothing where no card size comes before it or the held part is
    not smaller."""
    card_size = _last_size(text, at, reach)
    if not card_size or not card_size[0]:
        return
    held = to_bytes(number, unit or card_size[1])
    if held and held < card_size[0]:
        free.append(card_size[0] - held)


def readings(text: str, free: list, total: list, card: list) -> None:
    """Add what ``text`` says by sums to ``free``, ``total`` and ``card``."""
    for m in [*_SMI.finditer(text), *_USED_OF.finditer(text)]:
        used, size = to_bytes(m.group(1), m.group(2) or m.group(4)), to_bytes(m.group(3), m.group(4))
        if used is None or size is None or used >= size:
            continue
        clause = re.split(r"[.。;；\n]", text[max(0, m.start() - 80):m.start()])[-1] + text[m.end():m.end() + 40]
        (free.append(size - used) if _BEFORE_START.search(clause) else total.append(size))
    for m in _HOLDS_EN.finditer(text):
        if not _NOT_OTHERS.search(m.group(1)):
            _add_left(free, text, m.start(2), m.group(2), m.group(3), reach=80)
    for m in _LET_HAVE.finditer(text):
        card_size = _last_size(text, m.start(1), reach=80)
        if card_size and card_size[0]:
            part = to_bytes(m.group(1), m.group(2) or card_size[1])
            if part and part < card_size[0]:
                free.append(part)
    for m in _OF_WHICH_HELD_ZH.finditer(text):
        if not _OWN.search(m.group(3)):
            _add_left(free, text, m.start(), m.group(1), m.group(2), reach=40)
    for m in _HELD_ZH.finditer(text):
        if not _OWN.search(m.group(1)):
            _add_left(free, text, m.start(2), m.group(2), m.group(3))
    for m in _HELD_EN.finditer(text):
        held, size = to_bytes(m.group(1), m.group(2) or m.group(4)), to_bytes(m.group(3), m.group(4))
        if held and size and held < size:
            free.append(size - held)
    for m in _HELD_BY_EN.finditer(text):
        _add_left(free, text, m.start(), m.group(1), m.group(2))
    for rx in _TOTAL:
        for m in rx.finditer(text):
            if not _RAM_AFTER.match(text, m.end()) and not _USED_BEFORE.search(text[max(0, m.start() - 14):m.start()]):
                total.append(to_bytes(m.group(1), m.group(2)))
    for m in _UNITLESS_FREE.finditer(text):
        said = _last_size(text, m.start(), reach=120)
        if said:
            free.append(to_bytes(m.group(1), said[1]))
    for m in _OF_TOTAL.finditer(text):
        used, size = to_bytes(m.group(1), m.group(2) or m.group(4)), to_bytes(m.group(3), m.group(4))
        if used and size and used < size and not _RAM_AFTER.match(text, m.end()):
            total.append(size)
    for m in _COUNT_TIMES.finditer(text):
        size = to_bytes(m.group(2), m.group(3))
        if size and not _RAM_AFTER.match(text, m.end()):
            total.append(int(m.group(1)) * size)
    for m in _EACH_CARD.finditer(text):
        if not _RAM_AFTER.match(text, m.end()):
            card.append(to_bytes(m.group(1), m.group(2)))
    for rx in _BELIEF:
        for m in rx.finditer(text):
            if not _RAM_AFTER.match(text, m.end()):
                card.append(to_bytes(m.group(1), m.group(2)))
