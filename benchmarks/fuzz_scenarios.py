"""Mutation fuzzing of `scalesim run` (and `serve`): never a traceback, never an exit outside 0/2/3, always quick.

Each case takes a shipped scenario and applies one to three seeded mutations:
drop a key, a value of the wrong type, a bad value (negative, zero, a typo in a
name, an unknown choice), a huge or tiny value (10^6, 10^9, 2^63, 1e30, .inf,
.nan, 1e-300), an unknown or duplicated key, garbage bytes, a truncated file,
or a YAML tag (!!python/object, !!binary, ...). The zoo model and the node
design may first be written out inline, so their keys are mutated too.

Serving scenarios go to `scalesim serve`, the others to `scalesim run` (in a process of their
own, one case in four as users run it by default: plots and the scaling curve included).
A case passes when the command exits 0 (fits), 3 (does not fit) or 2 with an
`error:` line, prints no traceback, and answers within the time bound.

Run: python benchmarks/fuzz_scenarios.py [--count 2000] [--seed 0] [--bound 10] [--timeout 120]
(each case in its own process, as a user runs it; the bound is on its CPU
seconds, so other work on the machine does not fail it, and a case still
running after --timeout wall seconds is stopped and reported as hung);
tests/test_fuzz_scenarios.py runs a quick in-process version. The count can
also come from SCALESIM_FUZZ_COUNT.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ALLOWED_EXITS = {0, 2, 3}
HUGE = [10**6, 10**9, 2**63, 2**1000, 1e30, 1e300, float("inf"), float("nan")]
TINY = [1e-300, 1e-9, 0, -1, -(2**63)]
WRONG = ["abc", "", [1, 2], {"a": 1}, True, None, 1.5, "8 GPUs", "1e9"]
TAGS = ["!!python/object/apply:os.system ['true']", "!!python/name:os.system", "!!binary aGVsbG8=",
        "!!set {a, b}", "!!timestamp 2001-12-14", "!custom 3", "!!float '8'", "!!str 8"]
CHOICES = {"precision": ["fp32", "tf32", "fp16", "bf16", "fp8"], "zero": [0, 1, 2, 3],
           "activation_checkpointing": ["none", "selective", "full"], "pp_schedule": ["gpipe", "1f1b", "interleaved"],
           "attention": ["auto", "flash", "flash2", "flash3", "naive", "fused"], "optimizer": ["adamw", "adam", "sgd"],
           "topology": ["fat-tree", "rail-optimized", "single-switch"], "offload_optimizer": [True, False],
           "grad_reduce_dtype": ["auto", "fp32", "bf16", "fp16"], "sequence_parallel": [True, False],
           "order": ["tp-cp-dp-pp", "tp-pp-dp-cp", "dp-tp-cp-pp"], "overlap_param_gather": [True, False],
           "link": ["ib-ndr", "ib-hdr", "roce-400g", "eth-100g", "eth-10g"], "memory_format": ["nhwc", "nchw"],
           "node": ["dgx-h100", "dgx-a100", "rtx4090-pcie-8"], "model": ["gpt2-124m", "llama2-7b", "resnet50"]}
NAMES = ["ib-ndrr", "dgx-h10", "gpt2-125m", "rtx4099", "fp64", "interleavedd", "ring", "", "null"]


def base_scenarios(quick: bool = False) -> list[Path]:
    """The shipped scenarios; `quick`: those that simulate in well under a second."""
    paths = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "scenarios" / "claims").glob("*/*.yaml"))
    if quick:
        heavy = ("1024x", "16384x", "64xh100", "fp8", "small-vs-large", "serve-")    # serve: its rate search
        paths = [p for p in paths if not any(h in str(p.relative_to(ROOT)) for h in heavy)]
    return paths


def _leaves(data, prefix=()):
    """(path, value) of every key in a nested mapping/list, parents before children."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        yield prefix + (key,), value
        yield from _leaves(value, prefix + (key,))


def _get(data, path):
    for part in path:
        data = data[part]
    return data


def _set(data, path, value=None, delete=False):
    for part in path[:-1]:
        data = data[part]
    if delete:
        del data[path[-1]]
    else:
        data[path[-1]] = value


