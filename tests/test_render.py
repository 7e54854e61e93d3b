"""Render every multi_gpu choice of each task and run each project's own checks: ruff, then its pytest suite.

The dataparallel renderings use other names for the project, the package and the model, so that
nothing in the generated code or its tests depends on the defaults. Run: pytest tests/test_render.py
"""

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from conftest import render, run

RENAMED = {"project_name": "Vision Lab", "model_name": "SimpleCNN", "license": "none"}
ANSWERS = {
    "ddp": {"multi_gpu": "ddp"},
    "none": {"multi_gpu": "none"},
    "dataparallel-renamed": {"multi_gpu": "dataparallel", **RENAMED},
}
# Leftover template syntax: Jinja blocks, comments and expressions ("${{ }}" in GitHub workflow
# files is GitHub's own syntax, not Jinja's).
LEFTOVER = re.compile(r"\{%|%\}|\{#|#\}|(?<!\$)\{\{")


@pytest.fixture(scope="module", params=ANSWERS)
def project(request, tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp(request.param) / "project", **ANSWERS[request.param])


def assert_no_template_syntax_left(project: Path) -> None:
    for path in project.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            text = path.read_text(encoding="utf-8")
            match = LEFTOVER.search(text)
            assert match is None, f"{path.relative_to(project)}: leftover {match.group()!r}"


def test_no_template_syntax_left(project):
    assert_no_template_syntax_left(project)


def assert_notebook_as_jupyter_saves_it(project: Path) -> None:
    """notebooks/explore.ipynb: valid, no outputs, and in nbformat's own layout, so a first save changes nothing."""
    text = (project / "notebooks" / "explore.ipynb").read_text()
    notebook = nbformat.reads(text, as_version=4)
    nbformat.validate(notebook)
    assert all(not cell.get("outputs") and not cell.get("execution_count") for cell in notebook.cells)
    assert text == nbformat.writes(notebook) + "\n"


def test_layout(project, tmp_path):
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    package = project / answers["package_name"]
    for name in ("layers", "networks", "losses", "ops", answers["model_module"], "data"):
        assert (package / f"{name}.py").is_file()
    scripts = ("train.py", "test.py", "predict.py", "export.py")
    for name in (*scripts, "README.md", "pyproject.toml", ".gitignore", ".copier-answers.yml"):
        assert (project / name).is_file()
    assert (project / "LICENSE").exists() == (answers["license"] != "none")
    multi_gpu = answers["multi_gpu"]
    # Every mode has harness/distributed.py: torchrun's under ddp, a single process's identities otherwise.
    distributed = (package / "harness" / "distributed.py").read_text()
    assert ("DistributedDataParallel(" in distributed) == (multi_gpu == "ddp")
    # The researcher's room at the top (the style guide's files, the data, the task: at most 12
    # modules), and what trains, checkpoints and scales the model in harness/.
    room = sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__")
    assert len(room) <= 12, room
    harness = {p.stem for p in (package / "harness").glob("*.py")}
    assert {"checkpoint", "runs", "runtime", "tracking", "loaders", "samplers", "images", "downloads"} <= harness
    # `pip install .` installs the packages pyproject.toml's patterns find: every folder of the package, one added too.
    pyproject = (project / "pyproject.toml").read_text()
    include = re.search(r"^\[tool\.setuptools\.packages\.find\]\ninclude = (\[.*?\])", pyproject, re.M).group(1)
    folders = {".".join(p.parent.relative_to(project).parts) for p in package.rglob("__init__.py")}
    found = lambda name: any(fnmatch.fnmatchcase(name, pattern) for pattern in yaml.safe_load(include))  # noqa: E731
    assert all(map(found, [*folders, f"{package.name}.models"])) and not found("tests.harness")
    # The tests mirror the split: the harness's tests in tests/harness/.
    assert {"test_checkpoint", "test_runs", "test_runtime", "test_samplers"} <= {
        p.stem for p in (project / "tests" / "harness").glob("*.py")
    }
    assert (project / "slurm.sbatch").exists() == (multi_gpu == "ddp")
    (tmp_path / ".gitignore").write_text((project / ".gitignore").read_text())  # what git leaves out, and keeps:
    run(["git", "init", "-q"], cwd=tmp_path)
    paths = ["runs/r/last.pt", "notebooks/runs/x", "data/cifar10/x.bin", "tests/data/cat.png", "pkg/data/__init__.py"]
    ignored = subprocess.run(["git", "check-ignore", *paths], cwd=tmp_path, capture_output=True, text=True).stdout
    assert ignored.split() == paths[:3]  # a test's images and a data/ package are code
    assert_notebook_as_jupyter_saves_it(project)
    assert ("nn.DataParallel(" in distributed) == (multi_gpu == "dataparallel")
    if multi_gpu == "none":
        assert "DataParallel" not in distributed and "DataParallel" not in (project / "train.py").read_text()


