"""Which samples each training process reads, in which order, each with the seed of its random augmentation."""

import contextlib
import hashlib
import itertools
from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, DistributedSampler


class SeededSampler(DistributedSampler):
    """DistributedSampler's shuffle, a function of (seed, epoch), as keys (index, sample_seed(seed, epoch, index)).

    Every rank gets num_samples = ceil(N / world_size) keys (padded by wrapping around). set_epoch(epoch, start)
    skips the first `start`: a run resumed mid-epoch sees exactly the batches it had not, augmented as they would be.
    """

    def __init__(self, size: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        super().__init__(range(size), world_size, rank, shuffle=True, seed=seed)  # it needs only the length
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Choose the epoch's permutation, and how many of this rank's keys to skip."""
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


def hold_out(keys: list[str], fraction: float) -> list[str]:
    """Of distinct `keys` (two or more), those held out for validation: at least one, never all, in a stable order.

    The keys whose SHA-256, read as a number in [0, 1), is below `fraction`: the same on every machine and run, and
    adding keys moves none of the others (unless the count of held-out keys meets a bound).
    """
    place = {key: int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64 for key in keys}
    count = sum(value < fraction for value in place.values())
    return sorted(keys, key=place.__getitem__)[: min(max(count, 1), len(keys) - 1)]


class Seeded(Dataset):
    """Reads `dataset[index]` for keys (index, seed) under fixed_seed(seed); items are (image, label, seed)."""

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
    """In the block torch's CPU generator (no CUDA call in loader workers) starts from `seed`; then it is restored."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield
