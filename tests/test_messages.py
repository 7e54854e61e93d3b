"""copier.yml's messages: next steps after a first copy, a review of your edits after a recopy.

pytest tests/test_messages.py
"""

from copier import run_copy, run_recopy

from conftest import REPO, run


def test_copy_and_recopy_print_the_message_for_their_operation(tmp_path, capsys):
    project = tmp_path / "project"
    run_copy(str(REPO), project, defaults=True, vcs_ref="HEAD", quiet=False, unsafe=False)
    first = capsys.readouterr().err
    assert f'Created "Shape Classifier" in {project}. Next steps:' in first
    assert "git init -b main" in first and "Re-rendered" not in first

    with (project / "train.py").open("a") as train:
        train.write("# my edit\n")
    run(["git", "init", "-q", "-b", "main"], cwd=project)
    run(["git", "add", "-A"], cwd=project)
    run(["git", "commit", "-q", "-m", "Start, with my edit"], cwd=project)
    run_recopy(project, defaults=True, overwrite=True, vcs_ref="HEAD", quiet=False, unsafe=False)
    again = capsys.readouterr().err
    assert f'Re-rendered "Shape Classifier" over the existing project in {project}.' in again
    assert "Your edits to generated files were replaced; git still has them." in again
    for step in ("git diff", "git checkout -p", "git add -A && git commit"):
        assert step in again
    assert "git init" not in again and "Next steps" not in again
    assert "-# my edit" in run(["git", "diff", "train.py"], cwd=project).stdout  # replaced, and still in git
