"""The answers file for unattended runs: what a person would have typed.

YAML with the keys ``symptom`` (text), ``want_ctx``, ``want_parallel``,
``keep_context``, ``budget``, ``lang``. Checked here, once, with one clear
line per problem, so ``diagnose`` never starts measuring on a typo.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from assistant.errors import UsageError
from assistant.i18n import catalog, t
from assistant.ui import parse_answer

KEYS = ("symptom", "want_ctx", "want_parallel", "keep_context", "keep_concurrency", "budget", "lang", "model")
YES_NO_KEYS = ("keep_context", "keep_concurrency")

MSG = catalog({
    "answers.missing": {"en": "answers file {path} does not exist", "zh": "答案文件 {path} 不存在"},
    "answers.yaml": {"en": "answers file {path} is not valid YAML: {error}", "zh": "答案文件 {path} 不是有效的 YAML：{error}"},
    "answers.mapping": {"en": "answers file {path} must be a mapping of keys to values",
                        "zh": "答案文件 {path} 必须是“键: 值”的映射"},
    "answers.unknown": {"en": "answers file {path}: unknown key {key!r} (known: {known})",
                        "zh": "答案文件 {path}：未知的键 {key!r}（可用：{known}）"},
    "answers.what.text": {"en": "text", "zh": "文本"},
    "answers.bad": {"en": "answers file {path}: {key} = {value!r} is not {what}",
                    "zh": "答案文件 {path}：{key} = {value!r} 不是{what}"},
})


def load_answers(path: str | Path | None) -> dict:
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UsageError(t("answers.missing", path=p))
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UsageError(t("answers.yaml", path=p, error=str(exc).splitlines()[0])) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(t("answers.mapping", path=p))
    out = {}
    for key, value in data.items():
        if key not in KEYS:
            raise UsageError(t("answers.unknown", path=p, key=key, known=", ".join(KEYS)))
        if value is None:
            out[key] = None
            continue
        if key in ("want_ctx", "want_parallel", "budget", *YES_NO_KEYS):
            if isinstance(value, bool) != (key in YES_NO_KEYS):
                raise UsageError(t("answers.bad", path=p, key=key, value=value, what=_what(key)))
            if key == "budget":
                try:
                    parse_answer(key, str(value))  # checked here; kept as written (6GiB, 80%)
                except ValueError:
                    raise UsageError(t("answers.bad", path=p, key=key, value=value, what=_what(key))) from None
                value = str(value)
            elif key not in YES_NO_KEYS:
                try:
                    value = parse_answer(key, str(value))
                except ValueError:
                    raise UsageError(t("answers.bad", path=p, key=key, value=value, what=_what(key))) from None
                if not isinstance(value, int) or value <= 0:
                    raise UsageError(t("answers.bad", path=p, key=key, value=value, what=_what(key)))
        elif key == "lang" and value not in ("en", "zh"):
            raise UsageError(t("answers.bad", path=p, key=key, value=value, what="en / zh"))
        elif key in ("symptom", "model") and not isinstance(value, str):
            raise UsageError(t("answers.bad", path=p, key=key, value=value, what=t("answers.what.text")))
        out[key] = value
    return out


def _what(key: str) -> str:
    if key in YES_NO_KEYS:
        return t("ui.what.yesno")
    return {"budget": t("ui.what.size")}.get(key, t("ui.what.number"))
