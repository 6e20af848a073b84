"""``nvidia-smi`` and ``rocm-smi`` for the simulated cards: a runner that
answers their command lines with the text the tools print, one row (or one
``cardN`` entry) per physical card and one process row per card a process
uses, read from the same :class:`oomsim.state.SimState` as NVML. A card split
into MIG slices shows as one GPU with its whole memory and the sum of its
slices' use, as ``nvidia-smi --query-gpu`` shows it; ``nvidia-smi -L`` lists
the slices under it."""
from __future__ import annotations

import json
import subprocess
from typing import Sequence

from oomsim.devspec import cards, card_uuid, device_uuid
from oomsim.state import SimState

MIB = 1 << 20


class SmiRunner:
    """``runner(argv) -> stdout`` for the simulated device's command-line tool.

    Behaves like ``subprocess.run(argv, check=True).stdout``: a tool this
    vendor does not have raises FileNotFoundError, a query the tool would
    refuse raises CalledProcessError."""

    def __init__(self, state: SimState):
        self._state = state
        self._cards = cards(state.scenario.devices)
        self.history: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        argv = tuple(str(a) for a in argv)
        self.history.append(argv)
        tool = argv[0].rsplit("/", 1)[-1] if argv else ""
        vendor = self._state.vendor
        if tool == "nvidia-smi" and vendor == "nvidia":
            return self._nvidia_smi(argv)
        if tool == "rocm-smi" and vendor == "amd":
            return self._rocm_smi(argv)
        raise FileNotFoundError(2, "No such file or directory", tool or "?")

    def _card_reading(self, k: int) -> tuple[int, int]:
        """(total, used) bytes of physical card ``k``."""
        card = self._cards[k]
        used = sum(self._state.reading(i)[1] for i in card.devices)
        return card.total_bytes, used

    def _uuid(self, k: int) -> str:
        card = self._cards[k]
        if card.mig:
            return card_uuid(card, k)
        return device_uuid(self._state.devices[card.devices[0]], card.devices[0])

    def _card_procs(self, k: int) -> list[tuple[int, str, int]]:
        """(pid, name, bytes) on card ``k``, summed over its slices."""
        out: dict[int, list] = {}
        for i in self._cards[k].devices:
            for pid, name, held in self._state.processes(i):
                out.setdefault(pid, [pid, name, 0])[2] += held
        return [tuple(v) for v in out.values()]

    # nvidia-smi --query-gpu=memory.used,memory.total --format=csv[,noheader][,nounits]; nvidia-smi -L
    def _nvidia_smi(self, argv: tuple[str, ...]) -> str:
        if "-L" in argv or "--list-gpus" in argv:
            return self._list()
        query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
        apps = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-compute-apps=")), None)
        fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "")
        if not fmt.startswith("csv") or (query is None) == (apps is None):
            raise subprocess.CalledProcessError(2, list(argv), output="", stderr="Invalid combination of input arguments.")
        header, units = "noheader" not in fmt, "nounits" not in fmt
        driver = self._state.scenario.device.driver_version

        def mib(n: int) -> str:
            return f"{n // MIB} MiB" if units else str(n // MIB)

        def bad_field(name: str):
            return subprocess.CalledProcessError(2, list(argv), output="",
                                                 stderr=f'Field "{name}" is not a valid field to query.')

        if query is not None:
            fields = [f.strip() for f in query.split(",")]
            rows = []
            for k, card in enumerate(self._cards):
                total, used = self._card_reading(k)
                values = {
                    "memory.used": ("memory.used [MiB]", mib(used)),
                    "memory.total": ("memory.total [MiB]", mib(total)),
                    "memory.free": ("memory.free [MiB]", mib(total - used)),
                    "name": ("name", card.name),
                    "index": ("index", str(k)),
                    "uuid": ("uuid", self._uuid(k)),
                    "driver_version": ("driver_version", driver),
                    "count": ("count", str(len(self._cards))),
                    "mig.mode.current": ("mig.mode.current", "Enabled" if card.mig else "[N/A]"),
                }
                bad = [f for f in fields if f not in values]
                if bad:
                    raise bad_field(bad[0])
                rows.append(", ".join(values[f][1] for f in fields))
                head = ", ".join(values[f][0] for f in fields)
        else:
            fields = [f.strip() for f in apps.split(",")]
            heads = {"pid": "pid", "process_name": "process_name", "name": "process_name",
                     "used_memory": "used_gpu_memory [MiB]", "used_gpu_memory": "used_gpu_memory [MiB]",
                     "gpu_uuid": "gpu_uuid", "gpu_name": "gpu_name", "gpu_bus_id": "gpu_bus_id"}
            bad = [f for f in fields if f not in heads]
            if bad:
                raise bad_field(bad[0])
            head = ", ".join(heads[f] for f in fields)
            rows = []
            for k, card in enumerate(self._cards):
                for pid, name, held in self._card_procs(k):
                    if "ollama" not in name:
                        continue  # nvidia-smi lists compute apps; the desktop is a graphics process
                    cells = {"pid": str(pid), "process_name": name, "name": name, "used_memory": mib(held),
                             "used_gpu_memory": mib(held), "gpu_uuid": self._uuid(k), "gpu_name": card.name,
                             "gpu_bus_id": f"00000000:{k + 1:02X}:00.0"}
                    rows.append(", ".join(cells[f] for f in fields))
        return "\n".join(([head] if header else []) + rows) + "\n"

    def _list(self) -> str:
        lines = []
        for k, card in enumerate(self._cards):
            lines.append(f"GPU {k}: {card.name} (UUID: {self._uuid(k)})")
            if card.mig:
                for slot, i in enumerate(card.devices):
                    dev = self._state.devices[i]
                    lines.append(f"  MIG {dev.mig.profile:<12}Device {slot:2d}: (UUID: {device_uuid(dev, i)})")
        return "\n".join(lines) + "\n"

    # rocm-smi --showmeminfo vram --json, --showproductname --json, --showpids --json
    def _rocm_smi(self, argv: tuple[str, ...]) -> str:
        as_json = "--json" in argv
        if "--showmeminfo" in argv:
            data, text = {}, ""
            for k in range(len(self._cards)):
                total, used = self._card_reading(k)
                data[f"card{k}"] = {"VRAM Total Memory (B)": str(total), "VRAM Total Used Memory (B)": str(used)}
                text += (f"GPU[{k}]\t\t: VRAM Total Memory (B): {total}\n"
                         f"GPU[{k}]\t\t: VRAM Total Used Memory (B): {used}\n")
        elif "--showproductname" in argv:
            data, text = {}, ""
            for k, card in enumerate(self._cards):
                data[f"card{k}"] = {"Card Series": card.name, "Card Model": "0x744c", "Card Vendor":
                                    "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "SIMULATED"}
                text += f"GPU[{k}]\t\t: Card Series: \t\t{card.name}\n"
        elif "--showpids" in argv:
            # one row per process: how many GPUs it uses and its VRAM on all of them
            seen: dict[int, list] = {}
            for k in range(len(self._cards)):
                for pid, name, held in self._card_procs(k):
                    if "ollama" in name:
                        row = seen.setdefault(pid, [name.rsplit("/", 1)[-1], 0, 0])
                        row[1], row[2] = row[1] + 1, row[2] + held
            procs = {f"PID{pid}": f"{n}, {gpus}, {held}, 0, 0" for pid, (n, gpus, held) in seen.items()}
            data = {"system": procs}
            text = "".join(f"{k[3:]}\t{v}\n" for k, v in procs.items()) or "No KFD PIDs currently running\n"
        elif "--showdriverversion" in argv:
            data = {"system": {"Driver version": "6.7.0"}}
            text = "Driver version: 6.7.0\n"
        else:
            raise subprocess.CalledProcessError(2, list(argv), output="", stderr="rocm-smi: unsupported option")
        if as_json:
            return json.dumps(data) + "\n"
        bar = "=" * 24
        return f"{bar} ROCm System Management Interface {bar}\n{text}{bar} End of ROCm SMI Log {bar}\n"
