"""How batches reach the training loop, for any dataset: DataLoaders, unreadable files, a loading thread.

The dataset module (data.py) builds the datasets and calls build_loader(); train.py iterates
the loaders through background_batches(), and counts the files skipped with unreadable_flags().
"""

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from prefetch_generator import BackgroundGenerator
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate

from .images import SkipsUnreadable
from .samplers import Seeded


def build_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    sampler: Sampler | None = None,
    train: bool = False,
    num_workers: int = 0,
    pin_memory: bool = False,
    collate_fn: Callable | None = None,
) -> DataLoader:
    """Wrap a dataset in a DataLoader.

    Training drops the last incomplete batch (a batch of one breaks batch norm); evaluation
    keeps every sample that can be read (collate_readable), in order unless a sampler is given.
    The loader's own generator seeds its workers, so creating an iterator draws nothing from
    torch's global generator.
    """
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=train,
        num_workers=num_workers,
        pin_memory=pin_memory,
        collate_fn=collate_fn or (None if train else collate_readable),
        generator=torch.Generator().manual_seed(0),
        # Workers stay alive across epochs instead of being forked again each epoch.
        persistent_workers=num_workers > 0,
    )


def collate_readable(items: list[tuple[Any, ...] | None]) -> tuple[torch.Tensor, ...] | None:
    """Stack the items that are not None (unreadable files), field by field; None when none is left."""
    readable = [item for item in items if item is not None]
    return default_collate(readable) if readable else None


def unreadable_flags(loader: DataLoader) -> torch.Tensor:
    """A flag per file of the loader's dataset, set for the files found unreadable so far ((0,) if it has no files)."""
    dataset = loader.dataset.dataset if isinstance(loader.dataset, Seeded) else loader.dataset
    return dataset.unreadable if isinstance(dataset, SkipsUnreadable) else torch.zeros(0, dtype=torch.bool)


class _Failure(NamedTuple):
    error: BaseException


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
    the thread is stopped and joined, so no thread or loader iterator is left behind; an
    error raised while loading is re-raised in the caller instead of hanging it.
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
        except Exception as err:  # noqa: BLE001 - handed to the consumer, which re-raises it
            yield _Failure(err)

    thread = BackgroundGenerator(produce(), max_prefetch=depth)

    def consume() -> Iterator:
        for item in thread:
            if isinstance(item, _Failure):
                raise item.error
            yield item

    try:
        yield consume()
    finally:
        stop.set()
        while thread.is_alive():  # take batches so a pending put returns and the producer sees `stop`
            with contextlib.suppress(queue.Empty):
                thread.queue.get(timeout=0.05)
        thread.join()
