"""Run output: console lines, the tqdm bar, TensorBoard and metrics.jsonl; only the main process writes."""

import contextlib
import functools
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import nn
from torch.utils.tensorboard import SummaryWriter
from torchvision.transforms.v2.functional import pil_to_tensor
from tqdm import tqdm

from . import UsageError, runtime
from .checkpoint import OutputError, RunState, reason, write_atomic


class NonFiniteLossError(Exception):
    """The training loss, or the weights a step left, became NaN or infinite."""


def check_metrics(metrics: dict[str, Any], score: str, logged: tuple[str, ...]) -> None:
    """UsageError for a `score` or `logged` name (task.py's) not among a validation's `metrics`, or a wrong value.

    The score must be a Python number; every metric something JSON holds (metrics.jsonl, test.py's report).
    """
    if unknown := [name for name in (score, *logged) if name not in metrics]:
        raise UsageError(f"task.py names {unknown[0]!r} in SCORE or LOGGED; task.evaluate returns {list(metrics)}")
    if not isinstance(metrics[score], (int, float)):  # np.mean's float64 is one: train.py keeps a Python float
        kind = type(metrics[score]).__name__
        raise UsageError(f"task.py's SCORE {score!r} is a {kind}, not a Python number: return float(...)")
    for name, value in metrics.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            kind = f"{name!r} is a {type(value).__name__}, which JSON (metrics.jsonl, test.py's report) cannot hold"
            raise UsageError(f"task.evaluate's {kind}: return numbers, lists, dicts (.item(), .tolist())") from None


@dataclass
class Window:
    """Timing and sample counts between two log lines."""

    first_step: int  # global step before the window's first batch
    batches: int = 0
    samples: int = 0
    data_time: float = 0.0  # seconds spent waiting for the next batch
    compute_time: float = 0.0  # seconds spent on forward, backward and step
    started: float = field(default_factory=time.perf_counter)


def hide_event_writer_errors(hook: Callable[[Any], object], args: Any) -> None:
    """threading.excepthook while a RunLogger is open: `hook`, except for the OSError of TensorBoard's writer thread.

    The thread hands that error (a full disk) to the next write, which reports it in one line: no traceback too.
    """
    if not (isinstance(args.exc_value, OSError) and type(args.thread).__name__ == "_AsyncWriterThread"):
        hook(args)


