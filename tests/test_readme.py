"""What this repository's README.md says about the generated project and about copying holds.

pytest tests/test_readme.py
"""

import io
import re
import subprocess
from contextlib import redirect_stderr
from pathlib import Path

import pytest
import yaml

from conftest import REPO, render


def readme_tree() -> str:
    """The code block under "## The generated project"."""
    section = (REPO / "README.md").read_text().split("## The generated project", 1)[1]
    return section.split("```", 2)[1]


def test_the_tree_names_every_file_a_project_gets(tmp_path):
    project = render(tmp_path / "p", update_workflow=True)  # ddp, MIT, github CI: the most files
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    tree = readme_tree()
    named = set(re.findall(r"[\w.-]+\.(?:py|md|toml|sbatch|yaml|yml)|LICENSE|tests/|notebooks/|\.github/", tree))
    top_level = {p.name + ("/" if p.is_dir() else "") for p in project.iterdir()} - {".git/"}
    top_level -= {".copier-answers.yml", ".gitignore", answers["package_name"] + "/"}
    assert top_level - named == set()
    package = project / answers["package_name"]
    modules = {p.name for p in package.glob("*.py")} - {"__init__.py", answers["model_module"] + ".py"}
    assert modules - named == set()
    assert "<model_module>.py" in tree


def test_without_a_release_tag_copier_copies_head_as_the_readme_says(tmp_path):
    clone = tmp_path / "template"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    tags = subprocess.run(["git", "tag"], cwd=clone, capture_output=True, text=True, check=True).stdout.split()
    if tags:  # the README's paragraph is about the time before the first release
        subprocess.run(["git", "tag", "-d", *tags], cwd=clone, capture_output=True, check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True).stdout
    stderr = io.StringIO()
    with redirect_stderr(stderr):
        render(tmp_path / "p", src=clone, vcs_ref=None)  # None: the latest release, as `copier copy` without --vcs-ref
    message = "No git tags found in template; using HEAD as ref"
    assert message in stderr.getvalue()
    assert message in (REPO / "README.md").read_text()
    recorded = yaml.safe_load(Path(tmp_path / "p" / ".copier-answers.yml").read_text())["_commit"]
    assert str(recorded) == head.strip()  # the commit's hash, as the README says


@pytest.mark.parametrize("task", ["classification", "restoration"])
def test_the_readmes_line_counts_are_a_default_renderings(tmp_path, task):
    """The "now" rows of "How much code a project is": room, harness, scripts, code and tests, as `wc -l` counts."""
    project = render(tmp_path / "p", task=task)
    package = project / yaml.safe_load((project / ".copier-answers.yml").read_text())["package_name"]
    room, harness, scripts, tests = (
        sum(len(path.read_text().splitlines()) for path in paths)
        for paths in (package.glob("*.py"), (package / "harness").glob("*.py"), project.glob("*.py"),
                      (project / "tests").rglob("*.py"))
    )  # fmt: skip
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if line.startswith(f"| {task} | now |"))
    counted = [int(cell.replace(",", "")) for cell in row.split("|")[3:8]]
    assert counted == [room, harness, scripts, room + harness + scripts, tests], "update README.md's table"
