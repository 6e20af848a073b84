"""``oomvet check`` and the validation behind it: every malformed config is
refused with its own clear line, and neither check nor apply writes or creates
anything for it."""
from __future__ import annotations

import argparse
import io
import json

import pytest
import yaml

from assistant import cli
from assistant.commands import check as cmd_check
from assistant.commands.apply import Applier, CommandResult
from assistant.config import ConfigError, build_config, dump_config, load_config
from tests.test_config_roundtrip import sample_result


class FakeRunner:
    """Stands in for the ollama binary: answers from a queue, records each call."""

    def __init__(self):
        self.queue: list[CommandResult] = []
        self.history: list[tuple[list[str], dict]] = []

    def enqueue(self, returncode: int = 0, output: str = "") -> "FakeRunner":
        self.queue.append(CommandResult(returncode, output))
        return self

    def run(self, argv, env, timeout_s):
        self.history.append((list(argv), dict(env)))
        return self.queue.pop(0)


def valid_doc() -> dict:
    return build_config(sample_result())


def valid_text() -> str:
    return dump_config(valid_doc(), "en")


def dumped(**changes) -> str:
    doc = valid_doc()
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        target = doc
        for key in parents:
            target = target[key]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


_DELETE = object()

# (case id, file content, the words its message must contain)
MALFORMED = [
    ("yaml-syntax", "model: [neohorse-1:q8_0\nmax_context_len: 4096\n", "not valid YAML at line"),
    ("empty-file", "", "the file is empty"),
    ("top-level-list", "- model: neohorse-1:q8_0\n- max_context_len: 4096\n", "top level must be a mapping"),
    ("duplicate-key", valid_text() + "max_context_len: 2048\n", "'max_context_len' appears twice"),
    ("unknown-key-typo", dumped(max_ctx_len=4096), "unknown key 'max_ctx_len' (did you mean 'max_context_len'?)"),
    ("missing-model", dumped(model=_DELETE), "missing key 'model'"),
    ("model-with-space", dumped(model="neo horse:q8"), "model must be an Ollama model name"),
    ("context-not-a-number", dumped(max_context_len="4k"), "max_context_len must be a whole number, got '4k'"),
    ("context-zero", dumped(max_context_len=0), "max_context_len must be between 1 and 16777216, got 0"),
    ("batch-negative", dumped(max_batch_size=-512), "max_batch_size must be between 1 and 1048576, got -512"),
    ("concurrency-boolean", dumped(max_concurrency=True), "max_concurrency must be a whole number, got True"),
    ("quant-unknown", dumped(quant_type="Q9_K"), "quant_type 'Q9_K' is not a known quantization"),
    ("kv-cache-unknown", dumped(kv_cache="fp32"), "kv_cache must be one of f16, q8_0, q4_0, got 'fp32'"),
    ("utilization-over-one", dumped(gpu_memory_utilization=1.5), "at most 1, got 1.5"),
    ("utilization-text", dumped(gpu_memory_utilization="high"), "must be a fraction such as 0.8, got 'high'"),
    ("verified-not-bool", dumped(verified="maybe"), "verified must be true or false, got 'maybe'"),
    ("verified-but-not-fits", dumped(fits=False), "a verified config must fit"),
    ("model-empty-but-fits", dumped(model=None), "model is empty, but a config that fits needs a value"),
    ("env-var-typo", dumped(ollama__env={"OLLAMA_NUM_PARALEL": "1"}),
     "'OLLAMA_NUM_PARALEL' is not an Ollama server variable (did you mean 'OLLAMA_NUM_PARALLEL'?)"),
    ("env-disagrees-with-concurrency", dumped(ollama__env={"OLLAMA_NUM_PARALLEL": "4"}),
     "ollama.env.OLLAMA_NUM_PARALLEL is '4' but max_concurrency is '1'"),
    ("quantized-kv-without-flash-attention",
     dumped(kv_cache="q8_0", ollama__env={"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KV_CACHE_TYPE": "q8_0",
                                          "OLLAMA_FLASH_ATTENTION": "0"}),
     "kv_cache q8_0 needs OLLAMA_FLASH_ATTENTION=1"),
    ("parameter-disagrees-with-context", dumped(ollama__parameters={"num_ctx": 8192, "num_batch": 512}),
     "ollama.parameters.num_ctx is 8192 but max_context_len is 4096"),
    ("parameter-unknown", dumped(ollama__options={"num_context": 4096}),
     "'num_context' is not an Ollama option / Modelfile PARAMETER"),
    ("from-disagrees-with-model", dumped(ollama__from="neohorse-1:q4_0"),
     "ollama.from is 'neohorse-1:q4_0' but model is 'neohorse-1:q8_0'"),
    ("ollama-section-a-list", dumped(ollama=["num_ctx 4096"]), "ollama must be a mapping"),
    ("cause-unknown", dumped(diagnosis__cause="gremlins"), "diagnosis.cause must be one of"),
    ("steps-not-a-list", dumped(steps="probe, change"), "steps must be a list"),
    ("evidence-limit-negative", dumped(evidence__limit=-5), "evidence.limit must be a size in bytes"),
    ("not-utf8", b"model: neohorse-1:q8_0\n\xff\xfe\x00max_context_len: 4096\n", "is not UTF-8 text"),
]


