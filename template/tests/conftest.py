"""Shared fixtures: the smallest train.py run that still exercises every part of the loop."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str) -> ModuleType:
    """Import a top-level script (train.py, test.py, ...) by path; `test` would clash with the stdlib."""
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_one_epoch(train_script: ModuleType, session, state, args) -> bool:
    """train.py's train_one_epoch() on what its setup() built, called as fit() calls it."""
    with train_script.runtime.StopSignal() as stop:
        return train_script.train_one_epoch(
            session.wrapped, session.optimizer, session.scheduler, session.scaler, session.train_loader,
            session.device, state, args, session.logger, stop,
        )  # fmt: skip


@pytest.fixture(scope="session")
def train_script() -> ModuleType:
    return load_script("train")


@pytest.fixture(scope="session")
def test_script() -> ModuleType:
    return load_script("test")


@pytest.fixture
def tiny_args(tmp_path: Path) -> list[str]:
    """Flags for a run of a few seconds: small images, a small network, a few batches."""
    return [
        "--device", "cpu",
        "--img-size", "16",
        "--widths", "8,16",
        "--shapes-train-size", "96",
        "--shapes-val-size", "40",
        "--batch-size", "16",
        "--epochs", "1",
        "--log-interval", "2",
        "--progress", "never",
        "--output-dir", str(tmp_path / "runs"),
        "--run-name", "run",
    ]  # fmt: skip