def test_ruff(project):
    run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=project)
    run([sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "."], cwd=project)


@pytest.mark.parametrize(("multi_gpu", "task"), [("ddp", "classification"), ("none", "classification"),
                                                 ("ddp", "restoration")])  # fmt: skip
def test_ruff_with_long_names(tmp_path, multi_gpu, task):
    """The longest names copier.yml accepts (32-character package, 24-character model) give lines ruff accepts,
    and a package name that sorts before conftest keeps isort's order (the tests' modules import after it)."""
    answers = {"package_name": "aerial_imagery_classifier_v22_xx", "model_name": "MultiScaleSiameseResNetX"}
    project = render(tmp_path / "p", multi_gpu=multi_gpu, task=task, **answers)
    run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=project)
    run([sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "."], cwd=project)


def test_project_pytest(project):
    pytest_q = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    result = run(pytest_q, cwd=project)
    assert " passed" in result.stdout and " failed" not in result.stdout
    notebook = project / "notebooks" / "explore.ipynb"
    notebook.rename(project / "explore.ipynb")  # deleted by its user: its tests are skipped, not failed
    try:
        result = run([*pytest_q, "tests/test_notebook.py"], cwd=project)
    finally:
        (project / "explore.ipynb").rename(notebook)
    assert "2 skipped" in result.stdout


# The restoration task's project, checked like the rest, for each multi_gpu choice.
RESTORATION_MODULES = ("layers", "networks", "losses", "ops", "data", "degradations", "evaluation", "task")
RESTORATION = {
    "ddp": {"multi_gpu": "ddp"},
    "none": {"multi_gpu": "none"},
    "dataparallel-renamed": {"multi_gpu": "dataparallel", **RENAMED, "model_name": "PhotoDenoiser"},
}
RESTORATION["dataparallel-renamed"]["description"] = "Removes noise from photos."  # its full stop not doubled


@pytest.fixture(scope="module", params=RESTORATION)
def restoration(request, tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("restoration") / "project", task="restoration", **RESTORATION[request.param])


def test_restoration_layout_ruff_and_suite(restoration):
    answers = yaml.safe_load((restoration / ".copier-answers.yml").read_text())
    package = restoration / answers["package_name"]
    assert all((package / f"{name}.py").is_file() for name in (*RESTORATION_MODULES, answers["model_module"]))
    assert not (package / "transforms.py").exists() and not (package / "pretrained.py").exists()
    scripts = ("train.py", "test.py", "predict.py", "export.py", "README.md")
    assert all((restoration / name).is_file() for name in scripts)
    assert f"\n{answers['description'].rstrip('.')}.\n" in (restoration / "README.md").read_text()
    assert_no_template_syntax_left(restoration)
    assert_notebook_as_jupyter_saves_it(restoration)
    run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=restoration)
    run([sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "."], cwd=restoration)
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=restoration)
    assert " passed" in result.stdout and " failed" not in result.stdout
