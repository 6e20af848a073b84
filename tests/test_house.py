"""The shape of the house, checked from the source: the layers import only
downward (``common`` at the bottom, importing nothing of ours), no module
imports one that imports it back (lazy imports and ``import_module("...")``
count), no module grows past one job's size, every error a user sees has one
root and a named exit code, and every line oomvet shows comes from the one
catalog (no other module reads message files or writes an English/Chinese
pair inline)."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = tuple(p.name for p in ROOT.iterdir()
                 if p.is_dir() and (p / "__init__.py").exists() and p.name not in ("tests", "bench", "scripts"))
#: files whose length is their data, not code (none yet: catalogs are YAML)
DATA_MODULES: set[str] = set()
MAX_LINES = 450


def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports when it runs: at the top, inside functions
    (lazy) and by ``import_module("...")``; not under ``if TYPE_CHECKING:``,
    which never runs."""
    names = set()

    def visit(node):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        targets = {_owner(i) for i in _imports(path)} - {None, name}
        # a module importing its own package's __init__ is how Python loads it, not a cycle
        graph[name] = {t for t in targets if not name.startswith(t + ".")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_import_reader_sees_lazy_imports_and_skips_type_checking_ones(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import only.types\n"
                      "def f():\n    from lazy.one import x\n    importlib.import_module('by.name')\n")
    assert _imports(source) == {"typing", "typing.TYPE_CHECKING", "lazy.one", "lazy.one.x", "by.name"}


def test_the_cycle_finder_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    assert _cycles(_graph()) == []


@pytest.mark.parametrize("lower, upper", [("rules", "probes"), ("rules", "assistant"), ("probes", "assistant")]
                         + [("common", other) for other in PACKAGES if other != "common"])
def test_a_lower_layer_never_imports_a_higher_one(lower, upper):
    offenders = sorted(m for m, targets in _graph().items()
                       if m.split(".")[0] == lower and any(t.split(".")[0] == upper for t in targets))
    assert offenders == []


def test_no_module_is_over_the_size_of_one_job():
    long = {name: n for name, path in MODULES.items()
            if name not in DATA_MODULES and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


#: assistant/'s top level: the entry points, and a room (sub-package) for every job;
#: a new module goes into the room whose job it does
ASSISTANT_TOP = {"__init__.py", "__main__.py", "cli.py"}


def test_assistant_is_rooms_not_loose_modules():
    loose = sorted(p.name for p in (ROOT / "assistant").glob("*.py") if p.name not in ASSISTANT_TOP)
    assert loose == [], f"put these into a room of assistant/ (commands/, session/, ...): {loose}"
    rooms = sorted(p.name for p in (ROOT / "assistant").iterdir() if (p / "__init__.py").exists())
    assert {"commands", "session", "intake", "journal", "report", "config", "files"} <= set(rooms)


def test_every_command_module_is_registered_and_every_registered_one_is_a_command_module():
    # the registry is the tuple in assistant/commands/__init__.py, not names in a string table
    from assistant.commands import COMMANDS
    files = {p.stem for p in (ROOT / "assistant" / "commands").glob("*.py") if p.stem != "__init__"}
    assert {m.__name__.rpartition(".")[2] for m in COMMANDS} == files
    assert all(callable(getattr(m, "add_parser", None)) for m in COMMANDS)


def test_every_error_a_user_sees_has_one_root():
    import inspect

    from common import errors
    from oomrig import RigError
    from rules.engine import RulesUnavailable

    classes = [obj for _, obj in inspect.getmembers(errors, inspect.isclass) if issubclass(obj, Exception)]
    assert {c.__name__ for c in classes + [RigError, RulesUnavailable] if not issubclass(c, errors.UserError)} == set()
    # one class per meaning (one ServerUnreachable, whichever room found it): none redefined elsewhere
    names = {c.__name__ for c in classes}
    again = sorted(f"{module}.{node.name}" for module, path in MODULES.items() if module != "common.errors"
                   for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, ast.ClassDef) and node.name in names)
    assert again == []


def _bare_exit_codes(tree: ast.AST, returns: bool) -> list[int]:
    """Line numbers of exit codes written as numbers: ``exit_code = 3`` anywhere,
    and (``returns``) ``return 2`` / ``return 0 if ok else 1``."""
    def number(node) -> bool:
        return (isinstance(node, ast.Constant) and type(node.value) is int
                or isinstance(node, ast.IfExp) and (number(node.body) or number(node.orelse)))

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and number(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(t, "id", getattr(t, "attr", None)) == "exit_code" for t in targets):
                lines.append(node.lineno)
        elif returns and isinstance(node, ast.Return) and node.value is not None and number(node.value):
            lines.append(node.lineno)
    return lines


def test_the_exit_code_finder_sees_bare_numbers():
    tree = ast.parse("class E:\n    exit_code = 3\ndef run(a):\n    return 0 if a else 1\n"
                     "def ok(a):\n    return ExitCode.OK\n")
    assert _bare_exit_codes(tree, returns=True) == [2, 4]
    assert _bare_exit_codes(tree, returns=False) == [2]


def test_exit_codes_are_named_not_numbers():
    # the command line and its commands return exit codes; every room may set one on an error
    bare = {name: lines for name, path in MODULES.items()
            if (lines := _bare_exit_codes(ast.parse(path.read_text(encoding="utf-8")),
                                          returns=name == "assistant.cli" or name.startswith("assistant.commands")))}
    assert bare == {}


# --- the one catalog ----------------------------------------------------------------

CATALOG = "common.catalog"
#: modules that read Chinese (the intake's cue words, the answers' counting words), not say it
READS_CHINESE = ("assistant.intake", "assistant.session.answers")
#: the rooms that speak to the user; oomsim plays the server and its model, whose words are not ours
SPEAKING = ("assistant", "common", "probes", "rules", "oomrig")
_HAN = re.compile(r"[\u4e00-\u9fff]")


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _text(node) -> bool:
    """Words written in the source: a literal, an f-string, or a choice between two of them
    (a catalog look-up that falls back to ``"?"`` is not, nor an empty default: no words)."""
    return (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value != ""
            or isinstance(node, ast.JoinedStr)
            or isinstance(node, ast.IfExp) and _text(node.body) and _text(node.orelse))


def _zh_name(node) -> bool:
    """``x_zh`` as a name, an attribute, a keyword, a dict key or a subscript (``d["x_zh"]``)."""
    if isinstance(node, ast.Subscript):
        node = node.slice
    name = node if isinstance(node, str) else getattr(node, "id", getattr(node, "attr", None))
    if name is None and isinstance(node, ast.Constant):
        name = node.value
    return isinstance(name, str) and (name == "zh" or name.lower().endswith("_zh"))


def _inline_pairs(source: str) -> list[int]:
    """Line numbers where a module writes Chinese itself: a literal holding Han
    characters (not a docstring), or a ``*_zh`` name, keyword or key given a
    literal or f-string (``note_zh=f"..."``, ``{"verified_zh": "..."}``)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                and _HAN.search(node.value):
            lines.add(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _text(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_zh_name(t) for t in targets):
                lines.add(node.lineno)
        elif isinstance(node, ast.keyword) and _zh_name(node.arg) and _text(node.value):
            lines.add(node.value.lineno)
        elif isinstance(node, ast.Dict):
            lines.update(v.lineno for k, v in zip(node.keys, node.values) if k is not None and _zh_name(k) and _text(v))
    return sorted(lines)


def test_the_pair_finder_sees_the_old_inline_pairs_and_not_data():
    old = ('where_zh = "主机" if host else info.name\n'
           'limit = Limit(n, "budget", f"{b} from --budget", note_zh=f"{b}，来自 --budget")\n'
           '_PLACEMENT = {"gpu": "全部在 GPU"}\n'
           'fields = {"verified": "passed", "verified_zh": "passed" if ok else "failed"}\n'
           'fields["placement_zh"] = f"{where}"\n')
    assert _inline_pairs(old) == [1, 2, 3, 4, 5]
    data = ('"""A docstring may quote 大概三万字."""\nMODEL = "qwen2.5:7b"\n'
            'entry = {"note": en.format_map(f), "note_zh": zh.format_map(f)}\nnote_zh = t("budget.host", "zh")\n'
            'fields["placement_zh"] = t(key, "zh") if known else "?"\n')
    assert _inline_pairs(data) == []


def test_no_module_writes_an_english_chinese_pair_inline():
    found = {name: lines for name, path in MODULES.items()
             if name.split(".")[0] in SPEAKING and not name.startswith(READS_CHINESE)
             if (lines := _inline_pairs(path.read_text(encoding="utf-8")))}
    assert found == {}


def _messages_shaped(data) -> bool:
    """Is this YAML (part) a message: ``{en: text, zh: text}``?"""
    if isinstance(data, dict):
        if isinstance(data.get("en"), str) and isinstance(data.get("zh"), str):
            return True
        return any(_messages_shaped(v) for v in data.values())
    return isinstance(data, list) and any(_messages_shaped(v) for v in data)


def test_messages_live_only_under_common_messages():
    import yaml

    messages = ROOT / "common" / "messages"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the intake corpus is large
    elsewhere = sorted(str(path.relative_to(ROOT)) for pkg in PACKAGES for path in (ROOT / pkg).rglob("*.yaml")
                       if messages not in path.parents
                       and _messages_shaped(yaml.load(path.read_text(encoding="utf-8"), Loader=loader)))
    assert elsewhere == []


def test_only_the_catalog_reads_message_files():
    # the old readers: assistant/i18n.py (files("assistant").joinpath("messages", ...)) and
    # rules/catalog.py (Path(__file__).with_name("sentences.yaml")), each with yaml
    readers = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        uses_yaml = any(i == "yaml" or i.startswith("yaml.") for i in _imports(path))
        names_messages = any(isinstance(node, ast.Constant) and isinstance(node.value, str)
                             and (node.value in ("messages", "sentences.yaml") or "messages/" in node.value)
                             for node in ast.walk(tree))
        if name != CATALOG and uses_yaml and names_messages:
            readers.append(name)
    assert readers == []


# -- one gateway to Ollama's HTTP API ------------------------------------------------------

#: the only module that may import the ollama client or httpx (the LLM intake reader's
#: langchain_ollama is another library, for a chat model, and stays outside this rule)
GATEWAY = "probes.ollama_api"
HTTP_LIBRARIES = ("httpx", "ollama")
#: the client's and the gateway's private calls: used only on ``self``, inside the gateway
PRIVATE_CALLS = ("_request_raw", "_call")
#: source outside the packages that talks to servers too
SCRIPTS = {f"{path.parent.name}.{path.stem}": path for folder in ("bench", "scripts")
           for path in (ROOT / folder).glob("*.py")}


def _http_imports(path: Path) -> set[str]:
    return {name for name in _imports(path) if name.split(".")[0] in HTTP_LIBRARIES}


def _private_calls(path: Path) -> list[str]:
    """``x._call`` / ``x._request_raw`` on anything but ``self``, as ``line: text``."""
    return [f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE_CALLS
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")]


def test_the_gateway_checks_see_an_http_import_and_a_reach_into_private_calls(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import httpx\nfrom ollama import Client\nimport langchain_ollama\n"
                      "def f(api):\n    api._call(lambda: api.client._request_raw('GET', '/'))\n"
                      "    return self._call(g)\n")
    assert _http_imports(source) == {"httpx", "ollama", "ollama.Client"}
    assert len(_private_calls(source)) == 2 and all(c.startswith("5: ") for c in _private_calls(source))


def test_only_the_gateway_imports_the_ollama_client_or_httpx():
    assert GATEWAY in MODULES and _http_imports(MODULES[GATEWAY])
    offenders = {name: sorted(_http_imports(path)) for name, path in {**MODULES, **SCRIPTS}.items()
                 if name != GATEWAY and _http_imports(path)}
    assert offenders == {}


def test_no_source_reaches_into_a_private_call_of_the_client_or_the_gateway():
    offenders = {name: calls for name, path in {**MODULES, **SCRIPTS}.items() if (calls := _private_calls(path))}
    assert offenders == {}
