"""copier update keeps the user's work: clean merges, visible conflicts, migrations, changed answers.

    pytest tests/test_update.py

The tests build their own template history in a temporary git repository, from this working
tree's copier.yml, template/ and hooks/, so nothing depends on this repository's tags:

    1.0.0  the template as it is now
    1.1.0  edits one line at the top of train.py, of the model file and of README.md; adds a
           question (citation) with a file of its own, adds CONTRIBUTING.md, removes
           tests/test_cuda.py
    2.0.0  moves the model file into models/ and test.py to scripts/evaluate.py, unchanged, with
           `_migrations` that run hooks/move_path.py before the new version is rendered
    2.1.0  edits CONTRIBUTING.md: an update from 2.0.0 crosses no migration

Projects are rendered and updated with copier's Python API and checked through their files and
git state; their own test suites run in test_render.py, not here.
"""

import filecmp
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from copier import VcsRef, run_copy, run_update
from copier.errors import UnsafeTemplateError
from packaging.version import InvalidVersion, Version

from conftest import REPO, render

MODEL = "shape_classifier/classifier.py"  # the model file with the default answers
CLASSIFICATION = "{{% if task == 'classification' %}}{}{{% endif %}}"  # a classification file's template name
MOVED_MODEL = "shape_classifier/models/classifier.py"  # where 2.0.0 puts it
TEMPLATE_MARK = "[template 1.1.0] "
WORKFLOW = ".github/workflows/copier-update.yml"
CONFLICT_STEP = "Fail when the update left conflicts"
MARKER = re.compile(r"^(<<<<<<<|>>>>>>>) (before|after) updating$", re.MULTILINE)

MIGRATIONS = """
_migrations:
  - version: "2.0.0"
    when: "{{ _stage == 'before' }}"
    command:
      - "{{ _copier_python }}"
      - "{{ _copier_conf.src_path }}/hooks/move_path.py"
      - "{package_name}/{model_module}.py"
      - "{package_name}/models/{model_module}.py"
  - version: "2.0.0"
    when: "{{ _stage == 'before' }}"
    command: ["{{ _copier_python }}", "{{ _copier_conf.src_path }}/hooks/move_path.py", test.py, scripts/evaluate.py]
"""

CITATION_QUESTION = """
citation:
  type: bool
  help: Add a CITATION.cff?
  default: false
"""


# ---------------------------------------------------------------------------------------------
# Helpers


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run git without signing or hooks, whatever the machine's configuration."""
    config = ["-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "core.hooksPath=/dev/null"]
    result = subprocess.run(["git", *config, *args], cwd=cwd, capture_output=True, text=True)
    if check:
        assert result.returncode == 0, f"git {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)


def copy_project(dst: Path, history: Path, version: str, **answers) -> Path:
    """`copier copy --vcs-ref VERSION`, then the user's first commit."""
    render(dst, src=history, vcs_ref=version, **answers)
    git(dst, "init", "-q", "-b", "main")
    commit_all(dst, f"Start from the template {version}")
    return dst


def update(project: Path, version: str | VcsRef, unsafe: bool = False, **options) -> None:
    """`copier update --defaults --vcs-ref VERSION [--trust]`, as the README tells users."""
    run_update(project, defaults=True, overwrite=True, vcs_ref=version, quiet=True, unsafe=unsafe, **options)


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root except .git, by relative path."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(root).parts
    }


def assert_same_tree(actual: Path, expected: Path) -> None:
    got, want = tree(actual), tree(expected)
    assert sorted(got) == sorted(want), (
        f"only in {actual.name}: {set(got) - set(want)}; only in fresh copy: {set(want) - set(got)}"
    )
    differ = [name for name in want if got[name] != want[name]]
    assert not differ, f"differ from a fresh copy: {differ}"


def unmerged(project: Path) -> set[str]:
    return {line.split("\t", 1)[1] for line in git(project, "ls-files", "--unmerged").stdout.splitlines()}


def run_step(project: Path, name: str, **env: str) -> subprocess.CompletedProcess:
    """Run one `run:` step of the generated copier-update workflow, with bash as GitHub runs it."""
    steps = yaml.safe_load((project / WORKFLOW).read_text())["jobs"]["update"]["steps"]
    script = next(step["run"] for step in steps if step.get("name") == name)
    command = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script]
    return subprocess.run(command, cwd=project, capture_output=True, text=True, env={**os.environ, **env})


def conflict_check(project: Path) -> subprocess.CompletedProcess:
    """The workflow's check for unmerged files, conflict markers and *.rej files."""
    return run_step(project, CONFLICT_STEP)


def edit_first(path: Path, pattern: str, change: Callable[[str], str]) -> None:
    """Rewrite the first line matching pattern."""
    lines = path.read_text().splitlines(keepends=True)
    index = next((i for i, line in enumerate(lines) if re.match(pattern, line)), None)
    assert index is not None, f"{path}: no line matches {pattern!r}"
    lines[index] = change(lines[index])
    path.write_text("".join(lines))


