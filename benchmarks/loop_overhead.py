"""Samples per second of the generated training loop, a bare PyTorch loop and Lightning, side by side.

    # The README's tables, about 20 minutes each on 2 cores:
    python benchmarks/loop_overhead.py --batch-size 64 --rounds 60 --also-prefetch-depth 2 --noise-control
    python benchmarks/loop_overhead.py --batch-size 128 --also-prefetch-depth 2 --noise-control
    python benchmarks/loop_overhead.py --quick --json result.json  # ~1.5 min: tests/test_benchmarks.py
    python benchmarks/loop_overhead.py --quick --task restoration --json result.json  # the restoration project

The script renders this template with its default answers into a temporary folder, imports the
rendered train.py and builds everything with its setup(): the default Classifier (networks.py's
residual network), the built-in shapes dataset, the DataLoader, AdamW, the schedule and the run
logger. Every variant then trains that same model object with that same optimizer on that same
DataLoader (same dataset, sampler, batch size and num_workers, so the data pipeline costs all of
them the same), for the same number of steps, in this one process. The training set holds
exactly --steps batches, so each run is a whole epoch, as in train.py.

  generated  train.py's train_one_epoch(), called as its fit() calls it, with train.py's defaults:
             BackgroundGenerator prefetching as loaders.prefetch_depth() chooses it (on the CPU: no
             loader thread, since torch's compute threads already use every core), the tqdm bar
             (--progress always; drawn to /dev/null), data and compute timing, the on-device loss
             buffer, the LR schedule, the GradScaler (disabled without --amp fp16), and a log line
             (metrics.jsonl and TensorBoard, in a temporary run directory) every --log-interval
             steps and at the end of the epoch. Checkpoints and validation are written outside
             train_one_epoch, so they are off.
  bare       the limit for this software stack: for images, targets in loader: copy to the device,
             zero_grad(set_to_none=True), forward, the model's loss, backward, optimizer.step().
             No bar, no prefetch thread, no timing, no logging, no schedule.
  lightning  only when `lightning` or `pytorch_lightning` is installed: a LightningModule holding the
             same model and optimizer, training_step = forward + loss + self.log("loss",
             prog_bar=True), under Trainer(max_epochs=1) with its default TQDM bar (drawn to
             /dev/null) and a TensorBoardLogger that logs at the end of the epoch like the generated
             loop; checkpointing, model summary, validation and the sanity check off. Timed from
             on_fit_start to on_train_epoch_end: building the Trainer and its set-up are not counted,
             just as train.py's setup() is not counted for the generated loop.
  --also-prefetch-depth N adds the generated loop with --prefetch-depth N (0: no thread) as a
             row of its own, to show what the BackgroundGenerator thread costs or saves;
             --noise-control adds the bare loop a second time: its ratio shows the noise.

Evaluation, the same way: train.py's validate() (evaluation.evaluate() plus summarize()) against a
bare loop under torch.no_grad() that sums the loss and the correct predictions, on the same
validation DataLoader (--eval-batches batches).

What each loop adds per step, on a near-zero model (micro_session(): a 4-channel Classifier on
8x8 images in batches of 8 from a TensorDataset, about 2 ms a step): generated, bare and
lightning train it for --micro-steps steps, and the table gives each loop's microseconds per
step over the bare loop's, paired by round, and that as a share of a default-model step. On the
default model a 2-core machine's noise (see the bare-again row) is larger than any loop's own
cost; here the costs stand out of it.

Method: one warm-up run of everything, then rounds. A round runs each comparison as a pair of
runs back to back: generated and bare, generated and each extra, generated and lightning; the
evaluation pair; on the near-zero model bare and generated, bare and lightning. Pairs run in a
random order and so do the two runs of a pair (seeded), so that no run always follows the same
other one. A run's samples/s is its samples / its seconds; each pair gives one ratio (generated /
the other), and the reported ratio is the median of a comparison's per-round ratios: the two
runs of a pair are seconds apart, so drift of the machine's speed cancels. Runs are
--steps long, fewer than the default --log-interval 50, so the generated loop (and Lightning) log
once per run, at its end: more often than train.py logs by default, which can only make it look
slower. Outside --quick, a round counts only if other processes used at most
--max-foreign-load of the CPUs meanwhile (read from /proc/stat on Linux); busy rounds are
printed, dropped and run again.

--task restoration renders the template with task=restoration and measures that project's loop the
same way: the default Restorer (a U-Net that returns its loss when given the clean images) on the
built-in shapes with Gaussian noise, as (degraded, clean) batches. Its bare loop's step is
zero_grad, loss = model(degraded, clean).mean(), backward, step; its bare evaluation sums the pixel (L1)
loss and PSNR and SSIM of the restored and of the degraded images, with the project's own ops
functions, as validate() does. The near-zero model is a 4-channel, one-level U-Net on 16x16 patches
(SSIM, which validation scores, needs 11 or more).
"""

