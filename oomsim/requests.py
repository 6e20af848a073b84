"""Requests on the simulated server: a slot of the runner, the request's
scratch memory (a runner whose peak does not fit the device dies with the
runtime's out-of-memory text), the answer's tokens and timings, and the leak
a request leaves behind."""
from __future__ import annotations

from typing import Any, Mapping

from oomsim import text as simtext
from oomsim.messages import CRASH, RUN_ERROR, RUNTIME_OOM_MSG, human_bytes2
from oomsim.runner import Runner, Ticket
from oomsim.settings import SimError, _int_option

MIB = 1 << 20
GIB = 1 << 30
CUBLAS_WORKSPACE_BYTES = 32 * MIB
GPU_BANDWIDTH = {"nvidia": 300 * GIB, "amd": 300 * GIB, "apple": 200 * GIB}
CPU_BANDWIDTH = 40 * GIB
PROMPT_SPEEDUP = 25      # prompt tokens go through in batches, this many times faster than generation
TEMPLATE_TOKENS = 5      # the chat template around a generate prompt
MESSAGE_TOKENS = 4       # per chat message (role markers)


class Requests:
    """The request part of :class:`oomsim.state.SimState`."""

    def begin(self, runner: Runner, prompt: str, options: Mapping[str, Any] | None, *,
              extra_tokens: int = TEMPLATE_TOKENS, answer_to: str | None = None,
              timeout_s: float = 600.0) -> Ticket:
        """Start a request on ``runner``: wait for a free slot, add the
        request's scratch memory, and crash the runner if the device is now
        over its total. ``prompt`` is everything sent (it is what counts
        against num_ctx); ``answer_to`` the text the answer is about (default:
        the prompt). Raises SimError (500) for a crash or a runner error."""
        options = dict(options or {})
        if not runner.slots.acquire(timeout=timeout_s):
            raise SimError(503, "server busy, please try again.  maximum pending requests exceeded")
        try:
            return self._begin(runner, prompt, options, extra_tokens, prompt if answer_to is None else answer_to)
        except BaseException:
            runner.slots.release()
            raise

    def _begin(self, runner: Runner, prompt: str, options: dict, extra_tokens: int, answer_to: str) -> Ticket:
        faults = self.scenario.faults
        model = runner.model
        sent = simtext.count_tokens(prompt) + extra_tokens
        ctx = runner.ctx_slot
        truncated = sent > ctx
        evaluated = ctx if truncated else sent
        seed = _int_option(options, "seed", 0)
        if seed < 0:
            seed = 0
        num_predict = _int_option(options, "num_predict", -1)
        limit = 10 * ctx if num_predict <= 0 or num_predict > 10 * ctx else num_predict
        kind = faults.incoherent.get(model.tag, "coherent")
        words = simtext.pieces(simtext.answer(answer_to, seed, kind, limit))
        done_reason = "stop"
        if len(words) > limit or kind == "repetitive":
            words = words[:limit]
            done_reason = "length"
        p = runner.placement
        scratch = 0
        if p.layers_gpu:
            scratch = CUBLAS_WORKSPACE_BYTES + 8 * model.arch.embedding_length * min(evaluated, runner.num_batch)
        scratch += faults.peak_extra_bytes
        per_token_s = self._seconds_per_token(runner)
        with self.lock:
            if not runner.alive:
                raise SimError(500, CRASH)
            ticket = Ticket(next(self._ids), runner, evaluated, sent, truncated, words, done_reason,
                            int(evaluated * per_token_s / PROMPT_SPEEDUP * 1e9), int(len(words) * per_token_s * 1e9), 0)
            if truncated:
                self._log(f'level=WARN msg="truncating input prompt" limit={ctx} prompt={sent} keep=4 new={ctx}')
            runner.transient[ticket.id] = scratch
            runner.requests += 1
            over = self.over_device(self.clock())
            if over is not None:
                runner.transient.pop(ticket.id, None)
                raise SimError(500, self._runtime_oom(runner, *over))
            if model.tag in faults.runner_error:
                runner.transient.pop(ticket.id, None)
                raise SimError(500, RUN_ERROR.format(text=faults.runner_error[model.tag]))
        return ticket

    def embed_tokens(self, runner: Runner, texts: list[str], truncate: bool) -> int:
        """Tokens an embedding request evaluates: each text cut to the context
        (or refused when ``truncate`` is false, as Ollama does)."""
        ctx = runner.ctx_slot
        count = 0
        for text in texts:
            n = simtext.count_tokens(text)
            if n > ctx and not truncate:
                raise SimError(400, "input length exceeds maximum context length")
            count += min(n, ctx)
        with self.lock:
            runner.requests += len(texts)
        return count

    def _runtime_oom(self, runner: Runner, index: int, need: int) -> str:
        """The runner's allocation failed mid-request: it dies, the log has the
        runtime's out-of-memory lines, and the request's error ends with what
        Ollama's status writer captured. The current engine also expires every
        loaded model ("runtime OOM detected")."""
        msg = RUNTIME_OOM_MSG[self.vendor]
        dev = self.devices[index]
        self._log(f"ggml_backend_sched_graph_compute: {msg}")
        self._log(f"  current device: {index}, in function ggml_backend_cuda_graph_compute at ggml-cuda.cu:2510")
        self._log(f'level=ERROR msg="{"llama-server" if self.current else "llama runner"} terminated" '
                  f'error="{msg}" model={runner.model.tag} needed="{human_bytes2(need)}" '
                  f'total="{human_bytes2(dev.total_bytes)}"')
        runner.last_error = msg
        self._drop(runner.model.tag.lower(), "crashed: out of memory")
        text = RUN_ERROR.format(text=msg)
        if self.current:
            self._log(f'level=WARN msg="runtime OOM detected; expiring loaded models to clear memory before next '
                      f'request" model={runner.model.tag} error="{text}"')
            for key, other in list(self.runners.items()):
                if other.transient or other.refs:
                    other.expires_at, other.unloading = self.clock(), True
                else:
                    self._drop(key, "expired after runtime OOM")
        return text

    def died_error(self, runner: Runner) -> str:
        """What a request still streaming from a runner that died gets: the
        captured error when it crashed, the generic text otherwise (a restart)."""
        return RUN_ERROR.format(text=runner.last_error) if runner.last_error else CRASH

    def _seconds_per_token(self, runner: Runner) -> float:
        p = runner.placement
        share_gpu = p.layers_gpu / max(p.layers_total, 1)
        weights = runner.model.weights_bytes
        return (weights * share_gpu / GPU_BANDWIDTH[self.vendor]
                + weights * (1 - share_gpu) / CPU_BANDWIDTH)

    def finish(self, ticket: Ticket, keep_alive: Any = None) -> None:
        """End a request: release its scratch, keep any leak, renew keep_alive."""
        runner = ticket.runner
        with self.lock:
            scratch = runner.transient.pop(ticket.id, None)
            if scratch is not None and runner.alive:
                runner.leaked_bytes += self.scenario.faults.leak_per_request_bytes
            if runner.alive:
                self.set_expiry(runner, keep_alive)
        runner.slots.release()
