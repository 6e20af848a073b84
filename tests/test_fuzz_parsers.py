"""Every parser a user or a server can feed, fed by hypothesis.

The contract: an input is either accepted or refused with one clear line (a
UserError, a ProbeError included, exit 2 at the CLI); never a traceback. Each
test tallies inputs tried / accepted / clean errors / tracebacks per parser;
with ``OOMVET_FUZZ_TALLY=FILE`` the figures are written there as JSON.
"""
from __future__ import annotations

import atexit
import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import UserError

TALLY: dict[str, Counter] = defaultdict(Counter)
FUZZ = settings(max_examples=int(os.environ.get("OOMVET_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _write_tally():
    path = os.environ.get("OOMVET_FUZZ_TALLY")
    if path and TALLY:
        Path(path).write_text(json.dumps({k: dict(v) for k, v in sorted(TALLY.items())}, indent=1))


atexit.register(_write_tally)


def judge(parser: str, fn, *args, **kwargs):
    """Run one input; a clean refusal is one line of our own error type."""
    TALLY[parser]["tried"] += 1
    try:
        value = fn(*args, **kwargs)
    except UserError as exc:  # a ProbeError is one too
        if "\n" in str(exc) or not str(exc).strip():
            TALLY[parser]["tracebacks"] += 1
            raise AssertionError(f"{parser}: not one clear line: {str(exc)!r}") from exc
        TALLY[parser]["clean errors"] += 1
        return exc
    except Exception:
        TALLY[parser]["tracebacks"] += 1
        raise
    TALLY[parser]["accepted"] += 1
    return value


# -- strategies ---------------------------------------------------------------

UNITS = st.sampled_from(["", "B", "b", "K", "KB", "KiB", "k", "M", "MB", "MiB", "mib", "G", "GB", "GiB", "g",
                         "T", "TiB", "%", " %", "x", "GiBs", "千", "兆"])
NUMBERS = st.one_of(st.integers(-10**20, 10**20).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.from_regex(r"\A[ +-]?[0-9]{0,6}(\.[0-9]{0,4})?([eE][+-]?[0-9]{1,4})?\Z"))
SIZE_TEXT = st.one_of(st.text(max_size=30), st.builds(lambda n, sp, u: f"{n}{sp}{u}", NUMBERS,
                                                        st.sampled_from(["", " ", "  ", "\t"]), UNITS))
JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20),
                       lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids,
                                                                                max_size=4),
                       max_leaves=12)
TAGS = st.one_of(st.text(max_size=40),
                 st.from_regex(r"\A[a-zA-Z0-9._/-]{0,20}(:[a-zA-Z0-9._-]{0,12})?\Z"),
                 st.sampled_from(["neohorse-1:q8_0", "hf.co/x/y:Q4_K_M", ":", "a:", ":b", "a:b:c", "../x",
                                  "registry.ollama.ai/library/m:latest", "NeoHorse-1:Q4_1", "模型:q4"]))


# -- sizes and budgets ---------------------------------------------------------

@FUZZ
@given(SIZE_TEXT)
def test_sizes_are_read_or_refused_in_one_line(text):
    from probes.units import parse_size
    got = judge("sizes (probes.units.parse_size)", parse_size, text)
    if isinstance(got, int):
        assert got > 0


@FUZZ
@given(SIZE_TEXT)
def test_budgets_are_read_or_refused_in_one_line(text):
    from probes.budget import parse_budget
    judge("budgets (probes.budget.parse_budget)", parse_budget, text)


# -- model tags ------------------------------------------------------------------

@FUZZ
@given(TAGS)
def test_model_tags_never_raise(tag):
    from assistant.intake import normalise_model
    from probes.memmodel import level_from_tag
    from oomsim.scenario import canonical
    for name, fn in (("model tags (intake.normalise_model)", normalise_model),
                     ("model tags (memmodel.level_from_tag)", level_from_tag),
                     ("model tags (sim.scenario.canonical)", canonical)):
        got = judge(name, fn, tag)
        assert not isinstance(got, Exception), f"{name} refused a tag: {got}"


# -- answers files ----------------------------------------------------------------

ANSWER_KEYS = st.sampled_from(["symptom", "want_ctx", "want_parallel", "keep_context", "budget", "lang", "model",
                               "Model", "ctx", ""])
ANSWERS = st.one_of(st.text(max_size=80),
                    st.dictionaries(ANSWER_KEYS, JSONISH, max_size=5).map(lambda d: yaml.safe_dump(d)),
                    st.dictionaries(ANSWER_KEYS, st.one_of(SIZE_TEXT, st.integers(), st.booleans()),
                                    max_size=5).map(lambda d: yaml.safe_dump(d, allow_unicode=True)))