import argparse
import contextlib
import gc
import importlib.util
import json
import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the usual alias

REPO = Path(__file__).resolve().parents[1]
TRAIN_TARGET, LIGHTNING_TARGET = 0.97, 1.0  # the targets for ratio_vs_bare and ratio_vs_lightning
MICRO_BATCH = 8


def get_args_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64, help="samples per step (train.py's default: 64)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default 20, quick 10)")
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds after warm-up (default 30, quick 9)")
    parser.add_argument(
        "--eval-batches", type=int, default=None, help="batches per evaluation run (default 20, quick 16)"
    )
    parser.add_argument(
        "--micro-steps", type=int, default=None, help="steps per run of the near-zero model (default 400, quick 150)"
    )
    parser.add_argument(
        "--task", choices=("classification", "restoration"), default="classification",
        help="which project to render and measure (the template's question `task`)",
    )  # fmt: skip
    parser.add_argument("--device", default="cpu", help="cpu (what the targets are for), cuda, ...")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter runs: under 3 minutes on 2 CPU cores")
    parser.add_argument("--no-lightning", action="store_true", help="skip Lightning even when it is installed")
    parser.add_argument(
        "--also-prefetch-depth", type=int, default=None, metavar="N",
        help="add a row: the generated loop with --prefetch-depth N (0: no loader thread)",
    )  # fmt: skip
    parser.add_argument(
        "--max-foreign-load", type=float, default=None, metavar="F",
        help="keep only rounds in which other processes used at most this fraction of the CPUs (Linux; default: "
        "0.1, quick: keep every round)",
    )  # fmt: skip
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="stop adding rounds after this long (default 3600, quick 100)"
    )
    parser.add_argument(
        "--noise-control", action="store_true", help="add a row: the bare loop again, whose ratio shows the noise"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--project", type=Path, default=None, help="an already rendered project (default: render)")
    parser.add_argument("--template", type=Path, default=REPO, help="the template to render")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    return parser


def render(template: Path, dst: Path, **answers: str) -> Path:
    """Render the template with these answers, defaults for the rest (the working tree, with uncommitted changes)."""
    try:
        from copier import run_copy
    except ImportError:
        sys.exit(
            "copier is not installed: render with `copier copy --defaults --vcs-ref HEAD . DIR`, pass --project DIR"
        )

    vcs_ref = "HEAD" if (template / ".git").exists() else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # copier's DirtyLocalWarning: measuring the working tree is the point
        run_copy(str(template), dst, data=answers, defaults=True, vcs_ref=vcs_ref, quiet=True, unsafe=False)
    return dst


def import_train(project: Path) -> ModuleType:
    """Import the project's train.py (its package becomes importable from the project folder)."""
    sys.path.insert(0, str(project))
    spec = importlib.util.spec_from_file_location("generated_train", project / "train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def import_lightning() -> ModuleType | None:
    """lightning.pytorch, else pytorch_lightning, else None; quiet."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for logger_name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
            logging.getLogger(logger_name).setLevel(logging.ERROR)
        return module
    return None


def foreign_cpu_seconds() -> float | None:
    """CPU seconds that other processes have used since boot (from Linux's /proc/stat), or None elsewhere."""
    try:
        ticks = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
    own = os.times()  # this process, all its threads
    return busy - own.user - own.system


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so a run's clock stops when its work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def quiet(load: float | None, opts: argparse.Namespace) -> bool:
    """Whether a round counts: other processes stayed under --max-foreign-load (or it is not set)."""
    return opts.max_foreign_load is None or load is None or load <= opts.max_foreign_load


def run_generated(train: ModuleType, session: Any, state: Any, args: argparse.Namespace) -> float:
    """Seconds for one epoch of the generated train_one_epoch, set up as fit() sets it up."""
    session.train_loader.sampler.set_epoch(0)
    state.batch_in_epoch = 0
    with train.runtime.StopSignal() as stop:
        start = time.perf_counter()
        finished = train.train_one_epoch(session, state, args, stop)
        synchronize(session.device)
        seconds = time.perf_counter() - start
    if not finished:
        raise KeyboardInterrupt
    return seconds


def run_bare(session: Any, memory_format: torch.memory_format, task: str) -> float:
    """Seconds for one epoch of the minimal loop over the same loader, model and optimizer."""
    model, optimizer, device = session.wrapped, session.optimizer, session.device
    criterion = session.model.loss
    session.train_loader.sampler.set_epoch(0)
    model.train()
    start = time.perf_counter()
    for images, targets in session.train_loader:
        images = images.to(device, non_blocking=True, memory_format=memory_format)
        targets = targets.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        # Restoration: targets are the clean images, and the model returns its loss (per image) when given them.
        loss = model(images, targets).mean() if task == "restoration" else criterion(model(images), targets)
        loss.backward()
        optimizer.step()
    synchronize(device)
    return time.perf_counter() - start


def lightning_runner(pl: ModuleType, session: Any, args: argparse.Namespace, root: Path, task: str):
    """A function that trains one epoch under Lightning's Trainer and returns its seconds."""

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = session.wrapped

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            images, targets = batch
            if task == "restoration":  # targets are the clean images: the model returns its loss
                loss = self.model(images, targets).mean()
            else:
                loss = session.model.loss(self.model(images), targets)
            self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return session.optimizer

    class Clock(pl.Callback):
        def on_fit_start(self, trainer: Any, module: Any) -> None:
            self.start = time.perf_counter()

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            synchronize(session.device)
            self.seconds = time.perf_counter() - self.start

    module = Module()
    accelerator = "cuda" if session.device.type == "cuda" else session.device.type
    devices = [session.device.index or 0] if session.device.type == "cuda" else 1
    precision = {"none": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}[args.amp]
    steps = len(session.train_loader)

    def run() -> float:
        clock = Clock()
        trainer = pl.Trainer(
            accelerator=accelerator,
            devices=devices,
            precision=precision,
            max_epochs=1,
            logger=pl.loggers.TensorBoardLogger(str(root), name="lightning"),
            log_every_n_steps=min(args.log_interval, steps),  # as often as the generated loop logs
            enable_checkpointing=False,
            enable_model_summary=False,
            enable_progress_bar=True,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            callbacks=[clock],
            default_root_dir=str(root),
        )
        trainer.fit(module, train_dataloaders=session.train_loader)
        return clock.seconds

    return run


def run_generated_eval(train: ModuleType, session: Any, args: argparse.Namespace) -> float:
    """Seconds for train.py's validate() over the validation loader."""
    start = time.perf_counter()
    train.validate(session, args, session.wrapped, train.runtime.StopSignal())  # summarize() syncs: on the host
    return time.perf_counter() - start


@torch.no_grad()
def run_bare_eval(session: Any, memory_format: torch.memory_format, ops: ModuleType | None = None) -> float:
    """Seconds for a minimal evaluation loop: summed loss and metrics, fetched once at the end.

    Classification: the cross-entropy and the correct count. Restoration (`ops`, the project's
    ops module): the pixel loss, and PSNR and SSIM of the restored and of the degraded images
    with the project's own functions, the metrics validate() sums.
    """
    model, device = session.model, session.device
    model.eval()
    start = time.perf_counter()
    loss_sum = torch.zeros((), device=device)
    score = torch.zeros((), device=device, dtype=torch.int64 if ops is None else torch.float32)  # a count, or dB
    for images, targets in session.val_loader:
        images = images.to(device, non_blocking=True, memory_format=memory_format)
        targets = targets.to(device, non_blocking=True)
        outputs = model(images)
        if ops is None:  # outputs: the logits
            loss_sum += F.cross_entropy(outputs, targets, reduction="sum")
            score += (outputs.argmax(dim=1) == targets).sum()
        else:  # outputs: the restored images; targets: the clean ones, (N, 3, S, S)
            loss_sum += F.l1_loss(outputs, targets) * images.shape[0]
            restored = outputs.clamp(0, 1)
            for pred in (restored, images):
                score += ops.psnr(pred, targets).sum() + ops.ssim(pred, targets).sum()
    loss_sum.item(), score.item()
    seconds = time.perf_counter() - start
    model.train()
    return seconds


def micro_session(train: ModuleType, opts: argparse.Namespace, workdir: Path) -> tuple[Any, Any, argparse.Namespace]:
    """A session whose steps cost almost nothing, so that what each loop adds per step shows.

    A 4-channel Classifier on 8x8 images (restoration: a one-level U-Net, 16x16) in batches of 8, fed
    from images made once and held in a TensorDataset (the project's sampler, default collation):
    a step takes about 2 ms, data loading a small part of it.
    """
    size = ["--patch-size", "16"] if opts.task == "restoration" else ["--img-size", "8"]  # SSIM needs 11 or more
    args = train.get_args_parser().parse_args(
        [
            "--device", opts.device, "--batch-size", str(MICRO_BATCH), *size, "--widths", "4",
            "--shapes-train-size", str(opts.micro_steps * MICRO_BATCH), "--shapes-val-size", str(MICRO_BATCH),
            "--epochs", "1000", "--progress", "always",
            "--output-dir", str(workdir / "runs"), "--run-name", "micro",
        ]
    )  # fmt: skip
    session, state = train.setup(args)
    loader = session.train_loader
    shapes = loader.dataset.dataset  # inside Seeded
    images, targets = zip(*(shapes[i] for i in range(len(shapes))), strict=True)
    # Restoration's targets are the clean images (3, 8, 8), classification's class indices.
    targets = torch.stack(targets) if opts.task == "restoration" else torch.tensor(targets)
    dataset = torch.utils.data.TensorDataset(torch.stack(images), targets)
    # SeededSampler's shuffle without the per-sample seeds: a TensorDataset takes plain indices.
    shuffle = torch.utils.data.DistributedSampler(dataset, num_replicas=1, rank=0, seed=args.seed)
    session.train_loader = torch.utils.data.DataLoader(dataset, batch_size=MICRO_BATCH, sampler=shuffle)
    return session, state, args


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_average_1min_at_start": round(os.getloadavg()[0], 2),
    }


def measure(opts: argparse.Namespace, project: Path, workdir: Path) -> dict[str, Any]:
    """Run every comparison in pairs, round after round; return the issue's JSON fields plus the raw pairs."""
    train = import_train(project)
    pl = None if opts.no_lightning else import_lightning()
    args = train.get_args_parser().parse_args(
        [
            "--device", opts.device,
            "--batch-size", str(opts.batch_size),
            "--shapes-train-size", str(opts.steps * opts.batch_size),  # one epoch = --steps batches
            "--shapes-val-size", str(opts.eval_batches * opts.batch_size),
            "--epochs", "1000",  # the cosine schedule's length only: keeps the learning rate above 0
            "--progress", "always",  # the bar is on, as on a terminal; stderr goes to /dev/null below
            "--output-dir", str(workdir / "runs"),
            "--run-name", "generated",
        ]
    )  # fmt: skip
    session, state = train.setup(args)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    variants = {
        "generated": lambda: run_generated(train, session, state, args),
        "bare": lambda: run_bare(session, memory_format, opts.task),
    }
    if opts.also_prefetch_depth is not None:
        depth = opts.also_prefetch_depth
        other = argparse.Namespace(**{**vars(args), "prefetch_depth": depth})
        variants[f"generated_depth{depth}"] = lambda: run_generated(train, session, state, other)
    if opts.noise_control:
        variants["bare_again"] = variants["bare"]
    if pl is not None:
        variants["lightning"] = lightning_runner(pl, session, args, workdir / "lightning", opts.task)
    eval_variants = {
        "generated": lambda: run_generated_eval(train, session, args),
        "bare": lambda: run_bare_eval(session, memory_format, train.task.ops if opts.task == "restoration" else None),
    }
    micro, micro_state, micro_args = micro_session(train, opts, workdir)
    micro_variants = {
        "generated": lambda: run_generated(train, micro, micro_state, micro_args),
        "bare": lambda: run_bare(micro, torch.contiguous_format, opts.task),
    }
    if pl is not None:
        micro_variants["lightning"] = lightning_runner(pl, micro, micro_args, workdir / "lightning-micro", opts.task)
    train_samples = len(session.train_loader) * opts.batch_size
    eval_samples = len(session.val_loader.dataset)
    micro_steps = len(micro.train_loader)
    groups = {  # reference variant, its variants, and what a run's seconds become
        "train": ("generated", variants, lambda seconds: train_samples / seconds),  # samples/s
        "eval": ("generated", eval_variants, lambda seconds: eval_samples / seconds),  # samples/s
        "micro": ("bare", micro_variants, lambda seconds: seconds / micro_steps * 1e6),  # microseconds per step
    }
    # pairs[group][name][round] = (the reference's figure, name's figure), from two runs back to back
    pairs = {group: {name: [] for name in runs if name != ref} for group, (ref, runs, _) in groups.items()}
    order = random.Random(0)  # a fresh order each round, so that no run always follows the same other one
    foreign_loads: list[float | None] = []
    console, deadline = sys.stdout, time.perf_counter() + opts.max_seconds
    try:
        # Bars are drawn to /dev/null: the generated one on stderr, Lightning's on stdout.
        with (
            open(os.devnull, "w") as devnull,
            contextlib.redirect_stderr(devnull),
            contextlib.redirect_stdout(devnull),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")  # Lightning's advice on num_workers and log intervals
            for run in [*variants.values(), *eval_variants.values(), *micro_variants.values()]:  # warm-up
                run()
            while sum(quiet(load, opts) for load in foreign_loads) < opts.rounds:
                if foreign_loads and time.perf_counter() > deadline:
                    break
                before, started = foreign_cpu_seconds(), time.perf_counter()
                for group, (ref, runs, figure) in groups.items():
                    names = list(pairs[group])
                    order.shuffle(names)
                    for name in names:  # the reference and this variant back to back, in a random order
                        pair = [ref, name]
                        order.shuffle(pair)
                        figures = {}
                        for variant in pair:
                            gc.collect()
                            figures[variant] = figure(runs[variant]())
                        pairs[group][name].append((figures[ref], figures[name]))
                load = None
                if before is not None:
                    load = (foreign_cpu_seconds() - before) / ((time.perf_counter() - started) * os.cpu_count())
                foreign_loads.append(load)
                line = "  ".join(f"{name} {values[-1][1]:6.0f}" for name, values in pairs["train"].items())
                line = f"generated {pairs['train']['bare'][-1][0]:6.0f}  {line}"
                state_text = "kept" if quiet(load, opts) else "dropped: other processes were busy"
                load_text = "n/a" if load is None else f"{load:.2f}"
                print(f"round {len(foreign_loads)}: train samples/s {line}; foreign load {load_text}, {state_text}",
                      file=console, flush=True)  # fmt: skip
    finally:
        session.logger.close()
        micro.logger.close()

    keep = [quiet(load, opts) for load in foreign_loads]
    busy = sum(keep) < min(3, opts.rounds)
    if busy:  # never quiet enough: report every round rather than none
        keep = [True] * len(foreign_loads)
    pairs = {
        group: {name: [pair for pair, k in zip(values, keep, strict=True) if k] for name, values in by_name.items()}
        for group, by_name in pairs.items()
    }

    def medians(group: str) -> dict[str, float]:
        """The median figure of each variant of a group; the reference's over all its runs."""
        ref, by_name = groups[group][0], pairs[group]
        result = {ref: statistics.median(pair[0] for values in by_name.values() for pair in values)}
        return result | {name: statistics.median(pair[1] for pair in values) for name, values in by_name.items()}

    ratios = {name: [g / x for g, x in values] for name, values in pairs["train"].items()}
    eval_ratios = [g / x for g, x in pairs["eval"]["bare"]]
    overhead = {name: [x - b for b, x in values] for name, values in pairs["micro"].items()}  # µs per step
    samples_per_s = medians("train")
    samples_per_s.setdefault("lightning", None)
    samples_per_s.update({f"{name}_eval": value for name, value in medians("eval").items()})
    return {
        "ratio_vs_bare": statistics.median(ratios["bare"]),
        "ratio_vs_lightning": statistics.median(ratios["lightning"]) if "lightning" in ratios else None,
        "samples_per_s": samples_per_s,
        "eval_ratio_vs_bare": statistics.median(eval_ratios),
        "loop_us_per_step": medians("micro"),
        "overhead_us_per_step": {name: statistics.median(values) for name, values in overhead.items()},
        "task": opts.task,
        "batch_size": opts.batch_size,
        "steps": opts.steps,
        "rounds": sum(keep),
        "rounds_dropped": len(keep) - sum(keep),
        "busy_machine": busy,  # True: too few quiet rounds, so the figures include noisy ones
        "max_foreign_load": opts.max_foreign_load,
        "foreign_load_per_round": foreign_loads,
        "eval_batches": opts.eval_batches,
        "quick": opts.quick,
        "lightning_version": getattr(pl, "__version__", None),
        "per_round": {
            "pairs": pairs,  # group -> variant -> per round: [the reference's figure, the variant's figure]
            "ratio_vs": ratios,
            "eval_ratio_vs_bare": eval_ratios,
            "overhead_us_per_step": overhead,
        },
    }


def table(result: dict[str, Any]) -> str:
    """A Markdown table of the medians and the per-round ratio ranges."""
    bs, per_round = result["batch_size"], result["per_round"]
    rows = ["| batch | loop | variant | samples/s (median) | generated / variant: median [min, max] of rounds |"]
    rows.append("|---|---|---|---|---|")
    sps = result["samples_per_s"]

    def ratio(values: list[float]) -> str:
        return f"**{statistics.median(values):.3f}** [{min(values):.3f}, {max(values):.3f}]"

    rows.append(f"| {bs} | train | generated (train_one_epoch) | {sps['generated']:.0f} | |")
    labels = {"bare_again": "bare again (noise control: differs from bare by noise alone)"}
    for name, values in per_round["ratio_vs"].items():
        label = labels.get(name, name.replace("_depth", ", --prefetch-depth "))
        rows.append(f"| {bs} | train | {label} | {sps[name]:.0f} | {ratio(values)} |")
    if sps["lightning"] is None:
        rows.append(f"| {bs} | train | lightning | not installed | |")
    rows.append(f"| {bs} | eval | generated (validate) | {sps['generated_eval']:.0f} | |")
    rows.append(f"| {bs} | eval | bare | {sps['bare_eval']:.0f} | {ratio(per_round['eval_ratio_vs_bare'])} |")
    return "\n".join(rows)


def overhead_table(result: dict[str, Any]) -> str:
    """A Markdown table of what each loop adds per step on the near-zero model, and its share of a real step."""
    step_us = 1e6 * result["batch_size"] / result["samples_per_s"]["bare"]  # the bare loop's default-model step
    added = "µs added to the bare loop's step: median [min, max] of rounds"
    share = f"added / a default-model step at batch {result['batch_size']} ({step_us / 1000:.0f} ms)"
    rows = [
        f"| loop (near-zero model) | µs per step (median) | {added} | {share} |",
        "|---|---|---|---|",
        f"| bare | {result['loop_us_per_step']['bare']:.0f} | | |",
    ]
    for name, values in result["per_round"]["overhead_us_per_step"].items():
        median = statistics.median(values)
        spread = f"**{median:+.0f}** [{min(values):+.0f}, {max(values):+.0f}]"
        rows.append(f"| {name} | {result['loop_us_per_step'][name]:.0f} | {spread} | {100 * median / step_us:.2f} % |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Render, measure, print the table, write the JSON; with --check, exit 1 if a target is missed."""
    opts = get_args_parser().parse_args(argv)
    opts.steps = opts.steps or (10 if opts.quick else 20)
    opts.rounds = opts.rounds or (9 if opts.quick else 30)
    opts.max_seconds = opts.max_seconds or (100 if opts.quick else 3600)
    opts.eval_batches = opts.eval_batches or (16 if opts.quick else 20)
    opts.micro_steps = opts.micro_steps or (150 if opts.quick else 400)
    if opts.max_foreign_load is None and not opts.quick:
        opts.max_foreign_load = 0.1
    started = time.perf_counter()
    info = machine()
    with tempfile.TemporaryDirectory(prefix="loop-overhead-") as tmp:
        workdir = Path(tmp)
        project = opts.project or render(opts.template, workdir / "project", task=opts.task)
        result = measure(opts, project, workdir)
    info["load_average_1min_at_end"] = round(os.getloadavg()[0], 2)
    result["machine"] = info
    result["seconds"] = round(time.perf_counter() - started, 1)
    threads = f"{info['torch_threads']} torch threads"
    print(f"\n{info['cpu']}, {info['cores']} cores, {threads}, torch {info['torch']}, device {opts.device}")
    dropped = f", {result['rounds_dropped']} busy rounds dropped" if result["rounds_dropped"] else ""
    model = "Classifier (train.py defaults), built-in shapes"
    if opts.task == "restoration":
        model = "Restorer U-Net (train.py defaults), built-in shapes with noise"
    print(f"{model}: {opts.steps} steps x {result['rounds']} rounds{dropped}")
    if result["busy_machine"]:
        print(f"WARNING: fewer than 3 rounds with foreign load <= {opts.max_foreign_load}: every round is reported")
    print(table(result))
    print(overhead_table(result))
    lightning = result["ratio_vs_lightning"]
    met = result["ratio_vs_bare"] >= TRAIN_TARGET and (lightning is None or lightning >= LIGHTNING_TARGET)
    print(
        f"ratio_vs_bare {result['ratio_vs_bare']:.3f} (target >= {TRAIN_TARGET}), ratio_vs_lightning "
        f"{'n/a' if lightning is None else f'{lightning:.3f}'} (target >= {LIGHTNING_TARGET}), "
        f"eval_ratio_vs_bare {result['eval_ratio_vs_bare']:.3f}; {result['seconds']:.0f} s"
    )
    if opts.json is not None:
        opts.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if met or not opts.check else 1


if __name__ == "__main__":
    sys.exit(main())
