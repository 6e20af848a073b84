"""The two faces of a session: the chat (a person at a terminal) and the
unattended run (an answers file).

Both implement the small UI protocol of :mod:`assistant.session`. The chat
draws with rich: questions, consent before each probe, a live memory gauge
against the limit with a sparkline while a probe runs, and the slash
commands. Ctrl-C during a probe stops that probe (the server is restored);
a second Ctrl-C quits. Every line printed comes from the i18n catalog.
"""
from __future__ import annotations

import threading
import re
from typing import Any, Callable, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.text import Text

from assistant import render
from assistant.answers import parse_answer, parse_yes_no
from assistant.i18n import catalog, get_lang, set_lang, t
from probes.base import Cancelled, ProbeResult
from probes.units import fmt_size

MSG = catalog({
    "ui.q.symptom": {"en": "What happens? Tell me when it runs out of memory (at load, with long input, "
                           "with several users, slowly, or memory creeping up).",
                     "zh": "出了什么问题？请描述什么时候显存不足（加载时、长输入时、多人并发时、变慢、还是显存一直上涨）。"},
    "ui.q.model": {"en": "Which model tag do you run? (e.g. neohorse-1:q8_0)",
                   "zh": "你运行的是哪个模型标签？（例如 neohorse-1:q8_0）"},
    "ui.q.want_ctx": {"en": "How much context do you need, in tokens? (e.g. 8k; Enter = don't know)",
                      "zh": "你需要多长的上下文（token 数）？（例如 8k；直接回车表示不确定）"},
    "ui.q.want_parallel": {"en": "How many requests must run at once? (e.g. 4; Enter = don't know)",
                           "zh": "需要同时处理多少个请求？（例如 4；直接回车表示不确定）"},
    "ui.q.budget": {"en": "How much memory may the model use? (e.g. 8GiB or 80%; Enter = all that is free)",
                    "zh": "模型最多可以使用多少显存？（例如 8GiB 或 80%；直接回车表示使用全部空闲显存）"},
    "ui.q.keep_context": {"en": "Must the context stay that long, even if it takes a lower-bit model? (yes/no)",
                          "zh": "即使需要换成更低位的量化模型，上下文长度也必须保持吗？（是/否）"},
    "ui.q.other": {"en": "{question}?", "zh": "{question}？"},
    "ui.reason": {"en": "why I ask: {reason}", "zh": "原因：{reason}"},
    "ui.bad_answer": {"en": "I could not read that as {what}; try again or press Enter to skip.",
                      "zh": "无法把这个回答理解为{what}；请重试，或直接回车跳过。"},
    "ui.consent.probe": {"en": "Next I will run the {probe} probe on {model}: {what}. Go ahead? [Y/n]",
                         "zh": "下一步我将对 {model} 运行 {probe} 探测：{what}。开始吗？[Y/n]"},
    "ui.consent.change": {"en": "I suggest one change: {knob} {old} → {new}. Retest stability with it? [Y/n]",
                          "zh": "建议做一项修改：{knob} {old} → {new}。用它重新做稳定性测试吗？[Y/n]"},
    "ui.what.baseline": {"en": "load it at conservative settings and watch memory at idle, after load and after "
                               "settling", "zh": "以保守设置加载，记录空闲、加载后和稳定后的内存"},
    "ui.what.context": {"en": "send the same prompt at growing context lengths and record each peak",
                        "zh": "在逐步增大的上下文长度下发送同一提示词，记录每一档的峰值"},
    "ui.what.quant": {"en": "try the lower-bit tags on the server and check their answers stay coherent",
                      "zh": "尝试服务器上更低位的量化标签，并检查回答是否仍然连贯"},
    "ui.what.backend": {"en": "change one backend setting and measure its peak", "zh": "修改一项后端设置并测量峰值"},
    "ui.what.stability": {"en": "run the fixed task and check the output", "zh": "运行固定任务并检查输出"},
    "ui.probe.running": {"en": "probe {name} running — Ctrl-C stops it", "zh": "探测 {name} 运行中 — 按 Ctrl-C 停止"},
    "ui.probe.stopping": {"en": "stopping the probe and restoring the server…", "zh": "正在停止探测并恢复服务器…"},
    "ui.probe.stopped": {"en": "probe stopped; the server is as it was. Ctrl-C again quits.",
                         "zh": "探测已停止，服务器已恢复原状。再按一次 Ctrl-C 退出。"},
    "ui.probe.done": {"en": "{summary}", "zh": "{summary}"},
    "ui.gauge": {"en": "model memory {used} / limit {limit}   peak {peak}",
                 "zh": "模型内存 {used} / 上限 {limit}   峰值 {peak}"},
    "ui.skipped": {"en": "skipped.", "zh": "已跳过。"},
    "ui.lang": {"en": "Language: English.", "zh": "语言：中文。"},
    "ui.bye": {"en": "Bye. Nothing was changed on your server.", "zh": "再见。你的服务器没有被修改。"},
    "ui.why.empty": {"en": "No decision yet.", "zh": "还没有做出任何决定。"},
    "ui.why.title": {"en": "Why — the facts and rules behind each step", "zh": "原因 — 每一步背后的事实与规则"},
    "ui.status": {"en": "model {model}; limit {limit}; {steps} steps so far; last: {last}",
                  "zh": "模型 {model}；上限 {limit}；已完成 {steps} 步；最近一步：{last}"},
    "ui.back.none": {"en": "There is no earlier question to go back to.", "zh": "没有可以返回的上一个问题。"},
    "ui.help": {"en": "Commands: /why /status /skip /back /lang zh|en /quit",
                "zh": "命令：/why /status /skip /back /lang zh|en /quit"},
    "ui.cause.weights": {"en": "Diagnosis: the model's weights do not fit in the limit.",
                         "zh": "诊断：模型权重本身放不进内存上限。"},
    "ui.cause.kv_cache": {"en": "Diagnosis: the KV cache grows with context and overflows the limit.",
                          "zh": "诊断：KV 缓存随上下文增长，超出了内存上限。"},
    "ui.cause.not_released": {"en": "Diagnosis: memory is not released between requests (it creeps up while idle).",
                              "zh": "诊断：请求之间内存没有释放（空闲时仍在上涨）。"},
    "ui.cause.concurrency": {"en": "Diagnosis: one request fits; concurrency or batching overflows the limit.",
                             "zh": "诊断：单个请求没问题；并发或批处理超出了内存上限。"},
    "ui.cause.not_memory": {"en": "Diagnosis: this is not a memory problem (truncation or an unrelated crash).",
                            "zh": "诊断：这不是内存问题（输入被截断，或与内存无关的崩溃）。"},
    "ui.cause.None": {"en": "No diagnosis could be reached.", "zh": "未能得出诊断。"},
    "ui.config": {"en": "Recommended config: {model}, context {ctx}, batch {batch}, concurrency {par}, "
                        "quantization {quant}, KV cache {kv} — {verified}.",
                  "zh": "推荐配置：{model}，上下文 {ctx}，批大小 {batch}，并发 {par}，量化 {quant}，KV 缓存 {kv} — {verified}。"},
    "ui.verified": {"en": "verified by a stability retest", "zh": "已通过稳定性复测验证"},
    "ui.not_verified": {"en": "NOT verified", "zh": "未经验证"},
    "ui.nothing_fits": {"en": "No config fits within the limit; best finding above.",
                        "zh": "在内存上限内没有可用的配置；以上是目前最好的发现。"},
    "ui.advice": {"en": "What to do: {advice}", "zh": "建议：{advice}"},
    "ui.prompt": {"en": "you", "zh": "你"},
    "ui.tags_failed": {"en": "(could not list the server's models: {error}; type the full name:tag)",
                       "zh": "（无法列出服务器上的模型：{error}；请输入完整的 名称:标签）"},
})

