"""``oomvet apply FILE [--dry-run]``: put a checked oomvet.yaml into Ollama.

The per-model settings (FROM tag, num_ctx, num_batch) go into a new model made
with ``ollama create NAME -f Modelfile``, which this command runs for the user
(``--dry-run`` prints it instead). The server settings (OLLAMA_NUM_PARALLEL,
OLLAMA_KV_CACHE_TYPE, ...) only take effect when the server restarts, which
oomvet does not do behind a user's back: they are printed as exact commands.
The config is validated first, so a malformed file creates nothing. The
``ollama`` binary runs through a small runner object, so tests can inject a
queue-driven fake.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from assistant.config import load_config, ollama_of
from common.catalog import LANGS, t
from common.errors import ExitCode, ServerUnreachable, UsageError, UserError
from assistant.files.outputs import MODELFILE_NAME, created_model_name, modelfile_text, restart_commands, server_env
from probes.server import DEFAULT_HOST

CREATE_TIMEOUT_S = 600.0

_NAME = re.compile(r"^(?:\w[\w-]*/)?\w[\w.-]{0,79}(?::\w[\w.-]{0,79})?$", re.ASCII)
_HOST = re.compile(r"^(?:https?://)?[A-Za-z0-9._\-\[\]:]+(?::\d+)?/?$")
_UNREACHABLE = ("could not connect", "connection refused", "no such host", "connect: ")


class ApplyError(UserError):
    """``ollama create`` failed for a reason other than an unreachable server; one line, exit 2."""


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    output: str  # stdout and stderr together, as the user would have seen them


class SubprocessRunner:
    """Runs a program and waits for it; the real thing behind :class:`Applier`."""

    def run(self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CommandResult:
        proc = subprocess.run(list(argv), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace", timeout=timeout_s, check=False)
        return CommandResult(proc.returncode, proc.stdout or "")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("apply", help=t("apply.help", "en"), description=t("apply.help", "en"))
    parser.add_argument("file", metavar="FILE", help="the oomvet.yaml to apply")
    parser.add_argument("--dry-run", action="store_true", help="print the exact commands; run nothing")
    parser.add_argument("--host", metavar="URL", default=None,
                        help=f"Ollama server (default: $OLLAMA_HOST, else the config's host, else {DEFAULT_HOST})")
    parser.add_argument("--name", metavar="NAME", default=None,
                        help="name of the model to create (default: <model>-oomvet:<tag>)")
    parser.add_argument("--lang", choices=LANGS, default=None, help="language of the messages")
    parser.set_defaults(run=run)


def run(args) -> int:
    return Applier().apply(args.file, dry_run=args.dry_run, host=args.host, name=args.name,
                           lang=getattr(args, "lang", None))


class Applier:
    """Validates a config, then prints or runs what applying it takes."""

    def __init__(self, runner=None, out=None, environ: Mapping[str, str] | None = None):
        self.runner = runner or SubprocessRunner()
        self.out = out or sys.stdout
        self.environ = dict(os.environ if environ is None else environ)

    def apply(self, path, dry_run: bool = False, host: str | None = None, name: str | None = None,
              lang: str | None = None) -> int:
        path = Path(path)
        doc = load_config(path, lang)  # ConfigError (exit 2) before anything runs
        if not doc.get("model") or doc.get("fits") is False:
            self._say(t("apply.nothing", lang, path=path))
            return ExitCode.NO_FIT
        name = name or created_model_name(doc)
        if not _NAME.match(name):
            raise UsageError(t("apply.bad_name", lang, name=name))
        host = self._host(host, doc, lang)
        binary = self.environ.get("OLLAMA_BIN") or shutil.which("ollama", path=self.environ.get("PATH")) or "ollama"
        modelfile = modelfile_text(doc)
        beside = path.parent / MODELFILE_NAME
        use_beside = beside.is_file() and _read(beside) == modelfile
        section = ollama_of(doc) or {}
        params = section.get("parameters") or {}
        env, _ = server_env(doc)

        if not doc.get("verified"):
            self._say(t("apply.unverified", lang))
        self._say(t("apply.step_create", lang, name=name, tag=section.get("from"),
                    params=", ".join(f"{k} {v}" for k, v in params.items()) or "-"))
        create = ["OLLAMA_HOST=" + shlex.quote(host), shlex.quote(binary), "create", shlex.quote(name), "-f"]
        if use_beside:
            self._say(" ".join(create + [shlex.quote(str(beside.resolve()))]))
        else:
            self._say("f=$(mktemp) && cat > \"$f\" <<'EOF'")
            self._say(modelfile.rstrip("\n"))
            self._say("EOF")
            self._say(" ".join(create + ['"$f"']))
        if dry_run:
            self._env_steps(doc, env, binary, name, lang)
            self._say(t("apply.dry_run", lang))
            return ExitCode.OK

        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise UsageError(t("apply.no_binary", lang, bin=binary), hint=t("apply.no_binary_hint", lang))
        with tempfile.TemporaryDirectory(prefix="oomvet-apply-") as tmp:
            if use_beside:
                mf_path = beside.resolve()
            else:
                mf_path = Path(tmp) / MODELFILE_NAME
                mf_path.write_text(modelfile, encoding="utf-8")
            argv = [binary, "create", name, "-f", str(mf_path)]
            self._say(t("apply.running", lang, command=f"OLLAMA_HOST={host} " + " ".join(map(shlex.quote, argv))))
            try:
                result = self.runner.run(argv, {**self.environ, "OLLAMA_HOST": host}, CREATE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise ApplyError(t("apply.timeout", lang, name=name, seconds=CREATE_TIMEOUT_S)) from None
            except OSError as exc:
                raise UsageError(t("apply.no_binary", lang, bin=f"{binary}: {exc.strerror or exc}"),
                                 hint=t("apply.no_binary_hint", lang)) from None
        if result.returncode != 0:
            detail = _last_line(result.output) or f"exit status {result.returncode}"
            if any(marker in result.output.lower() for marker in _UNREACHABLE):
                raise ServerUnreachable(t("apply.unreachable", lang, host=host, detail=detail))
            raise ApplyError(t("apply.create_failed", lang, name=name, detail=detail))
        self._say(t("apply.created", lang, name=name, host=host))
        self._env_steps(doc, env, binary, name, lang)
        return ExitCode.OK

    def _env_steps(self, doc, env: Mapping[str, str], binary: str, name: str, lang) -> None:
        if env:
            self._say(t("apply.step_env", lang, env=", ".join(f"{k}={v}" for k, v in env.items())))
            for line in restart_commands(doc, binary, lang):
                self._say(line)
        else:
            self._say(t("apply.step_env_none", lang))
        self._say(t("apply.step_use", lang, name=name))
        self._say(f"{shlex.quote(binary)} run {shlex.quote(name)}")

    def _host(self, host: str | None, doc, lang) -> str:
        chosen = host or self.environ.get("OLLAMA_HOST") or (doc.get("generated") or {}).get("host") or DEFAULT_HOST
        chosen = str(chosen).strip()
        if not _HOST.match(chosen):
            raise UsageError(t("apply.bad_host", lang, host=chosen))
        return chosen if "://" in chosen else f"http://{chosen}"

    def _say(self, line: str) -> None:
        print(line, file=self.out)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _last_line(output: str) -> str:
    # ollama prints progress lines with carriage returns; the error is the last real line
    output = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output or "")
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", output) if ln.strip()]
    line = lines[-1] if lines else ""
    return line[len("Error: "):] if line.startswith("Error: ") else line
