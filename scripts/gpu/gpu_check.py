#!/usr/bin/env python3
"""The GPU check of issue 32, run on the device machine by ``check.sh``.

One command spends the device minutes in a fixed order: unpack the bundle,
start the CUDA build of llama-server's backend in the background, run part 1
(oomvet's readers on real NVML, ``part1.py``) while it compiles, write the
stand-in GGUFs, wait for the build, then part 2 (Ollama v0.34.4 on the card,
``part2.py``). Every step has an estimate and a minimum of time left to
start it; a step that no longer fits the deadline is skipped and said to
be, so the command always ends inside its limit with what it measured
packed into at most four files under ``$OUT`` (the device returns eight).

``--dry-run`` runs the same steps on a machine without a GPU: the readers
report that they have nothing to read, the build reports no nvcc, and part 2
runs on the CPU engine from the bundle, diagnosing under a budget instead of
a full card. ``plan`` prints the steps and the time they are given.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layout import BUNDLE_DIR, PARTS, WORK_DIR  # noqa: E402 - this folder is on the path from here on

MiB = 1 << 20
RETURN_FILE_MAX = 15 * MiB   # the device returns files of up to 16 MiB
LOG_FILE_MAX = 4 * MiB       # a longer log keeps its head and tail
RESERVE_S = 20               # kept back at every step for the final pack


@dataclass(frozen=True)
class Step:
    name: str
    part: int          # 0: the frame (unpack, pack), 1 or 2
    estimate_s: int    # on the H200 machine (16 cores); see docs/gpu-check.md
    min_s: int         # time left (after RESERVE_S) needed to start it
    background: bool = False   # runs beside the steps after it (the build)


STEPS = (
    Step("unpack", 0, 15, 5),
    Step("build", 2, 360, 60, background=True),
    Step("worker", 0, 20, 30),   # the CUDA process: part 1 reads it, part 2's hog is it
    Step("part1", 1, 100, 45),
    Step("standins", 2, 25, 30),
    Step("serve", 2, 20, 60),    # the tags are made while the build runs
    Step("build_wait", 2, 0, 20),
    Step("restart", 2, 10, 60),  # Ollama finds the new CUDA backend only when it starts
    Step("free_card", 2, 15, 50),
    Step("hog", 2, 5, 40),
    Step("full_card", 2, 15, 40),
    Step("diagnose", 2, 120, 45),
    Step("fa_off", 2, 20, 30),   # last: it needs the card free again, and issue 31 can wait for it
    Step("pack", 0, 0, 0),       # its time is RESERVE_S, kept back from every step
)


def plan(parts: set[int], budget_s: float) -> dict:
    """The steps of the chosen parts with the time each is expected to end at:
    the build runs beside part 1 and the stand-ins, so waiting for it costs
    only what it takes beyond them."""
    steps = [s for s in STEPS if s.part in parts or s.part == 0]
    t, build_end, rows = 0.0, None, []
    for s in steps:
        if s.background:
            build_end = t + s.estimate_s
            rows.append({**asdict(s), "ends_at_s": round(build_end)})
            continue
        if s.name == "build_wait" and build_end is not None:
            t = max(t, build_end)
        else:
            t += s.estimate_s
        rows.append({**asdict(s), "ends_at_s": round(t)})
    return {"budget_s": budget_s, "expected_s": round(t), "fits": t + RESERVE_S <= budget_s, "steps": rows}


class Clock:
    """The deadline every step is checked against."""

    def __init__(self, budget_s: float, now=time.monotonic):
        self.now = now
        self.start = now()
        self.deadline = self.start + budget_s
        self.record: list[dict] = []

    def left(self) -> float:
        return self.deadline - self.now() - RESERVE_S

    def may_start(self, step: Step) -> bool:
        return self.left() >= step.min_s

    def elapsed(self) -> float:
        return self.now() - self.start


def cap_file(path: Path, max_bytes: int = LOG_FILE_MAX) -> bool:
    """Keep the head and the tail of a file longer than ``max_bytes`` (a
    server log's start says how it was set up, its end how it failed)."""
    size = path.stat().st_size
    if size <= max_bytes:
        return False
    half = max_bytes // 2
    with open(path, "rb") as fh:
        head = fh.read(half)
        fh.seek(size - half)
        tail = fh.read()
    path.write_bytes(head + f"\n[... {size - 2 * half} bytes cut by gpu_check ...]\n".encode() + tail)
    return True


def pack(folder: Path, dest: Path, max_bytes: int = RETURN_FILE_MAX) -> dict:
    """``folder`` as ``dest`` (.tar.gz), each file capped; if the archive is
    still too big, the largest files are left out, and named in it."""
    capped = [str(p.relative_to(folder)) for p in sorted(folder.rglob("*")) if p.is_file() and cap_file(p)]
    left_out: list[str] = []
    while True:
        with tarfile.open(dest, "w:gz") as tar:
            for p in sorted(folder.rglob("*")):
                if p.is_file() and str(p.relative_to(folder)) not in left_out:
                    tar.add(p, arcname=f"{folder.name}/{p.relative_to(folder)}")
        if dest.stat().st_size <= max_bytes:
            break
        rest = [p for p in folder.rglob("*") if p.is_file() and str(p.relative_to(folder)) not in left_out]
        if not rest:
            break
        left_out.append(str(max(rest, key=lambda p: p.stat().st_size).relative_to(folder)))
    return {"file": dest.name, "bytes": dest.stat().st_size, "capped": capped, "left_out": left_out}


def unpack(bundle: Path, work: Path) -> dict:
    """The bundle's parts into ``work``: ``prefix/`` (Ollama's packaged layout),
    ``glue/``, ``llama.cpp/``. Done once per machine (a rerun on a warm one reuses it)."""
    import lzma

    stamp = work / ".unpacked"
    if stamp.exists():
        return {"reused": True}
    prefix = work / "prefix"
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    ollama = prefix / "bin" / "ollama"
    ollama.write_bytes(lzma.decompress((bundle / PARTS["ollama"]).read_bytes()))
    ollama.chmod(0o755)
    for part, dest in (("cpu_payload", prefix / "lib" / "ollama"), ("glue", work / "glue"),
                       ("llama_cpp", work / "llama.cpp")):
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(bundle / PARTS[part]) as tar:
            tar.extractall(dest, filter="tar")   # "tar": keeps the libraries' symlinks and modes
    stamp.write_text("ok\n")
    return {"reused": False}


def driver_on_path() -> None:
    """Put the driver's libraries (libcuda) where llama-server's loader looks:
    Ollama passes LD_LIBRARY_PATH on to it, with its own folders first."""
    extra = [d for d in ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib") if Path(d).is_dir()]
    if extra:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(
            [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p] + extra)


def headline(result: dict) -> dict:
    """The figures the issue's closing note asks for, from the full result."""
    p1, p2 = result.get("part1") or {}, result.get("part2") or {}
    sampling = [{k: r.get(k) for k in ("reader", "hz", "hz_achieved", "steps_caught", "steps",
                                      "cpu_percent_of_core", "errors")} for r in p1.get("sampling", [])]
    errors = [{"mib": row["mib"], **{n: row[n].get("error_mib") for n in ("nvml", "nvidia-smi")},
               **{f"{n} device": row[n].get("device_error_mib") for n in ("nvml", "nvidia-smi")}}
              for row in p1.get("levels", [])]
    compute = [{"label": ld["label"], "ctx": ld["ctx"],
                "buffers_mib": {f"{b['device']} {b['kind']}": round(b["bytes"] / MiB, 2)
                                for b in (ld.get("log") or {}).get("buffers", [])},
                "ps": [{k: m.get(k) for k in ("name", "size", "size_vram", "context_length")} for m in ld["ps"]],
                "offloaded": ld.get("offloaded"), "status": ld.get("status"), "error": ld.get("error")}
               for ld in p2.get("loads", [])]
    d = p2.get("diagnose") or {}
    return {"per_process_error_mib": errors, "sampling": sampling, "loads": compute,
            "leave_mib": p2.get("leave_mib"), "diagnosis": d.get("diagnosis"), "config": d.get("config"),
            "verified": d.get("verified"), "diagnose_rc": d.get("rc"), "build": result.get("build"),
            "steps": result.get("steps")}


class Check:
    def __init__(self, args):
        self.args = args
        # absolute: Modelfiles name the GGUFs by path, and ollama reads a relative one from elsewhere
        self.bundle, self.work, self.out = (Path(p).resolve() for p in (args.bundle, args.work, args.out))
        self.work.mkdir(parents=True, exist_ok=True)
        self.parts = {int(p) for p in args.parts.split(",")}
        self.clock = Clock(args.budget_s)
        self.result: dict = {"dry_run": args.dry_run, "plan": plan(self.parts, args.budget_s), "steps": []}
        self.worker = None
        self.build = None
        self._part2 = None
        self.ggufs: dict = {}

    def say(self, msg: str) -> None:
        print(f"[gpu-check {self.clock.elapsed():6.1f}s] {msg}", flush=True)

    def step(self, name: str, fn) -> bool:
        """Run one step if the clock allows; True if it ran without an error."""
        s = next(s for s in STEPS if s.name == name)
        if s.part and s.part not in self.parts:
            return False
        if not self.clock.may_start(s):
            self.result["steps"].append({"step": name, "skipped": f"{self.clock.left():.0f}s left, needs {s.min_s}s"})
            self.say(f"{name}: skipped, {self.clock.left():.0f}s left")
            return False
        t0 = time.monotonic()
        rec = {"step": name, "started_s": round(self.clock.elapsed(), 1)}
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one step failing must not cost the others' readings
            rec["error"] = f"{type(exc).__name__}: {exc}"
            (self.work / "errors.txt").open("a").write(f"--- {name}\n{traceback.format_exc()}\n")
            self.say(f"{name}: {rec['error']}")
        rec["took_s"] = round(time.monotonic() - t0, 1)
        self.result["steps"].append(rec)
        if s.part == 2 and (self.work / "part2").is_dir():   # a run stopped later still returns this much
            self.result["pack_part2"] = pack(self.work / "part2", self.out / "part2.tar.gz")
        self.save()
        return "error" not in rec

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").write_text(json.dumps(
            {"headline": headline(self.result), **self.result}, indent=1, default=str))

    # -- the steps -------------------------------------------------------------
    def do_unpack(self) -> None:
        self.result["unpack"] = unpack(self.bundle, self.work)
        driver_on_path()

    def do_build(self) -> None:
        from build_cuda import CudaBuild
        from oomrig.build import check_engine, ggml_isa_flags
        from oomrig.paths import RigPaths

        prefix = self.work / "prefix"
        if any(prefix.glob("lib/ollama/cuda_v*/libggml-cuda.so")):   # a rerun on a warm machine
            self.result["build"] = {"reused": True, "finished": True}
            return
        full = self.args.full_build
        if not full:
            try:   # the carried CPU build must run here, else the fallback builds it too
                check_engine(RigPaths(self.work), prefix / "bin" / "ollama")
            except Exception as exc:  # noqa: BLE001
                self.say(f"build: carried llama-server does not run here ({exc}); building it too")
                full = True
        (self.work / "build.log").unlink(missing_ok=True)
        self.build = CudaBuild(self.work / "glue", self.work / "llama.cpp", self.work / "build-cuda", prefix,
                               self.work / "build.log", jobs=self.args.jobs, full=full,
                               isa=tuple(ggml_isa_flags()) if full else ())
        self.build.start()

    def do_worker(self) -> None:
        from cuda_worker import Worker
        self.worker = Worker()
        self.say(f"worker: {self.worker.info}")

    def do_part1(self) -> None:
        import part1
        self.result["part1"] = part1.run(self.worker, self.work / "part1", self.say)
        self.result["pack_part1"] = pack(self.work / "part1", self.out / "part1.tar.gz")

    def do_standins(self) -> None:
        import standin
        spec = standin.load_spec(self.bundle / PARTS["standin"])
        self.ggufs = standin.write_levels(spec, self.work / "gguf")
        self.say(f"standins: {', '.join(f'{k} {p.stat().st_size // MiB} MiB' for k, p in self.ggufs.items())}")

    def do_build_wait(self) -> None:
        if self.build is None:   # not started, or reused
            return
        # as long as the restart, the loads and the hog still fit after it; diagnose gets the rest
        after = sum(s.min_s for s in STEPS if s.name in ("restart", "diagnose"))
        self.build.join(timeout=max(self.clock.left() - after, 1))
        if self.build.is_alive():
            self.build.stop()
            self.build.join(10)
        b = self.build
        self.result["build"] = {"timings": b.timings, "error": b.error, "cuda_major": b.cuda_major,
                                "missing_libs": b.missing, "install_error": b.install_error, "jobs": b.jobs,
                                "full": b.full,
                                "finished": not b.is_alive() and b.error is None}
        self.say(f"build: {self.result['build']}")

    def part2(self):
        if self._part2 is None:
            from part2 import Part2
            self._part2 = Part2(self.work / "prefix" / "bin" / "ollama", self.work / "models", self.work / "part2",
                                self.ggufs, self.worker, self.say, gpu=not self.args.dry_run)
            self.result["part2"] = self._part2.result
        return self._part2

    def run(self) -> int:
        self.say(f"plan: {json.dumps(self.result['plan']['steps'])}")
        self.step("unpack", self.do_unpack)
        self.step("build", self.do_build)
        self.step("worker", self.do_worker)
        self.step("part1", self.do_part1)
        if 2 in self.parts and self.step("standins", self.do_standins):
            p2 = self.part2()
            served = self.step("serve", p2.serve)
            self.step("build_wait", self.do_build_wait)
            built = self.args.dry_run or (self.result.get("build") or {}).get("finished")
            # without the server, its tags and the CUDA backend no load can say anything
            if served and built and self.step("restart", p2.restart):
                self.step("free_card", p2.free_card)
                self.step("hog", lambda: p2.hog(self.args.leave_mib))
                self.step("full_card", p2.full_card)
                self.step("diagnose", lambda: p2.diagnose(self.clock.left() - 20, budget=self.args.diagnose_budget))
                self.step("fa_off", p2.fa_off)
        self.step("pack", self.do_pack)
        return 0

    def do_pack(self) -> None:
        if self._part2 is not None:
            self._part2.close()
        if self.worker is not None:
            self.worker.close()
        if self.build is not None and self.build.is_alive():
            self.build.stop()
        p2 = self.work / "part2"
        if p2.is_dir():
            for extra in ("build.log", "errors.txt"):
                if (self.work / extra).exists():
                    shutil.copy2(self.work / extra, p2 / extra)
            self.result["pack_part2"] = pack(p2, self.out / "part2.tar.gz")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("run", "plan"))
    p.add_argument("--bundle", default=BUNDLE_DIR)
    p.add_argument("--work", default=WORK_DIR)
    p.add_argument("--out", default=os.environ.get("OUT") or os.path.join(WORK_DIR, "out"))
    p.add_argument("--budget-s", type=float, default=575.0,
                   help="seconds this run may take, packing included (the run call's timeout_s less a margin)")
    p.add_argument("--parts", default="1,2", help="1, 2 or 1,2")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2,
                   help="build jobs (default: every core; the build runs at low priority beside part 1)")
    p.add_argument("--leave-mib", type=int, default=None,
                   help="MiB the hog leaves free (default: from the free-card load, see part2.leave_mib)")
    p.add_argument("--diagnose-budget", default=None, help="--budget for diagnose (the dry run's CPU engine needs one)")
    p.add_argument("--full-build", action="store_true", help="build llama-server there too, not only its CUDA backend")
    p.add_argument("--dry-run", action="store_true", help="no GPU expected: run what can run on the CPU engine")
    args = p.parse_args(argv)
    if not {s.strip() for s in args.parts.split(",")} <= {"1", "2"}:
        p.error(f"--parts: 1, 2 or 1,2, not {args.parts!r}")
    if args.dry_run and args.diagnose_budget is None:
        # host memory as the card: the F16 stand-in's model process holds ~400 MiB at 4k, ~520 at 8k
        args.diagnose_budget = "480MiB"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "plan":
        print(json.dumps(plan({int(p) for p in args.parts.split(",")}, args.budget_s), indent=1))
        return 0
    return Check(args).run()


if __name__ == "__main__":
    sys.exit(main())
