"""Run directories: a run writes everything into `<output-dir>/<run-name>/`, never into another run's."""

import contextlib
import json
import os
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from . import UsageError
from .checkpoint import OutputError, epoch_checkpoints, load, reason, resolve
from .images import check_utf8, fingerprint, is_hidden, sample_digests


class RunFinished(Exception):  # noqa: N818 - not an error: the script says so and exits 0
    """Resuming a run that has nothing left to train."""


def find_run(
    output_dir: Path, run_name: str | None, resume: Path | None, auto_resume: bool, explicit: Collection[str] = ()
) -> tuple[Path, Path | None]:
    """Return the run directory and the checkpoint to resume from (None for a fresh run); nothing is created.

    UsageError for a bad --output-dir or --run-name, an --output-dir or --run-name in `explicit` (given) that is
    not the resumed checkpoint's directory, or a fresh run in a directory that holds a run.
    """
    existing = next(folder for folder in (output_dir, *output_dir.parents) if folder.exists())  # the nearest
    if not existing.is_dir():
        where = "is a file" if existing == output_dir else f"is under {existing}, a file"
        raise UsageError(f"--output-dir {output_dir} {where}, not a directory")
    if run_name is not None and (Path(run_name).name != run_name or run_name in ("", ".", "..")):
        raise UsageError(f"--run-name {run_name!r} must be a plain directory name, without / or ..")
    if run_name is not None and len(os.fsencode(run_name)) > 255:  # a failed write, later, otherwise
        raise UsageError(f"--run-name {run_name[:60]}...: longer than file systems take (a name 255 bytes)")
    if auto_resume and (run_name is None or resume is not None):
        raise UsageError("--auto-resume needs a fixed --run-name (and no --resume) to find the run again")
    if resume is not None:
        path = resolve(resume)
        output_given = "output_dir" in explicit or "run_name" in explicit
        if output_given and (output_dir / (run_name or path.parent.name)).resolve() != path.parent.resolve():
            raise UsageError(
                f"--resume continues in the checkpoint's own directory {path.parent}; leave out --output-dir and "
                "--run-name (to branch off into a new run, copy the checkpoint into a new directory and resume that)"
            )
        last = path.parent / "last.pt"
        if path.name != last.name and last.exists():
            raise UsageError(
                f"resuming {path} would overwrite {last}; resume {path.parent} instead, or copy {path.name} "
                "into a new directory and resume that"
            )
        return path.parent, path
    if run_name is None:  # the start time; make_run_dir() adds -2, -3, ... if another run has it
        return output_dir / time.strftime("%Y%m%d-%H%M%S"), None
    run_dir = output_dir / run_name
    last = run_dir / "last.pt"
    if last.is_file() and auto_resume:
        return run_dir, last
    if last.exists():
        raise UsageError(f"{run_dir} already holds a checkpoint; continue with --resume {run_dir} or pick a --run-name")
    if auto_resume and (kept := sorted(p.name for p in run_dir.glob("*.pt"))):  # no last.pt
        held, furthest = f"{run_dir} holds {', '.join(kept)} but no last.pt", furthest_readable(run_dir)
        if not furthest:
            raise UsageError(f"{held}, and none of them reads: pick another --run-name (a fresh run overwrites them)")
        if not validated_past(run_dir, furthest[0]):  # a job stopped between writing best.pt and a first last.pt
            return run_dir, furthest[1]
        then = f"put last.pt back or go on with {resume_command(furthest[1])}, or pick another --run-name"
        raise UsageError(f"{held}, and later epochs were validated: {then}")
    if run_dir.exists() and not auto_resume:
        raise UsageError(f"{run_dir} already exists; pick another --run-name, or remove it")
    return run_dir, None


TRAINING_STATE = {"run_state", "optimizer", "scheduler", "scaler", "rng"}  # what resuming restores, besides the model


