"""Making room before a load, as Ollama's scheduler does it (``server/sched.go``
processPending and findRunnerToUnload, both engines): at most
``OLLAMA_MAX_LOADED_MODELS`` runners (unset: 3 per GPU), and a model that
does not fit beside the loaded ones unloads them one at a time — idle ones
first, shortest keep_alive first, then by model path — until it fits or
nothing is left. The log has the scheduler's own lines (its DEBUG lines, as
with ``OLLAMA_DEBUG=1``) and then the simulator's "runner stopped"."""
from __future__ import annotations

import hashlib
import math

from oomsim.messages import _library, human_bytes2
from oomsim.runner import Runner
from oomsim.settings import Settings

DEFAULT_MODELS_PER_GPU = 3   # defaultModelsPerGPU
BLOBS = "/root/.ollama/models/blobs/sha256-"


class Evictions:
    """The eviction part of :class:`oomsim.state.SimState`."""

    def _unload_order(self, exclude: str) -> list[tuple[str, Runner]]:
        """ByDurationAndName: shortest keep_alive first (forever last), then model path."""
        others = [(k, r) for k, r in self.runners.items() if k != exclude]
        return sorted(others, key=lambda kr: (math.inf if kr[1].keep_s is None else kr[1].keep_s,
                                              BLOBS + _blob_of(kr[1])))

    def _runner_to_unload(self, exclude: str, idle_only: bool = True) -> str | None:
        """findRunnerToUnload: the first idle runner in unload order; with
        ``idle_only`` False, else the first one (which Ollama waits for)."""
        order = self._unload_order(exclude)
        for key, r in order:
            if not r.transient:  # no request being answered (a runner only scheduled counts as idle, as before)
                return key
        return None if idle_only or not order else order[0][0]

    def _evict(self, key: str) -> None:
        """Expire a runner now to make room: gone at once when idle, after its
        requests otherwise."""
        r = self.runners[key]
        busy = len(r.transient)
        self._log(f'level=DEBUG msg="resetting model to expire immediately to make room" '
                  f'runner.name={r.model.tag} runner.inference={_library(self.vendor)} '
                  f'runner.devices={len(r.split.devices) if r.split else 1} '
                  f'runner.size="{human_bytes2(r.placement.size_bytes)}" '
                  f'runner.vram="{human_bytes2(r.placement.size_vram_bytes)}" runner.parallel={r.num_parallel} '
                  f'runner.pid={r.pid} runner.model={BLOBS}{_blob_of(r)} runner.num_ctx={r.num_ctx * r.num_parallel} '
                  f'refCount={busy}')
        r.keep_s = 0.0
        if busy:
            r.expires_at, r.unloading = self.clock(), True
        else:
            self._drop(key, "evicted to make room")

    def _max_loaded(self, s: Settings) -> int:
        return s.max_loaded or DEFAULT_MODELS_PER_GPU * max(len(self.scenario.devices), 1)

    def _enforce_max_loaded(self, s: Settings, key: str) -> None:
        """``OLLAMA_MAX_LOADED_MODELS``: at the limit, one runner goes before the load."""
        others = [k for k, r in self.runners.items() if k != key and not r.unloading]
        limit = self._max_loaded(s)
        while len(others) >= limit:
            self._log(f'level=DEBUG msg="max runners achieved, unloading one to make room" '
                      f'runner_count={len(others)}')
            victim = self._runner_to_unload(key, idle_only=False)
            if victim is None:
                return
            self._evict(victim)
            others = [k for k, r in self.runners.items() if k != key and not r.unloading]

    def _make_room(self, fits, key: str) -> bool:
        """Unload idle runners one at a time until ``fits()`` says yes; False
        when it still does not fit with no idle runner left."""
        while not fits():
            victim = self._runner_to_unload(key)
            if victim is None:
                return False
            self._evict(victim)
        return True


def _blob_of(r: Runner) -> str:
    return hashlib.sha256(r.model.tag.encode()).hexdigest()  # as oomsim.loads names the blob
