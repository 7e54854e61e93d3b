"""How batches reach the training loop, for any dataset: DataLoaders, unreadable files, a loading thread."""

import atexit
import contextlib
import functools
import itertools
import multiprocessing
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing import resource_tracker
from typing import Any

import torch
from prefetch_generator import BackgroundGenerator
from torch.utils.data import DataLoader, Dataset, default_collate

from . import UsageError
from .images import SkipsUnreadable
from .samplers import Seeded, SeededSampler


@functools.cache  # one for every loader of the process: train.main() called again (a notebook) adds none
def exit_flag() -> Any:
    """1 at exit, before multiprocessing's exit handler (run later) ends the workers with the one SIGTERM they obey.

    No lock: a signal handler reads it (an Event's lock, which a second signal interrupts, deadlocks).
    """
    flag = multiprocessing.RawValue("b", 0)
    atexit.register(setattr, flag, "value", 1)
    return flag


def build_loader(dataset: Dataset, batch_size: int, *, train: bool = False, **options: Any) -> DataLoader:
    """A DataLoader (`options` go to it) that draws no random number from torch's global generator.

    Training drops the last incomplete batch (a batch of one breaks batch norm); evaluation skips unreadable files.
    """
    options.setdefault("collate_fn", None if train else collate_readable)
    options["persistent_workers"] = options.get("num_workers", 0) > 0
    if options["persistent_workers"]:
        then = options.get("worker_init_fn")  # the caller's own worker set-up runs after the signal policy
        options["worker_init_fn"] = functools.partial(leave_stop_signals_to_the_main_process, exit_flag(), then)
    return DataLoader(dataset, batch_size, drop_last=train, generator=torch.Generator().manual_seed(0), **options)


def leave_stop_signals_to_the_main_process(exiting: Any, then: Callable[[int], None] | None, worker_id: int) -> None:
    """In a DataLoader worker: ignore SIGINT, and SIGTERM until `exiting.value` is 1 (then exit 0); call `then`.

    SLURM, a terminal, `kill -- -PGID` and torchrun signal every process: a worker that died of it would end the run
    in a traceback, not after the step with last.pt written. A worker whose main process died stops by itself.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_sigterm(signum: int, frame: object) -> None:
        if exiting.value:  # the main process is ending its workers: exit 0, as a worker killed by a signal makes
            os._exit(0)  # torch's SIGCHLD handler raise in the main process (a traceback after a run's error line)

    signal.signal(signal.SIGTERM, on_sigterm)
    if hasattr(signal, "pthread_sigmask"):  # held since the worker started (held_stop_signals): taken up now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if then is not None:
        then(worker_id)


@contextlib.contextmanager
def held_stop_signals() -> Iterator[None]:
    """SIGINT and SIGTERM held, not lost, in the block: DataLoader workers started in it start with them held.

    A spawned worker (macOS's default) imports torch for seconds before its worker_init_fn installs the handlers; a
    Ctrl-C or SLURM's SIGTERM to the whole process group then would kill it and fail the run.
    """
    if not hasattr(signal, "pthread_sigmask"):  # Windows
        yield
        return
    if multiprocessing.get_start_method() != "fork":  # its tracker, started with the first worker, would unblock them
        resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a signal that came meanwhile is handled now


def num_workers(requested: int | None, dataset: Dataset) -> int:
    """DataLoader workers: `requested`, else none for data in memory, and up to 8 for image files (SkipsUnreadable)."""
    if requested is not None:
        return requested
    if not isinstance(dataset, SkipsUnreadable):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))  # shared by torchrun's processes


def build_split_loaders(
    train: Dataset,
    val: Dataset,
    batch_size: int,
    *,
    seed: int,
    collate_fn: Any,
    rank: int = 0,
    world_size: int = 1,
    **options: Any,
) -> tuple[DataLoader, DataLoader]:
    """Training loader (Seeded(train)'s items, batched by `collate_fn`) and validation loader; `options` go to both.

    Each process gets its share: training padded to the same number of batches on every rank, validation unpadded
    so each sample is counted once. UsageError when a share is smaller than one batch. Validation's workers start here.
    """
    sampler = SeededSampler(len(train), seed, rank, world_size)  # keys (index, seed)
    val_sampler = range(rank, len(val), world_size) if world_size > 1 else None
    seeded = Seeded(train)  # items (..., seed)
    train_loader = build_loader(seeded, batch_size, sampler=sampler, train=True, collate_fn=collate_fn, **options)
    val_loader = build_loader(val, batch_size, sampler=val_sampler, **options)
    if len(train_loader) == 0:  # the last partial batch is dropped: a share smaller than a batch gives none
        share = f" {sampler.num_samples} per process," if world_size > 1 else ""
        size = f"--batch-size {batch_size}" + (", per process" if world_size > 1 else "")
        raise UsageError(f"the training set has {len(train)} samples,{share} fewer than one batch ({size})")
    # Fork the (persistent) validation workers now, not right after an epoch's collectives: on Python < 3.11.10 a fork
    # while a thread takes the GIL afresh (a gloo thread, it seems) can hang the child (python/cpython#112275). The
    # training workers start with the first epoch: forked here too, they would race validation's pin-memory thread.
    if val_loader.num_workers > 0:
        with held_stop_signals():
            iter(val_loader)  # its first batches are loaded again at the first validation
    return train_loader, val_loader


def collate_readable(items: list[tuple[Any, ...] | None]) -> tuple[torch.Tensor, ...] | None:
    """Stack the items that are not None (unreadable files), field by field; None when none is left."""
    readable = [item for item in items if item is not None]
    return default_collate(readable) if readable else None


def unreadable_flags(loader: DataLoader) -> torch.Tensor:
    """A flag per file of the loader's dataset, set for the files found unreadable so far ((0,) if it has no files)."""
    dataset = loader.dataset.dataset if isinstance(loader.dataset, Seeded) else loader.dataset
    return dataset.unreadable if isinstance(dataset, SkipsUnreadable) else torch.zeros(0, dtype=torch.bool)


def prefetch_depth(requested: int | None, device: torch.device, num_workers: int) -> int:
    """Batches the loading thread keeps ready: `requested`, else 2 on a GPU without DataLoader workers, else 0."""
    if requested is not None:
        return requested
    # On the CPU torch's compute threads use every core: a loading thread slowed the loop by 6-20 %.
    return 2 if device.type != "cpu" and num_workers == 0 else 0


@contextlib.contextmanager
def background_batches(loader: DataLoader, depth: int) -> Iterator[Iterator]:
    """Iterate `loader` in a thread keeping `depth` batches ready (0: no thread); it ends on exit, its errors raised."""
    with held_stop_signals():  # the first epoch starts the workers, in this thread
        batches = iter(loader)
    if depth == 0:
        yield batches
        return
    stop = threading.Event()
    # BackgroundGenerator (>= 1.0.3) hands the producer's error to the consumer: its next() raises it.
    thread = BackgroundGenerator(itertools.takewhile(lambda _: not stop.is_set(), batches), max_prefetch=depth)
    try:
        yield thread
    finally:
        stop.set()
        while thread.is_alive():  # take batches so a pending put returns and the producer sees `stop`
            with contextlib.suppress(queue.Empty):
                thread.queue.get(timeout=0.05)
