"""predict.py, export.py and test.py's inputs and outputs, on a checkpoint from a short training run.

Run: pytest tests/test_predict_export.py
"""

import errno
import importlib
import json
import os
import types
import warnings
from pathlib import Path

import pytest
import torch
from PIL import Image
from torchvision.transforms.functional import to_pil_image

from conftest import load_script


def draw_shapes(train_script, count: int) -> list[tuple[Image.Image, str]]:
    """(image, class name) pairs drawn by the built-in dataset, every class in turn."""
    shapes = importlib.import_module(train_script.task.data.__name__.rsplit(".", 1)[0] + ".shapes")
    dataset = shapes.SyntheticShapes(count, 16, seed=7)
    return [(to_pil_image(image), shapes.SHAPES[label]) for image, label in (dataset[i] for i in range(count))]


def write_image_folder(folder: Path, train_script, count: int) -> Path:
    """folder/<class>/<index>.png for `count` images of the built-in dataset."""
    for index, (image, name) in enumerate(draw_shapes(train_script, count)):
        (folder / name).mkdir(parents=True, exist_ok=True)
        image.save(folder / name / f"{index}.png")
    return folder


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, train_script) -> Path:
    """A short run on an image folder of the built-in shapes (its classes in folder order)."""
    root = tmp_path_factory.mktemp("predict")
    write_image_folder(root / "data" / "train", train_script, 48)
    write_image_folder(root / "data" / "val", train_script, 12)
    flags = ["--data-dir", str(root / "data"), "--device", "cpu", "--img-size", "16", "--widths", "8,16",
             "--batch-size", "16", "--epochs", "1", "--progress", "never", "--output-dir", str(root),
             "--run-name", "run"]  # fmt: skip
    assert train_script.main(flags) == 0
    return root / "run"


@pytest.fixture(scope="module")
def images(tmp_path_factory, train_script) -> Path:
    """A folder of PNG files drawn by the built-in dataset, one per class."""
    folder = tmp_path_factory.mktemp("images")
    classes = train_script.task.data.SHAPES
    for index, (image, name) in enumerate(draw_shapes(train_script, len(classes))):
        image.save(folder / f"{index}_{name}.png")
    (folder / "notes.txt").write_text("not an image: skipped when a folder is given")
    return folder


