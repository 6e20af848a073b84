"""`--rig` is the test-and-demo rig, an extra (`pip install oomvet[rig]`):
without it the diagnosis still installs and runs, and `--rig` says in one
line what to install."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _without(module: str, lang: str) -> subprocess.CompletedProcess:
    # None in sys.modules makes `import module` fail as a missing module does
    code = (f"import sys; sys.modules[{module!r}] = None; from assistant.cli import main; "
            "sys.exit(main(['diagnose', '--rig', '--model', 'neohorse-1', '--budget', '600MiB', '--auto']))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "OOMVET_LANG": lang, "HOME": str(ROOT)})


@pytest.mark.parametrize("module", ["oomrig", "gguf"])
def test_rig_without_the_extra_is_one_line_and_exit_2(module):
    proc = _without(module, "en")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"oomvet: --rig needs oomvet's test rig, which is not installed here ({module} is missing): "
        "pip install 'oomvet[rig]'"]


def test_rig_without_the_extra_says_so_in_chinese():
    proc = _without("gguf", "zh")
    assert proc.returncode == 2
    assert "本机未安装（缺少 gguf）" in proc.stderr and "Traceback" not in proc.stderr


def test_the_diagnosis_does_not_depend_on_what_only_the_rig_needs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]}
    assert "gguf" not in names
    assert any(d.startswith("gguf") for d in project["optional-dependencies"]["rig"])
