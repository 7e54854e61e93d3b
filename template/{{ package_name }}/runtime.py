"""Process set-up shared by the scripts: flags, devices, seeds, backend flags, autocast, signals."""

import argparse
import contextlib
import os
import platform
import random
import signal
import threading
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np
import torch

from . import UsageError

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """Turn --device auto|cpu|cuda|cuda:N|mps into a device that exists here, or raise UsageError."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r} is not a device; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) visible")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS is not available on this machine; use --device cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"--device {name!r} is not supported; use auto, cpu, cuda, cuda:N or mps")
    return device


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (every device) from one number."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def configure_backends(deterministic: bool) -> None:
    """Deterministic kernels when asked; otherwise let cuDNN pick the fastest for fixed shapes."""
    if deterministic:
        # cuBLAS needs a fixed workspace for reproducible matmuls on CUDA >= 10.2.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic


def autocast(device: torch.device, amp: str) -> contextlib.AbstractContextManager:
    """torch.autocast for --amp bf16|fp16, a no-op context for --amp none."""
    if amp == "none":
        return contextlib.nullcontext()
    if amp == "fp16" and device.type == "cpu":
        raise UsageError("--amp fp16 needs a GPU; on CPU use --amp bf16 or --amp none")
    return torch.autocast(device.type, dtype=AMP_DTYPES[amp])


def environment(device: torch.device) -> dict[str, Any]:
    """Versions and hardware, printed at start and saved with the run."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(device),
        "threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    else:
        info["device_name"] = platform.processor() or platform.machine()
    return info


class StopSignal:
    """Record SIGINT and SIGTERM instead of dying mid-step, so training can save and exit cleanly.

    Use as a context manager around the training loop and check `received` (the signal
    number, or None) between steps. A second Ctrl-C raises KeyboardInterrupt at once.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread():  # signal handlers live there only
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: object) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signum


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line instead of the whole usage text."""

    def error(self, message: str) -> NoReturn:
        """Print `prog: error: message` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def positive(kind: type) -> Callable[[str], Any]:
    """An argparse type: `kind` parsed from text, rejected unless > 0."""

    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = f"positive {kind.__name__}"  # argparse names it in "invalid ... value"
    return parse


def non_negative(kind: type) -> Callable[[str], Any]:
    """An argparse type: `kind` parsed from text, rejected if < 0."""

    def parse(text: str) -> Any:
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value

    parse.__name__ = f"non-negative {kind.__name__}"
    return parse


def int_list(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated positive integers such as 16,32,64."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 16,32,64, got {text!r}") from None
    if min(values) <= 0:
        raise argparse.ArgumentTypeError(f"values must be > 0, got {text!r}")
    return values