SPARK = "▁▂▃▄▅▆▇█"


def _same_words(reason: str, question: str) -> bool:
    """Whether the rule's reason only repeats the question (then it is not shown)."""
    def squash(x: str) -> str:
        return re.sub(r"[\W_]+", "", x.lower())
    r, q = squash(reason), squash(question)
    return not r or r in q or q in r


class QuitSession(Exception):
    """The user typed /quit or pressed Ctrl-C twice."""


def sparkline(values: list[int], width: int = 40) -> str:
    if not values:
        return ""
    values = values[-width:]
    lo, hi = min(values), max(values)
    span = hi - lo or 1
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1)))] for v in values)


class AutoUI:
    """Unattended: answers from the answers file, consent always, progress on stderr."""

    def __init__(self, answers: dict | None = None, console: Console | None = None, quiet: bool = False):
        self.answers = dict(answers or {})
        self.console = console or Console(stderr=True)
        self.quiet = quiet

    def ask(self, question: str, reason: str) -> Any:
        # the file was checked on loading; the session reads it like a typed answer
        return self.answers.get(question)

    def consent(self, step: dict) -> bool:
        return True

    def run_probe(self, label: str, work: Callable[[], ProbeResult], env) -> ProbeResult:
        if self.quiet:
            return work()
        with self.console.status(t("ui.probe.running", name=label)):
            return work()

    def show(self, event: str, **data) -> None:
        if self.quiet:
            return
        if event == "probe_result":
            show_probe(self.console, data["result"], getattr(self, "session", None))
        elif event == "done":
            show_done(self.console, data["result"])