def mark_docstring(path: Path, mark: str) -> None:
    """Put mark at the start of the module docstring (the first line that opens with three quotes)."""
    edit_first(path, '"""', lambda line: line.replace('"""', '"""' + mark, 1))


USER_FUNCTION = '\n\ndef user_sweep() -> None:\n    """Added by the user: a learning-rate sweep."""\n'
USER_COMMENT = "# User note: widths tuned for 64x64 images.\n"
USER_CLASS = '\n\nclass UserHead(nn.Module):\n    """Added by the user: a second classification head."""\n'
USER_NOTES = "\n## Our results\n\n0.991 validation accuracy on the shapes, 5 epochs.\n"


def user_edits(project: Path) -> None:
    """What a user typically changes: code added to train.py and the model file, notes in README."""
    with (project / "train.py").open("a") as f:
        f.write(USER_FUNCTION)
    edit_first(project / MODEL, "class Classifier\\(nn.Module\\)", lambda line: USER_COMMENT + line)
    with (project / MODEL).open("a") as f:
        f.write(USER_CLASS)
    with (project / "README.md").open("a") as f:
        f.write(USER_NOTES)


# ---------------------------------------------------------------------------------------------
# The template history


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """A template repository tagged 1.0.0, 1.1.0, 2.0.0 and 2.1.0 (see the module docstring)."""
    src = tmp_path_factory.mktemp("history") / "template-repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.py[co]", ".pytest_cache", ".ruff_cache")
    src.mkdir()
    shutil.copy2(REPO / "copier.yml", src / "copier.yml")
    shutil.copytree(REPO / "template", src / "template", ignore=ignore)
    shutil.copytree(REPO / "hooks", src / "hooks", ignore=ignore)
    shutil.copytree(REPO / "partials", src / "partials", ignore=ignore)  # included by the READMEs
    git(src, "init", "-q", "-b", "main")
    commit_all(src, "1.0.0")
    git(src, "tag", "1.0.0")

    tpl = src / "template"
    mark_docstring(tpl / "train.py.jinja", TEMPLATE_MARK)
    package = tpl / CLASSIFICATION.format("{{ package_name }}")  # the classification files of the package
    model_file = "{{ model_module }}.py.jinja"
    mark_docstring(package / model_file, TEMPLATE_MARK)
    readme = tpl / (CLASSIFICATION.format("README.md") + ".jinja")
    edit_first(readme, "# ", lambda line: line.replace("# ", "# " + TEMPLATE_MARK, 1))
    with (src / "copier.yml").open("a") as f:
        f.write(CITATION_QUESTION)
    (tpl / "{% if citation %}CITATION.cff{% endif %}.jinja").write_text(
        'cff-version: 1.2.0\ntitle: "{{ project_name }}"\n'
    )
    (tpl / "CONTRIBUTING.md").write_text("# Contributing\n\nRun `pytest` before you open a pull request.\n")
    (tpl / "tests" / "test_cuda.py").unlink()
    commit_all(src, "1.1.0")
    git(src, "tag", "1.1.0")

    (package / "models").mkdir()
    git(package, "mv", model_file, f"models/{model_file}")
    (package / "models" / "__init__.py").write_text('"""The models."""\n')
    (tpl / "scripts").mkdir()
    evaluate = "scripts/" + CLASSIFICATION.format("evaluate.py") + ".jinja"
    git(tpl, "mv", CLASSIFICATION.format("test.py") + ".jinja", evaluate)
    config = (src / "copier.yml").read_text()  # 2.0.0's entries join the list the template already has
    assert config.count("\n_migrations:\n") == 1
    (src / "copier.yml").write_text(config.replace("\n_migrations:\n", MIGRATIONS.rstrip("\n") + "\n", 1))
    commit_all(src, "2.0.0")
    git(src, "tag", "2.0.0")

    with (tpl / "CONTRIBUTING.md").open("a") as f:
        f.write("\nFormat with `ruff format .` too.\n")
    commit_all(src, "2.1.0")
    git(src, "tag", "2.1.0")
    return src


# ---------------------------------------------------------------------------------------------
# 1. No user edits: an update gives exactly a fresh copy of the new version.

EDGE_ANSWERS = {
    "project_name": "Edge Case",
    "model_name": "SimpleCNN",
    "multi_gpu": "none",
    "license": "none",
    "ci": "none",
    "update_workflow": True,
}


