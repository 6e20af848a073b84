"""The shape of the house, checked from the source: the layers import only
downward, no module imports one that imports it back (lazy imports and
``import_module("...")`` count), and no module grows past one job's size."""
import ast
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


@pytest.mark.parametrize("lower, upper", [("rules", "probes"), ("rules", "assistant"), ("probes", "assistant")])
def test_a_lower_layer_never_imports_a_higher_one(lower, upper):
    offenders = sorted(m for m, targets in _graph().items()
                       if m.split(".")[0] == lower and any(t.split(".")[0] == upper for t in targets))
    assert offenders == []


def test_no_module_is_over_the_size_of_one_job():
    long = {name: n for name, path in MODULES.items()
            if name not in DATA_MODULES and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_every_error_a_user_sees_has_one_root():
    import inspect

    from assistant import errors as assistant_errors
    from probes import errors as probe_errors
    from probes.errors import UserError

    classes = {obj for module in (assistant_errors, probe_errors) for _, obj in inspect.getmembers(module, inspect.isclass)
               if issubclass(obj, Exception)}
    assert {c.__name__ for c in classes if not issubclass(c, UserError)} == set()
    # one unreachable server, whichever room found it
    assert issubclass(assistant_errors.ServerUnreachable, probe_errors.ServerUnreachableError)


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