def _snapshot(folder):
    return sorted((p.name, p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir())


def _write_case(tmp_path, content):
    folder = tmp_path / "cfg"
    folder.mkdir()
    path = folder / "oomvet.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_the_valid_config_passes_so_the_cases_below_fail_for_their_own_reason(tmp_path):
    path = _write_case(tmp_path, valid_text())
    out = io.StringIO()
    assert cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="en"), out=out) == 0
    assert "valid" in out.getvalue()
    assert load_config(path, "en") == valid_doc()


def test_at_least_fifteen_malformed_configs_each_with_its_own_message(tmp_path):
    messages = []
    for case, content, _ in MALFORMED:
        folder = tmp_path / case
        folder.mkdir()
        path = folder / "oomvet.yaml"
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        with pytest.raises(ConfigError) as info:
            load_config(path, "en")
        messages.append(str(info.value))
    assert len(MALFORMED) >= 15
    assert len(set(messages)) == len(messages), "two cases share a message"


@pytest.mark.parametrize("case,content,expected", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_check_rejects_malformed_config_with_one_clear_line_and_writes_nothing(tmp_path, case, content, expected):
    path = _write_case(tmp_path, content)
    before = _snapshot(path.parent)
    out = io.StringIO()

    code = cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="en"), out=out)

    lines = out.getvalue().splitlines()
    assert code == 2
    assert expected in lines[0], lines
    assert "Traceback" not in out.getvalue()
    assert _snapshot(path.parent) == before


@pytest.mark.parametrize("case,content,expected", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_apply_refuses_malformed_config_and_creates_nothing(tmp_path, case, content, expected):
    path = _write_case(tmp_path, content)
    before = _snapshot(path.parent)
    runner = FakeRunner()
    out = io.StringIO()

    with pytest.raises(ConfigError) as info:
        Applier(runner=runner, out=out, environ={"PATH": ""}).apply(path, dry_run=False, lang="en")

    assert expected in str(info.value)
    assert runner.history == []
    assert out.getvalue() == ""
    assert _snapshot(path.parent) == before


def test_cli_check_prints_no_traceback_and_exits_2(tmp_path, capsys):
    path = _write_case(tmp_path, dumped(kv_cache="fp32"))
    assert cli.main(["check", str(path), "--lang", "en"]) == 2
    captured = capsys.readouterr()
    assert "kv_cache must be one of" in captured.out
    assert "Traceback" not in captured.out + captured.err


def test_cli_apply_on_a_malformed_config_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OOMVET_RAISE", raising=False)
    path = _write_case(tmp_path, dumped(max_context_len="4k"))
    assert cli.main(["apply", str(path), "--dry-run", "--lang", "en"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("oomvet: ") and "max_context_len must be a whole number" in err[0]
    assert len([line for line in err if not line.startswith("hint:")]) == 1


def test_check_points_at_the_line_of_the_bad_key(tmp_path):
    path = _write_case(tmp_path, valid_text().replace("kv_cache: f16", "kv_cache: fp32"))
    line_no = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith("kv_cache:"))
    out = io.StringIO()
    cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="en"), out=out)
    assert f"line {line_no}: kv_cache must be one of" in out.getvalue()