class RunLogger:
    """Writes what a run reports; on other processes than the main one every method does nothing."""

    def __init__(
        self, run_dir: Path, main: bool, progress: str, world_size: int, accum_steps: int, resumed: RunState
    ) -> None:
        """`progress`: auto, always or never; what a crash logged after the `resumed` RunState is dropped."""
        self.main_process, self.world_size, self.accum_steps = main, world_size, accum_steps
        self.show_bar = main and (progress == "always" or (progress == "auto" and sys.stderr.isatty()))
        self.run_dir, self.metrics_file = run_dir, run_dir / "metrics.jsonl"
        if not main:
            return
        if self.metrics_file.is_file():  # a crashed attempt's, or a cut line
            text = self.metrics_file.read_text()
            rows, kept, step = text.splitlines(), [], resumed.global_step
            for row in rows:
                with contextlib.suppress(ValueError, KeyError, TypeError):  # a line that is not a whole row is dropped
                    logged = json.loads(row)
                    # An epoch's row (val) counts the epochs done: last.pt may hold its epoch trained, not validated.
                    if logged["step"] <= step and (logged["split"] == "train" or logged["epoch"] <= resumed.epoch):
                        kept.append(row + "\n")
            if "".join(kept) != text:  # rows to drop, or a last row cut short just before its newline
                write_atomic(self.metrics_file, lambda tmp: tmp.write_text("".join(kept)))
            if dropped := len(rows) - len(kept):
                self.print(f"dropped {dropped} rows logged after step {step} from {self.metrics_file}")
        self.thread_hook = threading.excepthook  # close() puts it back
        threading.excepthook = functools.partial(hide_event_writer_errors, self.thread_hook)  # before the thread starts
        try:
            with self._writing_events():
                run_dir.mkdir(parents=True, exist_ok=True)
                self.writer = SummaryWriter(str(run_dir), purge_step=resumed.global_step + 1)
        except OutputError:
            threading.excepthook = self.thread_hook
            raise

    def record_start(self, args: Any, model: nn.Module, device: torch.device, step: int, held_out: list[str]) -> None:
        """Print and save the arguments, the environment and a new run's `held_out` images; print the model summary."""
        if not self.main_process:
            return
        if step == 0 and held_out:
            text = "".join(f"{path}\n" for path in held_out)
            write_atomic(self.run_dir / "held_out.txt", lambda tmp: tmp.write_text(text))
            self.print(f"held_out.txt (saved in {self.run_dir}): the {len(held_out)} validation images")
        resumed = "" if step == 0 else f"-resume-step{step}"  # never overwrite the first run's: it may resume elsewhere
        written = {f"args{resumed}.json": vars(args), f"environment{resumed}.json": runtime.environment(device)}
        for file, what in written.items():
            text = json.dumps(what, indent=2, default=str)
            write_atomic(self.run_dir / file, lambda tmp, text=text: tmp.write_text(text + "\n"))
            self.print(f"{file} (saved in {self.run_dir}):\n{text}")
        try:
            from torchinfo import summary  # optional: pip install torchinfo

            self.print(str(summary(model, verbose=0, depth=3)))
        except ImportError:
            self.print(str(model))
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self.print(f"parameters: {sum(p.numel() for p in model.parameters()):,} ({trainable:,} trainable)")

    def print(self, message: str) -> None:
        """Print a line (without breaking the progress bar)."""
        if self.main_process:
            tqdm.write(message, file=sys.stdout)

    def progress(self, total: int, epoch: int) -> tqdm:
        """A tqdm bar over an epoch's batches; hidden off the main process and when not wanted."""
        return tqdm(total=total, desc=f"epoch {epoch}", disable=not self.show_bar, dynamic_ncols=True, leave=False)

    def log_train(self, window: Window, losses: list[float], step: int, epoch: int, lr: float, bar: tqdm) -> None:
        """Report a window's loss, lr and throughput; NonFiniteLossError names the first non-finite loss's step."""
        if bad := [k for k, value in enumerate(losses) if not math.isfinite(value)]:
            bad_step = window.first_step + bad[0] // self.accum_steps + 1
            raise NonFiniteLossError(f"loss is {losses[bad[0]]} at step {bad_step} (epoch {epoch})")
        elapsed = time.perf_counter() - window.started
        busy = window.compute_time + window.data_time
        values = {
            "loss": sum(losses) / (len(losses) * self.world_size),  # each micro-batch's, summed over processes
            "lr": lr,
            "samples_per_s": window.samples * self.world_size / max(elapsed, 1e-9),
            "data_ms": 1000 * window.data_time / max(1, window.batches),
            "compute_ms": 1000 * window.compute_time / max(1, window.batches),
            "compute_efficiency": window.compute_time / busy if busy > 0 else 0.0,  # near 1: loading keeps up
        }
        summary = (
            f"loss {values['loss']:.4f}  lr {lr:.2e}  data {values['data_ms']:.1f}ms  "
            f"compute {values['compute_ms']:.1f}ms  efficiency {values['compute_efficiency']:.2f}"
        )
        bar.set_postfix_str(summary, refresh=False)
        if not self.show_bar:
            self.print(f"epoch {epoch} step {step}  {summary}")
        self.write("train", values, step, epoch)

    def log_epoch(
        self, state: RunState, epochs: int, report: str, logged: dict, unreadable: dict[str, int], seconds: float
    ) -> None:
        """Report an epoch: `report` on the console; `logged` (per split) and `unreadable` (with "val") in the logs."""
        for split, values in logged.items():
            self.write(split, {**values, **(unreadable if split == "val" else {})}, state.global_step, state.epoch)
        skipped = sum(unreadable.values())
        skipped_text = f"  skipped {skipped} unreadable image file{'s' * (skipped != 1)}" if skipped else ""
        self.print(f"epoch {state.epoch}/{epochs}  {report}{skipped_text}  ({seconds:.0f}s)")

    def log_pictures(self, pictures: dict[str, Image.Image], step: int) -> None:
        """Add pictures to TensorBoard under their names, meant for once per epoch (images every step are slow)."""
        if not self.main_process:
            return
        with self._writing_events():
            for name, picture in pictures.items():
                self.writer.add_image(name, pil_to_tensor(picture), step)

    def write(self, split: str, values: dict[str, Any], step: int, epoch: int) -> None:
        """Add scalars to TensorBoard (<split>/<name>) and a line to metrics.jsonl; OutputError (no partial line)."""
        if not self.main_process:
            return
        with self._writing_events():
            for name, value in values.items():
                if isinstance(value, (int, float)):
                    self.writer.add_scalar(f"{split}/{name}", value, step)
        size = self.metrics_file.stat().st_size if self.metrics_file.exists() else 0
        try:
            with self.metrics_file.open("a") as metrics:  # opened per line (every --log-interval steps): none buffered
                metrics.write(json.dumps({"split": split, "step": step, "epoch": epoch, **values}) + "\n")
        except OSError as err:
            with contextlib.suppress(OSError):
                os.truncate(self.metrics_file, size)
            raise OutputError(f"cannot write {self.metrics_file} ({reason(err)})") from None

    def __enter__(self) -> "RunLogger":
        return self

    def __exit__(self, exc_type: type | None, *exc_info: object) -> None:
        try:
            self.close()
        except OutputError:
            if exc_type is None:  # else the error that ended the run is the one to report
                raise

    def close(self) -> None:
        """Flush and close the TensorBoard writer; OutputError if what it still held cannot be written."""
        if self.main_process:
            try:
                with self._writing_events():
                    self.writer.close()
            finally:
                threading.excepthook = self.thread_hook

    @contextlib.contextmanager
    def _writing_events(self) -> Iterator[None]:
        """OutputError for an OSError (TensorBoard's writer thread hands its error to the next call)."""
        try:
            yield
        except OSError as err:
            raise OutputError(f"cannot write TensorBoard's events in {self.run_dir} ({reason(err)})") from None
