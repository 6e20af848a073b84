"""The room every probe works in: its environment (:class:`ProbeEnv`: the
server, the memory reader, the limit), and leaving the server as it was found
afterwards (:func:`restoring`, :func:`server_settings`), Ctrl-C included.

A probe takes a ProbeEnv, measures in sampled steps (:mod:`probes.step`), and
returns a :class:`probes.result.ProbeResult`; what a failed load left behind
is read by :mod:`probes.evidence`. Usage is always measured as a difference
from the idle reading taken at the start of a step, so memory held by other
processes never counts against the model.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterator, Mapping

from common.envbool import env_on
from common.errors import ExitCode, ProbeError, ProbeTimeout, ServerUnreachable
from probes.ollama_api import Loaded, Ollama, canonical_name
from probes.server import ForeignServer, ServerControl
from probes.serverinfo import engine_of
from probes.texts import fill_prompt
from probes.units import fmt_size

#: How close to the idle level a reading must come after an unload before the
#: model counts as gone. Not a verdict (the rules judge readings): only when to
#: stop waiting for the old process to exit. A runner that has exited frees all
#: of its memory at once; 16 MiB is above the jitter of host RSS and NVML.
RELEASE_SLACK_BYTES = 16 << 20


def read_used(reader) -> int | None:
    """``reader``'s used bytes now, or None when the reading failed."""
    try:
        refresh = getattr(reader, "refresh", None)
        if refresh is not None:  # a process started a moment ago must be counted now
            refresh()
        used = reader.read().used_bytes
    except Exception:  # noqa: BLE001 - a failed reading is a value (unmeasured), not a crash
        return None
    return None if used is None else int(used)


class Cancelled(ProbeError):
    """The user stopped the probe (Ctrl-C in the chat); the server was restored."""

    exit_code = ExitCode.INTERRUPTED


@dataclass
class ProbeEnv:
    """Everything a probe may touch. ``limit_bytes`` caps the model's usage
    (min of --budget and what the device can give); None means no cap."""

    api: Ollama
    reader: Any                      # probes.memory MemoryReader
    limit_bytes: int | None = None
    device: Any = None               # probes.memory DeviceInfo
    control: ServerControl = field(default_factory=ForeignServer)
    hz: float = 20.0
    timeout_s: float = 900.0
    progress: Callable[[str, dict], None] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    on_gpu: bool = False             # True when the device is a GPU (spilling to CPU is then a shortage)
    #: why the memory source cannot see the model's process or device (a server
    #: on another machine): its figures are then reported, never measured
    blind: str | None = None
    release_timeout_s: float = 60.0
    last_idle_bytes: int | None = None   # the idle reading of the latest step, for unload()
    log: Any = None                      # probes.serverlog.ServerLog: the server's log, when readable
    # told of every change to the server before it is made and after it is
    # undone (the session journal), so a killed session's changes can be undone
    on_change: Callable[[str, dict], None] | None = None

    def changed(self, event: str, **data) -> None:
        if self.on_change is not None:
            self.on_change(event, data)

    def say(self, event: str, **data) -> None:
        if self.progress is not None:
            self.progress(event, data)

    def used(self) -> int | None:
        """One reading of the memory source; None when it failed or the source
        had no value (never 0: a dead source must not look like free memory)."""
        return read_used(self.reader)

    def unload(self, model: str) -> None:
        """Unload ``model`` and wait until it is really gone: Ollama drops it
        from ``/api/ps`` before its process has exited and freed its memory, so
        the next idle reading would count the old model. Waits until the
        source reads back at the idle level of the last step (within
        :data:`RELEASE_SLACK_BYTES`), or raises ProbeError at the deadline."""
        self.api.unload(model)
        target = self.last_idle_bytes
        if target is None:
            return
        deadline = time.monotonic() + self.release_timeout_s
        used = self.used()
        while used is None or used > target + RELEASE_SLACK_BYTES:
            if time.monotonic() > deadline:
                seen = "could not be read" if used is None else f"still {fmt_size(used - target)} above idle"
                raise ProbeError(f"{model} was unloaded but its memory did not come back within "
                                 f"{self.release_timeout_s:.0f}s ({seen})",
                                 hint="another process may be loading memory; check `ollama ps` and the process list")
            self.cancel.wait(0.05)
            used = self.used()

    def sleep(self, seconds: float, deadline: float | None = None) -> None:
        """Sleep that wakes up for Ctrl-C (``cancel``) and the probe timeout."""
        end = time.monotonic() + seconds
        while True:
            self.check(deadline)
            left = end - time.monotonic()
            if left <= 0:
                return
            self.cancel.wait(min(left, 0.1))

    def check(self, deadline: float | None) -> None:
        if self.cancel.is_set():
            raise Cancelled("probe stopped by the user")
        if deadline is not None and time.monotonic() > deadline:
            raise ProbeTimeout(f"the probe ran past its timeout of {self.timeout_s:.0f}s")