@pytest.mark.parametrize("answers", [{}, EDGE_ANSWERS], ids=["defaults", "other-answers"])
@pytest.mark.parametrize(("old", "new", "trust"), [("1.0.0", "1.1.0", False), ("1.1.0", "2.0.0", True)])
def test_update_without_edits_equals_a_fresh_copy(history, tmp_path, answers, old, new, trust):
    project = copy_project(tmp_path / "updated", history, old, **answers)
    update(project, new, unsafe=trust)
    fresh = render(tmp_path / "fresh", src=history, vcs_ref=new, **answers)
    assert_same_tree(project, fresh)  # .copier-answers.yml included: same _commit, same answers
    assert not unmerged(project)


def test_a_restoration_project_updates_as_one(history, tmp_path):
    """The task is recorded with the other answers, so an update re-renders the same task."""
    project = copy_project(tmp_path / "updated", history, "1.0.0", task="restoration")
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["task"] == "restoration"
    update(project, "1.1.0")
    assert_same_tree(project, render(tmp_path / "fresh", src=history, vcs_ref="1.1.0", task="restoration"))
    assert (project / "shape_restorer" / "restorer.py").is_file()


# ---------------------------------------------------------------------------------------------
# 2. User edits and template changes in different parts of the same files: both kept.


def test_user_edits_survive_and_template_changes_arrive(history, tmp_path):
    project = copy_project(tmp_path / "project", history, "1.0.0", update_workflow=True)
    user_edits(project)
    commit_all(project, "My changes")
    update(project, "1.1.0")

    # The result is a fresh 1.1.0 copy with the user's edits made again by hand, byte for byte.
    expected = render(tmp_path / "expected", src=history, vcs_ref="1.1.0", update_workflow=True)
    user_edits(expected)
    assert_same_tree(project, expected)
    for name, mine in [
        ("train.py", USER_FUNCTION),
        (MODEL, USER_CLASS),
        (MODEL, USER_COMMENT),
        ("README.md", USER_NOTES),
    ]:
        text = (project / name).read_text()
        assert mine in text and TEMPLATE_MARK in text, name
    assert not (project / "tests" / "test_cuda.py").exists()  # removed by 1.1.0
    assert not unmerged(project) and not list(project.rglob("*.rej"))
    assert conflict_check(project).returncode == 0


def test_no_generated_file_is_skipped_on_update():
    # README.md, "Which files are merged", explains why; change both together.
    assert yaml.safe_load((REPO / "copier.yml").read_text()).get("_skip_if_exists", []) == []


# ---------------------------------------------------------------------------------------------
# 3. The same line changed on both sides: a conflict that nobody can miss, nothing lost.


def resolve(text: str, merge: Callable[[str, str], str]) -> str:
    """Replace each inline conflict block by merge(user's side, template's side)."""
    block = re.compile(r"^<<<<<<< before updating\n(.*?)^=======\n(.*?)^>>>>>>> after updating\n", re.S | re.M)
    return block.sub(lambda m: merge(m.group(1), m.group(2)), text)


def test_overlapping_change_is_an_unmerged_conflict(history, tmp_path):
    project = copy_project(tmp_path / "project", history, "1.0.0", update_workflow=True)
    mark_docstring(project / "train.py", "[mine] ")
    commit_all(project, "My docstring")
    mine = (project / "train.py").read_text()

    update(project, "1.1.0")  # returns normally: `copier update` exits 0 here too
    text = (project / "train.py").read_text()

    # Nothing lost: the user's line and the template's new line are both in the file, marked.
    assert len(MARKER.findall(text)) == 2
    assert '"""[mine] ' in text and '"""' + TEMPLATE_MARK in text
    # ... and git records the file as unmerged: stage 2 is the user's version, 3 the template's.
    assert unmerged(project) == {"train.py"}
    assert "UU train.py" in git(project, "status", "--porcelain").stdout.splitlines()
    assert git(project, "show", ":2:train.py").stdout == mine
    assert TEMPLATE_MARK in git(project, "show", ":3:train.py").stdout

    # How a user or CI finds out: git refuses to commit, `git diff --check` and the generated
    # workflow's conflict step fail.
    assert git(project, "commit", "-q", "-m", "Update", check=False).returncode != 0
    assert "leftover conflict marker" in git(project, "diff", "--check", check=False).stdout
    check = conflict_check(project)
    assert check.returncode == 1 and "train.py" in check.stdout, check.stdout

    # Resolving: keep both changes, drop the markers, `git add`, commit.
    merged = resolve(text, lambda _mine, theirs: theirs.replace(TEMPLATE_MARK, TEMPLATE_MARK + "[mine] "))
    (project / "train.py").write_text(merged)
    commit_all(project, "Update to 1.1.0")
    fresh = render(tmp_path / "fresh", src=history, vcs_ref="1.1.0", update_workflow=True)
    assert merged == (fresh / "train.py").read_text().replace(TEMPLATE_MARK, TEMPLATE_MARK + "[mine] ", 1)
    assert not unmerged(project) and conflict_check(project).returncode == 0


