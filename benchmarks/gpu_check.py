"""The template's GPU check: every rendering's CUDA tests and the GPU benchmark, in one command.

    make gpu-check                                          # on a machine with CUDA: under 8 minutes on one GPU
    python benchmarks/gpu_check.py --device cpu --quick     # a smoke run of this script on a CPU

1. Renders each multi_gpu choice (ddp, dataparallel, none), and the restoration task with ddp,
   into build/gpu-check/<name>/ and runs its own pytest on tests/test_cuda.py (train.py's loop
   and test.py on CUDA: prefetch
   thread, pinned memory, bf16, fp16, channels_last, torch.compile);
   with 2 or more GPUs also its multi-GPU tests (test_distributed.py under ddp, including
   NCCL and SyncBatchNorm; test_dataparallel.py under dataparallel).
2. Runs benchmarks/gpu.py: the default model and ResNet-50, bf16, channels_last, torch.compile,
   the generated loop against a bare one, with images/s, peak memory and MFU.
3. Writes build/gpu-check/gpu-check.json and gpu-check.md (the machine, every rendering's test
   counts and failures, the benchmark table) and prints the Markdown.

--quick checks the ddp rendering and the default model only. Exit status: 0 when every test
passed (or skipped) and the benchmark ran, 1 otherwise, 2 without CUDA (one line, nothing run).
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
import warnings
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import torch
from gpu import table
from loop_overhead import REPO, render

RENDERINGS = {  # name: answers
    "ddp": {"multi_gpu": "ddp"},
    "dataparallel": {"multi_gpu": "dataparallel"},
    "none": {"multi_gpu": "none"},
    "restoration-ddp": {"multi_gpu": "ddp", "task": "restoration"},
}
CUDA_TESTS = ["tests/test_cuda.py"]  # test_efficiency.py runs on the CPU (its timing is a CPU test)
MULTI_GPU_TESTS = {
    "ddp": ["tests/test_distributed.py"],
    "dataparallel": ["tests/test_dataparallel.py"],
    "none": [],
    "restoration-ddp": ["tests/test_distributed.py"],
}
BUDGET_S = 480  # the whole check, on one GPU


def get_args_parser() -> argparse.ArgumentParser:
    """The check's flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda; cpu only for a smoke run of this script")
    parser.add_argument("--quick", action="store_true", help="the ddp rendering and the default model only")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "gpu-check", help="renderings and reports")
    return parser


def machine(device: str) -> dict[str, Any]:
    """What the figures come from."""
    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    if device == "cuda":
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def timed_out(err: subprocess.TimeoutExpired) -> str:
    """What a command printed before its timeout (bytes on POSIX, even with text=True), after saying so."""
    printed = err.stdout or b""
    if isinstance(printed, bytes):
        printed = printed.decode(errors="replace")
    return f"timed out after {err.timeout:.0f} s\n{printed}"