def open_run(
    output_dir: Path,
    run_name: str | None,
    resume: Path | None,
    auto_resume: bool,
    explicit: Collection[str] = (),
    world_size: int = 1,
) -> tuple[Path, Path | None, dict[str, Any] | None]:
    """find_run(), and the checkpoint's contents (None for a fresh run), which `world_size` processes resume."""
    run_dir, path = find_run(output_dir, run_name, resume, auto_resume, explicit)
    check_utf8(str(run_dir))  # args.json and TensorBoard's files name it
    if path is None:
        return run_dir, None, None
    try:
        state = load(path)
    except UsageError as err:
        raise UsageError(f"{err}{readable_instead(path)}") from None
    if missing := TRAINING_STATE - state.keys():  # a model saved alone, say
        raise UsageError(f"{path} holds no training state to resume (no {', '.join(sorted(missing))}); start a new run")
    check_same_processes(state, world_size)
    return run_dir, path, state


def readable_instead(last: Path) -> str:
    """For a last.pt that cannot be read: how to go on from the run's furthest other checkpoint that can, or ""."""
    if last.name != "last.pt" or not (furthest := furthest_readable(last.parent)):
        return ""
    return f"; {furthest[1].name} reads: move {last} aside, then resume it: {resume_command(furthest[1])}"


def furthest_readable(run_dir: Path) -> tuple[int, Path] | None:
    """(steps, path) of the newest epoch-N.pt that reads or best.pt, whichever holds more steps; None if neither.

    An epoch file left from before a resume without --keep-epochs may be older than best.pt.
    """
    found = []  # (steps, path) of the newest readable epoch file and of best.pt
    for others in (reversed(epoch_checkpoints(run_dir)), [run_dir / "best.pt"]):
        for other in others:
            try:
                found.append((load(other)["run_state"]["global_step"], other))
                break
            except (UsageError, KeyError, TypeError):  # missing, unreadable, or no training state
                continue
    return max(found) if found else None


