"""``--budget``: how much memory the recommended config may use, and the limit
every probe measures against.

A budget is a size (``6GiB``, ``600MiB``, ``7.5G``) or a share of the device
(``80%`` of its total). The limit is the smaller of the budget and what the
device can give. "What the device can give" is its free memory at the idle
baseline plus what our own model already holds there (``own_bytes``: it is
ours to reuse when the model reloads); memory other processes hold is not
ours. On the host source the reading's ``used`` is the runner's RSS, i.e.
already our own, and "free" is the system's available memory; without a
budget there the limit is the host's available memory, and the note says so.

Readings are device-level, so the limit is also expressed as a ceiling on a
reading from the same source (``ceiling_bytes`` = others' usage + limit):
a reading above it is an out-of-memory outcome like an error. The limit's
note is a :class:`~probes.notes.Note` (``budget.*`` in the catalog), so the UI
says it in the session's language.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from common.catalog import t
from common.errors import ProbeError
from probes.memory.base import DeviceInfo, Reading
from probes.notes import Note
from probes.units import SizeError, fmt_size, parse_size

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*%\s*$")
_HELP = "use a size like 6GiB, 600MiB, 7.5G, or a share of the device like 80%"


#: where a budget came from (``Budget.origin``), so the limit note names it as the user gave it
FLAG, ANSWERS, MESSAGE = "flag", "answers", "message"


@dataclass(frozen=True)
class Budget:
    """A budget parsed once, where it entered: ``--budget``, the answers file
    or the user's words; carried typed to the world and the probes."""

    bytes: int | None         # a size budget
    fraction: float | None    # a share of the device total (0 < f <= 1)
    text: str                 # as the user wrote it (a message's budget: its size, or its share)
    origin: str = FLAG        # FLAG, ANSWERS or MESSAGE

    def __str__(self) -> str:
        # what the journal and the devices report keep: the budget as the user gave it
        return self.text

    def said(self) -> str:
        """The budget as the user gave it, and where: "--budget 6GiB" (a flag
        is the same in every language), else a note (``budget.said.*``):
        "budget: 6GiB in the answers file", "your message"."""
        if self.origin == FLAG:
            return f"--budget {self.text}"
        return Note(f"budget.said.{self._kind()}", text=self.text)

    def said_from(self) -> Note:
        """The same after a figure: "from --budget 6GiB", "from your message" (``budget.from.*``)."""
        return Note(f"budget.from.{self._kind()}", text=self.text)

    def _kind(self) -> str:
        # a message's budget has no one span to quote (it may follow from "8G,
        # 3G of it taken"): its size is in the note already, a share is named
        return "message_share" if self.origin == MESSAGE and self.fraction is not None else self.origin

    def bytes_for(self, total_bytes: int | None) -> int:
        """The budget in bytes on a device with this total."""
        if self.bytes is not None:
            return self.bytes
        if total_bytes is None:
            raise ProbeError(f"{self.said()}: the memory source does not report the "
                             "device total, so a share cannot be computed",
                             hint="give a size instead, e.g. --budget 6GiB")
        return int(total_bytes * self.fraction)


def parse_budget(text: str) -> Budget:
    """``"6GiB"``, ``"600MiB"``, ``"7.5G"``, ``"80%"`` -> Budget. Anything else
    raises SizeError (a ProbeError: one clear line, exit code 2)."""
    raw = "" if text is None else str(text)
    if not raw.strip():
        raise SizeError(f"--budget is empty: {_HELP}")
    m = _PERCENT.match(raw)
    if m:
        pct = float(m.group(1))
        if not 0 < pct <= 100:
            raise SizeError(f"--budget {raw.strip()!r}: a share of the device must be above 0% "
                            "and at most 100%")
        return Budget(None, pct / 100.0, raw.strip())
    if raw.strip().startswith("-"):
        raise SizeError(f"--budget {raw.strip()!r}: a budget cannot be negative; {_HELP}")
    try:
        size = parse_size(raw)
    except SizeError as exc:
        # keep parse_size's reason when it is more precise than "not a size"
        why = str(exc)
        if "more than zero" in why:
            why = "a budget must be more than zero"
        elif why.startswith("unknown size unit"):
            why = why.split(" in ")[0]
        else:
            why = "not a size"
        raise SizeError(f"--budget {raw.strip()!r}: {why}; {_HELP}") from None
    if raw.strip().replace(".", "", 1).isdigit() and size < (1 << 20):
        # a bare number is bytes by the project's convention; this small it is a slip
        raise SizeError(f"--budget {raw.strip()!r} means {size} bytes, too small for any model; "
                        f"did you mean {raw.strip()}GiB?")
    return Budget(size, None, raw.strip())


