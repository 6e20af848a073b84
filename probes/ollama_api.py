"""The one place oomvet talks to an Ollama server.

Every room reaches Ollama's HTTP API through :class:`Ollama` (the probes, the
memory readers, the predictions, the rig); this is the only module that
imports the official ``ollama`` client or ``httpx`` (tests/test_house.py
checks it). The client carries every call it has; plain httpx the two it lacks
or trims: ``/api/version``, and ``/api/show`` with ``verbose`` for the tensor
list. Errors of a load or a request become small result values carrying
Ollama's own error text, because an out-of-memory answer is a finding, not a
crash; an unreachable server is raised as ServerUnreachable, a missing
model as ModelNotFoundError, an answer oomvet cannot read as ProbeError.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping

import httpx
import ollama
from tenacity import RetryError, Retrying, retry_if_exception_type, retry_if_result, stop_after_delay, wait_fixed

from probes.deadline import Overdue, settle, within
from common.errors import ModelNotFoundError, ProbeError, ServerUnreachable

# one classifier for both engines' error texts (probes/oomtext.py); re-exported for callers
# that still import it from here
from probes.oomtext import Failure, classify, is_oom_text  # noqa: E402,F401

DEFAULT_PORT = 11434
#: where Ollama listens unless told otherwise (``OLLAMA_HOST``)
DEFAULT_HOST = f"http://127.0.0.1:{DEFAULT_PORT}"


# the API's values live beside it; every caller imports them from here
from probes.ollama_types import Generation, Loaded, ModelShow, canonical_name, placement_of  # noqa: E402,F401


class Ollama:
    """Ollama's HTTP API on one server, with its errors as oomvet's.

    ``client`` (an ``ollama.Client`` or a fake with its methods) or
    ``transport`` (an ``httpx`` transport, e.g. ``httpx.MockTransport``) stand
    in for the network in tests; ``host`` None is ``$OLLAMA_HOST``, else the
    default address, as the ``ollama`` CLI reads it."""

    def __init__(self, host: str | None = None, timeout_s: float = 600.0, client=None, transport=None):
        self.host = _base_url(host)
        self.timeout_s = timeout_s
        self._transport = transport
        self._client = client or ollama.Client(host=self.host, timeout=timeout_s, transport=transport)
        self._raw_client: httpx.Client | None = None  # built on first use: most gateways never need it
        self._running: set = set()  # loads, unloads and generations still in their worker thread (see settle)

    def settle(self, limit_s: float = 30.0) -> bool:
        """Wait (up to ``limit_s``) for requests the caller gave up on, a load
        cut by Ctrl-C, to end on the server's side, so that what is unloaded
        next is what the server really holds. True when none is left."""
        return settle(self._running, limit_s)

    def in_flight(self) -> int:
        """Loads, unloads and generations sent and not yet answered (a caller may have given up on them)."""
        return len(self._running)

    def answers(self, within_s: float = 3.0) -> bool:
        """Whether the server answers ``/api/version`` within ``within_s``
        seconds now: after a call that timed out, a hung server (SIGSTOP, a
        stuck process) is told from a slow one without waiting the whole
        ``--timeout`` again."""
        try:
            within(lambda: self._http().request("GET", "/api/version", timeout=within_s).raise_for_status(),
                   within_s, None)
        except Exception:  # noqa: BLE001 - any failure is "does not answer"
            return False
        return True

    # -- reading -------------------------------------------------------------
    def version(self) -> str:
        """``curl HOST/api/version``; raises ServerUnreachable, or
        ProbeError when the answer is an error status."""
        try:
            return self._call(lambda: self._raw("GET", "/api/version")["version"])
        except ollama.ResponseError as exc:
            raise _refused(f"GET {self.host}/api/version", exc) from None

    def wait_until_up(self, timeout_s: float = 60.0, check: Callable[[], None] | None = None) -> str:
        """Ask ``curl HOST/api/version`` every 0.2 s until an Ollama answers
        (a server still starting refuses the connection); return its version.
        ``check`` runs before each try and raises to end the wait (the server's
        process exited). Something else answering there ends it at once:
        waiting will not help. Raises ServerUnreachable."""
        def ask() -> str:
            if check is not None:
                check()
            resp = self._http().get("/api/version", timeout=2)
            resp.raise_for_status()
            try:
                return str(resp.json()["version"])
            except (ValueError, KeyError, TypeError):
                raise ServerUnreachable(f"{self.host}/api/version did not answer as Ollama does: "
                                             f"{resp.text[:80]!r}") from None

        try:
            for attempt in Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(0.2),
                                    retry=retry_if_exception_type(httpx.HTTPError)):
                with attempt:
                    return ask()
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise ServerUnreachable(f"ollama serve at {self.host} did not answer within {timeout_s:.0f}s "
                                         f"({last})") from None
        raise AssertionError("unreachable")  # Retrying either returns or raises

    def tags(self) -> list[str]:
        """``ollama list`` (``curl HOST/api/tags``): every model name on the server."""
        return [m.model for m in self._call(self._client.list).models]

    def digests(self) -> dict[str, str]:
        """``ollama list``'s ID column: canonical name -> digest."""
        return {canonical_name(m.model): m.digest for m in self._call(self._client.list).models if m.digest}

    def file_size(self, model: str) -> int | None:
        """``ollama list``'s SIZE column for ``model``: the weights file's bytes."""
        want = canonical_name(model)
        return next((int(m.size) for m in self._call(self._client.list).models
                     if canonical_name(m.model) == want and m.size), None)

    def same_model(self, a: str, b: str, digests: dict[str, str] | None = None) -> bool:
        """One model under two names (``ollama list``): the same canonical name,
        or two tags of one digest (``neohorse-1:latest`` copied from ``neohorse-1:f16``)."""
        ca, cb = canonical_name(a), canonical_name(b)
        if ca == cb:
            return True
        digests = self.digests() if digests is None else digests
        return ca in digests and digests.get(ca) == digests.get(cb)

    def show(self, model: str, verbose: bool = False) -> ModelShow:
        """``ollama show MODEL`` (``curl HOST/api/show -d '{"model": M}'``);
        ``verbose`` adds the tensor list and the tokenizer's arrays (``ollama
        show -v MODEL``, ``"verbose": true``), which the client's show()
        drops. Raises ModelNotFoundError."""
        try:
            if verbose:
                return self._call(lambda: _shown(model, self._raw("POST", "/api/show",
                                                                   {"model": model, "verbose": True})))
            resp = self._call(lambda: self._client.show(model))
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise ModelNotFoundError(f"model {model!r} is not on the server at {self.host}",
                                         hint=f"ollama pull {model}  (oomvet never pulls on its own)") from None
            raise _refused(f"ollama show {model}", exc) from None
        details = resp.details
        return ModelShow(name=model, quantization=details.quantization_level if details else None,
                         family=details.family if details else None,
                         parameter_size=details.parameter_size if details else None,
                         model_info=dict(resp.modelinfo or {}), parameters=resp.parameters or "",
                         capabilities=tuple(getattr(resp, "capabilities", None) or ()))

    def ps_rows(self) -> list[dict]:
        """``curl HOST/api/ps``'s ``models`` as plain dicts, every field the
        server sent (``size``/``size_vram`` None where it sent none)."""
        return [m.model_dump() for m in self._ps()]

    def ps(self) -> list[Loaded]:
        """``ollama ps`` (``curl HOST/api/ps``): loaded models with Ollama's size / size_vram."""
        return [Loaded(name=str(m.model or getattr(m, "name", None) or ""), size_bytes=int(m.size or 0),
                       size_vram_bytes=int(m.size_vram or 0), context_length=getattr(m, "context_length", None),
                       quantization=m.details.quantization_level if m.details else None,
                       digest=getattr(m, "digest", None) or None) for m in self._ps()]

    def _ps(self) -> list:
        try:
            return self._call(self._client.ps).models or []
        except ollama.ResponseError as exc:
            raise _refused(f"ollama ps at {self.host}", exc) from None

    def loaded(self, model: str) -> Loaded | None:
        """The ``ollama ps`` row of ``model`` under any of its names (a bare
        name, its ``:latest``, or another tag of the same digest)."""
        rows = self.ps()
        want = canonical_name(model)
        row = next((m for m in rows if canonical_name(m.name) == want), None)
        if row is not None or not rows:
            return row
        digest = self.digests().get(want)
        return next((m for m in rows if digest and m.digest == digest), None)

    # -- loading -------------------------------------------------------------
    def pull(self, model: str) -> None:
        """``ollama pull MODEL``, only where the user allowed it. No
        whole-reply deadline: a download takes as long as it takes."""
        try:
            self._call(lambda: self._client.pull(model), deadline=False, loads=True)
        except ollama.ResponseError as exc:
            raise _refused(f"ollama pull {model}", exc) from None

    def load(self, model: str, options: Mapping[str, Any] | None = None, keep_alive: str | float = "10m") -> Generation:
        """Load without generating: ``curl HOST/api/generate -d '{"model": M}'`` (no prompt)."""
        started = time.monotonic()
        try:
            resp = self._call(lambda: self._client.generate(model=model, options=dict(options or {}),
                                                            keep_alive=keep_alive), loads=True)
        except ollama.ResponseError as exc:
            return Generation(ok=False, status=exc.status_code, error=exc.error,
                              duration_s=time.monotonic() - started)
        return Generation(ok=True, done_reason=resp.done_reason, duration_s=time.monotonic() - started)

    def unload(self, model: str, wait_s: float = 30.0) -> None:
        """``ollama stop MODEL``; waits until ``/api/ps`` no longer lists it
        (the real unload is asynchronous)."""
        try:
            self._call(lambda: self._client.generate(model=model, keep_alive=0), loads=True)
        except ollama.ResponseError:
            pass  # not loaded, or gone: either way it is not in memory
        gone = Retrying(stop=stop_after_delay(wait_s), wait=wait_fixed(0.05), retry_error_callback=lambda _: False,
                        retry=retry_if_result(lambda unloaded: not unloaded))
        if gone(lambda: self.loaded(model) is None):
            return
        raise ProbeError(f"{model} was still loaded {wait_s:.0f}s after asking Ollama to unload it",
                         hint="check `ollama ps`; a request still running keeps a model loaded")

    def unload_all(self, wait_s: float = 30.0) -> None:
        """``ollama stop`` for every model ``ollama ps`` lists."""
        for m in self.ps():
            self.unload(m.name, wait_s)

    # -- generating ------------------------------------------------------------
    def generate(self, model: str, prompt: str, options: Mapping[str, Any] | None = None,
                 keep_alive: str | float = "10m", on_token: Callable[[str], None] | None = None) -> Generation:
        """One streamed request (``ollama run MODEL PROMPT``, ``curl
        HOST/api/generate``); an error before or inside the stream becomes a
        failed Generation with Ollama's text and status."""
        started = time.monotonic()
        parts: list[str] = []

        def consume() -> Generation:
            last = None
            try:
                for chunk in self._client.generate(model=model, prompt=prompt, options=dict(options or {}),
                                                   keep_alive=keep_alive, stream=True):
                    if chunk.response:
                        parts.append(chunk.response)
                        if on_token:
                            on_token(chunk.response)
                    last = chunk
            except ollama.ResponseError as exc:
                return Generation(ok=False, text="".join(parts), status=exc.status_code, error=exc.error,
                                  duration_s=time.monotonic() - started)
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                return Generation(ok=False, text="".join(parts), status=None, error=f"connection dropped: {exc}",
                                  duration_s=time.monotonic() - started)
            return Generation(ok=True, text="".join(parts), done_reason=last.done_reason if last else None,
                              prompt_eval_count=last.prompt_eval_count if last else None,
                              eval_count=last.eval_count if last else None, duration_s=time.monotonic() - started,
                              load_s=(last.load_duration or 0) / 1e9 if last and last.load_duration is not None
                              else None)

        return self._call(consume, loads=True)  # the whole stream within the timeout, not each chunk

    def embed(self, model: str, text: str, options: Mapping[str, Any] | None = None,
              keep_alive: str | float = "10m") -> Generation:
        """One embedding request (``curl HOST/api/embed -d '{"model": M, "input": TEXT}'``),
        as a Generation with no text: what an embedding model is sent, since
        ``/api/generate`` refuses it. Input past the context is cut, as Ollama's default."""
        started = time.monotonic()

        def ask() -> Generation:
            try:
                resp = self._client.embed(model=model, input=text, options=dict(options or {}),
                                          keep_alive=keep_alive, truncate=True)
            except ollama.ResponseError as exc:
                return Generation(ok=False, status=exc.status_code, error=exc.error,
                                  duration_s=time.monotonic() - started)
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                return Generation(ok=False, status=None, error=f"connection dropped: {exc}",
                                  duration_s=time.monotonic() - started)
            return Generation(ok=True, done_reason="embed", prompt_eval_count=resp.prompt_eval_count, eval_count=0,
                              duration_s=time.monotonic() - started,
                              load_s=(resp.load_duration or 0) / 1e9 if resp.load_duration is not None else None)

        return self._call(ask, loads=True)

    def logprobs(self, model: str, prompt: str, options: Mapping[str, Any] | None = None, top: int = 5) -> list[dict]:
        """The per-token log-probabilities of one answer, ``[{token, logprob,
        top: {token: logprob}}]`` (``curl HOST/api/generate -d '{"model": M,
        "prompt": P, "logprobs": true, "top_logprobs": 5, "stream": false}'``);
        [] from a server that ignores the fields. An error status is ProbeError."""
        def ask() -> list[dict]:
            resp = self._client.generate(model=model, prompt=prompt, options=dict(options or {}),
                                         logprobs=True, top_logprobs=top, stream=False)
            return [{"token": step.token, "logprob": step.logprob,
                     "top": {t.token: t.logprob for t in (getattr(step, "top_logprobs", None) or [])}}
                    for step in (getattr(resp, "logprobs", None) or [])]

        try:
            return self._call(ask, loads=True)
        except ollama.ResponseError as exc:
            raise _refused(f"logprobs of {model}", exc) from None

    def siblings(self, model: str) -> list[str]:
        """Other tags of the same model name on the server (``ollama list | grep NAME:``)."""
        own = canonical_name(model)
        base = own.rsplit(":", 1)[0]
        digests = self.digests()
        return [n for n in self.tags()
                if canonical_name(n).rsplit(":", 1)[0] == base and not self.same_model(n, model, digests)]

    def _http(self) -> httpx.Client:
        if self._raw_client is None:
            headers = {"Accept": "application/json"}
            if key := os.environ.get("OLLAMA_API_KEY"):
                headers["Authorization"] = f"Bearer {key}"  # what the client sends on its own calls
            self._raw_client = httpx.Client(base_url=self.host, timeout=self.timeout_s, follow_redirects=True,
                                            headers=headers, transport=self._transport)
        return self._raw_client

    def _raw(self, method: str, path: str, body: dict | None = None) -> Any:
        """One JSON call the client lacks, on plain httpx; an error status
        raises ``ollama.ResponseError`` as the client's own calls do."""
        resp = self._http().request(method, path, json=body)
        if not resp.is_success:
            raise ollama.ResponseError(resp.text, resp.status_code)
        return resp.json()

    def _call(self, fn: Callable[[], Any], deadline: bool = True, loads: bool = False) -> Any:
        """``fn()`` (one request to the server) finished within ``timeout_s`` in
        all (unless not ``deadline``), with the client's errors as oomvet's.
        httpx bounds each read, so a reply dripping a few bytes at a time
        would never time out there. A call that ``loads`` (a load, an unload,
        a generation) is held in ``_running`` until it ends, for :meth:`settle`;
        a read given up on (``/api/ps`` over a slow network) changes nothing
        on the server, so the restore does not wait for it."""
        try:
            return within(fn, self.timeout_s if deadline else None, self._running if loads else None)
        except Overdue:
            raise ServerUnreachable(f"the Ollama server at {self.host} did not finish a reply within "
                                         f"{self.timeout_s:g} s (--timeout)") from None
        except (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ServerUnreachable(f"no Ollama server answers at {self.host}",
                                         hint="start it with `ollama serve`, or pass --host URL") from exc
        except httpx.TimeoutException as exc:  # a hung server (SIGSTOP, a stuck runner)
            raise ServerUnreachable(f"the Ollama server at {self.host} stopped answering "
                                         f"(no reply within its timeout: {type(exc).__name__})") from exc
        except (httpx.HTTPError, ValueError, TypeError, AttributeError, KeyError) as exc:
            # an answer that is not what Ollama sends (a proxy, a crash mid-reply):
            # JSON that does not parse, fields of the wrong type, a cut connection
            raise ProbeError(f"the Ollama server at {self.host} sent an answer oomvet cannot read: "
                             f"{_one_line(exc) if str(exc).strip() else type(exc).__name__}") from exc


def _base_url(host: str | None) -> str:
    # as the ollama client and CLI read an address: $OLLAMA_HOST when none is
    # given, http:// when it has no scheme (httpx needs one)
    text = (host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST).strip().rstrip("/")
    return text if "://" in text else f"http://{text}"


def _shown(model: str, body: dict) -> ModelShow:
    # a verbose /api/show as JSON: the client's ShowResponse has no tensors field
    details, tensors = body.get("details") or {}, body.get("tensors") or []
    if not isinstance(tensors, list):  # read by _call as an answer oomvet cannot read
        raise TypeError(f"tensors is a {type(tensors).__name__}, not a list")
    return ModelShow(name=model, quantization=details.get("quantization_level"), family=details.get("family"),
                     parameter_size=details.get("parameter_size"), model_info=dict(body.get("model_info") or {}),
                     parameters=body.get("parameters") or "", tensors=tensors,
                     capabilities=tuple(body.get("capabilities") or ()))


def _refused(what: str, exc) -> ProbeError:
    # an error status the server answered with (an ``ollama.ResponseError``), in one line of ours
    return ProbeError(f"{what}: {_one_line(exc.error)} (status {exc.status_code})")


def _one_line(text) -> str:
    # a server's error body is shown in one line of ours, whatever it holds
    return " ".join(str(text or "").split()) or "no reason given"
