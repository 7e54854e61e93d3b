"""Fixtures for the template tests: rendering with copier's Python API, running commands."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from copier import run_copy

REPO = Path(__file__).resolve().parents[1]

# Commits made by the tests need an identity, whatever the machine's git configuration.
os.environ.update(
    GIT_AUTHOR_NAME="Template Tests",
    GIT_AUTHOR_EMAIL="tests@example.invalid",
    GIT_COMMITTER_NAME="Template Tests",
    GIT_COMMITTER_EMAIL="tests@example.invalid",
)


def render(dst: Path, src: Path = REPO, vcs_ref: str = "HEAD", **answers) -> Path:
    """Copy the template with these answers (defaults for the rest) into dst; no --trust."""
    run_copy(str(src), dst, data=answers, defaults=True, vcs_ref=vcs_ref, quiet=True, unsafe=False)
    return dst


def run(cmd: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run a command, failing the test with its output when it exits non-zero."""
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(cmd)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable
