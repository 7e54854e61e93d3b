"""notebooks/explore.ipynb is saved without outputs, and runs from top to bottom: pytest tests/test_notebook.py

It runs in a fresh kernel, in a temporary project, twice: before a short train.py run and after; runs/ is untouched.
"""

import os
import shutil

import nbformat
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

from conftest import ROOT

NOTEBOOK = ROOT / "notebooks" / "explore.ipynb"
pytestmark = pytest.mark.skipif(not NOTEBOOK.is_file(), reason="notebooks/explore.ipynb was deleted")  # a scratchpad


def shown(cells: list) -> tuple[str, set[str]]:
    """What the cells printed, and the kinds of what they displayed ("image/png", ...)."""
    outputs = [output for cell in cells for output in cell.get("outputs", [])]
    text = "".join(output.get("text", "") for output in outputs)
    return text, {kind for output in outputs for kind in output.get("data", {})}


def test_the_notebook_is_saved_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    saved = [i for i, cell in enumerate(notebook.cells) if cell.get("outputs") or cell.get("execution_count")]
    clear = f"jupyter nbconvert --clear-output --inplace {NOTEBOOK.relative_to(ROOT)}"
    assert not saved, f"cells {saved} were saved with outputs, which copier update cannot merge; clear them: {clear}"


def run_notebook(project) -> list:
    """The notebook's cells, with their outputs, after a run from top to bottom in a fresh kernel in `project`."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # No kernelspec directories: "python3" is then ipykernel's native spec, this interpreter's.
    kernel = KernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[]))
    where = {"metadata": {"path": str(project / "notebooks")}}  # the kernel's working directory
    # cleanup_kc: shut the kernel down and delete its connection file in /tmp (left to the caller who passes km)
    NotebookClient(notebook, km=kernel, timeout=120, resources=where).execute(cleanup_kc=True)
    return notebook.cells


def test_the_notebook_runs_without_a_run_and_with_one(tmp_path, monkeypatch, train_script, tiny_args):
    shutil.copy(ROOT / "train.py", tmp_path)  # marks the project root, whose runs/ the notebook reads
    (tmp_path / "notebooks").mkdir()
    monkeypatch.setenv("PYTHONPATH", str(ROOT), prepend=os.pathsep)  # the kernel imports this package, installed or not
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # on a busy machine, the kernel's threads would wait for each other
    cells = run_notebook(tmp_path)
    last_section = max(i for i, cell in enumerate(cells) if cell.cell_type == "markdown")
    text, kinds = shown(cells[last_section:])
    assert "no run under" in text and not kinds
    assert "image/png" in shown(cells[:last_section])[1]  # the data's grid
    assert train_script.main([*tiny_args, "--max-steps-per-epoch", "2"]) == 0  # writes tmp_path/runs/run/best.pt
    text, kinds = shown(run_notebook(tmp_path)[last_section:])  # a fresh kernel again, now with a run
    assert str(tmp_path / "runs" / "run") in text and "image/png" in kinds