def test_rej_mode_takes_the_template_side_and_ci_notices(history, tmp_path):
    project = copy_project(tmp_path / "project", history, "1.0.0", update_workflow=True)
    mark_docstring(project / "train.py", "[mine] ")
    commit_all(project, "My docstring")

    update(project, "1.1.0", conflict="rej")
    assert "[mine]" not in (project / "train.py").read_text()  # the template's version was written
    assert '"""[mine] ' in (project / "train.py.rej").read_text()  # the user's hunk waits in .rej
    check = conflict_check(project)
    assert check.returncode == 1 and "train.py.rej" in check.stdout, check.stdout


# ---------------------------------------------------------------------------------------------
# 4. A release that moves files: the migration in hooks/ runs only with trust, moves the
#    user's files, keeps their content, and does nothing when run again.

MOVE_PATH = REPO / "hooks" / "move_path.py"


def run_hook(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(MOVE_PATH), *args], cwd=project, capture_output=True, text=True)


def git_state(project: Path) -> tuple[str, str, dict[str, bytes]]:
    """Everything a migration could change: status, index and files."""
    return git(project, "status", "--porcelain").stdout, git(project, "ls-files", "--stage").stdout, tree(project)


def test_migration_moves_the_users_files_and_keeps_their_content(history, tmp_path, capfd):
    project = copy_project(tmp_path / "project", history, "1.1.0")
    user_edits(project)  # the model file (moved by 2.0.0), train.py and README.md (not moved)
    commit_all(project, "My changes")
    mine = (project / MODEL).read_text()

    with pytest.raises(UnsafeTemplateError):  # migrations need --trust; nothing has changed yet
        update(project, "2.0.0")
    assert git(project, "status", "--porcelain").stdout == ""

    capfd.readouterr()
    update(project, "2.0.0", unsafe=True)
    out = capfd.readouterr().out
    assert f"move_path: moved {MODEL} -> {MOVED_MODEL} (staged in git)" in out
    assert "move_path: moved test.py -> scripts/evaluate.py (staged in git)" in out
    assert not (project / MODEL).exists() and not (project / "test.py").exists()

    # The unedited file moved cleanly: it is exactly the fresh 2.0.0 file.
    fresh = render(tmp_path / "fresh", src=history, vcs_ref="2.0.0")
    assert (project / "scripts/evaluate.py").read_bytes() == (fresh / "scripts/evaluate.py").read_bytes()
    # The user's edits elsewhere were merged as usual.
    assert USER_FUNCTION in (project / "train.py").read_text()
    assert USER_NOTES in (project / "README.md").read_text()
    # The edited file is at its new place with the user's version intact. The old template never
    # had this path, so copier has no common base to merge with: it marks the lines where the
    # user's version differs and records the file as unmerged, with the user's version as "ours".
    moved = (project / MOVED_MODEL).read_text()
    assert USER_COMMENT in moved and USER_CLASS.strip() in moved
    assert unmerged(project) == {MOVED_MODEL}
    assert git(project, "show", f":2:{MOVED_MODEL}").stdout == mine
    assert resolve(moved, lambda ours, _theirs: ours) == mine

    # Re-running the migration changes nothing.
    before = git_state(project)
    for old, new in [(MODEL, MOVED_MODEL), ("test.py", "scripts/evaluate.py")]:
        result = run_hook(project, old, new)
        assert result.returncode == 0 and "nothing to do" in result.stdout, result.stdout
    assert git_state(project) == before

    # Resolve as README says (the release only moved the file: keep ours), commit, and go on
    # to 2.1.0: it crosses no migration, so it needs no trust.
    git(project, "checkout", "--ours", "--", MOVED_MODEL)
    commit_all(project, "Update to 2.0.0")
    assert (project / MOVED_MODEL).read_text() == mine
    update(project, "2.1.0")
    assert (project / MOVED_MODEL).read_text() == mine
    assert "ruff format" in (project / "CONTRIBUTING.md").read_text()


def test_a_moved_file_the_template_also_changed_is_a_conflict_not_a_choice(history, tmp_path):
    # 1.0.0 -> 2.0.0 spans 1.1.0's change to the model file and 2.0.0's move of it. With no
    # common base copier cannot tell whose change a line is, so it takes neither side.
    project = copy_project(tmp_path / "project", history, "1.0.0")
    mine = (project / MODEL).read_text()
    update(project, "2.0.0", unsafe=True)
    fresh = render(tmp_path / "fresh", src=history, vcs_ref="2.0.0")
    assert unmerged(project) == {MOVED_MODEL}
    moved = (project / MOVED_MODEL).read_text()
    assert resolve(moved, lambda ours, _theirs: ours) == mine
    assert resolve(moved, lambda _ours, theirs: theirs) == (fresh / MOVED_MODEL).read_text()
    assert len(MARKER.findall(moved)) == 2  # one block: the docstring line 1.1.0 changed


