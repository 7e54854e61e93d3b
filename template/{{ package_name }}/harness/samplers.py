"""Samplers: which sample indices each process reads, in which order.

Training shuffles anew each epoch and pads so every rank runs the same number of steps, and
gives each sample the seed of its random augmentation, which Seeded sets while the sample is
read; evaluation shards without padding so every sample is counted exactly once.
"""

import contextlib
import math
from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, Sampler


class ShuffleSampler(Sampler[int]):
    """A new shuffle each epoch, a pure function of (seed, epoch), split across ranks.

    Every rank gets ceil(N / world_size) indices (the shuffled list is padded by wrapping
    around), so all ranks run the same number of steps. `set_epoch(epoch, start)` skips the
    first `start` indices of this rank's share: a run interrupted mid-epoch resumes on
    exactly the batches it had not seen.
    """

    def __init__(self, num_samples: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        self.num_samples = num_samples
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.per_rank = math.ceil(num_samples / world_size)
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Choose the epoch's permutation, and how many of this rank's indices to skip."""
        self.epoch = epoch
        self.start = start

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.num_samples, generator=gen)
        total = self.per_rank * self.world_size  # pad by wrapping around, as often as needed
        order = order.repeat(math.ceil(total / self.num_samples))[:total]
        return iter(order[self.rank :: self.world_size][self.start :].tolist())

    def __len__(self) -> int:
        return max(0, self.per_rank - self.start)


class SeededSampler(Sampler[tuple[int, int]]):
    """The indices of a ShuffleSampler, each with its augmentation seed: (index, sample_seed(seed, epoch, index)).

    The seed depends on nothing else (not on the worker, the process or what ran before), so a
    sample is augmented the same way in a run left alone and in one resumed mid-epoch.
    """

    def __init__(self, sampler: ShuffleSampler) -> None:
        self.sampler = sampler

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """ShuffleSampler.set_epoch()."""
        self.sampler.set_epoch(epoch, start)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        seed, epoch = self.sampler.seed, self.sampler.epoch
        return ((index, sample_seed(seed, epoch, index)) for index in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A well-mixed 63-bit seed from three integers (splitmix64's finaliser): nearby inputs give unrelated seeds."""
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xD1B54A32D192ED03 + index * 0x8CB92BA72F3D8DD7) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
    return (x ^ (x >> 31)) >> 1


class ShardSampler(Sampler[int]):
    """Indices rank, rank + world_size, ... without padding: evaluation sees every sample once.

    Shards differ in length by at most one, so evaluation must not run collectives per batch;
    it sums its results locally and reduces them once at the end.
    """

    def __init__(self, num_samples: int, rank: int, world_size: int) -> None:
        self.indices = range(rank, num_samples, world_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


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