def _inline(data: dict, rng: random.Random) -> None:
    """Write the zoo model and/or the node design out inline, so mutations reach their keys."""
    if isinstance(data.get("model"), str) and rng.random() < 0.5:
        data["model"] = {"kind": "transformer", "layers": 24, "hidden": 1024, "heads": 16, "vocab": 50257,
                         "name": "inline"}
        data.setdefault("training", {}).setdefault("seq_len", 1024)
    node = data.get("cluster", {}).get("node") if isinstance(data.get("cluster"), dict) else None
    if isinstance(node, str) and (ROOT / "topologies" / f"{node}.yaml").is_file() and rng.random() < 0.5:
        data["cluster"]["node"] = yaml.safe_load((ROOT / "topologies" / f"{node}.yaml").read_text())


def _value_mutation(data: dict, rng: random.Random) -> str:
    paths = [p for p, _ in _leaves(data)]
    if not paths:
        return "nothing to mutate"
    path = rng.choice(paths)
    kind = rng.choice(["drop", "wrong", "huge", "tiny", "name", "unknown", "scale", "scale", "choice", "choice"])
    current = _get(data, path)
    if kind == "scale" and not (isinstance(current, (int, float)) and not isinstance(current, bool)):
        kind = "choice"
    if kind == "choice" and path[-1] not in CHOICES:
        kind = "huge"
    where = ".".join(map(str, path))
    if kind == "drop":
        _set(data, path, delete=True)
        return f"drop {where}"
    if kind == "scale":
        factor = rng.choice([2, 4, 8, 0.5, 0.25, 3, 10, 100])
        value = current * factor if isinstance(current, float) else max(1, int(current * factor))
        _set(data, path, value)
        return f"scale {where} x{factor}"
    if kind == "choice":
        value = rng.choice(CHOICES[path[-1]])
        _set(data, path, value)
        return f"choice {where}={value!r}"
    if kind == "unknown":
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        if isinstance(parent, dict):
            parent[rng.choice(["micro_bach", "gpu", "extra", "fabric", "Nodes"])] = 1
            return f"unknown key beside {where}"
        kind = "wrong"
    value = rng.choice({"wrong": WRONG, "huge": HUGE, "tiny": TINY, "name": NAMES}[kind])
    _set(data, path, copy.deepcopy(value))
    return f"{kind} {where}={value!r}"


def _text_mutation(text: str, rng: random.Random) -> tuple[str, bytes]:
    lines = text.splitlines()
    kind = rng.choice(["garbage", "truncate", "tag", "duplicate"])
    if kind == "garbage":
        start = rng.randrange(len(text) + 1)
        junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        raw = text.encode()
        return "garbage bytes", raw[:start] + junk + raw[start + len(junk):]
    if kind == "truncate":
        return "truncated", text.encode()[:rng.randrange(len(text) + 1)]
    k = rng.randrange(len(lines)) if lines else 0
    if kind == "tag" and lines:
        line = lines[k]
        if ":" in line:
            lines[k] = line.split(":", 1)[0] + ": " + rng.choice(TAGS)
        return f"tag on line {k + 1}", ("\n".join(lines) + "\n").encode()
    top = [line for line in lines if line and not line[0].isspace() and not line.startswith("#")
           and ":" in line] or ["name: x"]
    return "duplicate key", (text + "\n" + rng.choice(top) + "\n").encode()


def mutate(path: Path, rng: random.Random) -> tuple[str, bytes]:
    """One fuzz case from a scenario file: (what was done, the file's bytes)."""
    data = yaml.safe_load(path.read_text())
    if rng.random() < 0.25:
        text = yaml.safe_dump(data, sort_keys=False) if rng.random() < 0.5 else path.read_text()
        return _text_mutation(text, rng)
    _inline(data, rng)
    done = [_value_mutation(data, rng) for _ in range(rng.choice([1, 1, 1, 2, 2, 3]))]
    try:
        text = yaml.safe_dump(data, sort_keys=False)
    except (yaml.YAMLError, OverflowError):
        return "; ".join(done), repr(data).encode()
    return "; ".join(done), text.encode()


def cases(count: int, seed: int, quick: bool = False):
    rng = random.Random(seed)
    bases = base_scenarios(quick)
    for i in range(count):
        base = bases[i % len(bases)]
        what, raw = mutate(base, rng)
        yield f"{base.relative_to(ROOT)}: {what}", raw


