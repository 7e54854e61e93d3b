"""Checkpoint files: atomic writes, safe loads, and the random-number state for exact resume."""

import contextlib
import json
import math
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from . import UsageError

REQUIRED_KEYS = ("model", "model_name", "model_config")


class OutputError(Exception):
    """A file could not be written (a full disk, a read-only folder): reported in one line, exit 1.

    Raised after the partial file is removed; the file it would have replaced is intact.
    """


@dataclass
class RunState:
    """Counters that a checkpoint carries over, so a resumed run continues the same schedule."""

    epoch: int = 0  # the epoch to run next
    batch_in_epoch: int = 0  # batches of `epoch` already trained (non-zero after an interrupt)
    global_step: int = 0  # optimizer steps so far
    best_score: float = -math.inf  # the best validation score so far (the task's SCORE)
    epochs_without_improvement: int = 0


def unwrap(model: nn.Module) -> nn.Module:
    """The bare model inside DataParallel, DistributedDataParallel and torch.compile wrappers."""
    while True:
        if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
            model = model._orig_mod
        else:
            return model


def training_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    scaler: torch.amp.GradScaler,
    run_state: dict[str, Any],
    args: dict[str, Any],
    classes: list[str],
    model_name: str,
    *,
    preprocessing: dict[str, Any],
    ema: Any = None,
    rng: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Everything a resumed run needs, as tensors and plain Python (loadable with weights_only=True).

    `preprocessing`: how images were fed to the model (transforms.Preprocessing.to_dict()).
    `ema`: an optim.EMA, whose weights test.py, predict.py and export.py use by default.
    `rng`: each process's rng_state(), in rank order (default: this process's alone).
    """
    return {
        "model": unwrap(model).state_dict(),  # the bare model: no wrapper prefixes in its keys
        "model_name": model_name,
        "model_config": unwrap(model).config.to_dict(),
        "classes": classes,
        "preprocessing": preprocessing,
        "ema": ema.module.state_dict() if ema is not None else None,
        "ema_updates": ema.n_averaged.item() if ema is not None else 0,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "run_state": run_state,
        "rng": rng if rng is not None else [rng_state()],
        "args": json.loads(json.dumps(args, default=str)),  # Paths become strings
    }


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """write(tmp), then move tmp onto `path`: `path` is replaced whole or not at all.

    A failed write (a full disk: OSError, or the RuntimeError torch.save raises) removes the
    partial tmp file and raises OutputError naming `path` and the reason.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err).strip().partition("\n")[0]
        raise OutputError(f"cannot write {path} ({reason})") from None


def save(state: dict[str, Any], path: Path) -> None:
    """Write `state` to `path` atomically: a crash or a full disk mid-write never leaves a truncated file."""
    write_atomic(path, lambda tmp: torch.save(state, tmp))


def save_run(state: dict[str, Any], run_dir: Path, *, best: bool, epoch: int, keep_epochs: int = 0) -> None:
    """Write run_dir/last.pt, and best.pt when `best`, and epoch-<epoch>.pt when keep_epochs > 0.

    Only the keep_epochs newest epoch files are kept. Every file is replaced atomically, and
    last.pt last: after a failed write last.pt is still the previous epoch's, and --resume
    trains this epoch again and writes every file.
    """
    paths = [run_dir / "best.pt"] if best else []
    if keep_epochs > 0:
        paths.append(run_dir / f"epoch-{epoch}.pt")
    paths.append(run_dir / "last.pt")
    save(state, paths[0])
    for path in paths[1:]:
        _copy(paths[0], path)
    if keep_epochs > 0:
        # Only the names written here, epoch-<number>.pt: epoch-best.pt or a copy such as epoch-3-backup.pt stays.
        written = {}
        for path in run_dir.glob("epoch-*.pt"):
            if match := re.fullmatch(r"epoch-(\d+)\.pt", path.name):
                written[int(match[1])] = path
        for number in sorted(written)[:-keep_epochs]:
            written[number].unlink()