@FUZZ
@given(text=ANSWERS)
def test_answers_files_are_read_or_refused_in_one_line(tmp_path, text):
    from assistant.session.answers import load_answers
    path = tmp_path / "answers.yaml"
    path.write_text(text, encoding="utf-8")
    judge("answers files (assistant.session.answers)", load_answers, path)


# -- oomvet.yaml (oomvet check) -----------------------------------------------------

def _valid_doc() -> dict:
    from tests.test_config_check import valid_doc
    return valid_doc()


def _mutate(doc, path, value):
    d = json.loads(json.dumps(doc, default=str))
    node = d
    for key in path[:-1]:
        if isinstance(node, dict) and key in node and isinstance(node[key], (dict, list)):
            node = node[key]
        else:
            break
    if isinstance(node, dict):
        node[path[-1]] = value
    return d


CONFIG_KEYS = st.sampled_from(["model", "max_context_len", "max_batch_size", "max_concurrency", "quant_type",
                               "kv_cache", "gpu_memory_utilization", "ollama", "diagnosis", "steps", "evidence",
                               "parameters", "env", "cause", "verified", "num_ctx", "OLLAMA_NUM_PARALLEL", "x"])
CONFIGS = st.one_of(
    st.text(max_size=200),
    st.builds(lambda path, v: yaml.safe_dump(_mutate(_valid_doc(), path, v), allow_unicode=True),
              st.lists(CONFIG_KEYS, min_size=1, max_size=3), JSONISH),
    st.builds(lambda cut: yaml.safe_dump(_valid_doc())[:cut], st.integers(0, 3000)),
)


@FUZZ
@given(text=CONFIGS)
def test_oomvet_check_reads_or_refuses_any_file_with_exit_0_or_2(tmp_path, capsys, text):
    from assistant.cli import main
    path = tmp_path / "oomvet.yaml"
    path.write_text(text, encoding="utf-8")
    code = judge("oomvet.yaml (oomvet check)", main, ["check", str(path)])
    assert code in (0, 2)
    if code == 2:  # refused at the CLI: a clean error, not an acceptance
        TALLY["oomvet.yaml (oomvet check)"].update({"accepted": -1, "clean errors": 1})
    err = capsys.readouterr().err
    assert "Traceback" not in err


# -- scenario files --------------------------------------------------------------------

SCENARIO_KEYS = st.sampled_from(["device", "host", "server", "models", "faults", "timing", "name", "vram", "total",
                                 "version", "engine", "tags", "weights", "x"])


def _scenario_text() -> str:
    root = Path(__file__).resolve().parents[1] / "scenarios" / "kv_cache.yaml"
    return root.read_text(encoding="utf-8")


SCENARIOS = st.one_of(
    st.text(max_size=200),
    st.dictionaries(SCENARIO_KEYS, JSONISH, max_size=6).map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
    st.builds(lambda path, v: yaml.safe_dump(_mutate(yaml.safe_load(_scenario_text()), path, v)),
              st.lists(SCENARIO_KEYS, min_size=1, max_size=3), JSONISH),
    st.builds(lambda cut: _scenario_text()[:cut], st.integers(0, 4000)),
)


@FUZZ
@given(text=SCENARIOS)
def test_scenario_files_are_read_or_refused_in_one_line(tmp_path, text):
    from oomsim.scenario import load_scenario
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    judge("scenario files (oomsim.scenario)", load_scenario, path)


# -- intake text --------------------------------------------------------------------------

INTAKE = st.one_of(st.text(max_size=300),
                   st.lists(st.sampled_from(["OOM", "out of memory", "显存不足", "加载", "context", "32k", "128K",
                                             "num_ctx=", "neohorse-1:q8_0", "--budget", "6GiB", "并发", "4 users",
                                             "CUDA error", "不", "not", "slow", "慢", " ", "\n", "1e999", "-5"]),
                            max_size=20).map(" ".join))


@FUZZ
@given(INTAKE)
def test_intake_reads_any_text_without_raising(text):
    from assistant.intake import parse
    got = judge("intake text (assistant.intake.parse)", parse, text)
    assert not isinstance(got, Exception)
    for fact in got.facts():
        from rules.facts import validate
        validate(fact)  # what intake makes, the rules accept


# -- /api/ps and /api/show payloads ----------------------------------------------------------

def _api(payload: bytes, status: int = 200):
    from probes.ollama_api import Ollama

    def handler(request):
        return httpx.Response(status, content=payload, headers={"Content-Type": "application/json"})
    return Ollama("http://127.0.0.1:9", transport=httpx.MockTransport(handler))