#: seconds the restore waits for requests still running on the server (a load cut by Ctrl-C)
RESTORE_SETTLE_S = 30.0
#: after a probe that was cut (Ctrl-C, an error, a timeout) with requests still on the
#: server, how long the restore watches ``/api/ps`` for a load landing after it
RESTORE_WATCH_S = 3.0
#: how many times the restore is tried when the server or the network fails it
#: (a reply that timed out, a dropped connection): a hiccup must not leave the
#: user's server changed when a second try would have put it back
RESTORE_TRIES = 3
#: seconds between those tries
RESTORE_RETRY_PAUSE_S = 1.0
#: after a probe whose reply timed out, how long the server has to answer
#: ``/api/version`` before it counts as hung and the restore is not tried
HUNG_CHECK_S = 3.0


@contextlib.contextmanager
def restoring(env: ProbeEnv) -> Iterator[list[Loaded]]:
    """Leave the server as it was: unload what the probe loaded, and reload a
    model that was loaded before at its old context length. Runs on errors,
    timeouts and Ctrl-C too."""
    before = env.api.ps()
    key = f"loaded-{time.monotonic_ns()}"
    was = [{"name": m.name, "context_length": m.context_length} for m in before]
    env.changed("loaded_before", key=key, host=env.api.host, models=was)
    cut = True
    try:
        yield before
        cut = False
    finally:
        cancel_was_set = env.cancel.is_set()
        env.cancel.clear()  # the restore itself must not be cancelled
        settled, busy = True, 0
        # the probe ended on a reply that never came: a server that does not answer
        # a short question now is hung, and every restore call would wait the whole
        # --timeout again (two minutes of a user's time for a restore that cannot work)
        hung = isinstance(sys.exc_info()[1], ServerUnreachable) and not _answers(env.api)
        try:
            if hung:
                raise ServerUnreachable(f"the Ollama server at {env.api.host} did not answer again "
                                        f"within {HUNG_CHECK_S:g} s after its timeout")
            # a load cut short by Ctrl-C or SIGTERM goes on in the server: let it end,
            # or the unload below runs first and the model stays loaded after we leave
            settle = getattr(env.api, "settle", None)
            if settle is not None:
                busy = env.api.in_flight()
                settled = bool(settle(RESTORE_SETTLE_S))
            # a cut request may have started a load that lands after the first pass
            tries = _retried(lambda: restore(env.api, before, watch_s=RESTORE_WATCH_S if cut and busy else 0.0))
        except Exception as exc:
            env.changed("restore_failed", key=key, host=env.api.host, models=was, reason=str(exc),
                        settled=settled, tries=getattr(exc, "tries", 1))
            raise
        finally:
            if cancel_was_set:
                env.cancel.set()
        env.changed("restored", key=key, settled=settled, tries=tries)


def _answers(api) -> bool:
    answers = getattr(api, "answers", None)
    return True if answers is None else bool(answers(HUNG_CHECK_S))


def _retried(put_back: Callable[[], None], tries: int = RESTORE_TRIES) -> int:
    """Run ``put_back`` until it succeeds, at most ``tries`` times, when the
    server or the network fails it (ServerUnreachable, ProbeError); return how
    many tries it took. The last failure is raised with ``tries`` set on it."""
    for n in range(1, tries):
        try:
            put_back()
            return n
        except ProbeError:
            time.sleep(RESTORE_RETRY_PAUSE_S)
    try:
        put_back()
    except ProbeError as exc:
        exc.tries = tries
        raise
    return tries


