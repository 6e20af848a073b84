"""``oomvet`` / ``oomvet chat``: the conversation.

The user describes the problem in their own words (Chinese, English or
both); intake reads the facts, the rules decide what to ask and measure, and
the chat shows each probe live and ends with the config files.
"""
from __future__ import annotations


from rich.console import Console
from rich.text import Text

from assistant.deliver import deliver
from assistant.i18n import catalog, set_lang, t
from assistant.intake import parse as parse_intake
from assistant.session import Session
from assistant.ui import ChatUI, QuitSession
from assistant.world import add_world_args, open_world

MSG = catalog({
    "chat.hello": {"en": "oomvet — tell me about the out-of-memory problem (English or 中文). /quit leaves.",
                   "zh": "oomvet — 请描述你遇到的显存不足问题（中文或 English 均可）。输入 /quit 退出。"},
    "chat.heard": {"en": "I read: {phase}{model}{ctx}{par}{budget}{error}.",
                   "zh": "我理解到：{phase}{model}{ctx}{par}{budget}{error}。"},
    "chat.wrote": {"en": "Wrote {n} files to {out}: {names}", "zh": "已写入 {n} 个文件到 {out}：{names}"},
    "chat.bye": {"en": "Bye — nothing was changed on your server.", "zh": "再见 — 你的服务器没有被修改。"},
    "chat.model": {"en": ", model {v}", "zh": "，模型 {v}"},
    "chat.ctx": {"en": ", context {v}", "zh": "，上下文 {v}"},
    "chat.par": {"en": ", {v} at once", "zh": "，并发 {v}"},
    "chat.budget": {"en": ", memory {v}", "zh": "，显存 {v}"},
    "chat.error": {"en": ", error “{v}”", "zh": "，报错“{v}”"},
    "chat.phase.load": {"en": "fails at load", "zh": "加载时失败"},
    "chat.phase.long_input": {"en": "fails with long input", "zh": "长输入时失败"},
    "chat.phase.concurrent": {"en": "fails with several requests at once", "zh": "并发请求时失败"},
    "chat.phase.slow": {"en": "runs slowly (likely spilled to CPU)", "zh": "运行很慢（可能溢出到 CPU）"},
    "chat.phase.creeping": {"en": "memory creeps up", "zh": "显存持续上涨"},
    "chat.phase.crash": {"en": "crashes", "zh": "崩溃"},
    "chat.phase.unknown": {"en": "no clear symptom yet", "zh": "还没有明确的症状"},
})


def add_parser(sub) -> None:
    p = sub.add_parser("chat", help="talk it through: describe the problem, watch the probes, get a config (default)",
                       description="Describe the out-of-memory problem in your own words (English or Chinese); "
                                   "oomvet asks what it needs, measures with your consent, and writes a verified config.")
    add_world_args(p)
    p.add_argument("--auto", action="store_true", help="run every probe without asking for consent")
    p.add_argument("--lang", choices=("en", "zh"), help="answer in this language (default: the first message's)")
    p.add_argument("--out", default="oomvet-out", help="folder for the config and report (default oomvet-out)")
    p.add_argument("--settle", type=float, default=None, help="seconds to watch memory after load")
    p.add_argument("--llm", metavar="MODEL", help="let a chat model on the same Ollama help read your messages")
    p.set_defaults(run=run)


def run(args, console: Console | None = None, stream=None) -> int:
    console = console or Console()
    if args.lang:
        set_lang(args.lang)
    ui = ChatUI(console, stream=stream, auto=args.auto, lang=args.lang)
    console.print(Text(t("chat.hello"), style="bold"))
    try:
        first = ui.read("")
        intake = parse_intake(first)
        if args.llm:
            intake = _with_llm(intake, first, args)
        lang = set_lang(args.lang or intake.lang)
        ui.say(_heard(intake))
        if not args.budget and intake.budget:
            args.budget = str(intake.budget)
        model = args.model or intake.model or ("neohorse-1:latest" if args.rig else None)
        with open_world(args, log=lambda m: console.print(m, markup=False, highlight=False)) as world:
            settle = args.settle if args.settle is not None else (5.0 if world.kind != "ollama" else 30.0)
            session = Session(world=world, ui=ui, intake=intake, model=model, lang=lang, settle_s=settle)
            session.transcript.add_user(first)
            outcome = session.run()
        doc, paths = deliver(args.out, outcome.result)
        console.print(t("chat.wrote", n=len(paths), out=args.out, names=", ".join(p.name for p in paths)),
                      highlight=False, markup=False)
        return outcome.exit_code
    except (QuitSession, KeyboardInterrupt):
        console.print(t("chat.bye"))
        return 130 if stream is None else 0


def _heard(intake) -> str:
    parts = {"model": intake.model, "ctx": intake.want_ctx, "par": intake.want_parallel,
             "budget": _size(intake.budget), "error": intake.error}
    extra = {k: (t(f"chat.{k}", v=v) if v else "") for k, v in parts.items()}
    return t("chat.heard", phase=t(f"chat.phase.{intake.phase}"), **extra)


def _size(n):
    from probes.units import fmt_size
    return fmt_size(n) if n else None


def _with_llm(intake, text, args):
    try:
        from assistant.intake_llm import combine, llm_intake
        from assistant.world import host_from
    except ImportError:
        return intake
    return combine(intake, llm_intake(text, args.llm, host_from(args)))