@pytest.mark.parametrize("user_action", ["deleted", "moved"])
def test_migration_when_the_user_already_deleted_or_moved_the_file(history, tmp_path, capfd, user_action):
    project = copy_project(tmp_path / "project", history, "1.1.0")
    with (project / "train.py").open("a") as f:
        f.write(USER_FUNCTION)
    if user_action == "deleted":
        git(project, "rm", "-q", MODEL)
    else:
        (project / MOVED_MODEL).parent.mkdir()
        git(project, "mv", MODEL, MOVED_MODEL)
        with (project / MOVED_MODEL).open("a") as f:
            f.write(USER_CLASS)
    commit_all(project, f"I {user_action} the model file")
    mine = (project / MOVED_MODEL).read_text() if user_action == "moved" else None

    capfd.readouterr()
    update(project, "2.0.0", unsafe=True)
    out = capfd.readouterr().out
    assert USER_FUNCTION in (project / "train.py").read_text()
    assert not (project / MODEL).exists()
    if user_action == "deleted":
        assert f"move_path: {MODEL} not found (deleted or moved by you?); nothing to move" in out
        # The new path is a new file for copier: it arrives from the template.
        fresh = render(tmp_path / "fresh", src=history, vcs_ref="2.0.0")
        assert (project / MOVED_MODEL).read_bytes() == (fresh / MOVED_MODEL).read_bytes()
    else:
        assert f"move_path: {MOVED_MODEL} is already in place and {MODEL} is gone; nothing to do" in out
        assert git(project, "show", f":2:{MOVED_MODEL}").stdout == mine
        assert resolve((project / MOVED_MODEL).read_text(), lambda ours, _theirs: ours) == mine


def test_copying_a_release_with_migrations_needs_no_trust(history, tmp_path):
    project = render(tmp_path / "project", src=history, vcs_ref="2.0.0")  # render() passes unsafe=False
    assert (project / MOVED_MODEL).is_file()


# ---------------------------------------------------------------------------------------------
# 5. Changing an answer through `copier update`: what depends on it is re-rendered, the rest kept.


@pytest.mark.parametrize(("old", "new"), [("none", "ddp"), ("ddp", "dataparallel")])
def test_changing_an_answer_rerenders_and_keeps_user_edits(history, tmp_path, old, new):
    notes = "# Experiments\n\nlr 2e-3 is best.\n"
    project = copy_project(tmp_path / "project", history, "1.1.0", multi_gpu=old)
    user_edits(project)
    (project / "notes.md").write_text(notes)
    commit_all(project, "My changes")

    update(project, VcsRef.CURRENT, data={"multi_gpu": new})  # copier update --vcs-ref :current: -d multi_gpu=...
    expected = render(tmp_path / "expected", src=history, vcs_ref="1.1.0", multi_gpu=new)
    user_edits(expected)
    (expected / "notes.md").write_text(notes)
    assert_same_tree(project, expected)
    distributed = (project / "shape_classifier" / "harness" / "distributed.py").read_text()
    assert ("DistributedDataParallel(" in distributed) == (new == "ddp")
    assert f"multi_gpu: {new}" in (project / ".copier-answers.yml").read_text()
    assert not unmerged(project)


def test_a_model_file_moved_before_its_answer_changes_keeps_the_edits_and_gets_the_updates(history, tmp_path):
    """The README's way to rename: `git mv`, commit, then the new answer. Renamed by hand alone: no more updates."""
    by_hand, renamed = (copy_project(tmp_path / name, history, "1.0.0") for name in ("by-hand", "renamed"))
    new = "shape_classifier/convnet.py"
    for project in (by_hand, renamed):
        user_edits(project)
        git(project, "mv", MODEL, new)
        commit_all(project, "My changes, the model file renamed")
    update(renamed, VcsRef.CURRENT, data={"model_module": "convnet"})  # -d model_module=convnet
    assert unmerged(renamed) == {new}  # added on both sides: the user's file and the template's
    git(renamed, "checkout", "--ours", "--", new)  # the user's, whole: the template only renamed it
    commit_all(renamed, "The answer follows the rename")
    for project in (by_hand, renamed):
        update(project, "1.1.0")
    text = (renamed / new).read_text()
    assert USER_CLASS in text and USER_COMMENT in text and TEMPLATE_MARK in text and not unmerged(renamed)
    assert TEMPLATE_MARK not in (by_hand / new).read_text() and not (by_hand / MODEL).exists()  # counted deleted


def test_update_answers_a_new_question(history, tmp_path):
    project = copy_project(tmp_path / "project", history, "1.0.0")
    update(project, "1.1.0", data={"citation": True})  # copier update -d citation=true
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["citation"] is True
    assert 'title: "Shape Classifier"' in (project / "CITATION.cff").read_text()


