#!/usr/bin/env python3
"""Move a generated file or folder to where a newer template version puts it; a copier migration.

    python hooks/move_path.py OLD NEW     # paths relative to the project root, the working directory

Standard library only, and safe to run any number of times:

* OLD exists, NEW does not: OLD is moved to NEW, the user's edits included.
* OLD is gone and NEW exists (moved already, by hand or by an earlier run): nothing to do.
* Both are gone (the user deleted the file): nothing to do.
* Both exist: every file of OLD that NEW already holds with the same bytes is dropped from OLD, and
  the rest is moved; if NEW holds any of them with different bytes, this move changes nothing
  and the script exits 1, which makes copier stop the update before it renders anything (the
  migrations that ran before this one keep their moves: committed, the update runs again).

Each outcome is printed on one line starting with "move_path:". Inside a git work tree the move
is also staged (`git rm --cached` OLD, `git add` NEW) for the files git tracked under OLD. That
is what keeps the user's version: copier builds the patch of the user's changes from the git
index, not from the working tree, and then renders the new template over the working tree. An
unstaged move would leave the patch pointing at OLD, and the fresh render of NEW would replace
the user's file.

Wire it into copier.yml for the release that moves the file, in the "before" stage (run before
copier renders the new version into the project):

    _migrations:
      - version: "2.0.0"
        when: "{{ _stage == 'before' }}"
        command:
          - "{{ _copier_python }}"
          - "{{ _copier_conf.src_path }}/hooks/move_path.py"
          - "{package_name}/{model_module}.py"
          - "{package_name}/models/{model_module}.py"

Write answers as {name}, not {{ name }}: in the "before" stage copier has not loaded the answers
yet, so Jinja cannot fill them (with StrictUndefined the update stops). This script fills each
{name} from the project's answers file (.copier-answers.yml, or --answers-file), which records
the answers the files on disk were rendered with.

hooks/README.md explains what the user sees after such an update and how to release one.
"""

import argparse
import contextlib
import filecmp
import json
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

PREFIX = "move_path:"
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def say(message: str) -> None:
    """Print one line of the report, flushed so it appears in order with copier's output."""
    print(f"{PREFIX} {message}", flush=True)


def read_answers(path: Path) -> dict[str, str]:
    """The one-line scalar answers at the top level of copier's answers file (YAML)."""
    answers = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*):[ \t]+(\S.*?)[ \t]*", line)
        if not match:
            continue
        key, value = match.groups()
        if len(value) > 1 and value[0] == value[-1] == "'":
            value = value[1:-1].replace("''", "'")
        elif len(value) > 1 and value[0] == value[-1] == '"':
            try:
                value = json.loads(value)
            except ValueError:
                continue
        elif value[0] in "[]{}|>&*!%@`#'\"":  # a list, a mapping, a block: not a one-line scalar
            continue
        answers[key] = value
    return answers


def project_path(text: str, answers_file: Path) -> Path:
    """Fill {answer} placeholders, then check the result is a path inside the project."""
    names = PLACEHOLDER.findall(text)
    if names:
        answers = read_answers(answers_file) if answers_file.is_file() else {}
        missing = sorted({name for name in names if name not in answers})
        if missing:
            raise ValueError(f"{text!r}: no answer {', '.join(missing)} in {answers_file}")
        text = PLACEHOLDER.sub(lambda match: answers[match.group(1)], text)
    pure = PurePosixPath(text.replace("\\", "/"))
    if not pure.parts or pure.is_absolute() or ".." in pure.parts or pure.parts[0] == ".git":
        raise ValueError(f"{text!r} must be a path inside the project, relative to its root")
    return Path(*pure.parts)


def files_under(root: Path) -> list[Path]:
    """Every file (and symlink, not followed) under root, relative to root; [Path()] for a file."""
    if not root.is_dir() or root.is_symlink():
        return [Path()]
    found = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        found += [(base / name).relative_to(root) for name in files]
        found += [(base / name).relative_to(root) for name in dirs if (base / name).is_symlink()]
    return sorted(found)


