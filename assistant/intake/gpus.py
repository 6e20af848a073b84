"""The GPU a message names, tidied to one spelling ("rtx4060ti" -> "RTX 4060 Ti",
"m2 max" -> "M2 Max"), with where it stands so the budget reader can look beside it."""
from __future__ import annotations

import re

from assistant.intake.text import ICASE


_GPU_PATTERNS = [
    # NVIDIA consumer with prefix: "RTX 4060 Ti", "GTX1080ti", "RTX A6000", "RTX 6000 Ada", "RTX 4090D",
    # the small-form-factor workstation card "RTX 4000 SFF Ada"
    re.compile(r"(?<![\w])(rtx|gtx)\s*-?\s*(a?\d{3,4})\s*(ti\s*super|ti|super|(?:sff\s*)?ada|d|(?<=\d)m)?(?![\w])", ICASE),
    # datacenter / workstation: "A100", "H100 80G", "Tesla T4", "L40S"; a plural counts ("two A6000s")
    re.compile(r"(?<![\w])(?:tesla\s+)?(a100|a800|h100|h200|h800|h20|v100|a10g?|a30|a40|a6000|a5500|a5000|a4500|"
               r"a4000|a2000|l40s?|l20|l4|t4|p40|p100|(?<=tesla )p4|k80)s?(?![\w])", ICASE),
    # AMD: "RX 7900 XTX", "7900xtx", "7900 GRE", "MI300X"
    re.compile(r"(?<![\w])(?:rx\s*)?(\d{4})\s*(xtx|xt|gre)(?![\w])|(?<![\w])(rx)\s*(\d{4})(?![\w])"
               r"|(?<![\w])(mi\d{3}x?)(?![\w])", ICASE),
    # Apple silicon (unified memory): "M2 Max", "M3 Ultra", "Mac mini M4", "Mac mini M4 Pro"
    re.compile(r"(?<![\w])(m[1-4])\s*(pro|max|ultra)(?![\w])"
               r"|(?:mac\s*(?:book\s*(?:pro|air)?|mini|studio)?|apple)\s*(m[1-4])(?:\s*(pro|max|ultra))?(?![\w])", ICASE),
    # Intel Arc, with the brand or (the desktop cards) without: "Arc A770", "A770 16G"
    re.compile(r"(?<![\w])arc\s*(a\d{3})(?![\w])|(?<![\w])(a(?:770|750|580|380|310))(?![\w])", ICASE),
    # bare NVIDIA numbers: "4060", the laptop "4050", "3090ti", "2080 super", "4090D" (not 4096: only real models)
    re.compile(r"(?:(?<![\w.])|(?<=(?<!\w)[2-8]x))((?:10[5-8]|16[56]|20[6-8]|30[5-9]|40[5-9]|50[6-9])0)\s*(ti\s*super|ti|super|d|(?<=16[56]0)s(?=\s|$|[,，。]))?s?(?!\w|\.\d)"
               r"(?!\s*(?:k\b|tokens?|mib|mb|个|人))", ICASE),
]


# laptop and embedded NVIDIA parts, tidied as written ("MX450", "Jetson Orin")
_GPU_PATTERNS.append(re.compile(r"(?<![\w])(mx\d{3}|jetson(?:\s+(?:orin|nano|xavier|agx|tx2))*)(?![\w])", ICASE))
# AMD integrated graphics and workstation cards named with "Radeon": "Radeon 780M", "Radeon Pro W7900"
_GPU_PATTERNS.append(re.compile(r"(?<![\w])radeon\s+(\d{3}m|(?:pro\s+)?w\d{4}|vii)(?![\w])", ICASE))
# Apple silicon named before the machine: "M1 的 MacBook Air", "an M2 Mac mini"
_GPU_PATTERNS.append(re.compile(r"(?<![\w])(m[1-4])(?=\s*(?:的\s*)?(?:mac|imac|\d+\s*g[b]?\s*(?:的)?\s*(?:统一内存|unified))(?!\w*\s*(?:os|osx)\b))", ICASE))


def _suffix(word: str | None) -> str:
    if not word:
        return ""
    word = word.lower()
    if word.endswith("ada"):
        return " SFF Ada" if word.startswith("sff") else " Ada"
    if word == "d":  # the China-market "4090D" is one word
        return "D"
    if word == "s":  # "1660s": the 1660 Super
        return " Super"
    if word == "m":  # the older laptop parts: "GTX 960M"
        return "M"
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
    if i == 8:
        return g[0].upper()
    if i == 7:
        return "Radeon " + " ".join(w.capitalize() if w.lower() == "pro" else w.upper() for w in g[0].split())
    return g[0] + _suffix(g[1])


def find_gpus(text: str) -> list[tuple[int, int, str]]:
    hits = []
    for i, rx in enumerate(_GPU_PATTERNS):
        for m in rx.finditer(text):
            if any(s <= m.start() < e for s, e, _ in hits):
                continue
            hits.append((m.start(), m.end(), _tidy_gpu(i, m)))
    hits.sort()
    return hits
