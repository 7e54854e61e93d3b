"""How batches reach the training loop, for any dataset: DataLoaders, unreadable files, a loading thread.

The dataset module (data.py) builds the datasets and calls build_split_loaders() (or build_loader()); train.py iterates
the loaders through background_batches(), and counts the files skipped with unreadable_flags().
"""

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import Any

import torch
from prefetch_generator import BackgroundGenerator
from torch.utils.data import DataLoader, Dataset, default_collate

from . import UsageError
from .images import SkipsUnreadable
from .samplers import Seeded, SeededSampler, shard_indices


def build_loader(dataset: Dataset, batch_size: int, *, train: bool = False, **options: Any) -> DataLoader:
    """Wrap a dataset in a DataLoader; `options` go to it (sampler, num_workers, pin_memory, collate_fn).

    Training drops the last incomplete batch (a batch of one breaks batch norm); evaluation
    keeps every sample that can be read (collate_readable), in order unless a sampler is given.
    The loader's own generator seeds its workers, so creating an iterator draws nothing from
    torch's global generator; workers stay alive across epochs instead of being forked again.
    """
    options.setdefault("collate_fn", None if train else collate_readable)
    options["persistent_workers"] = options.get("num_workers", 0) > 0
    return DataLoader(dataset, batch_size, drop_last=train, generator=torch.Generator().manual_seed(0), **options)


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
    """Training loader (a new shuffle each epoch, each sample with its seed) and validation loader.

    Training items are Seeded(train)'s (..., seed), batched by `collate_fn`. With world_size > 1
    each process gets its share: training batches padded to the same count on every rank,
    validation split without padding so each sample is counted once. `options` go to both
    DataLoaders. Raises UsageError when a process's share is smaller than one batch.
    """
    sampler = SeededSampler(len(train), seed, rank, world_size)  # keys (index, seed)
    val_sampler = shard_indices(len(val), rank, world_size) if world_size > 1 else None
    seeded = Seeded(train)  # items (..., seed)
    train_loader = build_loader(seeded, batch_size, sampler=sampler, train=True, collate_fn=collate_fn, **options)
    val_loader = build_loader(val, batch_size, sampler=val_sampler, **options)
    if len(train_loader) == 0:  # the last partial batch is dropped: a share smaller than a batch gives none
        if world_size == 1:
            raise UsageError(f"the training set has {len(train)} images, fewer than one batch of {batch_size}")
        raise UsageError(
            f"the training set has {len(train)} images, {sampler.num_samples} per process, "
            f"fewer than one batch of {batch_size} (--batch-size is per process)"
        )
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
    """Batches the BackgroundGenerator thread loads ahead: `requested`, else 2 where the thread pays, else 0.

    It pays on a GPU with num_workers 0: the loop's thread would load each batch while the GPU
    waits. On the CPU, torch's compute threads already use every core and a loading thread only
    competes with them (it made the loop 6-20 % slower on 2 cores); with DataLoader workers, other
    processes already load ahead.
    """
    if requested is not None:
        return requested
    return 2 if device.type != "cpu" and num_workers == 0 else 0


@contextlib.contextmanager
def background_batches(loader: DataLoader, depth: int) -> Iterator[Iterator]:
    """Iterate `loader` in a BackgroundGenerator thread that keeps `depth` batches ready.

    depth 0 iterates in the caller's thread. On exit, even after a `break` or an exception,
    the thread has ended, so no thread or loader iterator is left behind; an error raised
    while loading is re-raised in the caller instead of hanging it.
    """
    if depth == 0:
        yield iter(loader)
        return
    stop = threading.Event()

    def produce() -> Iterator:
        try:
            for batch in loader:
                if stop.is_set():
                    return
                yield batch
        except Exception as err:  # noqa: BLE001 - handed to the consumer, which re-raises it (no batch is one)
            yield err

    thread = BackgroundGenerator(produce(), max_prefetch=depth)

    def consume() -> Iterator:
        for item in thread:
            if isinstance(item, Exception):
                raise item
            yield item

    try:
        yield consume()
    finally:
        stop.set()
        while thread.is_alive():  # take batches so a pending put returns and the producer sees `stop`
            with contextlib.suppress(queue.Empty):
                thread.queue.get(timeout=0.05)