#: what Ollama runs with when a variable is not set (``envconfig``, the same on
#: v0.11.4 and v0.34.4). Flash attention has no entry: unset is off on the
#: legacy runner and *auto* on llama-server, so oomvet never writes it off.
UNSET_MEANS = {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KV_CACHE_TYPE": "f16"}


def measured_server_env(parallel: int, kv_cache: str) -> dict[str, str]:
    """The server-wide settings a measurement runs with: the concurrency and the
    KV cache type, with flash attention on when the cache is quantized (Ollama
    quantizes the cache only with flash attention). An f16 cache says nothing
    of flash attention: ``OLLAMA_FLASH_ATTENTION=0`` would force it off where
    unset means auto, and cost memory."""
    kv = str(kv_cache or "f16")
    env = {"OLLAMA_NUM_PARALLEL": str(max(1, int(parallel or 1))), "OLLAMA_KV_CACHE_TYPE": kv}
    if kv != "f16":
        env["OLLAMA_FLASH_ATTENTION"] = "1"
    return env


def settings_to_change(current: Mapping[str, str] | None, wanted: Mapping[str, str],
                       fa_auto: bool = False, known: Collection[str] | None = None) -> dict[str, str]:
    """The ``wanted`` settings that are not already in effect on a server whose
    settings are ``current`` (an unset variable is Ollama's default); all of
    them when ``current`` is None (not known: nothing is assumed in effect).
    ``known``: when only some keys were read (a model process's command line),
    those; a wanted key outside them is not known to be in effect either.
    ``fa_auto``: the server is v0.30+ (llama-server), where flash attention
    unset is *auto*, which a quantized cache works with: it is left as it is."""
    if current is None:
        return {k: str(v) for k, v in wanted.items()}
    return {k: str(v) for k, v in wanted.items()
            if (known is not None and k not in known)
            or (str(current.get(k) or UNSET_MEANS.get(k, "")) != str(v)
                and not (fa_auto and k == "OLLAMA_FLASH_ATTENTION" and str(v) == "1" and not current.get(k)))}


def in_effect(current: Mapping[str, str] | None, engine: str | None) -> dict[str, str] | None:
    """The settings ``current`` puts in effect on ``engine``: the legacy
    runner ignores a quantized ``OLLAMA_KV_CACHE_TYPE`` without
    ``OLLAMA_FLASH_ATTENTION`` on (unset is off there), and runs an f16 cache."""
    if current is None:
        return None
    kv = str(current.get("OLLAMA_KV_CACHE_TYPE") or "f16").lower()
    if engine == "runner" and kv != "f16" and not env_on(current.get("OLLAMA_FLASH_ATTENTION")):
        return {k: v for k, v in current.items() if k != "OLLAMA_KV_CACHE_TYPE"}
    return dict(current)


def known_keys(control) -> frozenset[str] | None:
    """The keys a server control's ``env()`` covers; None when it is the whole environment."""
    return getattr(control, "known", None)


def server_value(control, key: str) -> tuple[str | None, str]:
    """The value of the server setting ``key`` in effect (an unset one is
    Ollama's default from :data:`UNSET_MEANS`, or None where it has none) and
    where it was read; ``(None, "unknown")`` when it was not read."""
    current = control.env()
    known = known_keys(control)
    if current is None or (known is not None and key not in known):
        return None, "unknown"
    source_of = getattr(control, "source_of", None)
    source = source_of(key) if source_of is not None else control.source
    return current.get(key) or UNSET_MEANS.get(key), source


@contextlib.contextmanager
def server_settings(env: ProbeEnv, wanted: dict[str, str]) -> Iterator[bool]:
    """Run the block with these server-wide settings (``OLLAMA_NUM_PARALLEL``...),
    restarting a server oomvet owns and putting it back afterwards. Yields
    False when they are not known to be in effect and oomvet may not restart
    the server (a user's server, or one whose settings it could not read):
    the block then measures the server as it is, and nothing is verified."""
    current = env.control.env()
    changes = settings_to_change(in_effect(current, _engine_if_ignored(env, current)), wanted,
                                 fa_auto=_fa_auto(env, current, wanted), known=known_keys(env.control))
    if not changes:
        yield True
        return
    if current is None or not env.control.can_restart():
        yield False
        return
    back = {k: current.get(k) for k in changes}  # None: unset again, as it was
    key = f"settings-{time.monotonic_ns()}"
    env.changed("settings_before", key=key, host=env.api.host, settings=back, wanted=changes)
    env.control.restart(changes)
    try:
        yield True
    finally:
        try:
            env.control.restart(back)
        except Exception as exc:
            env.changed("restore_failed", key=key, host=env.api.host, settings=back, reason=str(exc))
            raise
        env.changed("settings_restored", key=key)


def _engine_if_ignored(env: ProbeEnv, current: Mapping[str, str] | None) -> str | None:
    """The server's engine, asked of it only when its settings hold a quantized
    cache without flash attention on (which the legacy runner ignores)."""
    if current is None or str(current.get("OLLAMA_KV_CACHE_TYPE") or "f16").lower() == "f16" \
            or env_on(current.get("OLLAMA_FLASH_ATTENTION")):
        return None
    return _engine(env)


def _fa_auto(env: ProbeEnv, current: Mapping[str, str] | None, wanted: Mapping[str, str]) -> bool:
    """Whether flash attention unset means auto on this server (v0.30+); asked
    of the server only when it matters."""
    known = known_keys(env.control)
    if current is None or "OLLAMA_FLASH_ATTENTION" not in wanted or current.get("OLLAMA_FLASH_ATTENTION") \
            or (known is not None and "OLLAMA_FLASH_ATTENTION" not in known):
        return False
    return _engine(env) == "llama-server"


def _engine(env: ProbeEnv) -> str | None:
    """The server's engine from its version now; None when it does not say."""
    try:
        return engine_of(env.api.version())
    except ProbeError:
        return None


def restore(api: Ollama, before: list[Loaded], watch_s: float = 0.0, passes: int = 3) -> None:
    """Unload what was not loaded before (or is at another context), then
    reload what was, at its old context length. Names are compared canonically.

    With ``watch_s``, the server is then watched that long, and put back again
    (``passes`` times in all) if it moves: an unload asked for while the server
    is still loading that model does nothing in Ollama (``expireRunner`` only
    sees loaded runners), so a load a cut request had started lands after the
    first pass. Raises ProbeError if it still differs after the last pass."""
    for _ in range(max(1, passes)):
        _put_back(api, before)
        if _stays(api, before, watch_s):
            return
    raise ProbeError(f"the models loaded on {api.host} kept changing while oomvet put them back: "
                     f"{_ps_line(api.ps())} (was {_ps_line(before)})")


def _put_back(api: Ollama, before: list[Loaded]) -> None:
    want = {canonical_name(m.name): m for m in before}
    for m in api.ps():
        old = want.get(canonical_name(m.name))
        if old is None or (old.context_length and m.context_length != old.context_length):
            api.unload(m.name)
    now = {canonical_name(m.name) for m in api.ps()}
    for m in before:
        if canonical_name(m.name) not in now:
            options = {"num_ctx": m.context_length} if m.context_length else {}
            api.load(m.name, options)


def _as_before(rows: list[Loaded], before: list[Loaded]) -> bool:
    """The same models, each at its old context length where one was known."""
    now = {canonical_name(m.name): m.context_length for m in rows}
    want = {canonical_name(m.name): m.context_length for m in before}
    return now.keys() == want.keys() and all(not ctx or now[name] == ctx for name, ctx in want.items())


def _stays(api: Ollama, before: list[Loaded], watch_s: float) -> bool:
    """True when ``/api/ps`` matches ``before`` now and at every look for ``watch_s`` seconds."""
    deadline = time.monotonic() + watch_s
    while True:
        if not _as_before(api.ps(), before):
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))


def _ps_line(rows: list[Loaded]) -> str:
    return ", ".join(f"{m.name} (num_ctx {m.context_length})" if m.context_length else m.name
                     for m in rows) or "nothing loaded"


def generate_at_once(env: ProbeEnv, model: str, units: int, options: dict, n: int) -> list:
    """``n`` fill prompts of ``units`` sent together from ``n`` threads (each
    with its own words, so no prompt cache is shared): the generations, in
    order. A call that raised (the server went away, the timeout passed)
    raises here, in the caller's thread, once every thread has ended."""
    gens: list = [None] * n
    raised: list[BaseException] = []

    def send(i: int) -> None:
        try:
            gens[i] = env.api.generate(model, fill_prompt(units, uuid.uuid4().hex[:8]), options)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            raised.append(exc)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if raised:
        raise raised[0]
    return gens
