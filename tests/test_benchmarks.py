"""The benchmarks run and write well-formed reports (the --quick runs of each; gpu.py on a CPU).

Speed is for the benchmarks to measure and for benchmarks/results/ and the README's tables to
record, on a quiet machine: on a busy 2-core CI machine a pass/fail suite cannot tell a loop 10 %
slower from a neighbour's load (the 0.90 bounds that stood here failed there with no code change).
What stays are guards that trip only on a loop costing about twice what it should.
Run: pytest tests/test_benchmarks.py (about 3 minutes)
"""

import json
import subprocess
import sys

import pytest
import torch

from conftest import REPO

# The generated loop taking twice the bare loop's time or more (a step run twice, a checkpoint or a
# validation on every step) trips this; noise does not. Each ratio is the median over rounds of
# pairs of runs seconds apart in one process, in a random order, so load that slows one run of a
# pair is as likely to raise the ratio as to lower it, and the median needs most rounds slowed
# the same way. Over 120 rounds on a quiet 2-core machine per-round ratios stayed within
# 0.73-1.30 in training and evaluation, medians 0.96-1.02 (benchmarks/results/). With a busy
# neighbour on the 2 cores, --quick fit one round in its 100 s (0.76; near-zero model: generated
# 1.6 times bare): a median of fewer than 3 rounds is one pair's noise, so the guards skip such a
# run (the report's busy_machine). They skip too when other processes used more than
# MAX_FOREIGN_LOAD of the CPUs in a round (--quick keeps such rounds): at 0.39-0.46 the near-zero
# model's bare step took 13.6 ms instead of 2, and a round's difference ranged from -0.7 to +60 ms.
# Smaller costs, such as the 14-21 % a BackgroundGenerator thread once cost on the CPU, are for
# the tables to show.
GUARD_RATIO_VS_BARE = 0.5
MAX_FOREIGN_LOAD = 0.25


