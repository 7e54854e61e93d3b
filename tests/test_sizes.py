"""Sizes of the generated code: files readable in one sitting, functions short enough to follow.

    pytest tests/test_sizes.py -s        # prints every file's size and every function over the limit

Limits for the package and the scripts: 300 lines per file (train.py, which keeps the training
loop, its flags, what --resume does with each of them and the fine-tuning set-up in view, 500)
and 60 lines per function, counted from the `def` line to the function's last line without its
docstring. Files under tests/ are reported but not held to the limits.
"""

import ast
from pathlib import Path

import pytest

from conftest import render

MULTI_GPU = ["ddp", "dataparallel", "none"]
FILE_LIMIT = 300
FILE_LIMITS = {"train.py": 500}
FUNCTION_LIMIT = 60


def function_sizes(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(qualified name, def line, lines without the docstring) of every function, nested ones too."""
    sizes = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = child.end_lineno - child.lineno + 1
                first = child.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    length -= first.end_lineno - first.lineno + 1  # the docstring
                sizes.append((prefix + child.name, child.lineno, length))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, f"{prefix}{child.name}." if isinstance(child, ast.ClassDef) else prefix)

    visit(tree, "")
    return sizes


def test_function_sizes_count_from_def_to_last_line_without_the_docstring():
    source = 'class A:\n    @property\n    def f(self):\n        """Doc\n\n        more."""\n        return 1\n'
    assert function_sizes(ast.parse(source)) == [("A.f", 3, 2)]


ANSWERS = {name: {"multi_gpu": name} for name in MULTI_GPU} | {"restoration": {"task": "restoration"}}


@pytest.fixture(scope="module", params=ANSWERS)
def project(request, tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp(f"sizes-{request.param}") / "project", **ANSWERS[request.param])


def test_files_and_functions_stay_small(project):
    report, too_big = [], []
    for path in sorted(project.rglob("*.py")):
        rel = path.relative_to(project).as_posix()
        text = path.read_text(encoding="utf-8")
        enforced = not rel.startswith("tests/")
        lines, limit = len(text.splitlines()), FILE_LIMITS.get(rel, FILE_LIMIT)
        report.append(f"{lines:5d} lines  {rel}")
        if enforced and lines > limit:
            too_big.append(f"{rel}: {lines} lines, {lines - limit} over the limit of {limit}")
        for name, line, length in function_sizes(ast.parse(text)):
            if length > FUNCTION_LIMIT:
                report.append(f"{length:5d} lines  {rel}:{line} {name}()")
                if enforced:
                    too_big.append(f"{rel}:{line}: {name}() has {length} lines, {length - FUNCTION_LIMIT} over")
    print("\n".join(report))
    assert not too_big, "\n".join(["too big:", *too_big, "", "all sizes:", *report])
