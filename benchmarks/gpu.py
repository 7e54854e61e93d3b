"""Images per second of the generated training loop and a bare loop on one CUDA GPU, with peak memory and MFU.

    python benchmarks/gpu.py --json gpu.json        # on a CUDA machine: about 4 minutes, never more than 5
    python benchmarks/gpu.py --project /tmp/bm      # a project rendered beforehand (no copier needed)
    python benchmarks/gpu.py --device cpu --quick   # smoke run of this script on a CPU: no figures to keep

Two models, each at --batch-size 256 under bf16 autocast, channels_last and torch.compile:
  default   the template's Classifier, its builtin residual network (widths 16,32,64), on 3x32x32 images, 6 classes
  resnet50  train.py --backbone resnet50 (torchvision's, no weights, a new head) on 3x224x224 images, 1000 classes

Both loops train the same compiled module with the same optimizer (train.py's AdamW and cosine
schedule) on the same synthetic batches, which sit on the GPU already (a few batches, cycled),
so the figures are the model's and the loop's, not an input pipeline's (--host-data puts them in
pinned host memory instead, copied with non_blocking=True by both loops):
  generated  train.py's train_one_epoch() as fit() calls it: BackgroundGenerator prefetching, the
             tqdm bar (drawn to /dev/null), data/compute timing, the on-device loss buffer, the
             schedule, and a log line every --log-interval 50 steps and at the end of the run.
  bare       zero_grad(set_to_none=True), forward under autocast, the same loss, backward, step.
Runs alternate (generated, bare, generated, ...) after a warm-up that also compiles; each run
starts and ends with torch.cuda.synchronize(). Reported: median images/s, the median of the
per-round ratios generated / bare, peak memory allocated during the runs, and MFU = images/s x
training FLOPs per image (FlopCounterMode over one forward and backward: matmuls and
convolutions only) / the GPU's dense bf16 peak (989 TFLOPS on an H100 or H200; --peak-tflops
for others). An H200 should train ResNet-50 this way at 3,500 images/s or more.
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from loop_overhead import REPO, import_train, render, synchronize
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

# Dense (no sparsity) bf16 tensor-core peaks, FLOP/s, by a substring of the device name.
# Dense bf16 peaks by a part of the device's name: the first that matches, so the longer names come first.
PEAK_BF16 = {"H200 NVL": 835e12, "H200": 989.4e12, "H100 PCIe": 756e12, "H100 NVL": 835e12, "H100": 989.4e12}
PEAK_BF16 |= {"A100": 312e12, "L40S": 362e12, "L40": 181e12, "A10G": 70e12, "L4": 121e12}
H200_RESNET50_FLOOR = 3500  # images/s: below this on an H200 something is wrong


def get_args_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda or cuda:N; cpu only for a smoke run of the script")
    parser.add_argument("--models", default="default,resnet50", help="comma-separated: default, resnet50")
    parser.add_argument("--batch-size", type=int, default=None, help="default 256 (quick on a CPU: 8)")
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds per model (default 5, quick 2)")
    parser.add_argument("--quick", action="store_true", help="short runs; on a CPU also small images, no compile")
    parser.add_argument("--no-compile", action="store_true", help="eager mode instead of torch.compile")
    parser.add_argument("--host-data", action="store_true", help="batches in pinned host memory, not on the GPU")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak, for MFU")
    parser.add_argument("--time-budget", type=float, default=270.0, help="seconds; later models are skipped after it")
    parser.add_argument("--project", type=Path, default=None, help="an already rendered project (default: render)")
    parser.add_argument("--template", type=Path, default=REPO, help="the template to render")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    return parser


class Batches:
    """`steps` batches per epoch, cycling through a few fixed ones: a loader with no loading cost."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int) -> None:
        self.batches = batches
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for i in range(self.steps):
            yield self.batches[i % len(self.batches)]


def build(train: ModuleType, name: str, args: argparse.Namespace, device: torch.device) -> nn.Module:
    """The bare model on the device, built as train.py builds it (resnet50: --backbone resnet50, no weights)."""
    task = train.task  # the task module: train.py's flags and builders for this project's task
    classes = list(task.data.SHAPES) if name == "default" else [str(i) for i in range(1000)]
    return task.build_model(args, task.data.DataSplits(None, None, classes, 3), device)


def train_flops_per_image(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, autocast: Any) -> float:
    """FLOPs of one forward and backward per image, counted on the uncompiled model."""
    with FlopCounterMode(display=False) as counter:
        with autocast:
            loss = model.loss(model(images), targets)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / images.shape[0]