# ---------------------------------------------------------------------------------------------
# 6. This repository's latest release to its working tree, when the repository has tags.


def latest_release_tag() -> str | None:
    """The highest PEP 440 release tag of this repository; None without tags or without git."""
    try:
        listed = subprocess.run(["git", "tag", "--list"], cwd=REPO, capture_output=True, text=True).stdout.split()
    except OSError:
        return None
    releases = []
    for tag in listed:
        try:
            version = Version(tag)
        except InvalidVersion:
            continue
        if not version.is_prerelease:
            releases.append((version, tag))
    return max(releases)[1] if releases else None


def without_commit(answers_file: Path) -> dict:
    return {k: v for k, v in yaml.safe_load(answers_file.read_text()).items() if k != "_commit"}


@pytest.mark.skipif(latest_release_tag() is None, reason="no release tags here (a CI checkout needs fetch-depth: 0)")
def test_update_from_the_latest_release_tag_to_head(tmp_path):
    tag = latest_release_tag()
    answers = {"update_workflow": True}

    def copy_tag(dst: Path) -> Path:
        run_copy(str(REPO), dst, data=answers, defaults=True, vcs_ref=tag, quiet=True)
        git(dst, "init", "-q", "-b", "main")
        commit_all(dst, f"Start from the template {tag}")
        return dst

    # Without edits: the same tree as a fresh copy of HEAD (this working tree, uncommitted changes included) given
    # the answers the project recorded: a default that changed since (model_name's) leaves the project's as it was.
    untouched = copy_tag(tmp_path / "untouched")
    answers_file = ".copier-answers.yml"
    recorded = {k: v for k, v in yaml.safe_load((untouched / answers_file).read_text()).items() if k[0] != "_"}
    update(untouched, "HEAD", unsafe=True)  # this repository's own migrations, if it crosses any
    fresh = run_copy(str(REPO), tmp_path / "fresh", data=recorded, defaults=True, vcs_ref="HEAD", quiet=True).dst_path
    assert without_commit(untouched / answers_file) == without_commit(Path(fresh) / answers_file)
    (untouched / answers_file).unlink()
    (Path(fresh) / answers_file).unlink()
    assert_same_tree(untouched, Path(fresh))

    # With an edit: still there afterwards, merged or between conflict markers, never dropped.
    edited = copy_tag(tmp_path / "edited")
    with (edited / "README.md").open("a") as f:
        f.write(USER_NOTES)
    commit_all(edited, "My notes")
    update(edited, "HEAD", unsafe=True)
    assert USER_NOTES.strip() in (edited / "README.md").read_text()
    assert not list(edited.rglob("*.rej"))


# ---------------------------------------------------------------------------------------------
# The generated copier-update workflow, step by step, against a local remote and a stand-in gh.


def test_update_workflow_opens_one_pull_request_per_release(history, tmp_path):
    project = copy_project(tmp_path / "project", history, "1.1.0", update_workflow=True)
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(project, "remote", "add", "origin", str(origin))
    git(project, "push", "-q", "origin", "main")
    bin_dir = tmp_path / "bin"  # `gh` stand-in: records its arguments
    bin_dir.mkdir()
    (bin_dir / "gh").write_text('#!/bin/sh\necho "$@" >> "$GH_LOG"\n')
    (bin_dir / "gh").chmod(0o755)
    gh_log = tmp_path / "gh.log"
    env = {
        "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]),
        "GH_LOG": str(gh_log),
        "BASE": "main",
        "TRUST": "",
    }

    # The latest release (2.1.0) crosses 2.0.0's migration: without trust the job stops, loudly.
    result = run_step(project, "Run copier update", **env)
    assert result.returncode == 4 and "::error::" in result.stdout and "--trust" in result.stdout
    assert git(project, "status", "--porcelain").stdout == ""

    result = run_step(project, "Run copier update", **{**env, "TRUST": "true"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert run_step(project, CONFLICT_STEP, **env).returncode == 0
    result = run_step(project, "Open a pull request", **env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "copier-update/2.1.0" in git(origin, "branch", "--list").stdout
    assert gh_log.read_text().startswith("pr create --base main --head copier-update/2.1.0 ")

    # Next week, same release: the branch exists, so nothing is pushed over it.
    git(project, "checkout", "-q", "main")
    update(project, "2.1.0", unsafe=True)
    result = run_step(project, "Open a pull request", **env)
    assert result.returncode == 0 and "exists already" in result.stdout, result.stdout + result.stderr
    assert len(gh_log.read_text().splitlines()) == 1


def test_update_workflow_passes_a_project_newer_than_the_latest_release(history, tmp_path):
    """A project copied from a commit after the latest tag has no release to update to: a notice, not a failure."""
    newer = tmp_path / "template-repo"
    git(tmp_path, "clone", "-q", str(history), str(newer))
    (newer / "template" / "CONTRIBUTING.md").write_text("# Contributing\n\nAfter 2.1.0.\n")
    commit_all(newer, "after 2.1.0")
    project = copy_project(tmp_path / "project", newer, "HEAD", update_workflow=True)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])  # copier
    result = run_step(project, "Run copier update", TRUST="", PATH=path)
    assert result.returncode == 0 and "::notice::" in result.stdout, result.stdout + result.stderr
    assert git(project, "status", "--porcelain").stdout == ""


# ---------------------------------------------------------------------------------------------
# hooks/move_path.py on its own


def load_hook():
    spec = importlib.util.spec_from_file_location("move_path", MOVE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


move_path = load_hook()


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_move_path_moves_a_file_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"pkg/model.py": "mine\n"})
    assert move_path.main(["pkg/model.py", "pkg/models/model.py"]) == 0
    assert "moved pkg/model.py -> pkg/models/model.py" in capsys.readouterr().out
    assert tree(tmp_path) == {"pkg/models/model.py": b"mine\n"}
    assert move_path.main(["pkg/model.py", "pkg/models/model.py"]) == 0  # again: nothing to do
    assert "already in place" in capsys.readouterr().out
    assert tree(tmp_path) == {"pkg/models/model.py": b"mine\n"}