def same_file(a: Path, b: Path) -> bool:
    """True when both are files with the same bytes, or symlinks with the same target."""
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b)
    return a.is_file() and b.is_file() and filecmp.cmp(a, b, shallow=False)


def git(*args: str) -> subprocess.CompletedProcess:
    """Run git in the working directory; never raises, the caller reads returncode."""
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:  # no git at all: behave as outside a work tree
        return subprocess.CompletedProcess(["git", *args], 127, "", "git not found")


def tracked_files(path: Path) -> list[Path]:
    """Files under path that git tracks here, relative to path; [] outside a git work tree."""
    if git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        return []
    listed = git("ls-files", "-z", "--", path.as_posix()).stdout.split("\0")
    return [Path(name).relative_to(path) if Path(name) != path else Path() for name in listed if name]


def remove_empty_dirs(root: Path) -> None:
    """Remove root and the folders under it that are left empty, deepest first."""
    for folder, _dirs, _files in sorted(os.walk(root), key=lambda entry: -len(Path(entry[0]).parts)):
        with contextlib.suppress(OSError):  # not empty: something is still there, keep it
            Path(folder).rmdir()


def move(old: Path, new: Path) -> int:
    """Move old to new as described in the module docstring; return the exit status."""
    if old == new or new.is_relative_to(old) or old.is_relative_to(new):
        say(f"refusing to move {old} to {new}: one contains the other")
        return 2
    if not old.exists() and not old.is_symlink():
        if new.exists():
            say(f"{new} is already in place and {old} is gone; nothing to do")
        else:
            say(f"{old} not found (deleted or moved by you?); nothing to move")
        return 0

    # Decide everything before changing anything, so a refusal leaves the project untouched.
    relative = files_under(old)
    clashes, duplicates = [], []
    for rel in relative:
        target = new / rel
        blocker = next((parent for parent in target.parents if parent.is_file() or parent.is_symlink()), None)
        if blocker is not None:
            clashes.append(f"{blocker} is a file where {old / rel} would go")
        elif target.exists() or target.is_symlink():
            if same_file(old / rel, target):
                duplicates.append(rel)
            else:
                clashes.append(f"{target} already exists and differs from {old / rel}")
    if clashes:
        for clash in clashes:
            say(f"refusing: {clash}")
        why = "this move changed nothing, earlier migrations of the update may have (git status shows them)"
        say(f"{why}; merge {old} into {new} by hand, commit, then run the update again")
        return 1

    tracked = tracked_files(old)
    if not new.exists() and not new.is_symlink():
        new.parent.mkdir(parents=True, exist_ok=True)
        old.rename(new)
    else:
        for rel in relative:
            if rel in duplicates:
                (old / rel).unlink()
            else:
                (new / rel).parent.mkdir(parents=True, exist_ok=True)
                (old / rel).rename(new / rel)
        if old.is_dir():
            remove_empty_dirs(old)

    staged = ""
    if tracked:
        removed = git("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", old.as_posix())
        added = git("add", "-f", "--", *[(new / rel).as_posix() for rel in tracked])
        if removed.returncode or added.returncode:
            say(f"moved, but staging the move in git failed: {removed.stderr.strip()} {added.stderr.strip()}")
            say(f"the update stops here: run `git add -A -- {old.as_posix()} {new.as_posix()}`, commit, update again")
            return 1
        staged = " (staged in git)"
    kept = f", {len(duplicates)} identical file(s) already there" if duplicates else ""
    say(f"moved {old} -> {new}{kept}{staged}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse OLD and NEW, move, and return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", metavar="OLD", help="path the older template version used; {answer} is filled in")
    parser.add_argument("new", metavar="NEW", help="path the newer template version uses; {answer} is filled in")
    parser.add_argument(
        "--answers-file", type=Path, default=Path(".copier-answers.yml"), help="where {answer} come from"
    )
    args = parser.parse_args(argv)
    try:
        old, new = (project_path(text, args.answers_file) for text in (args.old, args.new))
    except ValueError as error:
        parser.error(str(error))
    return move(old, new)


if __name__ == "__main__":
    sys.exit(main())