@dataclass
class Outcome:
    case: str
    exit_code: int | None
    seconds: float
    output: str

    def problem(self, time_bound_s: float) -> str | None:
        if self.exit_code is None:
            return "no answer before the wall-clock timeout"
        if "Traceback" in self.output:
            return "traceback"
        if self.exit_code not in ALLOWED_EXITS:
            return f"exit {self.exit_code}"
        if self.exit_code == 2 and "error:" not in self.output:
            return "exit 2 without a message"
        if self.seconds > time_bound_s:
            return f"took {self.seconds:.1f} s"
        return None


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command(case: str, path: Path, full: bool = False) -> list[str]:
    """The command a user runs on the case: `serve` for a serving scenario, else `run`; `full`:
    `run` as it runs by default (plots, so the scaling curve too) into a folder beside the file."""
    if case.startswith("scenarios/serve-"):
        return ["serve", str(path), "--no-plots"]
    if full:
        return ["run", str(path), "--out", str(path.parent / "plots")]
    return ["run", str(path), "--no-plots", "--no-scaling"]


def runs_in_full(raw: bytes) -> bool:
    """One case in four (by its bytes) runs the default command, scaling curve and plots included."""
    return zlib.crc32(raw) % 4 == 0


MEMORY_CAP_BYTES = 6 * 2**30


def _memory_cap() -> None:
    """In the case's process: a case that allocates without bound fails there (a MemoryError,
    reported as a traceback) instead of pushing the shared machine into swap or its OOM killer."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))


def run_in_subprocess(case: str, raw: bytes, directory: Path, timeout_s: float) -> Outcome:
    """The case as a user runs it; seconds are the process's CPU seconds (on a machine shared
    with other work, wall time overstates them); a process still running after `timeout_s`
    of wall time is stopped and reported."""
    path = directory / "case.yaml"
    path.write_bytes(raw)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cpu = _children_cpu_s()
    try:
        p = subprocess.run([sys.executable, "-m", "scalesim", *command(case, path, runs_in_full(raw))],
                           capture_output=True, text=True, timeout=timeout_s, env=env, cwd=directory,
                           preexec_fn=_memory_cap)
    except subprocess.TimeoutExpired:
        return Outcome(case, None, timeout_s, "")
    return Outcome(case, p.returncode, _children_cpu_s() - cpu, p.stdout[-2000:] + p.stderr[-4000:])


def run_in_process(case: str, raw: bytes, directory: Path) -> Outcome:
    """The same check with click's CliRunner (no process start-up); seconds are CPU seconds."""
    import traceback

    from click.testing import CliRunner

    from scalesim.cli import main as cli

    path = directory / "case.yaml"
    path.write_bytes(raw)
    start = time.process_time()
    result = CliRunner().invoke(cli, command(case, path))
    seconds = time.process_time() - start
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        output += "".join(traceback.format_exception(result.exception))
    return Outcome(case, result.exit_code, seconds, output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=int(os.environ.get("SCALESIM_FUZZ_COUNT", 200)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bound", type=float, default=10.0, help="CPU seconds a case may take [10]")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="wall seconds after which a case counts as hung and is stopped [120]")
    parser.add_argument("--in-process", action="store_true",
                        help="run the cases in this process (faster; a hang is not cut)")
    args = parser.parse_args(argv)
    exits, problems, slowest = Counter(), [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (case, raw) in enumerate(cases(args.count, args.seed), 1):
            outcome = (run_in_process(case, raw, Path(tmp)) if args.in_process
                       else run_in_subprocess(case, raw, Path(tmp), args.timeout))
            exits[outcome.exit_code] += 1
            slowest = sorted(slowest + [(outcome.seconds, case)], reverse=True)[:5]
            problem = outcome.problem(args.bound)
            if problem:
                problems.append((case, problem, outcome.output[-1500:]))
                print(f"[{k}] PROBLEM {problem}: {case}\n{outcome.output[-1500:]}", flush=True)
            elif k % 50 == 0:
                print(f"[{k}/{args.count}] exits so far {dict(exits)}", flush=True)
    print(f"{args.count} cases, seed {args.seed}: exits {dict(exits)}; {len(problems)} problems")
    kinds = Counter(p.split(" ")[0] if not p.startswith("took") else "slow" for _, p, _ in problems)
    print(f"problems by kind: {dict(kinds)} (traceback: {kinds['traceback']}, hung: {kinds['no']}, "
          f"slow: {kinds['slow']}); max CPU {slowest[0][0] if slowest else 0:.1f} s")
    print("slowest: " + "; ".join(f"{s:.1f} s {c}" for s, c in slowest))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