@pytest.mark.parametrize(("task", "header"), [("classification", "Classifier"), ("restoration", "Restorer U-Net")])
def test_loop_overhead_quick(tmp_path, task, header):
    """--quick for each task's project (about 30 s for classification, 45 s for restoration, on 2 cores)."""
    path = tmp_path / "loop_overhead.json"
    command = [sys.executable, "benchmarks/loop_overhead.py", "--quick", "--task", task, "--json", str(path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert header in result.stdout and "| 64 | train | bare |" in result.stdout  # the table the README shows

    report = json.loads(path.read_text())
    assert report["task"] == task
    for key in ("ratio_vs_bare", "eval_ratio_vs_bare"):
        assert isinstance(report[key], float) and report[key] > 0
    speeds = report["samples_per_s"]
    assert all(isinstance(speeds[name], float) and speeds[name] > 0 for name in ("generated", "bare"))
    assert all(isinstance(speeds[f"{name}_eval"], float) for name in ("generated", "bare"))
    if report["lightning_version"] is None:  # optional: measured only where Lightning is installed
        assert report["ratio_vs_lightning"] is None and speeds["lightning"] is None
    else:
        assert isinstance(report["ratio_vs_lightning"], float) and isinstance(speeds["lightning"], float)
    loops = report["loop_us_per_step"]  # the near-zero model: what each loop adds per step
    assert loops["bare"] > 0 and set(report["overhead_us_per_step"]) == set(loops) - {"bare"}
    # --quick's short runs were measured; how long it took is for the benchmark to print (it stops
    # adding rounds after 100 s), and the subprocess timeout above catches a run that hangs.
    assert report["quick"] and report["steps"] == 10 and 1 <= report["rounds"] <= 9 and report["seconds"] > 0
    loads = [load for load in report["foreign_load_per_round"] if load is not None]  # None: not Linux
    if not report["busy_machine"] and max(loads, default=0.0) <= MAX_FOREIGN_LOAD:  # 3 rounds or more, quiet
        assert report["ratio_vs_bare"] >= GUARD_RATIO_VS_BARE, result.stdout
        assert report["eval_ratio_vs_bare"] >= GUARD_RATIO_VS_BARE, result.stdout
        # The same bound on the near-zero model (about 2 ms a step, median of pairs like the ratios):
        # the loop adding a whole such step to every step trips it; measured, it adds 50-150 µs.
        assert report["overhead_us_per_step"]["generated"] < loops["bare"], result.stdout


def test_demo_efficiency_quick(tmp_path):
    """The default project trains for one short epoch and the script reports its readout (README: 0.96 quiet)."""
    path = tmp_path / "demo.json"
    command = [sys.executable, "benchmarks/demo_efficiency.py", "--ref", "HEAD", "--quick", "--json", str(path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = json.loads(path.read_text())["runs"]["HEAD"]
    assert run["s_per_epoch"] > 0 and 0 <= run["best_accuracy"] <= 1 and run["data_ms"] > 0  # one short epoch
    # Trips when the loop waits for data as long as it computes, not on load: waiting and compute
    # slow down together (0.96 measured on a quiet machine, 0.99 with three busy processes on its
    # 2 cores). A slower pipeline like the 0.79 one of the README's table is for the benchmark to show.
    assert run["efficiency"] >= 0.5, result.stdout


def test_data_throughput_quick(tmp_path):
    """The generated loader, torchvision's pipeline and decoding alone read the same photographs (about 15 s)."""
    path = tmp_path / "data_throughput.json"
    command = [sys.executable, "benchmarks/data_throughput.py", "--quick", "--json", str(path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    row = json.loads(path.read_text())["workers"]["0"]
    names = {"generated", "torchvision", "decode-pil", "decode-torchcodec"}
    assert set(row["images_per_s"]) == names and all(speed > 0 for speed in row["images_per_s"].values())
    # 1.45 on a quiet 2-core machine (README); this trips when the generated loader reads at half
    # torchvision's speed (0.94 before read_image decoded JPEGs with TorchCodec), not on load: such a
    # loader is slow in every round, a busy machine in some (one CI round measured 0.48).
    rounds = zip(row["per_round"]["generated"], row["per_round"]["torchvision"], strict=True)
    assert max(generated / bare for generated, bare in rounds) >= GUARD_RATIO_VS_BARE, result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_gpu_benchmark_says_it_needs_cuda():
    result = subprocess.run([sys.executable, "benchmarks/gpu.py"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2
    assert "CUDA" in result.stderr and "--device cpu --quick" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_make_gpu_check_says_it_needs_cuda():
    result = subprocess.run(["make", "--no-print-directory", "gpu-check"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if not line.startswith("make")]  # make: or make[1]:
    assert len(lines) == 1 and "needs CUDA" in lines[0] and "Traceback" not in result.stderr


def test_gpu_check_smoke_on_cpu(tmp_path):
    """make gpu-check's script on the CPU: renders, runs the CUDA tests' CPU twin, runs gpu.py, writes both reports."""
    command = [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--quick", "--out", str(tmp_path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    tests = report["tests"]["ddp"]
    assert tests["ok"] and tests["passed"] > 0 and tests["failed"] == 0 and tests["skipped"] > 0  # the CUDA cases
    model = report["benchmark"]["models"]["default"]  # gpu.py's own figures: meaningless on a CPU, but there
    assert model["generated"]["images_per_s"] > 0 and model["bare"]["images_per_s"] > 0
    assert model["train_gflop_per_image"] > 0 and isinstance(model["ratio_vs_bare"], float)
    assert "| ddp | test_cuda.py |" in (tmp_path / "gpu-check.md").read_text()


def test_gpu_check_reports_a_command_that_runs_past_its_time(monkeypatch, tmp_path):
    """A hung benchmark or test run is a failed row in the report, with what it printed, not a lost report."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import gpu_check

    def hang(command, timeout, **kwargs):
        raise subprocess.TimeoutExpired(command, timeout, output=b"step 3 of 10\n")  # bytes, as on POSIX

    monkeypatch.setattr(gpu_check.subprocess, "run", hang)
    opts = gpu_check.get_args_parser().parse_args(["--device", "cpu", "--quick"])
    benchmark = gpu_check.run_benchmark(opts, tmp_path / "gpu.json", budget=60)
    assert benchmark == {"ok": False, "output_tail": "timed out after 300 s\nstep 3 of 10\n"}
    tests = gpu_check.run_tests(tmp_path, ["tests/test_cuda.py"], tmp_path / "report.xml", timeout=5)
    assert not tests["ok"] and tests["output_tail"] == "timed out after 5 s\nstep 3 of 10\n"