def test_predict_prints_label_and_confidence_as_the_model_computes_them(run_dir, images, capsys, train_script):
    predict = load_script("predict")
    assert predict.main([str(run_dir / "best.pt"), str(images), "--top-k", "2", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    classes = torch.load(run_dir / "best.pt", weights_only=True)["classes"]
    assert len(lines) == len(classes)  # one line per PNG; notes.txt is not an image
    for line in lines:
        path, *labels = line.split("\t")
        assert path.endswith(".png") and len(labels) == 2 and all(label.split()[0] in classes for label in labels)
        probs = [float(label.split()[1]) for label in labels]
        assert probs == sorted(probs, reverse=True) and 0.0 <= sum(probs) <= 1.0 + 1e-6

    image = sorted(images.glob("*.png"))[0]  # a run directory means its last.pt
    assert predict.main([str(run_dir), str(image), "--device", "cpu"]) == 0
    _, label_prob = capsys.readouterr().out.strip().split("\t")
    state = torch.load(run_dir / "last.pt", weights_only=True)
    args = train_script.get_args_parser().parse_args(["--img-size", "16", "--widths", "8,16"])
    prep = train_script.task.transforms.Preprocessing(16)
    splits = train_script.task.data.build_datasets("shapes", None, prep, train_size=8, val_size=8)
    model = train_script.task.build_model(args, splits, torch.device("cpu")).eval()
    model.load_state_dict(state["model"])
    tensor = train_script.task.transforms.build_transforms(prep)(Image.open(image).convert("RGB"))
    with torch.no_grad():
        probs = model(tensor[None]).softmax(dim=1)[0]  # (num_classes,)
    assert label_prob == f"{state['classes'][probs.argmax()]} {probs.max():.3f}"


def test_predict_names_the_files_it_cannot_read_and_classifies_the_rest(run_dir, images, tmp_path, capsys):
    predict = load_script("predict")
    assert predict.main([str(run_dir), str(tmp_path / "missing.png")]) == 2
    (tmp_path / "fake.png").write_text("not a png")
    assert predict.main([str(run_dir), str(tmp_path / "fake.png")]) == 2
    assert capsys.readouterr().err.splitlines()[-2:] == [
        f"predict.py: skipped: cannot read {tmp_path / 'fake.png'} (not an image PIL can identify)",
        "predict.py: error: none of the 1 image files could be read",
    ]
    folder = tmp_path / "mixed"
    folder.mkdir()
    for path in sorted(images.glob("*.png"))[:2]:
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 only the start of a JPEG")
    assert predict.main([str(run_dir / "best.pt"), str(folder), "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert [line.split("\t")[0] for line in out.splitlines()] == [str(p) for p in sorted(folder.glob("*.png"))]
    assert err.startswith(f"predict.py: skipped: cannot read {folder / 'broken.jpg'} (") and len(err.splitlines()) == 1


@pytest.mark.parametrize("fmt", ["export", "torchscript"])
def test_export_matches_the_eager_model(run_dir, tmp_path, fmt, capsys):
    export = load_script("export")
    out = tmp_path / "missing" / "folder" / f"model{export.SUFFIXES[fmt]}"  # made by export.py
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated; the option stays for old runtimes
        assert export.main([str(run_dir / "best.pt"), "--format", fmt, "--output", str(out)]) == 0
        loaded = torch.jit.load(str(out)) if fmt == "torchscript" else torch.export.load(out).module()
    assert "largest difference" in capsys.readouterr().out
    state = torch.load(run_dir / "best.pt", weights_only=True)
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        logits = loaded(images)  # (3, num_classes)
    assert logits.shape == (3, len(state["classes"]))


@pytest.mark.parametrize("backbone", ["resnet18", "mobilenet_v3_small"])
def test_a_fine_tuned_torchvision_model_predicts_and_exports_from_its_checkpoint_alone(
    backbone, tmp_path, images, train_script, capsys
):
    """No flags after training: the backbone, its preprocessing and the averaged weights come from the checkpoint."""
    flags = ["--device", "cpu", "--backbone", backbone, "--freeze-backbone", "--ema-decay", "0.9", "--img-size", "32",
             "--shapes-train-size", "32", "--shapes-val-size", "8", "--batch-size", "8", "--max-steps-per-epoch", "2",
             "--epochs", "1", "--progress", "never", "--output-dir", str(tmp_path), "--run-name", "run"]  # fmt: skip
    assert train_script.main(flags) == 0
    capsys.readouterr()
    checkpoint = tmp_path / "run" / "best.pt"
    assert load_script("predict").main([str(checkpoint), str(images), "--device", "cpu"]) == 0
    assert load_script("export").main([str(checkpoint)]) == 0  # exit 1 if it differs by more than 1e-4
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(train_script.task.data.SHAPES) + 1  # one per image, then export.py's line
    assert float(lines[-1].rsplit(": ", 1)[1]) <= 1e-4
    assert checkpoint.with_suffix(".pt2").is_file()


def test_export_never_overwrites_a_checkpoint_or_an_input(run_dir, tmp_path, capsys):
    export = load_script("export")
    (tmp_path / "notes").write_text("mine")
    before = {path: path.read_bytes() for path in (run_dir / "best.pt", run_dir / "last.pt", tmp_path / "notes")}
    refused = [
        (["--output", str(run_dir / "last.pt")], "must end in .pt2 for --format export"),  # the run's other checkpoint
        (["--output", str(run_dir / "best.pt")], "would overwrite the checkpoint"),
        (["--format", "torchscript", "--output", str(tmp_path / "model.pt2")], "must end in .ts"),
        (["--output", str(tmp_path)], "is a folder; name a file in it, e.g."),
        (["--output", str(tmp_path / "notes" / "model.pt2")], f"cannot make the folder for --output {tmp_path}"),
    ]
    for flags, message in refused:
        assert export.main([str(run_dir / "best.pt"), *flags]) == 2, flags
        err = capsys.readouterr().err
        assert err.startswith("export.py: error: ") and err.count("\n") == 1 and message in err, (flags, err)
    assert {path: path.read_bytes() for path in before} == before


def test_a_failed_write_or_check_keeps_the_earlier_export_and_leaves_no_file(run_dir, tmp_path, monkeypatch, capsys):
    """A full disk (torch reports a RuntimeError) or an export that computes something else: exit 1, one line,
    the earlier export kept, no new file and no .tmp left."""
    export = load_script("export")
    out = tmp_path / "model.pt2"
    assert export.main([str(run_dir / "best.pt"), "--output", str(out)]) == 0
    earlier = out.read_bytes()
    message = "[enforce fail at inline_container.cc:800] . PytorchStreamWriter failed writing file data/0"

    def disk_full(program, file, *args, **kwargs):
        file.write(b"PK\x03\x04 the first bytes")
        raise RuntimeError(message + "\nException raised from writeRecord at inline_container.cc:800")

    with monkeypatch.context() as patch:
        patch.setattr(torch.export, "save", disk_full)
        assert export.main([str(run_dir / "best.pt"), "--output", str(out)]) == 1
    assert capsys.readouterr().err == f"export.py: error: cannot write {out} ({message})\n"
    state = torch.load(run_dir / "best.pt", weights_only=True)  # another model, so that a new export would differ
    state["model"] = {key: value * 2 if value.is_floating_point() else value for key, value in state["model"].items()}
    torch.save(state, tmp_path / "other.pt")
    real_load = torch.export.load

    def off_by_one(file):  # a program that does not compute what the model does
        program = real_load(file).module()
        return types.SimpleNamespace(module=lambda: lambda images: program(images) + 1)

    monkeypatch.setattr(torch.export, "load", off_by_one)
    for target in (out, tmp_path / "new.pt2"):
        assert export.main([str(tmp_path / "other.pt"), "--output", str(target)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"export.py: error: cannot write {target} (") and err.count("\n") == 1, err
        assert "differs from the eager model by 1.00e+00" in err
    assert out.read_bytes() == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt2", "other.pt"]  # no new file, no .tmp


def test_test_py_reports_a_failed_write_in_one_line_and_keeps_the_old_report(run_dir, test_script, monkeypatch, capsys):
    report = run_dir / "best.pt.eval.json"
    report.write_text("{}")
    real_write_text = Path.write_text

    def disk_full(path, text, *args, **kwargs):
        real_write_text(path, text[:20])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", disk_full)
    assert test_script.main([str(run_dir / "best.pt"), "--device", "cpu"]) == 1
    assert capsys.readouterr().err == f"test.py: error: cannot write {report} (No space left on device)\n"
    assert report.read_text() == "{}" and not list(run_dir.glob("*.tmp"))


# test.py: the validation split alone, and a report that never replaces a checkpoint


@pytest.mark.parametrize("train_folder", ["missing", "holding an unreadable file"])
def test_test_py_reads_only_the_validation_split(run_dir, tmp_path, train_script, test_script, train_folder, capsys):
    data_dir = tmp_path / "other"
    write_image_folder(data_dir / "val", train_script, 12)
    if train_folder != "missing":  # a folder that train.py could not load: no class folders, no image
        (data_dir / "train").mkdir()
        (data_dir / "train" / "broken.png").write_text("not an image")
    report = tmp_path / "report.json"
    argv = [str(run_dir / "best.pt"), "--data-dir", str(data_dir), "--device", "cpu", "--json", str(report)]
    assert test_script.main(argv) == 0, capsys.readouterr().err
    assert json.loads(report.read_text())["samples"] == 12


def test_test_py_report_must_be_json_and_gets_its_folder(run_dir, tmp_path, test_script, capsys):
    before = (run_dir / "last.pt").read_bytes()
    assert test_script.main([str(run_dir / "best.pt"), "--device", "cpu", "--json", str(run_dir / "last.pt")]) == 2
    assert capsys.readouterr().err == f"test.py: error: --json {run_dir / 'last.pt'} must end in .json\n"
    assert (run_dir / "last.pt").read_bytes() == before
    arguments = (run_dir / "args.json").read_bytes()
    assert test_script.main([str(run_dir / "best.pt"), "--device", "cpu", "--json", str(run_dir / "args.json")]) == 2
    assert "would replace a file that train.py wrote" in capsys.readouterr().err
    assert (run_dir / "args.json").read_bytes() == arguments

    report = tmp_path / "missing" / "folder" / "report.json"
    assert test_script.main([str(run_dir / "best.pt"), "--device", "cpu", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["checkpoint"] == str(run_dir / "best.pt")
