"""A step's peak is the model's share: what other programs on the card gain
or give back during the step is left out of it (and said), where the source
names processes with their memory."""
from __future__ import annotations

import threading
import time

from probes.base import ProbeEnv
from probes.memory.base import ProcessUsage, Reading
from probes.step import OthersAside, sampled

MiB = 1 << 20
GiB = 1 << 30


class Card:
    """A device source as NVML reads one: the card's used memory is every
    process's, and the process list names each with what it holds."""

    name = "nvml"

    def __init__(self, **held: int):
        self.held = dict(held)  # process name -> bytes
        self.lock = threading.Lock()
        self.per_process = True

    def read(self) -> Reading:
        with self.lock:
            used = 300 * MiB + sum(self.held.values())  # the driver's own share, named by no process
        return Reading(time.monotonic(), used, 24 * GiB, 24 * GiB - used)

    def processes(self) -> list[ProcessUsage]:
        with self.lock:
            return [ProcessUsage(pid, name, size if self.per_process else None)
                    for pid, (name, size) in enumerate(self.held.items(), start=100)]

    def set(self, name: str, size: int) -> None:
        with self.lock:
            self.held[name] = size


class NoServer:
    host = "http://127.0.0.1:9"

    def ps(self):
        raise ConnectionError("not needed here")


def _step(card: Card, during) -> dict:
    env = ProbeEnv(api=NoServer(), reader=card, hz=50)
    with sampled(env, "load") as step:
        during()
        time.sleep(0.1)
    return {"peak": step.peak, **step.reading()}


def test_memory_another_program_gives_back_during_the_step_does_not_hide_the_models_peak():
    card = Card(Xorg=400 * MiB, python=3 * GiB)  # a training job holds 3 GiB

    def load():
        card.set("python", 1 * GiB)          # it frees 2 GiB
        card.set("llama-server", 5 * GiB)    # while the model loads its 5 GiB

    seen = _step(card, load)
    # the device reading rose by 3 GiB only; the model's share is its 5 GiB
    assert abs(seen["peak"] - 5 * GiB) < 8 * MiB, seen["peak"] / MiB
    assert seen["others_moved"] == -2 * GiB and seen["measured"] is True


def test_a_program_that_grows_during_the_step_is_not_charged_to_the_model():
    card = Card(Xorg=400 * MiB)

    def load():
        card.set("llama-server", 2 * GiB)
        card.set("Xorg", 1400 * MiB)

    seen = _step(card, load)
    assert abs(seen["peak"] - 2 * GiB) < 8 * MiB and seen["others_moved"] == 1000 * MiB


def test_without_per_process_figures_the_device_reading_stands():
    card = Card(Xorg=400 * MiB, python=3 * GiB)
    card.per_process = False  # Windows WDDM: NVML lists processes without their memory

    def load():
        card.set("python", 1 * GiB)
        card.set("llama-server", 5 * GiB)

    seen = _step(card, load)
    assert abs(seen["peak"] - 3 * GiB) < 8 * MiB and "others_moved" not in seen


def test_a_process_no_source_names_may_be_the_model_so_the_device_reading_stands():
    card = Card(Xorg=400 * MiB, python=3 * GiB)

    def load():
        card.set("python", 1 * GiB)
        card.set("?", 5 * GiB)  # the runner, in another container: NVML gives no name for it

    seen = _step(card, load)
    assert abs(seen["peak"] - 3 * GiB) < 8 * MiB and "others_moved" not in seen


def test_the_host_source_is_already_the_servers_runners_alone():
    host = Card()
    host.name = "host"
    assert not OthersAside.wraps(host) and OthersAside.wraps(Card())


def test_the_chat_says_what_other_programs_did_in_the_users_language():
    from rich.console import Console

    from assistant.session.render import probe_result
    from common import catalog
    from probes.result import ProbeResult

    result = ProbeResult("baseline", ok=True)
    result.facts.append({"kind": "load", "model": "m", "others_moved": -2 * GiB, "measured": True})
    console = Console(width=80, record=True)
    console.print(probe_result(result, 80))
    assert "other programs on the device gave back 2.00 GiB during this step" in \
        " ".join(console.export_text().split())
    catalog.set_lang("zh")
    console = Console(width=80, record=True)
    console.print(probe_result(result, 80))
    assert "其他程序释放了 2.00 GiB" in console.export_text()