def show_probe(console: Console, result: ProbeResult, session=None) -> None:
    """The probe's result in the session's language, then the server's state in one line."""
    console.print(render.probe_result(result, console.width))
    api = getattr(getattr(getattr(session, "world", None), "env", None), "api", None)
    if api is not None:
        try:
            line = render.ps_line(api.ps())
        except Exception as exc:  # noqa: BLE001 - a summary line; the session goes on
            line = t("ps.failed", error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        console.print(Text(line, style="dim"))


def show_done(console: Console, result: dict) -> None:
    cause = (result.get("diagnosis") or {}).get("cause")
    console.print(Text(t(f"ui.cause.{cause}"), style="bold"))
    config = result.get("config")
    if config:
        console.print(t("ui.config", model=config.get("model"), ctx=config.get("max_context_len"),
                        batch=config.get("max_batch_size"), par=config.get("max_concurrency"),
                        quant=config.get("quant_type"), kv=config.get("kv_cache"),
                        verified=t("ui.verified") if result.get("verified") else t("ui.not_verified")),
                      highlight=False, markup=False)
    else:
        console.print(t("ui.nothing_fits"))
    advice = (result.get("diagnosis") or {}).get("advice")
    if advice:
        console.print(t("ui.advice", advice=advice), highlight=False, markup=False)


class ChatUI:
    """A person at a terminal (or, in tests, a stream of lines and a string console)."""

    def __init__(self, console: Console, stream: TextIO | None = None, auto: bool = False, lang: str | None = None):
        self.console = console
        self.stream = stream
        self.auto = auto
        self.session = None
        self.advisor = None
        self.history: list[tuple[str, Any]] = []
        self._tags: list[str] | None = None
        if lang:
            set_lang(lang)

    def bind(self, session, advisor) -> None:
        self.session, self.advisor = session, advisor

    # -- input ---------------------------------------------------------------
    def read(self, prompt: str) -> str:
        """One line from the user; slash commands that do not answer are handled here."""
        while True:
            self.console.print(f"[bold cyan]{t('ui.prompt')}>[/] ", end="")
            if self.stream is not None:
                line = self.stream.readline()
                if line == "":
                    raise QuitSession()
                line = line.rstrip("\n")
                self.console.print(line, markup=False, highlight=False)
            else:
                try:
                    line = input()
                except EOFError:
                    raise QuitSession() from None
            if self.session is not None:
                self.session.transcript.add_user(line)
            handled = self._command(line.strip())
            if handled is None:
                return line
            if handled == "answer":
                return line

    def _command(self, line: str) -> str | None:
        if not line.startswith("/"):
            return None
        cmd, _, arg = line.partition(" ")
        if cmd == "/quit":
            raise QuitSession()
        if cmd == "/why":
            self.show_why()
        elif cmd == "/status":
            self.show_status()
        elif cmd == "/lang":
            lang = arg.strip() or ("en" if get_lang() == "zh" else "zh")
            if lang in ("en", "zh"):
                set_lang(lang)
                if self.session is not None:
                    self.session.lang = lang
            self.console.print(t("ui.lang"))
        elif cmd in ("/skip", "/back"):
            return "answer"
        else:
            self.console.print(t("ui.help"))
        return "handled"

    # -- UI protocol ---------------------------------------------------------
    def ask(self, question: str, reason: str) -> Any:
        key = f"ui.q.{question}"
        try:
            text = t(key)
        except KeyError:
            text = t("ui.q.other", question=question)
        previous = list(self.history)
        while True:
            self.say(text)
            if reason and not _same_words(reason, text):
                self.console.print(Text(t("ui.reason", reason=reason), style="dim"))
            line = self.read(text)
            if line.strip() == "/skip":
                self.console.print(t("ui.skipped"))
                self.history.append((question, None))
                return None
            if line.strip() == "/back":
                self.go_back(previous)
                continue
            try:
                value = parse_answer(question, line, tags=self.tags())
            except ValueError as exc:
                self.console.print(t("ui.bad_answer", what=str(exc)))
                continue
            self.history.append((question, value))
            return value

    def tags(self, world=None) -> list[str] | None:
        """The models the server has, to read a model name from an answer; None
        when there is no server (yet) or it cannot say."""
        world = world or getattr(self.session, "world", None)
        api = getattr(getattr(world, "env", None), "api", None)
        if api is None:
            return None
        if self._tags is None:
            try:
                self._tags = list(api.tags())
            except Exception as exc:  # noqa: BLE001 - a name typed in full is still read without the list
                self._tags = []
                self.console.print(Text(t("ui.tags_failed", error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__),
                                        style="dim"))
        return self._tags

    def go_back(self, previous: list) -> None:
        """Answer the previous question again; the rules take the newest answer."""
        if not previous:
            self.console.print(t("ui.back.none"))
            return
        question, _ = previous[-1]
        value = self.ask(question, "")
        if self.advisor is not None:
            from assistant.answers import answer_facts  # the same reading the session posts
            total = self.session.world.device_fact().get("total") if self.session is not None else None
            self.advisor.post_many(answer_facts(question, value, device_total=total))

    def consent(self, step: dict) -> bool:
        if self.auto:
            return True
        if step["action"] == "change":
            text = t("ui.consent.change", knob=step.get("knob"), old=step.get("from"), new=step.get("to"))
        else:
            model = (step.get("args") or {}).get("model") or (self.session.model if self.session else "")
            text = t("ui.consent.probe", probe=step["probe"], model=model, what=t(f"ui.what.{step['probe']}"))
        while True:
            self.say(text)
            line = self.read(text).strip().lower()
            if line == "/back":
                self.go_back(list(self.history))
                continue
            said = parse_yes_no(line)
            if line == "" or said is True:
                return True
            if said is False or line == "/skip":
                self.console.print(t("ui.skipped"))
                return False

    def run_probe(self, label: str, work: Callable[[], ProbeResult], env) -> ProbeResult:
        box: dict = {}
        # an Event, not worker.is_alive(): on CPython 3.11-3.12 a join cut by Ctrl-C leaves
        # the thread reading as finished while its probe still runs (and restores the server)
        done = threading.Event()

        def target():
            try:
                box["result"] = work()
            except BaseException as exc:  # handed to the main thread
                box["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=target, name=f"probe-{label}", daemon=True)
        state = {"step": None}
        old_progress = env.progress
        env.progress = lambda event, data: state.__setitem__("step", data.get("step")) if event == "step" else None
        env.cancel.clear()
        worker.start()
        interrupted = False
        try:
            with Live(self._panel(label, state, env), console=self.console, refresh_per_second=8,
                      transient=True) as live:
                while not done.is_set():
                    try:
                        done.wait(0.12)
                        live.update(self._panel(label, state, env, stopping=interrupted))
                    except KeyboardInterrupt:
                        if interrupted:
                            raise QuitSession() from None
                        interrupted = True
                        env.cancel.set()
                        self.console.print(t("ui.probe.stopping"))
        finally:
            env.progress = old_progress
        if "error" in box:
            if isinstance(box["error"], Cancelled) or interrupted:
                self.console.print(t("ui.probe.stopped"))
                raise Cancelled("stopped by the user")
            raise box["error"]
        if interrupted:
            self.console.print(t("ui.probe.stopped"))
            raise Cancelled("stopped by the user")
        return box["result"]

    def _panel(self, label: str, state: dict, env, stopping: bool = False) -> Panel:
        step = state.get("step")
        limit = env.limit_bytes
        used = peak = 0
        values: list[int] = []
        if step is not None:
            values = [max(0, u - step.idle_bytes) for _, u in step.sampler.timeline]
            used = values[-1] if values else 0
            peak = step.peak
        bar = ProgressBar(total=float(limit or max(peak, 1)), completed=float(min(used, limit or used)), width=40)
        text = Text(t("ui.gauge", used=fmt_size(used), limit=fmt_size(limit), peak=fmt_size(peak)))
        title = t("ui.probe.stopping") if stopping else t("ui.probe.running", name=label)
        return Panel(Group(Text(step.name if step else label, style="bold"), bar, text,
                           Text(sparkline(values), style="green")), title=title, title_align="left")

    def show(self, event: str, **data) -> None:
        if event == "probe_result":
            show_probe(self.console, data["result"], getattr(self, "session", None))
        elif event == "done":
            show_done(self.console, data["result"])

    # -- helpers ---------------------------------------------------------------
    def say(self, text: str) -> None:
        self.console.print(Text("oomvet> ", style="bold magenta") + Text(text))
        if self.session is not None:
            self.session.transcript.add_assistant(text)

    def show_why(self) -> None:
        chain = self.advisor.why() if self.advisor is not None else []
        if not chain:
            self.console.print(t("ui.why.empty"))
            return
        self.console.print(Text(t("ui.why.title"), style="bold"))
        for line in render.why_lines(chain, get_lang()):
            self.console.print(Text(line))

    def show_status(self) -> None:
        s = self.session
        if s is None:
            return
        last = s.steps[-1].get("summary") if s.steps else "—"
        self.console.print(t("ui.status", model=s.model, limit=fmt_size(s.world.limit.bytes), steps=len(s.steps),
                             last=last), highlight=False, markup=False)