MODEL_ROW = st.fixed_dictionaries({}, optional={
    "name": JSONISH | st.text(max_size=10), "model": JSONISH | TAGS, "size": JSONISH | st.integers(-5, 2**40),
    "size_vram": JSONISH | st.integers(-5, 2**40), "context_length": JSONISH | st.integers(-5, 2**20),
    "details": JSONISH | st.fixed_dictionaries({}, optional={"quantization_level": JSONISH,
                                                              "family": JSONISH, "parameter_size": JSONISH}),
    "expires_at": JSONISH | st.just("2026-01-01T00:00:00Z")})
PS = st.one_of(st.binary(max_size=60),
               JSONISH.map(lambda v: json.dumps(v).encode()),
               st.lists(MODEL_ROW, max_size=3).map(lambda ms: json.dumps({"models": ms}).encode()),
               st.lists(MODEL_ROW, max_size=3).map(lambda ms: json.dumps({"models": ms}).encode()[:-3]))
SHOW = st.one_of(st.binary(max_size=60), JSONISH.map(lambda v: json.dumps(v).encode()),
                 st.fixed_dictionaries({}, optional={
                     "modelfile": JSONISH, "parameters": JSONISH, "template": JSONISH, "tensors": JSONISH,
                     "details": JSONISH | st.fixed_dictionaries({}, optional={"quantization_level": JSONISH,
                                                                               "family": JSONISH}),
                     "model_info": JSONISH | st.dictionaries(st.sampled_from(
                         ["general.architecture", "llama.context_length", "llama.block_count",
                          "llama.embedding_length", "llama.attention.head_count_kv"]), JSONISH)})
                 .map(lambda d: json.dumps(d).encode()))
STATUS = st.sampled_from([200, 200, 200, 404, 500, 502])


@FUZZ
@given(PS, STATUS)
def test_api_ps_payloads_are_read_or_refused_in_one_line(payload, status):
    got = judge("/api/ps payloads (probes.ollama_api.ps)", _api(payload, status).ps)
    if isinstance(got, list):
        for m in got:
            assert isinstance(m.name, str) and isinstance(m.size_bytes, int)


@FUZZ
@given(SHOW, STATUS)
def test_api_show_payloads_are_read_or_refused_in_one_line(payload, status):
    judge("/api/show payloads (probes.ollama_api.show)", _api(payload, status).show, "neohorse-1:q8_0")


@FUZZ
@given(SHOW, STATUS)
def test_verbose_api_show_payloads_are_read_or_refused_in_one_line(payload, status):
    # the verbose show is read as plain JSON (the client's model drops the tensors), so it
    # meets no schema on the way: what it lets through must still be a dict of model_info
    got = judge("/api/show verbose payloads (probes.ollama_api.show)", _api(payload, status).show,
                "neohorse-1:q8_0", verbose=True)
    if not isinstance(got, Exception):
        assert isinstance(got.model_info, dict) and isinstance(got.tensors, list)


# -- server log lines -------------------------------------------------------------

_LOG_TEMPLATES = [
    'time=x level=INFO source=server.go:1 msg="starting llama-server" cmd="{a} --model {b} -c {n} -np {m} --flash-attn {a}"',
    "llama_kv_cache: {a} KV buffer size = {f} MiB",
    "load_tensors: {a} model buffer size = {f} MiB",
    'time=x level=INFO msg="vram-based default context" total_vram="{a}" default_num_ctx={n}',
    "llama_params_fit_impl: projected to use {n} MiB of device memory vs. {m} MiB of free device memory",
    "llama_params_fit_impl: will leave {n} >= {m} MiB",
    "llm_load_tensors: offloaded {n}/{m} layers to GPU",
    'level=WARN msg="requested context size too large for model" num_ctx={n} n_ctx_train={m}',
    "level=ERROR msg={a} error={b}",
    "CUDA error: {a}",
]
LOG_LINES = st.lists(st.one_of(
    st.text(max_size=120),
    st.builds(lambda tpl, a, b, n, m, f: tpl.format(a=a, b=b, n=n, m=m, f=f), st.sampled_from(_LOG_TEMPLATES),
              st.text(max_size=12), st.text(max_size=12), NUMBERS, NUMBERS, NUMBERS),
), max_size=12)


@FUZZ
@given(LOG_LINES)
def test_server_log_lines_are_read_or_ignored_never_raised_on(lines):
    from probes.serverlog import parse
    got = judge("server log lines (probes.serverlog.parse)", parse, lines)
    assert not isinstance(got, Exception), f"a log line was refused: {got}"
    json.dumps(got.fact("fuzz"), default=str)  # the log fact is plain data
