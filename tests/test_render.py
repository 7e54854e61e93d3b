"""Render every multi_gpu choice and run each project's own checks: ruff, then its pytest suite.

pytest tests/test_render.py
"""

import re
import sys
from pathlib import Path

import pytest

from conftest import render, run

MULTI_GPU = ["ddp", "dataparallel", "none"]
# Leftover template syntax: Jinja blocks, comments and expressions ("${{ }}" in GitHub workflow
# files is GitHub's own syntax, not Jinja's).
LEFTOVER = re.compile(r"\{%|%\}|\{#|#\}|(?<!\$)\{\{")


@pytest.fixture(scope="module", params=MULTI_GPU)
def project(request, tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp(request.param) / "project", multi_gpu=request.param)


def test_no_template_syntax_left(project):
    for path in project.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            text = path.read_text(encoding="utf-8")
            match = LEFTOVER.search(text)
            assert match is None, f"{path.relative_to(project)}: leftover {match.group()!r}"


def test_layout(project):
    package = project / "shape_classifier"
    for name in ("layers", "networks", "losses", "ops", "tiny_resnet", "data"):
        assert (package / f"{name}.py").is_file()
    scripts = ("train.py", "test.py", "predict.py", "export.py")
    for name in (*scripts, "README.md", "pyproject.toml", ".gitignore", ".copier-answers.yml", "LICENSE"):
        assert (project / name).is_file()
    multi_gpu = re.search(r"multi_gpu: (\w+)", (project / ".copier-answers.yml").read_text()).group(1)
    assert (package / "distributed.py").exists() == (multi_gpu == "ddp")
    train = (project / "train.py").read_text()
    assert ("DataParallel(" in train) == (multi_gpu == "dataparallel")
    if multi_gpu == "none":
        assert "distributed" not in train and "DataParallel" not in train


def test_ruff(project):
    run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=project)
    run([sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "."], cwd=project)


def test_project_pytest(project):
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project)
    assert " passed" in result.stdout and " failed" not in result.stdout