def _copy(src: Path, dst: Path) -> None:
    write_atomic(dst, lambda tmp: shutil.copyfile(src, tmp))


def resolve(path: Path) -> Path:
    """A checkpoint file, or last.pt inside a run directory."""
    if path.is_dir():
        path = path / "last.pt"
    if not path.is_file():
        raise UsageError(f"checkpoint {path} does not exist")
    return path


def load(path: Path, map_location: torch.device | str = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by train.py, tensors only (weights_only=True); UsageError if unusable."""
    path = resolve(path)
    state = read(path, "checkpoint", map_location)
    if not isinstance(state, dict) or any(key not in state for key in REQUIRED_KEYS):
        raise UsageError(f"{path} is not a checkpoint written by train.py (missing model state or config)")
    return state


def read(path: Path, what: str, map_location: torch.device | str = "cpu") -> Any:
    """torch.load(path, weights_only=True); a file it cannot read is a UsageError naming `what` and the path."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - garbage bytes fail in many ways inside the unpickler
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"{what} {path} is corrupt or not a PyTorch file ({first_line})") from None


def check_compatible(state: dict[str, Any], model_name: str, model_config: dict[str, Any]) -> None:
    """Raise UsageError unless the checkpoint holds the same model class and config."""
    if state["model_name"] != model_name:
        raise UsageError(f"checkpoint holds a {state['model_name']} model, not {model_name}")
    saved = {key: _tuples(value) for key, value in state["model_config"].items()}
    wanted = {key: _tuples(value) for key, value in model_config.items()}
    diffs = [f"{key}={saved.get(key)!r} (now {value!r})" for key, value in wanted.items() if saved.get(key) != value]
    if diffs:
        raise UsageError("checkpoint was trained with a different model config: " + ", ".join(diffs))


def _tuples(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def restore(
    state: dict[str, Any],
    model_name: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    scaler: torch.amp.GradScaler,
    ema: Any = None,
    rank: int = 0,
) -> RunState:
    """Load a checkpoint into freshly built objects (an optim.EMA too) and return its counters.

    Raises UsageError if it holds another model or config. Restores process `rank`'s random-number
    state too, so call it after everything else that draws random numbers (model init) is built. A
    process the saved run did not have (a restart with more of them) keeps the streams it was seeded with.
    """
    check_compatible(state, model_name, unwrap(model).config.to_dict())
    unwrap(model).load_state_dict(state["model"])
    if ema is not None:
        ema.module.load_state_dict(state["ema"])
        ema.n_averaged.fill_(state["ema_updates"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):  # the rebuilt curve's rate now (a new --epochs
        # changes the curve), not the rate the saved one had set: the next step trains at the rebuilt curve's rate.
        rates = zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True)
        for group, base_lr, factor in rates:
            group["lr"] = base_lr * factor(scheduler.last_epoch)
    if state["scaler"]:  # empty when saved without --amp fp16: a newly enabled scaler starts afresh
        scaler.load_state_dict(state["scaler"])
    states = state["rng"] if isinstance(state["rng"], list) else [state["rng"]]  # a dict: before ranks had their own
    if rank < len(states):
        set_rng_state(states[rank])
    saved = dict(state["run_state"])
    if "best_accuracy" in saved:  # a checkpoint written before the score had a task-neutral name
        saved["best_score"] = saved.pop("best_accuracy")
    return RunState(**saved)


def rng_state(generator: torch.Generator | None = None) -> dict[str, Any]:
    """Every random-number state the run uses, as plain Python and tensors (weights_only-safe)."""
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    if generator is not None:
        state["generator"] = generator.get_state()
    return state


def set_rng_state(state: dict[str, Any], generator: torch.Generator | None = None) -> None:
    """Restore what rng_state() captured."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    if generator is not None and "generator" in state:
        generator.set_state(state["generator"].cpu())