@dataclass(frozen=True)
class Limit:
    bytes: int                # what the model may use
    source: str               # "budget" | "device" | "host-available"
    note: str                 # one line the UI shows: a Note (English, with the key to say it in Chinese)
    device_bytes: int | None = None   # what the device can give (None: unknown)
    budget_bytes: int | None = None
    ceiling_bytes: int = 0    # a reading (same source) above this is over the limit

    def text(self, lang: str = "en") -> str:
        return _in_lang(self.note, lang)

    def to_dict(self) -> dict:
        # --json readers (and `devices`) get the line in both languages
        return {"bytes": self.bytes, "source": self.source, "note": str(self.note), "note_zh": self.text("zh"),
                "device_bytes": self.device_bytes, "budget_bytes": self.budget_bytes,
                "ceiling_bytes": self.ceiling_bytes}


def _in_lang(note, lang: str) -> str:
    """A note in ``lang``, the notes among its values too (where a budget came from)."""
    key = getattr(note, "key", None)
    if key is None:
        return str(note)
    return t(key, lang, **{k: _in_lang(v, lang) if isinstance(v, Note) else v for k, v in note.values.items()})


def resolve_limit(budget: Budget | None, info: DeviceInfo, reading: Reading, *,
                  own_bytes: int | None = None) -> Limit:
    """min(budget, what the device can give), from a reading at the idle baseline.

    ``own_bytes``: memory our model already holds in that reading (default:
    the whole reading on the host source, where ``used`` is the runner's RSS;
    0 on GPU sources, whose baseline is taken with the model unloaded).
    """
    host = info.source == "host"
    own = (reading.used_bytes or 0) if own_bytes is None and host else (own_bytes or 0)
    total = info.total_bytes if info.total_bytes is not None else reading.total_bytes
    if reading.free_bytes is not None:
        can_give = reading.free_bytes + own
    elif total is not None and reading.used_bytes is not None:
        can_give = total - reading.used_bytes + own
    else:
        can_give = None
    if can_give is not None:
        can_give = max(can_give, 0)
    others = 0 if host else max((reading.used_bytes or 0) - own, 0)

    def limit(nbytes: int, source: str, key: str, budget_b=None, **values) -> Limit:
        note = Note(key, can_give=fmt_size(can_give), name=info.name, **values)
        return Limit(nbytes, source, note, can_give, budget_b, others + nbytes)

    where = "host" if host else "device"
    if budget is not None:
        b = budget.bytes_for(total)
        if can_give is None or b <= can_give:
            return limit(b, "budget", f"budget.within_{where}", b, limit=fmt_size(b), said=budget.said_from())
        return limit(can_give, "host-available" if host else "device", f"budget.over_{where}", b,
                     budget=fmt_size(b), said=budget.said())
    if can_give is None:
        raise ProbeError(f"cannot tell how much memory {info.name} can give (its {info.source} "
                         "reading is n/a)", hint="pass --budget SIZE, e.g. --budget 6GiB")
    if host and info.unified:
        return limit(can_give, "host-available", "budget.unified")
    if host:
        return limit(can_give, "host-available", "budget.host")
    return limit(can_give, "device", "budget.device", total=fmt_size(total))
