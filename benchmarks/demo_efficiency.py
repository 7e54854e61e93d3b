"""The default project's own readout, before and after a change: compute efficiency, seconds per epoch, time to 99%.

    # The README's "Demo efficiency" table (about 4 minutes on 2 cores):
    python benchmarks/demo_efficiency.py --ref 5f26239 --ref HEAD --repeats 3 \\
        --json benchmarks/results/demo_efficiency_cpu.json
    python benchmarks/demo_efficiency.py --ref HEAD --quick --json result.json  # ~30 s: tests/test_benchmarks.py

For each --ref (a commit of this repository) the script renders the template with its default
answers, then runs the rendered project's `python train.py` exactly as its README says, with
nothing added but the output directory (--quick adds `--epochs 1 --max-steps-per-epoch 100`:
two log lines, no accuracy to reach). The refs take turns, run after run, so that a machine
that slows down or speeds up during the session affects each of them alike. Each run gives:

  efficiency   the median of the compute efficiencies train.py logs (metrics.jsonl, train lines):
               compute / (compute + waiting for data) over each log interval
  data ms      the median of the logged data-loading times per step
  s/epoch      the median wall time between consecutive epoch lines of train.py's output
  to 0.99      seconds from starting `python train.py` to the first epoch line whose validation
               accuracy is 0.99 or more (start-up included); "-" if no epoch reached it
  best         the run's best validation accuracy

Rendering with copier's Python API needs no network; HEAD with uncommitted changes renders them.
"""

import argparse
import itertools
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import copier
import torch

TEMPLATE = Path(__file__).resolve().parent.parent


def render(ref: str, dest: Path) -> Path:
    """The default project rendered from `ref`."""
    copier.run_copy(str(TEMPLATE), str(dest), vcs_ref=ref, defaults=True, quiet=True, unsafe=False)
    return dest


def train(project: Path, out: Path, extra: list[str]) -> dict:
    """Run `python train.py` in `project` (with the `extra` flags); the figures of the module docstring."""
    start = time.monotonic()
    command = [sys.executable, "train.py", "--output-dir", str(out), "--run-name", "demo", *extra]
    proc = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    epoch_times, to_99 = [], None
    for line in proc.stdout:
        now = time.monotonic() - start
        if " val accuracy " in line and line.startswith("epoch "):  # "epoch 3/5  val loss ...  val accuracy 0.9835 ..."
            epoch_times.append(now)
            accuracy = float(line.split(" val accuracy ")[1].split()[0])
            if to_99 is None and accuracy >= 0.99:
                to_99 = now
    if proc.wait() != 0:
        raise SystemExit(f"train.py failed in {project} (exit {proc.returncode})")
    records = [json.loads(line) for line in (out / "demo" / "metrics.jsonl").read_text().splitlines()]
    train_lines = [r for r in records if r["split"] == "train"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(epoch_times)]
    return {
        "efficiency": statistics.median(r["compute_efficiency"] for r in train_lines),
        "data_ms": statistics.median(r["data_ms"] for r in train_lines),
        "compute_ms": statistics.median(r["compute_ms"] for r in train_lines),
        "s_per_epoch": statistics.median(gaps) if gaps else epoch_times[0],  # one epoch: start-up included
        "seconds_to_0.99": to_99,
        "best_accuracy": max(r["accuracy"] for r in records if r["split"] == "val"),
        "wall_s": time.monotonic() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", action="append", required=True, help="a commit to render (repeat for each)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each ref, taking turns")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--quick", action="store_true", help="one epoch of 100 steps per run")
    args = parser.parse_args()
    extra = ["--epochs", "1", "--max-steps-per-epoch", "100"] if args.quick else []
    runs: dict[str, list[dict]] = {ref: [] for ref in args.ref}
    with tempfile.TemporaryDirectory() as tmp:
        projects = {ref: render(ref, Path(tmp) / f"project-{i}") for i, ref in enumerate(args.ref)}
        for repeat in range(args.repeats):
            for ref in args.ref if repeat % 2 == 0 else reversed(args.ref):
                result = train(projects[ref], Path(tmp) / f"runs-{len(runs[ref])}-{args.ref.index(ref)}", extra)
                runs[ref].append(result)
                print(ref, json.dumps(result), flush=True)
    print("| ref | median efficiency | data ms / step | compute ms / step | s / epoch | s to 0.99 val acc | best |")
    print("|---|---|---|---|---|---|---|")
    for ref, results in runs.items():
        for r in results:
            to_99 = "-" if r["seconds_to_0.99"] is None else f"{r['seconds_to_0.99']:.0f}"
            print(f"| {ref} | {r['efficiency']:.3f} | {r['data_ms']:.1f} | {r['compute_ms']:.1f} | "
                  f"{r['s_per_epoch']:.1f} | {to_99} | {r['best_accuracy']:.4f} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "runs": runs}, indent=2) + "\n")


def machine() -> dict:
    """What the figures came from."""
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return {
        "cpu": names[0] if names else platform.processor(),
        "cores": len(names),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


if __name__ == "__main__":
    main()
