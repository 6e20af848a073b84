"""``oomvet.yaml`` as text: written with a comment header, read back strictly.

The reader refuses a key given twice (PyYAML keeps the last one silently),
reports YAML syntax errors with line and column, and puts the line of the
offending key in front of each problem the schema finds. :class:`ConfigError`
carries the first problem as the one line the CLI prints.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import yaml

from assistant import __version__
from assistant.config.knobs import VOCAB
from assistant.config.schema import problems_of
from common.catalog import t
from common.errors import UsageError


class ConfigError(UsageError):
    """An oomvet.yaml that cannot be read or does not hold a valid config; one line, exit 2."""


def dump_config(doc: Mapping[str, Any], lang: str | None = None) -> str:
    """YAML text of ``doc`` with a comment header saying what produced it and when."""
    gen = doc.get("generated") or {}
    lines = []
    if doc.get("model"):
        lines.append(t("config.header_title", lang, model=doc["model"]))
    else:
        lines.append(t("config.header_title_none", lang))
    lines.append(t("config.header_produced", lang, by=gen.get("by") or f"oomvet {__version__}",
                   at=gen.get("at") or "?", host=gen.get("host") or "?"))
    lines.append(t("config.header_verified" if doc.get("verified") else "config.header_unverified", lang))
    lines.append(t("config.header_use", lang))
    out = [_comment(lines), ""]
    sections = (
        ("config.section_values", [k for k in VOCAB + ("verified", "unverified", "fits", "unmet") if k in doc]),
        ("config.section_ollama", ["ollama"]),
        ("config.section_alternatives", ["alternatives"]),
        ("config.section_diagnosis", ["diagnosis"]),
        ("config.section_steps", ["steps"]),
        ("config.section_evidence", ["evidence"]),
        (None, ["generated"]),
    )
    done = set()
    for title, keys in sections:
        part = {k: doc[k] for k in keys if k in doc}
        done.update(part)
        if not part:
            continue
        if title:
            out.append(_comment([t(title, lang)]))
        out.append(_yaml(part))
    rest = {k: v for k, v in doc.items() if k not in done}
    if rest:
        out.append(_yaml(rest))
    return "\n".join(out)


def parse_config(text: str, lang: str | None = None) -> dict:
    """Parse YAML text into a doc and check it; ConfigError with one line if it fails."""
    problems = _parse_and_check(text, lang)
    if isinstance(problems, dict):
        return problems
    raise ConfigError(problems[0], hint=None)


def load_config(path: os.PathLike | str, lang: str | None = None) -> dict:
    """Read and validate an oomvet.yaml; raise :class:`ConfigError` with one clear line."""
    text = read_text(path, lang)
    result = _parse_and_check(text, lang)
    if isinstance(result, dict):
        return result
    hint = t("config.more_problems", lang, n=len(result) - 1, path=path) if len(result) > 1 else None
    raise ConfigError(f"{path}: {result[0]}", hint=hint)


def read_text(path: os.PathLike | str, lang: str | None = None) -> str:
    """The file as text, or ConfigError naming exactly why it cannot be read."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(t("config.file_missing", lang, path=p)) from None
    except OSError as exc:
        raise ConfigError(t("config.file_unreadable", lang, path=p, reason=exc.strerror or exc)) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(t("config.not_utf8", lang, path=p, pos=exc.start)) from None


def check_text(text: str, lang: str | None = None) -> list[str]:
    """Every problem in the YAML text, one line each (empty = valid)."""
    return inspect_text(text, lang)[1]


def inspect_text(text: str, lang: str | None = None) -> tuple[dict | None, list[str]]:
    """(the doc, []) when the YAML text is a valid config, else (None, its problems)."""
    result = _parse_and_check(text, lang)
    return (result, []) if isinstance(result, dict) else (None, result)


def _parse_and_check(text: str, lang: str | None) -> dict | list[str]:
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        return [t("config.at_line", lang, line=dup.line,
                  problem=t("config.duplicate_key", lang, field=dup.key, line=dup.first_line))]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return [t("config.yaml_syntax", lang, line=(mark.line + 1) if mark else "?",
                  col=(mark.column + 1) if mark else "?", problem=problem)]
    if doc is None:
        return [t("config.empty", lang)]
    problems = problems_of(doc, lang)
    if not problems:
        return doc
    lines = _key_lines(text)
    out = []
    for path, message in problems:
        line = lines.get(path)
        while line is None and "." in path:
            path = path.rsplit(".", 1)[0]
            line = lines.get(path)
        out.append(t("config.at_line", lang, line=line, problem=message) if line else message)
    return out


# ---------------------------------------------------------------- YAML helpers

class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key, first_line, line):
        super().__init__(f"duplicate key {key!r}")
        self.key, self.first_line, self.line = key, first_line, line


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:
            continue  # unhashable key: construct_mapping reports it properly
        if first is not None:
            raise _DuplicateKey(key, first, key_node.start_mark.line + 1)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _key_lines(text: str) -> dict[str, int]:
    """Dotted key path -> line number, for pointing problems at the right line."""
    lines: dict[str, int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
                lines.setdefault(path, key_node.start_mark.line + 1)
                walk(value_node, path)

    walk(root, "")
    return lines


class _Dumper(yaml.SafeDumper):
    """Indents lists under their key, the way people write YAML by hand."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def _yaml(data: Mapping) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=100)


def _comment(lines: list[str]) -> str:
    return "\n".join(f"# {line}" for line in lines)