def validated_past(run_dir: Path, steps: int) -> bool:
    """Whether metrics.jsonl has an epoch validated past `steps`: the run went on after a checkpoint of that many.

    Where last.pt is missing, none means a job stopped between writing best.pt and last.pt at its first epoch (an
    epoch is logged before it is saved), or stopped again before the next epoch ended, or a kept epoch-<N>.pt of
    the last epoch: --auto-resume resumes it; a later epoch validated (last.pt deleted or moved aside): it refuses.
    """
    with contextlib.suppress(OSError):
        for row in (run_dir / "metrics.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):  # a line cut short
                if (logged := json.loads(row))["split"] != "train" and logged["step"] > steps:
                    return True
    return False


def make_run_dir(run_dir: Path, *, unique: bool, exist_ok: bool) -> Path:
    """Create a fresh run's directory, exclusively, so that no two runs ever share one; return it.

    `unique` (a default name): if another run took it, take <name>-2, <name>-3, ...; else UsageError unless
    `exist_ok` (--auto-resume before a first checkpoint).
    """
    candidate, attempt = run_dir, 1
    while True:
        try:
            candidate.mkdir(parents=True, exist_ok=exist_ok)
            return candidate
        except FileExistsError:
            if not unique:
                raise UsageError(f"{run_dir} already exists; pick another --run-name, or remove it") from None
            attempt += 1
            candidate = run_dir.with_name(f"{run_dir.name}-{attempt}")
        except OSError as err:  # a read-only or full disk, no permission
            raise OutputError(f"cannot create {candidate} ({reason(err)})") from None


def check_unfinished(run_dir: Path, run_state: dict[str, Any], epochs: int, patience: int | None) -> None:
    """Raise RunFinished when a resumed run has nothing left to do with these --epochs and --patience."""
    if run_state["epoch"] >= epochs:
        raise RunFinished(
            f"{run_dir} is finished (epoch {run_state['epoch']} of --epochs {epochs}); "
            "resume with a larger --epochs to train on"
        )
    if patience and run_state["epochs_without_improvement"] >= patience:
        raise RunFinished(
            f"{run_dir} has had {run_state['epochs_without_improvement']} epochs without a better validation score, "
            f"which meets --patience {patience}; resume with a larger --patience (0: off) to train on"
        )


def check_same_processes(state: dict[str, Any], world_size: int) -> None:
    """UsageError unless as many processes resume the run as saved their random streams in it (an older one: any)."""
    saved = state["rng"]
    if isinstance(saved, list) and len(saved) != world_size:
        raise UsageError(
            f"the run trained with world size {len(saved)}, this launch has {world_size}: the global batch, the "
            f"steps of an epoch and the learning-rate curve would change; resume it under torchrun with world size "
            f"{len(saved)} (nodes x processes per node, in a multi_gpu=ddp project), or start a new run"
        )


def check_same_data(views: list[tuple[list[str], int, int]]) -> None:
    """UsageError unless every process's (classes, training items, validation items) in `views` are rank 0's."""
    first = views[0]
    for rank, (classes, train, val) in enumerate(views):
        if (classes, train, val) != tuple(first):
            differ = "other classes; " if classes != first[0] else ""
            raise UsageError(
                f"rank {rank} sees other data than rank 0 ({differ}{train} training and {val} validation items, "
                f"rank 0 {first[1]} and {first[2]}); give every machine the same copy of the data"
            )


def check_outside(run_dir: Path, folders: list[Path], resuming: bool) -> None:
    """UsageError where the run directory is inside one of the `folders` whose every image is data.

    Inside as written (images are listed through links) or as resolved; not under a hidden name (never listed).
    """
    for folder in folders:
        as_written = Path(os.path.abspath(run_dir)), Path(os.path.abspath(folder))  # ".." taken out, links kept
        for run, data in (as_written, (run_dir.resolve(), folder.resolve())):
            if run.is_relative_to(data) and not any(is_hidden(part) for part in run.relative_to(data).parts):
                then = f"move {run_dir} out and resume it there" if resuming else "give an --output-dir outside it"
                raise UsageError(
                    f"run directory {run_dir} is inside {folder}, every image of which is data: its pictures would "
                    f"be read as images; {then}"
                )


def check_runs_data(classes: list[str], train: Dataset, val: Dataset, resumed: dict[str, Any] | None) -> dict[str, Any]:
    """What the run saves of its data; UsageError for a `resumed` run's other data.

    That is "val_files", the validation split's images.fingerprint, and "train_sample", images.sample_digests of
    its training split (for test.py). The data of a resumed run (moved, perhaps) must have the classes it was
    trained on, in their order, and the validation files it scored (compared where both have a fingerprint).
    """
    digests = {"val_files": fingerprint(val), "train_sample": sample_digests(train)}
    if resumed is None:
        return digests
    if classes != (saved := resumed.get("classes", classes)):
        only = sorted(set(classes) ^ set(saved))
        why = f"{only[0]!r} is in only one of them" if only else "the same names in another order"
        raise UsageError(f"the data's classes are not the run's: {why}; start a new run")
    check_val_files(digests["val_files"], resumed, "give its own data, or start a new run")
    return digests


def check_val_files(val_files: str | None, saved: dict[str, Any], then: str) -> None:
    """UsageError, saying `then`, where the run `saved` scored other files than `val_files` (images.fingerprint's).

    Compared where both have one (a checkpoint of torchvision's datasets or an older run has none).
    """
    if None not in (val_files, saved.get("val_files")) and val_files != saved["val_files"]:
        why = "other names or sizes than those it scored"
        raise UsageError(f"the data's validation images are not the run's: {why}; {then}")


def what_is_kept(run_dir: Path, then: str = "free some space and resume", flags: str | None = "") -> str:
    """After a failed write or a stop: the intact checkpoint (last.pt, else epoch 1's best.pt) and how to go on.

    How: `then` and the command that resumes the run, `flags` added; `then` alone if `flags` is None.
    """
    if not (kept := [path for path in (run_dir / "last.pt", run_dir / "best.pt") if path.is_file()]):
        return f"no checkpoint had been written yet in {run_dir}"
    resume = resume_command(run_dir if kept[0].name == "last.pt" else kept[0])
    return f"the last good checkpoint {kept[0]} is intact; {then}" + (f": {resume}{flags}" if flags is not None else "")


def resume_command(path: Path) -> str:
    """The command that continues a run from `path`: under torchrun, with this launch's processes, as it must."""
    if "LOCAL_WORLD_SIZE" not in os.environ:  # not launched by torchrun
        return f"python train.py --resume {path}"
    per_node = int(os.environ["LOCAL_WORLD_SIZE"])
    nodes = int(os.environ["WORLD_SIZE"]) // per_node
    launch = "--standalone" if nodes == 1 else f"--nnodes={nodes} <your rendezvous flags>"
    return f"torchrun {launch} --nproc_per_node={per_node} train.py --resume {path}"
