"""How people write a memory size: "12G", "8 gigs", "两个G", "500 兆",
"3 点几 G", "一千五百兆". One grammar for every reader of sizes."""
from __future__ import annotations

from assistant.intake.numbers import EN_ALT, EN_NUM, zh_int
from probes.units import SizeError, parse_size

#: group 1 the number, group 2 the unit
SIZE = (r"(\d+(?:\.\d+)?(?:\s*点几)?|(?<![a-z])(?:" + EN_ALT + r")(?=[\s-])|[一二两三四五六七八九十百千]+)[\s-]*(?:个\s*(?:多\s*)?)?"
        r"(gib|gigabytes?|gigs?|gb|g|mib|megabytes?|megs?|mb|m|兆|tib|tb)(?![a-z])")
_UNIT_WORDS = {"gigabyte": "g", "gigabytes": "g", "gig": "g", "gigs": "g", "megabyte": "m", "megabytes": "m",
               "meg": "m", "megs": "m", "兆": "m"}


def to_bytes(number: str, unit: str) -> int | None:
    """Bytes of a number and unit as :data:`SIZE` matched them; None if not a size."""
    number = number.split("点几")[0].strip()  # "3 点几 G": three and a bit, read as its whole part
    if not number[0].isdigit():
        number = str(EN_NUM.get(number.lower()) or zh_int(number) or "")
    try:
        return parse_size(f"{number}{_UNIT_WORDS.get(unit.lower(), unit)}")
    except SizeError:
        return None
