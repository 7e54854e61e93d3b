"""Checkpoint files: atomic writes, safe loads, and the random-number state for exact resume."""

import argparse
import contextlib
import json
import math
import os
import random
import re
import shutil
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.amp import GradScaler
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from . import UsageError


class OutputError(Exception):
    """A file could not be written (a full disk, a read-only folder): one line, exit 1; the file it replaced is kept."""


def reason(err: object) -> str:
    """Why `err` happened, in one line: an OSError's strerror, else its message's first line, else its type."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


@dataclass
class RunState:
    """Counters that a checkpoint carries over, so a resumed run continues the same schedule."""

    epoch: int = 0  # the epoch to run next
    batch_in_epoch: int = 0  # batches of `epoch` already trained (non-zero after an interrupt)
    global_step: int = 0  # optimizer steps so far
    best_score: float = -math.inf  # the best validation score so far (the task's SCORE)
    epochs_without_improvement: int = 0
    score: str = ""  # the name of the score best_score is of ("" in checkpoints older than the name)


def unwrap(model: nn.Module) -> nn.Module:
    """The bare model inside DataParallel, DistributedDataParallel and torch.compile wrappers."""
    while hasattr(model, "_orig_mod") or isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        model = model._orig_mod if hasattr(model, "_orig_mod") else model.module  # _orig_mod: torch.compile's
    return model


def training_state(
    session: Any, run_state: RunState, args: argparse.Namespace, rng: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Everything a resumed run needs, as tensors and plain Python (loadable with weights_only=True).

    `session`: train.py's Session (or anything with its fields); `rng`: each process's rng_state() in rank
    order, by default this process's.
    """
    model, ema = unwrap(session.model), session.ema  # no wrapper prefixes in the keys
    return {
        "model": model.state_dict(),
        "model_name": type(model).__name__,
        "model_config": model.config.to_dict(),
        "classes": session.classes,
        "held_out": session.held_out,
        **session.data_digests,  # "val_files" and "train_sample" (runs.check_runs_data)
        "preprocessing": session.prep.to_dict(),
        "ema": ema.module.state_dict() if ema is not None and ema.n_averaged > 0 else None,  # none before an update
        "ema_updates": ema.n_averaged.item() if ema is not None else 0,
        "optimizer": session.optimizer.state_dict(),
        "scheduler": session.scheduler.state_dict(),
        "scaler": session.scaler.state_dict(),
        "run_state": asdict(run_state),
        "rng": rng if rng is not None else [rng_state()],
        "args": json.loads(json.dumps(vars(args), default=str)),  # Paths become strings
    }


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """write(tmp), then move tmp onto `path`: the file is replaced whole or not at all.

    A failed write (OSError, or torch.save's RuntimeError on a full disk) removes tmp and raises OutputError; so
    does write()'s own OutputError (a check of what it wrote), as it is.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as err:  # a second Ctrl-C mid-write too: no partial tmp is left behind
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not isinstance(err, (OSError, RuntimeError)):  # write()'s OutputError, a KeyboardInterrupt, ...
            raise
        full = "" if isinstance(err, OSError) else "; is the disk full?"  # torch.save's runs out of room in C++
        raise OutputError(f"cannot write {path} ({reason(err)}{full})") from None


def check_writable(path: Path, what: str) -> None:
    """Make `path`'s folder and check that it takes a new file; UsageError if not. Before the work `path` is for."""
    if path.is_dir():
        raise UsageError(f"cannot write {what}: {path} is a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path.parent).close()  # a read-only folder or disk: refused now, not after the work
    except OSError as err:  # a file in the way (or a link to nowhere) says "File exists"
        why = "not a folder" if isinstance(err, (FileExistsError, NotADirectoryError)) else err.strerror or err
        raise UsageError(f"cannot write {what} in {path.parent}: {why}") from None


def save(state: dict[str, Any], path: Path) -> None:
    """torch.save(state) to `path`, atomically: a crash or a full disk mid-write never leaves a truncated file."""
    write_atomic(path, lambda tmp: torch.save(state, tmp))


def save_run(state: dict[str, Any], run_dir: Path, *, best: bool, epoch: int, keep_epochs: int = 0) -> None:
    """Write best.pt when `best`, epoch-<epoch>.pt when keep_epochs > 0 (the newest keep_epochs kept), then last.pt.

    last.pt comes last: after a failed write it is still the previous epoch's. Epoch files numbered above `epoch`
    (a continuation the run was resumed from before) are not pruned: newer by number, they are not the run's newest.
    """
    paths = [run_dir / name for name in ["best.pt"] * best + [f"epoch-{epoch}.pt"] * (keep_epochs > 0) + ["last.pt"]]
    save(state, paths[0])
    for path in paths[1:]:
        write_atomic(path, lambda tmp: shutil.copyfile(paths[0], tmp))
    if keep_epochs > 0:
        for path in epoch_checkpoints(run_dir, up_to=epoch)[:-keep_epochs]:
            path.unlink()


def epoch_checkpoints(run_dir: Path, up_to: float = math.inf) -> list[Path]:
    """The epoch-<N>.pt files of a run with N <= up_to, oldest first (epoch-3-backup.pt is not one)."""
    numbered = [(int(m[1]), p) for p in run_dir.iterdir() if (m := re.fullmatch(r"epoch-(\d+)\.pt", p.name))]
    return [path for n, path in sorted(numbered) if n <= up_to]


def resolve(path: str | os.PathLike) -> Path:
    """A checkpoint file, or last.pt inside a run directory (a str too: a notebook's "runs/x/best.pt")."""
    path = Path(path)
    if path.is_dir():
        path = path / "last.pt"
    if not path.is_file():
        held = sorted(other.name for other in path.parent.glob("*.pt")) if path.name == "last.pt" else []  # best.pt
        raise UsageError(f"checkpoint {path} does not exist" + (f"; its folder has {', '.join(held)}" if held else ""))
    return path


CHECKPOINT_KEYS = {"model", "model_name", "model_config", "classes", "args"}  # in every train.py checkpoint


def load(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by train.py (a file, or a run directory's last.pt); UsageError if unusable.

    Its tensors stay on the CPU: the scripts move the model alone to the device, not the optimizer's state.
    """
    path = resolve(path)
    state = read(path, "checkpoint")
    missing = sorted(CHECKPOINT_KEYS - state.keys()) if isinstance(state, dict) else ["model"]
    if missing:  # a model saved alone, say: no class names, no flags to rebuild its data from
        raise UsageError(f"{path} is not a checkpoint written by train.py (no {', '.join(missing)})")
    return state


def read(path: Path, what: str) -> Any:
    """torch.load(path, weights_only=True) to the CPU; a file it cannot read: UsageError naming `what` and the path."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except PermissionError as err:  # other OSErrors come from a broken zip archive: corrupt, below
        raise UsageError(f"cannot read {what} {path}: {reason(err)}") from None
    except Exception as err:  # noqa: BLE001 - garbage bytes fail in many ways inside the unpickler
        # torch's own message suggests weights_only=False, which would run whatever the file holds: not repeated.
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        why = f" (it holds a {found[1]}: only tensors and plain values are loaded)" if found else ""
        raise UsageError(f"{what} {path} is corrupt or not a PyTorch file{why}") from None


def restore(
    state: dict, *, model: nn.Module, optimizer: Optimizer, scheduler: Any, scaler: GradScaler, ema: Any, rank: int = 0
) -> RunState:
    """Load a checkpoint into freshly built objects (`ema`: an optim.EMA or None) and return its counters.

    UsageError if it holds another model or config. Restores process `rank`'s random-number state too (call
    it last); a process the saved run did not have keeps the streams it was seeded with.
    """
    model = unwrap(model)
    if state["model_name"] != type(model).__name__:
        raise UsageError(f"checkpoint holds a {state['model_name']} model, not {type(model).__name__}")
    # Compared as JSON: a tuple that went through JSON is a list, the same value. A field added to the config since
    # the run was saved takes its default, which is meant to keep the model as it was.
    defaults = {field.name: field.default for field in fields(model.config) if field.default is not MISSING}
    saved, wanted = (json.loads(json.dumps(c)) for c in ({**defaults, **state["model_config"]}, model.config.to_dict()))
    diffs = [f"{key}={saved.get(key)!r} (now {value!r})" for key, value in wanted.items() if saved.get(key) != value]
    if diffs:
        raise UsageError("checkpoint was trained with a different model config: " + ", ".join(diffs))
    load_weights(model, state["model"])
    if ema is not None and state["ema"] is not None:  # None: the average had no update yet
        load_weights(ema.module, state["ema"])
        ema.n_averaged.fill_(state["ema_updates"])
    try:
        optimizer.load_state_dict(state["optimizer"])
    except ValueError as err:  # the code changed which parameters train, or how they are grouped
        raise UsageError(f"the checkpoint's optimizer state does not fit this model's parameters: {err}") from None
    scheduler.load_state_dict(state["scheduler"])
    if isinstance(scheduler, LambdaLR):  # the rebuilt curve's rate (a new --epochs changes it), not the saved one
        for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
            group["lr"] = base * factor(scheduler.last_epoch)
    if state["scaler"]:  # empty when saved without --amp fp16: a newly enabled scaler starts afresh
        scaler.load_state_dict(state["scaler"])
    states = state["rng"] if isinstance(state["rng"], list) else [state["rng"]]  # a dict: before ranks had their own
    if rank < len(states):
        rng = states[rank]
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"].cpu())
        if torch.cuda.is_available():  # a state per GPU the saving process saw: those this one sees (maybe fewer)
            for index, cuda_state in enumerate(rng["cuda"][: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(cuda_state.cpu(), index)
        if rng.get("mps") is not None and torch.backends.mps.is_available():  # dropout on a Mac draws from it
            torch.mps.set_rng_state(rng["mps"].cpu())
    saved = dict(state["run_state"])
    if "best_accuracy" in saved:  # a checkpoint written before the score had a task-neutral name
        saved["best_score"] = saved.pop("best_accuracy")
    return RunState(**saved)


def load_weights(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """model.load_state_dict(weights); UsageError naming what does not fit (the model's code changed since)."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:  # "Error(s) in loading state_dict for M:", then a line each: missing, unexpected, size
        detail = textwrap.shorten((str(err).splitlines()[1:] or [str(err)])[0], 240)
        raise UsageError(f"the checkpoint does not fit this {type(model).__name__}: {detail}") from None


def rng_state() -> dict[str, Any]:
    """Every random-number state the run uses, as plain Python and tensors (weights_only-safe)."""
    name, keys, *rest = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), *rest],  # set_state() takes the list; weights_only loads no arrays
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "mps": torch.mps.get_rng_state() if torch.backends.mps.is_available() else None,
    }