def measure_model(train: ModuleType, name: str, opts: argparse.Namespace, workdir: Path, deadline: float) -> dict:
    """Warm up (and compile), then alternate generated and bare runs; return the model's figures."""
    device = torch.device(opts.device)
    img_size = 32 if name == "default" else (64 if opts.quick and device.type == "cpu" else 224)
    steps = {"default": 200, "resnet50": 40}[name] if not opts.quick else {"default": 20, "resnet50": 5}[name]
    flags = ["--device", opts.device, "--amp", "bf16", "--channels-last", "--batch-size", str(opts.batch_size)]
    flags += ["--img-size", str(img_size), "--epochs", "1000", "--progress", "always"]
    flags += ["--output-dir", str(workdir / "runs"), "--run-name", name] + ([] if opts.no_compile else ["--compile"])
    flags += ["--backbone", "resnet50"] if name == "resnet50" else []
    args = train.get_args_parser().parse_args(flags)
    args.num_workers = 0  # as setup() resolves it for data in memory: on a GPU the loop's prefetch thread runs
    train.distributed.refuse_flags(args, device)  # as train.py's setup() does, before any work
    train.runtime.configure_backends(args.deterministic)
    train.runtime.seed_everything(args.seed)
    model = build(train, name, args, device)
    num_classes = 6 if name == "default" else 1000
    optimizer, scheduler, scaler = train.build_optimization(model, args, steps, device, None)  # a fresh run
    autocast = train.runtime.autocast(device, args.amp)

    # A few fixed batches; targets are class indices, images normal noise, channels_last like train.py's copies.
    generator = torch.Generator().manual_seed(0)
    host = [
        (torch.randn(opts.batch_size, 3, img_size, img_size, generator=generator),
         torch.randint(0, num_classes, (opts.batch_size,), generator=generator))
        for _ in range(4)
    ]  # fmt: skip
    if opts.host_data:
        batches = [(x.pin_memory(), y.pin_memory()) if device.type == "cuda" else (x, y) for x, y in host]
    else:
        batches = [(x.to(device, memory_format=torch.channels_last), y.to(device)) for x, y in host]
    loader = Batches(batches, steps)
    flop_images = min(8, opts.batch_size)
    x, y = batches[0][0][:flop_images].to(device), batches[0][1][:flop_images].to(device)
    flops = train_flops_per_image(model, x.contiguous(memory_format=torch.channels_last), y, autocast)

    wrapped = train.distributed.wrap(model, device, compile=args.compile)  # as train.py's setup() does
    state = train.checkpoint.RunState()
    logger = train.RunLogger(workdir / "runs" / name, True, args.progress, 1, args.accum_steps, state)  # 1 process
    session = train.Session(
        model=model,
        wrapped=wrapped,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        train_loader=loader,
        val_loader=None,  # train_one_epoch reads none of these six
        classes=[],
        held_out=[],
        data_digests={},
        prep=None,
        preview=None,
        ema=None,
        device=device,
        run_dir=workdir / "runs" / name,
        logger=logger,
    )
    memory_format = torch.channels_last

    def generated() -> float:
        state.batch_in_epoch = 0
        with train.runtime.StopSignal() as stop:
            synchronize(device)
            start = time.perf_counter()
            train.train_one_epoch(session, state, args, stop)
            synchronize(device)
            return time.perf_counter() - start

    def bare() -> float:
        wrapped.train()
        synchronize(device)
        start = time.perf_counter()
        for images, targets in loader:
            images = images.to(device, non_blocking=True, memory_format=memory_format)
            targets = targets.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with autocast:
                loss = model.loss(wrapped(images), targets)
            loss.backward()
            optimizer.step()
        synchronize(device)
        return time.perf_counter() - start

    variants = {"generated": generated, "bare": bare}
    started = time.perf_counter()
    for run in variants.values():  # warm-up: compiles forward and backward, tunes cuDNN, fills the allocator
        run()
    warmup_s = time.perf_counter() - started
    images_per_s: dict[str, list[float]] = {variant: [] for variant in variants}
    peak: dict[str, int] = dict.fromkeys(variants, 0)
    for index in range(opts.rounds):
        if index > 0 and time.perf_counter() > deadline:
            break  # keep inside the time budget: fewer rounds rather than no answer
        for variant, run in variants.items():
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            seconds = run()
            images_per_s[variant].append(steps * opts.batch_size / seconds)
            if device.type == "cuda":
                peak[variant] = max(peak[variant], torch.cuda.max_memory_allocated(device))
    logger.close()
    peak_flops = opts.peak_tflops * 1e12 if opts.peak_tflops else None
    result: dict[str, Any] = {
        "img_size": img_size,
        "batch_size": opts.batch_size,
        "steps_per_run": steps,
        "rounds": len(images_per_s["bare"]),
        "warmup_and_compile_s": round(warmup_s, 1),
        "train_gflop_per_image": flops / 1e9,
        "ratio_vs_bare": statistics.median(
            g / b for g, b in zip(images_per_s["generated"], images_per_s["bare"], strict=True)
        ),
    }
    for variant, values in images_per_s.items():
        rate = statistics.median(values)
        result[variant] = {
            "images_per_s": rate,
            "peak_memory_gib": peak[variant] / 2**30 if device.type == "cuda" else None,
            "mfu": rate * flops / peak_flops if peak_flops else None,
            "per_round": values,
        }
    return result


