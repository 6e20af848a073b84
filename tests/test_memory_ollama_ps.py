"""Ollama's /api/ps turned into labelled estimates, never measurements."""
from __future__ import annotations

import pytest

from common.errors import ProbeError, ServerUnreachable
from probes.memory.ollama_ps import LABEL, OllamaPsReader, fetch_ps, ollama_estimate

GiB = 1 << 30

PS = [  # as /api/ps returns it (v0.11.4)
    {"name": "neohorse-1:q8_0", "model": "neohorse-1:q8_0", "size": 6 * GiB, "size_vram": 6 * GiB,
     "digest": "ab12", "details": {"quantization_level": "Q8_0"},
     "expires_at": "2025-08-01T12:00:00Z", "context_length": 4096},
    {"name": "big:q4", "model": "big:q4", "size": 10 * GiB, "size_vram": 7 * GiB, "context_length": 8192},
    {"name": "cpu-only", "model": "cpu-only", "size": 2 * GiB, "size_vram": 0},
]


def test_estimates_carry_the_label_and_sizes():
    est = ollama_estimate(PS)
    assert [e.label for e in est] == [LABEL] * 3
    assert LABEL == "Ollama's estimate"
    assert (est[0].name, est[0].size_bytes, est[0].size_vram_bytes, est[0].context_length) == \
        ("neohorse-1:q8_0", 6 * GiB, 6 * GiB, 4096)


def test_placement_shows_a_spill_to_cpu():
    assert [e.placement for e in ollama_estimate(PS)] == ["gpu", "partial", "cpu"]
    assert ollama_estimate(PS)[1].cpu_bytes == 3 * GiB


def test_old_servers_without_context_length_read_as_none():
    assert ollama_estimate(PS)[2].context_length is None


def test_client_objects_are_accepted_too():
    from ollama._types import ProcessResponse
    resp = ProcessResponse(models=PS)
    est = ollama_estimate(resp.models)
    assert [e.size_vram_bytes for e in est] == [6 * GiB, 7 * GiB, 0]


class FakeApi:
    """The gateway's ``ps_rows`` answering from a queue (an exception is raised)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.history = []

    def ps_rows(self):
        self.history.append("ps_rows")
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_fetch_ps_reads_models_and_unreachable_is_exit_3():
    api = FakeApi([PS, ServerUnreachable("no Ollama server answers at http://127.0.0.1:9")])
    assert [m["name"] for m in fetch_ps(api=api)] == ["neohorse-1:q8_0", "big:q4", "cpu-only"]
    with pytest.raises(ServerUnreachable) as err:
        fetch_ps("http://127.0.0.1:9", api=api)
    assert err.value.exit_code == 3 and "did not answer /api/ps" in str(err.value)
    assert api.history == ["ps_rows", "ps_rows"]


def test_an_answer_fetch_ps_cannot_read_counts_as_no_answer():
    api = FakeApi([ProbeError("the Ollama server at http://h:1 sent an answer oomvet cannot read: x")])
    with pytest.raises(ServerUnreachable) as err:
        fetch_ps("http://h:1", api=api)
    assert err.value.exit_code == 3


def test_ps_reader_reports_estimate_and_never_claims_a_device_total():
    reader = OllamaPsReader(api=FakeApi([PS, PS]))
    usable, reason = reader.probe()
    assert usable and "not a measurement" in reason
    r = reader.read()
    assert r.used_bytes == 13 * GiB and r.total_bytes is None
