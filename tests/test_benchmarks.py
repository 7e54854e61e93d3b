"""The benchmarks run, and the generated loop keeps up with a bare loop (benchmarks/loop_overhead.py --quick).

Also runs benchmarks/gpu.py's CPU smoke path. Run: pytest tests/test_benchmarks.py (about 1.5 minutes)
"""

import json
import subprocess
import sys

import pytest
import torch

from conftest import REPO

# The target is 0.97, and the README's tables (60 and 30 rounds on a quiet machine) meet it.
# --quick runs at most 9 rounds of 10 steps on whatever else the 2 CI cores are running: there,
# two identical bare loops measured against each other came out up to 4 % apart in the median,
# and further apart while neighbours were busy. 0.90 holds through that noise and still catches
# a regression of the size found while building this benchmark: a BackgroundGenerator thread on
# the CPU competes with torch's compute threads for the cores and cost the loop 14-21 %.
CI_RATIO_VS_BARE = 0.90


@pytest.mark.parametrize(("task", "header"), [("classification", "TinyResNet"), ("restoration", "Restorer U-Net")])
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
    assert report["seconds"] < 180, "--quick must finish in under 3 minutes"
    assert report["ratio_vs_bare"] >= CI_RATIO_VS_BARE, result.stdout
    assert report["eval_ratio_vs_bare"] >= CI_RATIO_VS_BARE, result.stdout
    # A coarse guard with room for noise: a per-step cost of half a near-zero step (about 1 ms: a
    # redraw or a file write on every step) would show here.
    assert report["overhead_us_per_step"]["generated"] < 0.5 * loops["bare"], result.stdout


def test_demo_efficiency_quick(tmp_path):
    """The default project's own readout stays near 1 (README: 0.96 on a quiet 2-core machine; 0.79 before)."""
    path = tmp_path / "demo.json"
    command = [sys.executable, "benchmarks/demo_efficiency.py", "--ref", "HEAD", "--quick", "--json", str(path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = json.loads(path.read_text())["runs"]["HEAD"]
    assert run["s_per_epoch"] > 0 and 0 <= run["best_accuracy"] <= 1 and run["data_ms"] > 0  # one short epoch
    # Room for a busy CI machine, and still far above the 0.79 of a pipeline that draws every image per step.
    assert run["efficiency"] >= 0.90, result.stdout


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
    assert "| ddp | test_cuda.py, test_efficiency.py |" in (tmp_path / "gpu-check.md").read_text()