def table(results: dict[str, dict]) -> str:
    """A Markdown table: one row per model and loop."""
    rows = ["| model | images | batch | loop | images/s | generated / bare | peak memory | MFU |"]
    rows.append("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        for variant in ("generated", "bare"):
            v = r[variant]
            ratio = f"**{r['ratio_vs_bare']:.3f}**" if variant == "bare" else ""
            memory = "n/a" if v["peak_memory_gib"] is None else f"{v['peak_memory_gib']:.2f} GiB"
            mfu = "n/a" if v["mfu"] is None else f"{100 * v['mfu']:.1f} %"
            cells = [name, f"{r['img_size']}x{r['img_size']}", r["batch_size"], variant, f"{v['images_per_s']:.0f}"]
            rows.append("| " + " | ".join(str(cell) for cell in [*cells, ratio, memory, mfu]) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Check the device, render, measure each model, print the table, write the JSON."""
    opts = get_args_parser().parse_args(argv)
    device = torch.device(opts.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            "benchmarks/gpu.py measures a CUDA GPU, and torch sees none here (torch.cuda.is_available() is False).\n"
            "For a smoke run of the script itself on a CPU: python benchmarks/gpu.py --device cpu --quick",
            file=sys.stderr,
        )
        return 2
    if device.type not in ("cuda", "cpu"):
        print(f"benchmarks/gpu.py: --device {opts.device} is not supported; use cuda, cuda:N or cpu", file=sys.stderr)
        return 2
    on_cpu = device.type == "cpu"
    opts.batch_size = opts.batch_size or (8 if on_cpu and opts.quick else 256)
    opts.rounds = opts.rounds or (2 if opts.quick else 5)
    opts.no_compile = opts.no_compile or (on_cpu and opts.quick)  # inductor on a CPU takes minutes
    name = torch.cuda.get_device_name(device) if not on_cpu else "cpu"
    if opts.peak_tflops is None:
        opts.peak_tflops = next((peak / 1e12 for key, peak in PEAK_BF16.items() if key in name), None)
    started = time.perf_counter()
    deadline = started + opts.time_budget
    results: dict[str, dict] = {}
    skipped = []
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as tmp:
        workdir = Path(tmp)
        project = opts.project or render(opts.template, workdir / "project")
        train = import_train(project)
        for model_name in opts.models.split(","):
            if results and time.perf_counter() > deadline:
                skipped.append(model_name)
                continue
            with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):  # the tqdm bar
                results[model_name] = measure_model(train, model_name, opts, workdir, deadline)
            r = results[model_name]
            print(
                f"{model_name}: generated {r['generated']['images_per_s']:.0f} images/s, bare "
                f"{r['bare']['images_per_s']:.0f}, ratio {r['ratio_vs_bare']:.3f} "
                f"(warm-up and compile {r['warmup_and_compile_s']:.0f} s)",
                flush=True,
            )
    seconds = time.perf_counter() - started
    compiled = "eager" if opts.no_compile else "torch.compile"
    data = "pinned host memory" if opts.host_data else "on the device"
    print(f"\n{name}, torch {torch.__version__}, bf16 autocast, channels_last, {compiled}, batches {data}")
    if opts.peak_tflops:
        print(f"MFU against {opts.peak_tflops:.1f} TFLOPS dense bf16")
    print(table(results))
    warnings = [f"skipped after the time budget: {', '.join(skipped)}"] if skipped else []
    rn50 = results.get("resnet50")
    if rn50 and "H200" in name and rn50["bare"]["images_per_s"] < H200_RESNET50_FLOOR:
        warnings.append(f"ResNet-50 below {H200_RESNET50_FLOOR} images/s on an H200: something is wrong")
    for line in warnings:
        print(f"WARNING: {line}")
    print(f"{seconds:.0f} s")
    report = {
        "device": name,
        "torch": torch.__version__,
        "compile": not opts.no_compile,
        "data": "host" if opts.host_data else "device",
        "peak_tflops_bf16": opts.peak_tflops,
        "models": results,
        "warnings": warnings,
        "seconds": round(seconds, 1),
    }
    if opts.json is not None:
        opts.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