def run_tests(project: Path, files: list[str], report: Path, timeout: float) -> dict[str, Any]:
    """Run the project's own pytest on `files`; counts from its JUnit XML, and the failed tests' names."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *files]
    started = time.perf_counter()
    try:
        result = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=timeout)
        output, exit_code = result.stdout + result.stderr, result.returncode
    except subprocess.TimeoutExpired as err:
        output, exit_code = timed_out(err), None
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed = []
    if report.exists():
        for case in ElementTree.parse(report).iter("testcase"):
            outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else None
            outcome = outcome or ("skipped" if case.find("skipped") is not None else "passed")
            counts[outcome] += 1
            if outcome == "failed":
                failed.append(f"{case.get('classname')}::{case.get('name')}")
    ok = exit_code == 0 and counts["failed"] == 0
    tail = "" if ok else output[-3000:]
    return {"files": files, **counts, "failed_tests": failed, "ok": ok, "output_tail": tail,
            "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip


def run_benchmark(opts: argparse.Namespace, path: Path, budget: float) -> dict[str, Any]:
    """benchmarks/gpu.py in its own process; its JSON report, or why there is none."""
    command = [sys.executable, str(REPO / "benchmarks" / "gpu.py"), "--json", str(path), "--device", opts.device]
    command += ["--time-budget", str(max(60.0, budget))]
    if opts.quick:
        command += ["--quick", "--models", "default"]
    try:
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=max(120.0, budget + 240))
    except subprocess.TimeoutExpired as err:  # the tests' results still make the report
        return {"ok": False, "output_tail": timed_out(err)[-3000:]}
    if result.returncode != 0 or not path.exists():
        return {"ok": False, "output_tail": (result.stdout + result.stderr)[-3000:]}
    return {"ok": True, **json.loads(path.read_text())}


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: the machine, a row per rendering's tests, then the benchmark's table."""
    gpus = ", ".join(report["machine"].get("gpus", [])) or "no GPU (smoke run on the CPU)"
    versions = f"torch {report['machine']['torch']}, CUDA {report['machine']['cuda']}"
    lines = [f"GPU check, {report['date']}: {gpus}; {versions}", ""]
    lines += ["| rendering | tests | passed | failed | skipped | seconds |", "|---|---|---|---|---|---|"]
    for name, t in report["tests"].items():
        files = ", ".join(Path(f).name for f in t["files"])
        lines.append(f"| {name} | {files} | {t['passed']} | {t['failed']} | {t['skipped']} | {t['seconds']} |")
        lines += [f"|   failed: {test} | | | | | |" for test in t["failed_tests"]]
    benchmark = report["benchmark"]
    lines.append("")
    lines.append(table(benchmark["models"]) if benchmark["ok"] else "benchmarks/gpu.py failed; see gpu-check.json")
    lines += ["", f"{report['seconds']:.0f} s in all; {'every check passed' if report['ok'] else 'FAILED'}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Check the device, then test every rendering, run the benchmark and write the reports."""
    opts = get_args_parser().parse_args(argv)
    if opts.device not in ("cuda", "cpu"):
        print(f"gpu_check.py: --device {opts.device} is not supported; use cuda (cpu: a smoke run)", file=sys.stderr)
        return 2
    if opts.device == "cuda" and not torch.cuda.is_available():
        print("gpu-check needs CUDA, and torch sees no CUDA device here (smoke-test the script on a CPU with "
              "python benchmarks/gpu_check.py --device cpu --quick)", file=sys.stderr)  # fmt: skip
        return 2
    started = time.perf_counter()
    opts.out.mkdir(parents=True, exist_ok=True)
    gpus = torch.cuda.device_count() if opts.device == "cuda" else 0
    tests = {}
    for choice in list(RENDERINGS)[:1] if opts.quick else RENDERINGS:
        project = opts.out / choice
        shutil.rmtree(project, ignore_errors=True)  # a fresh rendering each time
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # copier's DirtyLocalWarning: checking the working tree is the point
            render(REPO, project, **RENDERINGS[choice])
        files = CUDA_TESTS + (MULTI_GPU_TESTS[choice] if gpus >= 2 else [])
        tests[choice] = run_tests(project, files, opts.out / f"{choice}.xml", timeout=300)
        print(f"{choice}: {tests[choice]['passed']} passed, {tests[choice]['failed']} failed, "
              f"{tests[choice]['skipped']} skipped ({tests[choice]['seconds']:.0f} s)", flush=True)  # fmt: skip
    budget = BUDGET_S - (time.perf_counter() - started) - 30
    benchmark = run_benchmark(opts, opts.out / "gpu.json", budget)
    ok = benchmark["ok"] and all(t["ok"] for t in tests.values())
    report = {"date": time.strftime("%Y-%m-%d"), "machine": machine(opts.device), "quick": opts.quick,
              "tests": tests, "benchmark": benchmark, "ok": ok,
              "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    (opts.out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (opts.out / "gpu-check.md").write_text(text + "\n")
    print(text)
    print(f"reports: {opts.out / 'gpu-check.md'}, {opts.out / 'gpu-check.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
