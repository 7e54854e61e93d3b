"""Samplers: which sample indices each process reads, in which order.

Training shuffles anew each epoch and pads so every rank runs the same number of steps, and
gives each sample the seed of its random augmentation, which Seeded sets while the sample is
read; evaluation shards without padding so every sample is counted exactly once.
"""

import contextlib
import itertools
from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, DistributedSampler


class SeededSampler(DistributedSampler):
    """DistributedSampler's shuffle, from any point of an epoch, each index with its augmentation seed.

    A new shuffle each epoch, a pure function of (seed, epoch), split across ranks: every rank
    gets num_samples = ceil(N / world_size) indices (the shuffled list is padded by wrapping
    around), so all ranks run the same number of steps. Each index comes as the key (index,
    sample_seed(seed, epoch, index)) for Seeded: the seed depends on nothing else (not on the
    worker, the process or what ran before). `set_epoch(epoch, start)` skips the first `start`
    keys of this rank's share, so a run interrupted mid-epoch resumes on exactly the batches it
    had not seen, augmented as they would have been.
    """

    def __init__(self, size: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        super().__init__(range(size), world_size, rank, shuffle=True, seed=seed)  # it needs only the length
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Choose the epoch's permutation, and how many of this rank's indices to skip."""
        super().set_epoch(epoch)
        self.start = start

    def __iter__(self) -> Iterator[tuple[int, int]]:
        indices = itertools.islice(super().__iter__(), self.start, None)
        return ((index, sample_seed(self.seed, self.epoch, index)) for index in indices)

    def __len__(self) -> int:
        return max(0, self.num_samples - self.start)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A well-mixed 63-bit seed from three integers (splitmix64's finaliser): nearby inputs give unrelated seeds."""
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xD1B54A32D192ED03 + index * 0x8CB92BA72F3D8DD7) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
    return (x ^ (x >> 31)) >> 1


def shard_indices(size: int, rank: int, world_size: int) -> range:
    """Indices rank, rank + world_size, ... without padding, a DataLoader's sampler: evaluation sees every sample once.

    Shards differ in length by at most one, so evaluation must not run collectives per batch;
    it sums its results locally and reduces them once at the end.
    """
    return range(rank, size, world_size)


class Seeded(Dataset):
    """Reads `dataset[index]` for keys (index, seed) with torch's random numbers seeded by `seed`.

    torchvision's random transforms draw from torch's global generator; seeding it per sample
    (and putting its state back afterwards) makes each sample's augmentation a function of its
    seed alone, and leaves the training loop's own random numbers (dropout) untouched. Items are
    (image, label, seed): BatchMix seeds the batch's mixing from them.
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, int, int]:
        index, seed = key
        with fixed_seed(seed):
            image, label = self.dataset[index]
        return image, label, seed


@contextlib.contextmanager
def fixed_seed(seed: int) -> Iterator[None]:
    """Within the block, torch's global CPU generator starts from `seed`; afterwards it is as it was before."""
    generator = torch.default_generator  # the CPU generator only: no CUDA call in a loader worker
    state = generator.get_state()
    generator.manual_seed(seed)
    try:
        yield
    finally:
        generator.set_state(state)
