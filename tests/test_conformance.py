"""Every rendered project checks the style guide itself: ruff, tests/test_style.py, pre-commit, CI, README.

    pytest tests/test_conformance.py

Every answer combination that changes Python code (multi-GPU mode x Python version, with other
names, licences and CI answers cycled through them) must pass ruff and its own style tests with
zero findings; a violation planted in a project must make its style test fail, naming the rule.
test_style_rules.py proves every rule on small snippets without rendering.
"""

import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, render, run

NAMES = [
    {},
    {"model_name": "SimpleCNN", "package_name": "my_pkg"},
    {"model_name": "MobileNetV2", "project_name": "Edge Vision 2"},
    {"model_name": "GPT2Model", "package_name": "lm", "description": "Text, not images"},
]
LICENSES = ["MIT", "Apache-2.0", "BSD-3-Clause", "none"]
COMBINATIONS = [
    {
        "multi_gpu": multi_gpu,
        "python_version": version,
        "license": LICENSES[i % len(LICENSES)],
        "ci": ("github", "none")[i % 2],
        "update_workflow": i % 3 == 0,
        **NAMES[i % len(NAMES)],
    }
    for i, (multi_gpu, version) in enumerate(
        itertools.product(["ddp", "dataparallel", "none"], ["3.10", "3.11", "3.12", "3.13"])
    )
]


def combination_id(answers: dict) -> str:
    return f"{answers['multi_gpu']}-py{answers['python_version']}-{answers.get('model_name', 'Classifier')}"


def pytest_in(project: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=project, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("answers", COMBINATIONS, ids=map(combination_id, COMBINATIONS))
def test_every_combination_passes_ruff_and_its_style_tests(tmp_path, answers):
    project = render(tmp_path / "project", **answers)
    lint = run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=project)
    assert "All checks passed!" in lint.stdout
    run([sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "."], cwd=project)
    result = pytest_in(project, "tests/test_style.py")
    assert result.returncode == 0 and " passed" in result.stdout, result.stdout + result.stderr
    # What pre-commit's end-of-file-fixer and trailing-whitespace would change on a first run.
    for path in project.rglob("*"):
        if path.is_file() and ".ruff_cache" not in path.parts:
            text = path.read_text(encoding="utf-8")
            rel = path.relative_to(project)
            assert text.endswith("\n") and not text.endswith("\n\n"), f"{rel}: must end in exactly one newline"
            assert not re.search(r"[ \t]$", text, re.MULTILINE), f"{rel}: trailing whitespace"


@pytest.fixture(scope="module")
def default_project(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("default") / "project")


# (file, code appended to it, the rule the style test must name at the code's last line)
PLANTS = [
    ("train.py", "\n\ndef planted(model, x):\n    return model.forward(x)\n", "call-modules-not-forward"),
    ("test.py", "\nfrom shape_classifier.networks import ResNetClassifier\n", "scripts-import-only-the-model-file"),
    ("train.py", "\ntorch.manual_seed(1)\n", "no-import-time-work"),
    ("shape_classifier/layers.py", "\n\ndef to_gpu(x):\n    return x.cuda()\n", "no-cuda-call"),
    (
        "shape_classifier/harness/checkpoint.py",
        "\n\ndef peek(path):\n    return torch.load(path)\n",
        "torch-load-weights-only",
    ),
    ("shape_classifier/ops.py", "\nfrom .layers import ConvBlock\n", "imports-point-one-way"),
    ("shape_classifier/harness/runs.py", "\nfrom shape_classifier import data\n", "harness-imports-only-the-harness"),
]


@pytest.mark.parametrize(("path", "code", "rule"), PLANTS, ids=[rule for _, _, rule in PLANTS])
def test_a_planted_violation_fails_the_style_test_naming_rule_and_line(default_project, tmp_path, path, code, rule):
    project = shutil.copytree(default_project, tmp_path / "project")
    text = (project / path).read_text() + code
    (project / path).write_text(text)
    line = len(text.splitlines())  # the plant's last line is the one that breaks the rule
    result = pytest_in(project, "tests/test_style.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{rule}: {path}:{line}:" in result.stdout, result.stdout


# The project's test_efficiency.py measures the live autograd graph at each training step; here the
# measure has to notice the classic leak, losses summed as tensors across steps.
LEAKING_LOOP = """
import sys

sys.path[:0] = [".", "tests"]  # as pytest's configuration puts them: the project, then its tests
import torch
from test_efficiency import autograd_graph_size

model, total, sizes = torch.nn.Linear(4, 1), 0.0, []
for _ in range(4):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    total = total + loss  # the leak: total += loss.item() would keep no graph
    sizes.append(autograd_graph_size())
assert sizes[0] < sizes[1] < sizes[2] < sizes[3], sizes
"""


def test_the_graph_measure_sees_a_leaking_loop(default_project):
    run([sys.executable, "-c", LEAKING_LOOP], cwd=default_project)


def test_pre_commit_runs_ruff_and_the_file_hygiene_hooks(default_project):
    config = yaml.safe_load((default_project / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    wanted = {"ruff-check", "ruff-format", "check-merge-conflict", "end-of-file-fixer", "trailing-whitespace"}
    assert wanted <= set(hooks)
    assert "--assume-in-merge" in hooks["check-merge-conflict"]["args"]  # catches copier update's markers
    assert all(re.fullmatch(r"v\d+\.\d+\.\d+", repo["rev"]) for repo in config["repos"])  # pinned releases


def test_github_workflow_follows_the_ci_answer(tmp_path):
    project = render(tmp_path / "github", ci="github", python_version="3.12")
    workflow = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    commands = "\n".join(step.get("run", "") for step in steps)
    for command in ("--index-url https://download.pytorch.org/whl/cpu", 'pip install -e ".[dev]"', "ruff check .",
                    "ruff format --check .", "pytest"):  # fmt: skip
        assert command in commands
    assert any(step.get("with", {}).get("python-version") == "3.12" for step in steps)

    project = render(tmp_path / "none", ci="none", update_workflow=False)
    assert not (project / ".github").exists()  # no empty folders either


def test_template_ci_runs_the_suite_with_full_git_history():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    checkout = next(step for step in steps if step.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0
    assert any("make test" in step.get("run", "") for step in steps)


@pytest.mark.parametrize("multi_gpu", ["ddp", "none"])
def test_readme_explains_the_layout_and_gives_tips(tmp_path, multi_gpu):
    project = render(tmp_path / "project", multi_gpu=multi_gpu, package_name="my_pkg", model_name="SimpleCNN")
    readme = (project / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", readme, re.MULTILINE)
    assert headings.index("How this project is organised") == headings.index("Install") - 1
    assert headings.index("Tips") == headings.index("Test") - 1
    layout = readme.split("## How this project is organised")[1].split("\n## ")[0]
    modules = ("layers", "networks", "losses", "ops", "simple_cnn", "data")
    for name in (*(f"my_pkg/{m}.py" for m in modules), "train.py", "test.py", "tests/test_style.py"):
        assert name in layout
    assert "`ops` -> `layers` -> `networks` -> `simple_cnn`" in layout
    assert "distributed.py" in layout
    assert ("torchrun: process groups" in layout) == (multi_gpu == "ddp")