def test_move_path_leaves_a_deleted_file_deleted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert move_path.main(["gone.py", "new/gone.py"]) == 0
    assert "gone.py not found" in capsys.readouterr().out
    assert not (tmp_path / "new").exists()


def test_move_path_merges_folders_without_overwriting(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"old/same.py": "1\n", "old/only_old.py": "2\n", "old/sub/deep.py": "3\n"})
    write(tmp_path, {"new/same.py": "1\n", "new/only_new.py": "4\n"})
    assert move_path.main(["old", "new"]) == 0
    assert "1 identical file(s) already there" in capsys.readouterr().out
    assert tree(tmp_path) == {
        "new/same.py": b"1\n",
        "new/only_old.py": b"2\n",
        "new/sub/deep.py": b"3\n",
        "new/only_new.py": b"4\n",
    }


@pytest.mark.parametrize(
    "files",
    [
        {"old/a.py": "mine\n", "new/a.py": "theirs\n"},  # same file name, different content
        {"old.py": "mine\n", "new.py/inside.py": "x\n"},  # a file where the target is a folder
        {"old/a.py": "mine\n", "new": "a file\n"},  # a folder where the target is a file
    ],
)
def test_move_path_refuses_to_overwrite_and_changes_nothing(tmp_path, monkeypatch, capsys, files):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, files)
    old, new = ("old.py", "new.py") if "old.py" in files else ("old", "new")
    assert move_path.main([old, new]) == 1
    assert "refusing" in capsys.readouterr().out
    assert tree(tmp_path) == {name: text.encode() for name, text in files.items()}


@pytest.mark.parametrize("args", [["../outside.py", "x.py"], ["/etc/passwd", "x.py"], [".git/config", "x"], ["", "x"]])
def test_move_path_rejects_paths_outside_the_project(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        move_path.main(args)
    assert exc.value.code == 2


def test_move_path_refuses_to_move_a_folder_into_itself(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"tests/test_a.py": "1\n"})
    assert move_path.main(["tests", "tests/unit"]) == 2
    assert tree(tmp_path) == {"tests/test_a.py": b"1\n"}


def test_the_migrations_read_the_answers_file_the_project_keeps(tmp_path):
    """A project copied with `copier copy -a .my-answers.yml`: every migration reads {package_name} from there."""
    commands = [migration["command"] for migration in yaml.safe_load((REPO / "copier.yml").read_text())["_migrations"]]
    assert all(command[-2:] == ["--answers-file", "{{ _copier_conf.answers_file }}"] for command in commands)
    write(tmp_path, {".my-answers.yml": "package_name: pkg\n", "pkg/runs.py": "mine\n"})
    result = run_hook(tmp_path, "{package_name}/runs.py", "pkg/harness/runs.py", "--answers-file", ".my-answers.yml")
    assert result.returncode == 0 and (tmp_path / "pkg" / "harness" / "runs.py").read_text() == "mine\n"


def test_move_path_stages_the_move_in_git(tmp_path):
    write(tmp_path, {"old/a.py": "a\n", "old/b.py": "b\n", ".gitignore": "*.log\n"})
    git(tmp_path, "init", "-q", "-b", "main")
    commit_all(tmp_path, "start")
    write(tmp_path, {"old/run.log": "ignored\n"})
    result = run_hook(tmp_path, "old", "new")  # as copier runs it: a script, in the project root
    assert result.returncode == 0 and "moved old -> new (staged in git)" in result.stdout, result.stdout
    status = git(tmp_path, "status", "--porcelain").stdout.splitlines()
    assert sorted(status) == ["R  old/a.py -> new/a.py", "R  old/b.py -> new/b.py"]  # run.log moved, not staged
    assert (tmp_path / "new" / "run.log").is_file() and not (tmp_path / "old").exists()
    assert filecmp.cmp(tmp_path / "new" / "a.py", tmp_path / "new" / "a.py")


