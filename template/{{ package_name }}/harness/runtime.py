"""Process set-up shared by the scripts: flags, devices, seeds, backend flags, autocast, signals."""

import argparse
import contextlib
import copy
import functools
import math
import os
import platform
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, NoReturn, TextIO

import numpy as np
import torch

from . import UsageError


def resolve_device(name: str) -> torch.device:
    """Turn --device auto|cpu|cuda|cuda:N|mps into a device that exists here, or raise UsageError."""
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if name == "auto":
        name = "cuda" if available["cuda"] else "mps" if available["mps"] else "cpu"
    device = None
    with contextlib.suppress(RuntimeError):  # not a device name: "gpu0", "cuda:x"
        device = torch.device(name)
    if device is None or device.type not in available:
        raise UsageError(f"--device {name!r} is not a device; use auto, cpu, cuda, cuda:N or mps")
    if not available[device.type]:
        raise UsageError(f"--device {name}: {device.type.upper()} is not available on this machine; use --device cpu")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) visible")
    if device.type == "cuda" and device.index is not None:  # pinned memory follows the current device: no context
        torch.cuda.set_device(device)  # on GPU 0 for a run on cuda:1
    return device


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (every device) from one number."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def configure_backends(deterministic: bool) -> None:
    """Deterministic kernels when asked, an op that has none warning by name; else cuDNN picks the fastest.

    On CUDA both tasks' models use such ops (AdaptiveAvgPool2d's and bilinear upsampling's backward): raising for
    them would stop every --deterministic run at its first step.
    """
    if deterministic:  # cuBLAS needs a fixed workspace for reproducible matmuls
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic


def non_blocking(device: torch.device) -> bool:
    """Whether host-to-`device` copies may be asynchronous: to CUDA only."""
    return device.type == "cuda"  # to MPS, an asynchronous copy may read memory already freed (pytorch#139550)


def autocast(device: torch.device, amp: str) -> contextlib.AbstractContextManager:
    """torch.autocast for --amp bf16|fp16, a no-op context for --amp none; UsageError for fp16 on the CPU."""
    if amp == "none":
        return contextlib.nullcontext()
    if amp == "fp16" and device.type == "cpu":
        raise UsageError("--amp fp16 needs a GPU; on CPU use --amp bf16 or --amp none")
    return torch.autocast(device.type, dtype=torch.float16 if amp == "fp16" else torch.bfloat16)


def environment(device: torch.device) -> dict[str, Any]:
    """Versions and hardware, printed at start and saved with the run."""
    cuda = device.type == "cuda"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }


class StopSignal:
    """Record SIGINT and SIGTERM around the training loop instead of dying mid-step, so that it saves and exits.

    poll() says whether to stop after this step; `vote` (distributed.StopVote) shares each process's request.
    Repeats (SLURM and torchrun both deliver SIGTERM) never cut the save short: only a second Ctrl-C, at least
    ESCALATE_AFTER seconds after the first signal, raises KeyboardInterrupt at once.
    """

    ESCALATE_AFTER = 1.0  # seconds: a launcher's duplicate arrives within milliseconds, a person's second press later

    def __init__(self, vote: Callable[[int, bool], int] = lambda request, wait: request) -> None:
        self.received: int | None = None  # the first signal this process received
        self.signal: int | None = None  # the signal all processes stop for, once poll() agreed on one
        self.vote = vote
        self._first_at = 0.0
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
        if self.received is None:
            self.received, self._first_at = signum, time.monotonic()
            name = signal.Signals(signum).name
            said = f"\n{name}: saving after this step (or now, in validation); a second Ctrl-C stops unsaved\n"
            if os.environ.get("LOCAL_RANK", "0") == "0":  # os.write: a print here could break one in progress
                with contextlib.suppress(OSError):  # stderr closed or its reader gone: the stop goes on regardless
                    os.write(2, said.encode())
        elif signum == signal.SIGINT and time.monotonic() - self._first_at >= self.ESCALATE_AFTER:
            raise KeyboardInterrupt

    def poll(self, wait: bool = False) -> bool:
        """True when the run should stop after this step: a signal came to any process (`wait`: up to now)."""
        self.signal = self.vote(self.received or 0, wait) or None  # signal numbers, 0 for none
        return self.signal is not None


def refuse_idle_flags(args: argparse.Namespace, given: Collection[str], acts_only_with: dict[str, tuple]) -> None:
    """UsageError for a flag `given` where it would change nothing, rather than ignore it silently.

    `acts_only_with`: flag (by dest) -> (what it needs, in words; a predicate on `args` that says whether it acts).
    """
    for name, (needs, acts) in acts_only_with.items():
        if name in given and not acts(args):
            raise UsageError(f"--{name.replace('_', '-')} acts only with {needs}; leave it out")