def test_check_lists_every_problem_one_per_line(tmp_path):
    path = _write_case(tmp_path, dumped(max_context_len=0, kv_cache="fp32", quant_type="Q9_K"))
    out = io.StringIO()
    assert cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="en"), out=out) == 2
    lines = out.getvalue().splitlines()
    assert len(lines) == 4  # three problems and the summary
    assert "3 problem(s)" in lines[-1]


def test_check_json_is_one_object_with_the_problems(tmp_path):
    path = _write_case(tmp_path, dumped(gpu_memory_utilization=1.5))
    out = io.StringIO()
    assert cmd_check.run(argparse.Namespace(file=str(path), json=True, lang="en"), out=out) == 2
    report = json.loads(out.getvalue())
    assert report["valid"] is False and len(report["problems"]) == 1
    assert "gpu_memory_utilization" in report["problems"][0]


def test_check_missing_file_is_one_line_exit_2(tmp_path):
    out = io.StringIO()
    missing = tmp_path / "nope.yaml"
    assert cmd_check.run(argparse.Namespace(file=str(missing), json=False, lang="en"), out=out) == 2
    assert out.getvalue().splitlines()[0] == f"cannot read {missing}: no such file"


def test_check_speaks_chinese_when_asked(tmp_path):
    path = _write_case(tmp_path, dumped(kv_cache="fp32"))
    out = io.StringIO()
    cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="zh"), out=out)
    assert "kv_cache 必须是 f16、q8_0、q4_0 之一" in out.getvalue()


def test_config_without_an_ollama_section_is_valid_and_derives_it(tmp_path):
    path = _write_case(tmp_path, dumped(ollama=_DELETE))
    out = io.StringIO()
    assert cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="en"), out=out) == 0


def test_unverified_config_is_valid_but_says_so(tmp_path):
    path = _write_case(tmp_path, dumped(verified=False))
    out = io.StringIO()
    assert cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="en"), out=out) == 0
    assert "verified is false" in out.getvalue()


def test_a_key_yaml_reads_as_true_is_named_as_yaml_read_it(tmp_path):
    path = _write_case(tmp_path, dumped(ollama__env={"OLLAMA_NUM_PARALLEL": "1", True: "1"}))
    out = io.StringIO()
    assert cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="en"), out=out) == 2
    assert "ollama.env: True is not an Ollama server variable" in out.getvalue().splitlines()[0]


def test_an_unknown_variable_is_one_problem_whatever_its_value(tmp_path):
    path = _write_case(tmp_path, dumped(ollama__env={"OLLAMA_NUM_PARALEL": ["4"]}))
    out = io.StringIO()
    assert cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="en"), out=out) == 2
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "'OLLAMA_NUM_PARALEL' is not an Ollama server variable" in lines[0]


def test_problems_come_in_the_order_of_the_sections_unknown_keys_first(tmp_path):
    path = _write_case(tmp_path, dumped(generated__who="me", max_ctx=1, verified="yes", kv_cache="fp32",
                                        diagnosis__cause="gremlins", ollama__from="other:q4_0"))
    out = io.StringIO()
    cmd_check.run(argparse.Namespace(file=str(path), json=False, lang="en"), out=out)
    lines = out.getvalue().splitlines()[:-1]
    expected = ["unknown key 'max_ctx'", "verified must be", "kv_cache must be", "ollama.from is",
                "diagnosis.cause must be", "unknown key 'generated.who'"]
    assert len(lines) == len(expected) and all(want in line for want, line in zip(expected, lines)), lines
