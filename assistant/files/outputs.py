"""The ready-to-apply files that sit beside ``oomvet.yaml``.

From one valid config document this renders what a user applies as it is: a
``Modelfile`` (FROM the chosen tag, PARAMETER num_ctx / num_batch), an env
file and a systemd drop-in for the server settings that need a restart, and
the same recommendation translated to llama.cpp ``llama-server`` and vLLM flags
for users who move backends. The translations are marked as such: they were
not measured. :func:`write_outputs` puts the set on disk all or nothing.
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any, Callable, Mapping

from assistant import __version__
from assistant.files.atomic import write_files
from assistant.config import dump_config, env_text, ollama_of
from common.catalog import t


CONFIG_NAME = "oomvet.yaml"
MODELFILE_NAME = "Modelfile"
ENV_NAME = "ollama.env"
DROPIN_NAME = "oomvet-ollama.conf"
LLAMA_SERVER_NAME = "llama-server.txt"
VLLM_NAME = "vllm.txt"
DROPIN_DIR = "/etc/systemd/system/ollama.service.d"

_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9._:/,+-]*$")

# Ollama KV cache types -> vLLM --kv-cache-dtype (vLLM has no 4-bit KV cache;
# fp8 is the nearest it offers)
_VLLM_KV = {"f16": "auto", "q8_0": "fp8", "q4_0": "fp8"}


def render_files(doc: Mapping[str, Any], lang: str | None = None) -> dict[str, str]:
    """``{file name: text}`` for a valid doc. A doc where nothing fits (no model)
    gets only ``oomvet.yaml``: there is nothing to apply."""
    files = {CONFIG_NAME: dump_config(doc, lang)}
    if not doc.get("model"):
        return files
    files[MODELFILE_NAME] = modelfile_text(doc, lang)
    files[ENV_NAME] = env_file_text(doc, lang)
    files[DROPIN_NAME] = systemd_dropin_text(doc, lang)
    files[LLAMA_SERVER_NAME] = llama_server_text(doc, lang)
    files[VLLM_NAME] = vllm_text(doc, lang)
    return files


def write_outputs(out_dir: os.PathLike | str, files: Mapping[str, str | bytes],
                  lang: str | None = None) -> list[Path]:
    """Write the files atomically; an existing different file is kept as NAME.bak.
    Raises UsageError with one line when the folder cannot be written (nothing partial)."""
    return write_files(out_dir, files, lang=lang)


# ---------------------------------------------------------------- Ollama

def created_model_name(doc: Mapping[str, Any]) -> str:
    """The name ``oomvet apply`` gives the model it creates: ``neohorse-1:q8_0``
    -> ``neohorse-1-oomvet:q8_0`` (registry host and namespace dropped: the new
    model is local)."""
    model = str(doc["model"])
    base, _, tag = model.rpartition(":") if ":" in model.rsplit("/", 1)[-1] else (model, "", "")
    base = base.rsplit("/", 1)[-1]
    return f"{base}-oomvet:{tag}" if tag else f"{base}-oomvet"


def modelfile_text(doc: Mapping[str, Any], lang: str | None = None) -> str:
    """``FROM <tag>`` plus a PARAMETER line per load-time option; the
    comments in ``lang`` (the session's)."""
    section = ollama_of(doc)
    lines = _header(doc, "Modelfile", lang) + [
        t("files.modelfile.create", lang, name=created_model_name(doc)),
        t("files.modelfile.options", lang, quant=doc.get("quant_type")),
        f"FROM {section['from']}",
    ]
    for name, value in (section.get("parameters") or {}).items():
        lines.append(f"PARAMETER {name} {_param_value(value)}")
    return "\n".join(lines) + "\n"


def server_env(doc: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(the server variables the config needs, the optional ones), as text."""
    section = ollama_of(doc) or {}
    env = {k: env_text(v) for k, v in (section.get("env") or {}).items() if v is not None}
    optional = {k: env_text(v) for k, v in (section.get("optional_env") or {}).items() if v is not None}
    return env, optional


def env_file_text(doc: Mapping[str, Any], lang: str | None = None) -> str:
    """KEY=value lines that both systemd ``EnvironmentFile=`` and a POSIX shell read."""
    lines = _header(doc, "ollama.env", lang) + [t("files.env.when", lang), t("files.env.systemd", lang),
                                                t("files.env.shell", lang)]
    lines += _env_lines(doc, lambda k, v: f"{k}={_env_value(v)}", off="# ", lang=lang)
    return "\n".join(lines) + "\n"


def systemd_dropin_text(doc: Mapping[str, Any], lang: str | None = None) -> str:
    """A ``[Service] Environment=...`` drop-in for the ollama systemd unit."""
    lines = _header(doc, DROPIN_NAME, lang) + [
        t("files.dropin.for", lang),
        t("files.dropin.install", lang, command=f"sudo mkdir -p {DROPIN_DIR}"),
        f"#           sudo cp {DROPIN_NAME} {DROPIN_DIR}/{DROPIN_NAME}",
        "#           sudo systemctl daemon-reload && sudo systemctl restart ollama",
        "[Service]",
    ]
    lines += _env_lines(doc, _systemd_line, off="#", lang=lang)
    return "\n".join(lines) + "\n"


def _env_lines(doc: Mapping[str, Any], line: Callable[[str, str], str], off: str, lang: str | None = None) -> list[str]:
    """The server variables as ``line`` writes them; each optional one after
    a comment saying why, itself commented out with ``off``."""
    env, optional = server_env(doc)
    lines = [line(k, v) for k, v in env.items()]
    if not env:  # the server already runs with what the config needs: its own settings stay
        lines.append("# " + t("outputs.env_none", lang))
    for key, value in optional.items():
        why = t(f"files.optional.{key}", lang) if key in OPTIONAL_KEYS else ""
        lines.append(t("files.optional", lang, why=why).rstrip())
        lines.append(off + line(key, value))
    return lines


def _systemd_line(key: str, value: str) -> str:
    return f'Environment="{key}={_systemd_value(value)}"'


#: the optional server settings, each with why in the catalog (``files.optional.<key>``)
OPTIONAL_KEYS = ("OLLAMA_CONTEXT_LENGTH", "OLLAMA_GPU_OVERHEAD")


def restart_commands(doc: Mapping[str, Any], ollama_bin: str = "ollama", lang: str | None = None) -> list[str]:
    """Exact shell lines that put the server settings in place (they need a restart).

    Self-contained (printf | tee) so they work wherever the user runs them."""
    env, _ = server_env(doc)
    if not env:
        return []
    conf = f"{DROPIN_DIR}/{DROPIN_NAME}"
    body = ["[Service]"] + [_systemd_line(k, v) for k, v in env.items()]
    inline = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    lines = [
        t("outputs.restart_systemd", lang),
        f"sudo mkdir -p {DROPIN_DIR}",
        "printf '%s\\n' " + " ".join(shlex.quote(line) for line in body) + f" | sudo tee {conf} >/dev/null",
        "sudo systemctl daemon-reload && sudo systemctl restart ollama",
        t("outputs.restart_macos", lang),
    ]
    lines += [f"launchctl setenv {k} {shlex.quote(v)}" for k, v in env.items()]
    lines += [
        t("outputs.restart_manual", lang),
        f"{inline} {shlex.quote(ollama_bin)} serve",
    ]
    return lines


# ---------------------------------------------------------------- other backends

def llama_server_text(doc: Mapping[str, Any], lang: str | None = None) -> str:
    """The same recommendation as llama.cpp ``llama-server`` flags (translated, not measured)."""
    ctx, batch = doc.get("max_context_len"), doc.get("max_batch_size")
    parallel = doc.get("max_concurrency") or 1
    kv = doc.get("kv_cache") or "f16"
    args = ["llama-server", "-m", "/path/to/model.gguf"]
    if ctx:
        # llama-server's -c is the whole cache shared by all slots; Ollama's num_ctx is per slot
        args += ["-c", str(ctx * parallel)]
    if batch:
        args += ["-b", str(batch)]
    args += ["-np", str(parallel)]
    if kv != "f16":
        args += ["-fa", "on", "--cache-type-k", kv, "--cache-type-v", kv]
    lines = _header(doc, LLAMA_SERVER_NAME, lang) + [
        t("files.translated", lang),
        t("files.llama.retest", lang),
        t("files.llama.path", lang, model=doc.get("model")),
        t("files.llama.ctx", lang, ctx=ctx, parallel=parallel),
        t("files.llama.fa", lang),
        " ".join(shlex.quote(a) for a in args),
    ]
    return "\n".join(lines) + "\n"


def vllm_text(doc: Mapping[str, Any], lang: str | None = None) -> str:
    """The same recommendation as ``vllm serve`` flags (translated, not measured)."""
    ctx, parallel = doc.get("max_context_len"), doc.get("max_concurrency") or 1
    util, kv = doc.get("gpu_memory_utilization"), doc.get("kv_cache") or "f16"
    args = ["vllm", "serve", "/path/to/model.gguf", "--tokenizer", "HF_ORG/ORIGINAL_MODEL",
            "--quantization", "gguf"]
    if ctx:
        args += ["--max-model-len", str(ctx)]
    args += ["--max-num-seqs", str(parallel)]
    if util is not None:
        args += ["--gpu-memory-utilization", str(util)]
    args += ["--kv-cache-dtype", _VLLM_KV.get(kv, "auto")]
    lines = _header(doc, VLLM_NAME, lang) + [
        t("files.translated", lang),
        t("files.vllm.reserve", lang),
        t("files.vllm.gguf", lang, quant=doc.get("quant_type")),
        t("files.vllm.kv", lang, kv=kv, dtype=_VLLM_KV.get(kv, "auto")) + (t("files.vllm.kv4", lang) if kv == "q4_0" else ""),
        t("files.vllm.batch", lang, batch=doc.get("max_batch_size")),
        " ".join(shlex.quote(a) for a in args),
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- helpers

def _header(doc: Mapping[str, Any], name: str, lang: str | None = None) -> list[str]:
    gen = doc.get("generated") or {}
    verified = t("files.verified" if doc.get("verified") else "files.not_verified", lang)
    return [t("files.header", lang, name=name, by=gen.get("by") or f"oomvet {__version__}", at=gen.get("at") or "?",
              model=doc.get("model"), verified=verified)]


def _param_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return text if _PLAIN_VALUE.match(text) and text else '"' + text.replace('"', '\\"') + '"'


def _env_value(value: str) -> str:
    return value if _PLAIN_VALUE.match(value) else shlex.quote(value)


def _systemd_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