# ---------------------------------------------------------------------------------------------
# The real 0.2.0 migration: the harness moves into <package>/harness/, from the last layout before.
# Both releases are built from their commits, so later changes to the harness files do not enter
# this test (an update across them is unmerged for those lines, as hooks/README.md says).

BEFORE_HARNESS = "cce1636a848501d8ce85f7843e9b27623d2c49ab"  # 0.1.0: the flat package
HARNESS_LAYOUT = "69ae4964615e86332fcbab70110bcace41ac7c0e"  # 0.2.0: the harness moved, its files unchanged


@pytest.mark.parametrize("tags", [True, False], ids=["released", "untagged-moved-by-hand"])
def test_the_harness_move_keeps_the_users_edits_to_room_and_harness(tmp_path, capfd, tags):
    """A project rendered before 0.2.0, with edits to a room file, to harness files and to a harness test, updates
    with --trust: each moved file arrives at its new path with the user's edit, and the old paths are gone. Where
    the template has no tags the migration cannot run: moved by hand first, as README.md says, the same holds."""
    src = tmp_path / "template-repo"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    refs = {}  # release: what --vcs-ref names it by
    for commit, version in ((BEFORE_HARNESS, "0.1.0"), (HARNESS_LAYOUT, "0.2.0")):
        if git(REPO, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode:
            pytest.skip(f"this clone lacks commit {commit} (a shallow clone)")
        for name in ("template", "hooks"):
            shutil.rmtree(src / name, ignore_errors=True)
        archive = subprocess.run(["git", "archive", commit, "copier.yml", "template", "hooks"], cwd=REPO,
                                 capture_output=True, check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        commit_all(src, version)
        if tags:
            git(src, "tag", version)
        refs[version] = version if tags else git(src, "rev-parse", "HEAD").stdout.strip()

    project = copy_project(tmp_path / "project", src, refs["0.1.0"])
    edits = {"shape_classifier/networks.py": "# my network notes\n", "shape_classifier/checkpoint.py": "# my save\n",
             "shape_classifier/distributed.py": "# my ranks\n", "tests/test_runs.py": "# my run test\n"}  # fmt: skip
    for name, line in edits.items():
        with (project / name).open("a") as f:
            f.write(line)
    commit_all(project, "My changes")
    capfd.readouterr()
    if not tags:  # README.md: the migration's own script by hand, then an update to 0.2.0 (5fc269e)
        names = ["checkpoint", "runs", "runtime", "tracking", "loaders", "samplers", "images", "downloads", "optim"]
        for name in [*names, "distributed"]:
            print(run_hook(project, f"{{package_name}}/{name}.py", f"{{package_name}}/harness/{name}.py").stdout)
        commit_all(project, "Move the harness into <package>/harness/, as the template's 0.2.0 does")
    update(project, refs["0.2.0"], unsafe=tags)
    out = capfd.readouterr().out
    assert "move_path: moved shape_classifier/checkpoint.py -> shape_classifier/harness/checkpoint.py" in out
    moved = {"shape_classifier/checkpoint.py": "shape_classifier/harness/checkpoint.py",
             "shape_classifier/distributed.py": "shape_classifier/harness/distributed.py"}  # fmt: skip
    # The room file and the test merged as any edit does (the test's imports changed, the user's line stays).
    # An edited file that moved has no common base at its new path (hooks/README.md): it is there, unmerged,
    # with the user's version as "ours"; the unedited files that moved are exactly 0.2.0's.
    for name in ("shape_classifier/networks.py", "tests/test_runs.py"):
        assert (project / name).read_text().endswith(edits[name]), name
    assert unmerged(project) == set(moved.values())
    for old, new in moved.items():
        assert not (project / old).exists(), old
        assert git(project, "show", f":2:{new}").stdout.endswith(edits[old]), new  # the user's edit, at the new path
        git(project, "checkout", "--ours", "--", new)  # resolved as hooks/README.md says: keep ours
    for name in ("runtime", "tracking", "loaders", "samplers", "images", "downloads", "optim", "runs"):
        assert not (project / "shape_classifier" / f"{name}.py").exists()
        assert (project / "shape_classifier" / "harness" / f"{name}.py").is_file()
    fresh = render(tmp_path / "fresh", src=src, vcs_ref=refs["0.2.0"])
    for name, line in edits.items():  # the project is 0.2.0's with the user's four lines added
        target = project / moved.get(name, name)
        target.write_text(target.read_text().removesuffix(line))
    assert_same_tree(project, fresh)