def print_once(message: str, file: TextIO | None = None) -> None:
    """print() a line; under torchrun (which sets LOCAL_RANK) from the first process of each machine only."""
    if os.environ.get("LOCAL_RANK", "0") == "0":
        print(message, file=file)


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line, and gives a resumed run the flags it was started with."""

    def error(self, message: str) -> NoReturn:
        """Print `prog: error: message` and exit 2."""
        print_once(f"{self.prog}: error: {message} (see --help)", sys.stderr)
        self.exit(2)

    def given(self, argv: list[str] | None) -> set[str]:
        """The flags (by dest) that argv gives, as opposed to leaves at their defaults."""
        probe = copy.deepcopy(self)
        for action in probe._actions:
            action.default = argparse.SUPPRESS  # argparse leaves out what argv does not give
        return set(vars(probe.parse_args(argv)))

    def restore(
        self,
        args: argparse.Namespace,
        saved: dict[str, Any],
        given: Collection[str],
        may_change: Collection[str],
        ignore: Collection[str],
        meaning: Callable[[str, Any, argparse.Namespace], Any] = lambda name, value, args: value,
        moves: Collection[str] = (),
    ) -> None:
        """Give `args` the flags of the run it resumes, `saved` (its args as JSON), in place.

        Flags in `ignore` keep this invocation's value, those in `may_change` the saved one unless `given`, those
        in `moves` (where the data lies) a given path where the run had one (by its `meaning`). Any other takes the
        saved value, and raises UsageError when given with one that means another: both parsed alike, then through
        `meaning`. A flag the run did not save (newer than the run) stands for its default, unless the run saved a
        flag that this parser lacks.
        """
        # A run that saved a flag this parser lacks is of another version of the flags (one renamed, say): a flag it
        # did not save is not judged. Else such a flag is newer than the run, which trained as its default does.
        judged = set(saved) <= {action.dest for action in self._actions}
        for action in self._actions:
            name = action.dest
            if name in ignore or (name in given and name in may_change):
                continue
            if name not in saved and (name not in given or not judged):
                continue
            value, now = _parsed(action, saved.get(name, action.default)), getattr(args, name)
            if name in given and (means := meaning(name, now, args)) != (meant := meaning(name, value, args)):
                if name in moves and None not in (means, meant):
                    continue  # the data elsewhere (a copy on a node's own disk): the caller checks it is the same
                flag = action.option_strings[-1]
                run = f"the run's {_show(value)}"
                if name not in saved:  # a flag newer than the run, which trained as its default does
                    run = f"the default {_show(value)} the run trained with (it predates the flag)"
                raise UsageError(
                    f"{flag} {_show(now)} differs from {run}: a resumed run keeps the flags it was started with; "
                    f"leave out {flag}, or start a new run"
                )
            setattr(args, name, value)  # the run's own spelling of it


def _parsed(action: argparse.Action, value: Any) -> Any:
    """A value from JSON as the command line gives it: the flag's type, a list for nargs, a tuple for --widths."""
    if value is None or action.type is None:
        return value
    try:
        if isinstance(value, list) and action.nargs is not None:
            return [action.type(str(item)) for item in value]
        return action.type(",".join(map(str, value)) if isinstance(value, list) else str(value))  # --widths 16,32
    except (argparse.ArgumentTypeError, TypeError, ValueError):  # a value an older version allowed
        return value


def _show(value: Any) -> str:
    """A flag value as it is typed: 16,32,64 for --widths, 0.5 1.0 for two values."""
    if isinstance(value, (tuple, list)):
        return ("," if isinstance(value, tuple) else " ").join(map(str, value))
    return "(not set)" if value is None else str(value)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default, except where it is None: such flags say in their help what happens."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return super()._get_help_string(action) if action.default is not None else action.help or ""


def in_range(
    kind: type, low: float, high: float = math.inf, *, low_open: bool = False, high_open: bool = False
) -> Callable[[str], Any]:
    """An argparse type: `kind` parsed from text, rejected unless finite and in [low, high] (open ends excluded)."""
    bound = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if high == math.inf:
        bound = f"{'>' if low_open else '>='} {low}"

    def parse(text: str) -> Any:
        value = kind(text)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if (value <= low if low_open else value < low) or (value >= high if high_open else value > high):
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names it in "invalid int value"
    return parse


positive = functools.partial(in_range, low=0, low_open=True)  # positive(int): an argparse type for values > 0
non_negative = functools.partial(in_range, low=0)  # non_negative(float): for values >= 0


def path(text: str | os.PathLike) -> Path:
    """An argparse type for a file or folder, ~ expanded: refuses an empty one and one longer than systems take.

    No shell expands the ~ of --out=~/x. Path("") is the current folder; Path.exists() raises on a name too long
    instead of answering.
    """
    name = os.fspath(text)
    if not name.strip():
        raise argparse.ArgumentTypeError("an empty path")
    # NAME_MAX of Linux's and macOS's file systems, Linux's PATH_MAX less its NUL
    if len(os.fsencode(name)) > 4095 or any(len(os.fsencode(part)) > 255 for part in Path(name).parts):
        limits = "a name 255 bytes, a path 4095"
        raise argparse.ArgumentTypeError(f"{name[:60]}...: longer than file systems take ({limits})")
    return Path(name).expanduser()


def absolute_path(text: str | os.PathLike) -> Path:
    """An argparse type: path(), made absolute (./data is data), so that it names the same file from any folder.

    A symbolic link stays itself: an annexed labels.csv (git-annex, DVC) lists its images beside the link.
    """
    return Path(os.path.abspath(path(text)))


def int_list(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated positive integers such as 16,32,64."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 16,32,64, got {text!r}") from None
    if min(values) <= 0:
        raise argparse.ArgumentTypeError(f"values must be > 0, got {text!r}")
    return values
