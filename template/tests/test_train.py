"""train.py and test.py end to end on CPU: smoke run, exact resume, signals, bad input.

Run: pytest tests/test_train.py
"""

import errno
import io
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from conftest import run_one_epoch


def run_dir(args: list[str]) -> Path:
    return Path(args[args.index("--output-dir") + 1]) / args[args.index("--run-name") + 1]


def test_help_lists_the_documented_flags(train_script, capsys):
    assert exit_code(train_script.main, ["--help"]) == 0  # python train.py --help
    out = capsys.readouterr().out
    for flag in ("--dataset", "--data-dir", "--download", "--img-size", "--epochs", "--batch-size", "--lr", "--device",
                 "--num-workers", "--seed", "--output-dir", "--log-interval", "--max-steps-per-epoch", "--resume",
                 "--prefetch-depth", "--backbone", "--weights", "--freeze-backbone", "--ema-decay",
                 "--ema-every"):  # fmt: skip
        assert flag in out
    text = " ".join(out.split())  # argparse wraps lines
    assert "(default: 5)" in text  # the real defaults are shown ...
    assert "(default: None)" not in text and "(default: the start time" in text  # ... where there is one
    assert "builtin: channels per stage (default: 16,32,64)" in text


def test_the_readme_table_of_augmentation_flags_shows_each_and_its_default(train_script, capsys):
    """README.md's "Augment" table lists every flag of --help's augmentation group, with the parser's default."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme.split("\n## Augment\n")[1].split("\n## ")[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| `--")]
    table = {row[0].strip("| `").split()[0]: row[1] for row in rows}
    assert exit_code(train_script.main, ["--help"]) == 0
    group = capsys.readouterr().out.split("\naugmentation")[1].split("\n\n")[0]
    assert set(table) == {word for word in group.split() if word.startswith("--")}
    parser = train_script.get_args_parser()
    for flag, shown in table.items():
        default = parser.get_default(flag[2:].replace("-", "_"))
        assert shown == ("off" if default is None else f"{default:g}" if isinstance(default, float) else str(default))


def test_smoke_train_then_evaluate(train_script, test_script, tiny_args, capsys):
    assert train_script.main([*tiny_args, "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert '"batch_size": 16' in out  # the arguments are printed at start
    assert "efficiency" in out and "best val accuracy" in out
    directory = run_dir(tiny_args)
    names = {p.name for p in directory.iterdir()}
    assert {"args.json", "environment.json", "metrics.jsonl", "last.pt", "best.pt"} <= names
    assert any(name.startswith("events.out.tfevents") for name in names)
    assert json.loads((directory / "args.json").read_text())["batch_size"] == 16
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert {r["split"] for r in records} == {"train", "val"}
    assert all(0.0 <= r["compute_efficiency"] <= 1.0 for r in records if r["split"] == "train")
    state = torch.load(directory / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 2 and state["run_state"]["global_step"] == 12

    assert test_script.main([str(directory / "best.pt"), "--device", "cpu"]) == 0
    report = json.loads((directory / "best.pt.eval.json").read_text())
    assert report["samples"] == 40 and 0.0 <= report["accuracy"] <= 1.0
    assert set(report["per_class"]) == set(state["classes"])


def test_each_epoch_shows_the_same_validation_images_and_the_confusion_matrix(train_script, test_script, tiny_args):
    """TensorBoard gets, once per epoch, the 16 fixed validation images with the model's predictions
    (wrong ones bordered red) and the confusion matrix; test.py writes confusion_matrix.png and
    mistakes.png beside its report. Each is checked against the saved model's own predictions."""
    assert train_script.main([*tiny_args, "--epochs", "2"]) == 0
    directory = run_dir(tiny_args)
    events = EventAccumulator(str(directory), size_guidance={"images": 0})
    events.Reload()
    assert set(events.Tags()["images"]) == {"val/predictions", "val/confusion_matrix"}
    assert [event.step for event in events.Images("val/predictions")] == [6, 12]  # once per epoch
    grid = Image.open(io.BytesIO(events.Images("val/predictions")[-1].encoded_image_string)).convert("RGB")

    state = torch.load(directory / "last.pt", weights_only=True)
    model = getattr(train_script, state["model_name"]).from_checkpoint(state).eval()
    prep = train_script.transforms.from_checkpoint(state)
    val = train_script.data.build_split("shapes", None, prep, train=False, seed=0, val_size=40).dataset
    images, labels = train_script.preview_batch(val)  # (16, 3, 16, 16), (16,)
    wrong = (model(images).argmax(dim=1) != labels).tolist()
    tile_w, tile_h = test_script.figures.TILE + 4, test_script.figures.TILE + 4 + 2 * 12 + 2
    assert grid.size == (8 * (tile_w + 4) + 4, 2 * (tile_h + 4) + 4)  # 16 tiles in 2 rows
    borders = [grid.getpixel((4 + (i % 8) * (tile_w + 4), 4 + (i // 8) * (tile_h + 4))) for i in range(16)]
    assert [colour == test_script.figures.WRONG for colour in borders] == wrong

    assert test_script.main([str(directory / "last.pt"), "--device", "cpu"]) == 0
    report = json.loads((directory / "last.pt.eval.json").read_text())
    matrix = Image.open(directory / "confusion_matrix.png").convert("RGB")
    tb_matrix = Image.open(io.BytesIO(events.Images("val/confusion_matrix")[-1].encoded_image_string)).convert("RGB")
    assert matrix.tobytes() == tb_matrix.tobytes()  # the same model, the same validation set
    for row, counts in enumerate(report["confusion_matrix"]):
        for column, count in enumerate(counts):
            x, y = test_script.figures.cell_centre(row, column)
            corner = matrix.getpixel((x - test_script.figures.CELL // 2 + 2, y - test_script.figures.CELL // 2 + 2))
            assert (corner == (255, 255, 255)) == (count == 0)
    mistakes = Image.open(directory / "mistakes.png")
    wrong_count = report["samples"] - round(report["accuracy"] * report["samples"])
    shown = min(16, wrong_count)
    assert mistakes.size == (min(8, shown) * (tile_w + 4) + 4, -(-shown // 8) * (tile_h + 4) + 4)


def contents(directory: Path) -> dict[str, bytes]:
    """Every file of a run directory by name, to show that a command wrote nothing."""
    return {path.name: path.read_bytes() for path in directory.iterdir()}


def train_losses(directory: Path) -> list[float]:
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["split"] == "train"]


def test_extending_a_run_with_a_step_schedule_is_exact(train_script, tiny_args, tmp_path):
    """--epochs 2 in one run == --epochs 1, then --resume --epochs 2: same losses, same weights (and their
    moving average), bit for bit.

    Only the --epochs is given on resume: every other flag comes from the checkpoint.
    """
    common = [*tiny_args, "--scheduler", "step", "--step-epochs", "1", "--lr-gamma", "0.5", "--warmup-epochs", "0",
              "--mixup-alpha", "0.4", "--ema-decay", "0.9", "--ema-every", "2"]  # fmt: skip
    assert train_script.main([*common, "--epochs", "2", "--output-dir", str(tmp_path / "a")]) == 0
    assert train_script.main([*common, "--epochs", "1", "--output-dir", str(tmp_path / "b")]) == 0
    assert train_script.main(["--resume", str(tmp_path / "b" / "run"), "--epochs", "2", "--device", "cpu"]) == 0

    straight, resumed = tmp_path / "a" / "run", tmp_path / "b" / "run"
    assert train_losses(straight) == train_losses(resumed)
    a = torch.load(straight / "last.pt", weights_only=True)
    b = torch.load(resumed / "last.pt", weights_only=True)
    assert a["run_state"] == b["run_state"]
    assert all(torch.equal(a["model"][key], b["model"][key]) for key in a["model"])
    assert all(torch.equal(a["ema"][key], b["ema"][key]) for key in a["ema"])
    assert a["ema_updates"] == b["ema_updates"] == 6
    assert (resumed / "args-resume-step6.json").is_file()  # the first run's args.json is kept


def test_extending_a_cosine_run_recomputes_the_rest_of_the_curve(train_script, tiny_args, tmp_path):
    """With cosine, the resumed epoch runs at the learning rates of a 2-epoch curve (the README's promise)."""
    common = [*tiny_args, "--log-interval", "1", "--warmup-epochs", "0"]
    assert train_script.main([*common, "--epochs", "2", "--output-dir", str(tmp_path / "a")]) == 0
    assert train_script.main([*common, "--epochs", "1", "--output-dir", str(tmp_path / "b")]) == 0
    assert train_script.main(["--resume", str(tmp_path / "b" / "run"), "--epochs", "2", "--device", "cpu"]) == 0

    def rates(directory: Path) -> list[float]:
        return [r["lr"] for r in map(json.loads, (directory / "metrics.jsonl").read_text().splitlines()) if "lr" in r]

    straight, resumed = rates(tmp_path / "a" / "run"), rates(tmp_path / "b" / "run")
    assert resumed[6:] == straight[6:]  # epoch 2 follows the 2-epoch curve ...
    assert resumed[:6] != straight[:6]  # ... epoch 1 had followed the 1-epoch one: not the same run


def test_resume_continues_with_the_runs_own_flags(train_script, tiny_args, tmp_path):
    """The README's `--resume runs/<run> --epochs 2` keeps the image size, batch size, data and schedule."""
    assert train_script.main(tiny_args) == 0
    directory = run_dir(tiny_args)
    assert train_script.main(["--resume", str(directory), "--epochs", "2", "--log-interval", "1"]) == 0
    state = torch.load(directory / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 2 and state["run_state"]["global_step"] == 12  # 96 images / 16, twice
    saved = state["args"]
    assert (saved["img_size"], saved["batch_size"], saved["shapes_train_size"]) == (16, 16, 96)
    assert saved["widths"] == [8, 16]
    assert (saved["epochs"], saved["log_interval"], saved["dataset"]) == (2, 1, "shapes")
    assert saved["device"] == "auto"  # the machine's flags are this invocation's


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--batch-size", "32"], "--batch-size 32 differs from the run's 16"),
        (["--img-size", "32"], "--img-size 32 differs from the run's 16"),
        (["--widths", "8,32"], "--widths 8,32 differs from the run's 8,16"),
        (["--lr", "0.1"], "--lr 0.1 differs from the run's 0.002"),
        (["--data-dir", "elsewhere"], "--data-dir elsewhere differs from the run's (not set)"),
        (["--output-dir", "elsewhere"], "--resume continues in the checkpoint's own directory"),
        (["--run-name", "other"], "--resume continues in the checkpoint's own directory"),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else None,
)
def test_resume_refuses_a_flag_that_changes_the_run(train_script, tiny_args, capsys, flags, message):
    assert train_script.main(tiny_args) == 0
    directory = run_dir(tiny_args)
    before = contents(directory)
    capsys.readouterr()
    assert train_script.main(["--resume", str(directory), "--epochs", "2", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert contents(directory) == before  # nothing written


def test_resuming_a_finished_run_says_so_and_writes_nothing(train_script, tiny_args, capsys):
    assert train_script.main(tiny_args) == 0
    directory = run_dir(tiny_args)
    before = contents(directory)
    capsys.readouterr()
    assert train_script.main(["--resume", str(directory)]) == 0
    assert "is finished (epoch 1 of --epochs 1); resume with a larger --epochs" in capsys.readouterr().out
    assert contents(directory) == before


def test_resuming_an_older_checkpoint_would_overwrite_last_and_is_refused(train_script, tiny_args, capsys):
    assert train_script.main([*tiny_args, "--epochs", "2", "--keep-epochs", "2"]) == 0
    directory = run_dir(tiny_args)
    last = (directory / "last.pt").read_bytes()
    assert train_script.main(["--resume", str(directory / "epoch-1.pt"), "--epochs", "3"]) == 2
    assert f"would overwrite {directory / 'last.pt'}" in capsys.readouterr().err
    assert (directory / "last.pt").read_bytes() == last


def test_runs_started_in_the_same_second_get_their_own_directories(train_script, tiny_args, monkeypatch):
    monkeypatch.setattr(train_script.runs.time, "strftime", lambda fmt: "20260101-000000")
    argv = tiny_args[: tiny_args.index("--run-name")]  # the default name: the start time
    out = Path(argv[argv.index("--output-dir") + 1])
    assert train_script.main(argv) == 0 and train_script.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["20260101-000000", "20260101-000000-2"]
    for name in ("20260101-000000", "20260101-000000-2"):
        assert len(train_losses(out / name)) == 3  # each metrics.jsonl holds one run (6 steps, log every 2)


def test_a_fresh_run_never_shares_an_existing_directory(train_script, tiny_args, capsys):
    run_dir(tiny_args).mkdir(parents=True)  # e.g. a run that failed before its first checkpoint
    assert train_script.main(tiny_args) == 2
    assert "already exists; pick another --run-name" in capsys.readouterr().err


def test_signal_saves_a_resumable_checkpoint(train_script, tiny_args, monkeypatch):
    """SIGTERM mid-epoch, twice (as SLURM and torchrun deliver it): the current step finishes, last.pt is
    written, exit 143, whatever --log-interval is; --resume then finishes the run."""
    real_step, calls = train_script.optimizer_step, []

    def step_then_signal(*args, **kwargs):
        real_step(*args, **kwargs)
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(train_script, "optimizer_step", step_then_signal)
    assert train_script.main([*tiny_args, "--log-interval", "50"]) == 128 + signal.SIGTERM
    state = torch.load(run_dir(tiny_args) / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 0 and state["run_state"]["batch_in_epoch"] == 3

    monkeypatch.setattr(train_script, "optimizer_step", real_step)
    assert train_script.main([*tiny_args, "--resume", str(run_dir(tiny_args))]) == 0
    state = torch.load(run_dir(tiny_args) / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 1 and state["run_state"]["global_step"] == 6  # 96 images / 16 per batch


AUGMENTED = ["--hflip", "0.5", "--vflip", "0.5", "--random-resized-crop", "0.5", "1",
             "--auto-augment", "trivialaugment", "--random-erasing", "0.5",
             "--mixup-alpha", "0.4", "--cutmix-alpha", "1", "--dropout", "0.2"]  # fmt: skip


def test_sigterm_mid_epoch_then_resume_is_bit_exact_with_every_augmentation(
    train_script, tiny_args, tmp_path, monkeypatch
):
    """Every random augmentation is a function of (seed, epoch, image), mixup and cutmix of the batch's
    first seed: a run stopped by SIGTERM after step 3 of epoch 2 and resumed ends with the weights of the
    run left alone, bit for bit, whether the loop's thread or 2 workers (and a prefetch thread) loaded
    the batches before the stop, and the loop's thread after it."""
    common = [*tiny_args, *AUGMENTED, "--epochs", "2", "--ema-decay", "0.9"]
    workers = ["--num-workers", "2", "--prefetch-depth", "2"]
    real_step, calls = train_script.optimizer_step, []

    def step_then_signal(*args, **kwargs):
        real_step(*args, **kwargs)
        calls.append(1)
        if len(calls) == 9:  # step 3 of epoch 2
            os.kill(os.getpid(), signal.SIGTERM)

    def interrupted(name: str, loading: list[str], resume_loading: list[str]) -> None:
        calls.clear()
        monkeypatch.setattr(train_script, "optimizer_step", step_then_signal)
        assert train_script.main([*common, *loading, "--output-dir", str(tmp_path / name)]) == 128 + signal.SIGTERM
        monkeypatch.setattr(train_script, "optimizer_step", real_step)
        assert train_script.main(["--resume", str(tmp_path / name / "run"), "--device", "cpu", *resume_loading]) == 0

    assert train_script.main([*common, "--output-dir", str(tmp_path / "straight")]) == 0
    interrupted("resumed", [], [])
    interrupted("resumed-switched", workers, [])  # stopped while 2 workers loaded, resumed without them

    a = torch.load(tmp_path / "straight" / "run" / "last.pt", weights_only=True)
    assert a["run_state"]["global_step"] == 12
    saved = json.loads((tmp_path / "straight" / "run" / "args.json").read_text())
    for flags in (saved, a["args"]):  # every augmentation flag is recorded
        assert (flags["hflip"], flags["random_resized_crop"], flags["cutmix_alpha"]) == (0.5, [0.5, 1.0], 1.0)
    for name in ("resumed", "resumed-switched"):
        b = torch.load(tmp_path / name / "run" / "last.pt", weights_only=True)
        assert a["run_state"] == b["run_state"], name
        assert [key for key in a["model"] if not torch.equal(a["model"][key], b["model"][key])] == [], name
        assert [key for key in a["ema"] if not torch.equal(a["ema"][key], b["ema"][key])] == [], name


def test_a_signal_during_validation_stops_after_the_epochs_checkpoint(train_script, tiny_args, monkeypatch, capsys):
    real_validate = train_script.validate

    def validate_then_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(train_script, "validate", validate_then_signal)
    assert train_script.main([*tiny_args, "--epochs", "3"]) == 128 + signal.SIGINT
    state = torch.load(run_dir(tiny_args) / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 1 and state["run_state"]["batch_in_epoch"] == 0  # epoch 1 saved, no more
    assert f"resume with: python train.py --resume {run_dir(tiny_args)}" in capsys.readouterr().out


def test_non_finite_loss_stops_and_keeps_the_good_checkpoint(train_script, tiny_args, monkeypatch, capsys):
    assert train_script.main(tiny_args) == 0  # epoch 1 written
    good = (run_dir(tiny_args) / "last.pt").read_bytes()
    real_build = train_script.task.build_model

    def build_model_with_nan_loss(*args, **kwargs):
        model = real_build(*args, **kwargs)
        real_loss, calls = model.loss, []

        def loss(logits, targets):
            calls.append(1)
            value = real_loss(logits, targets)
            return value * float("nan") if len(calls) == 2 else value

        model.loss = loss  # instance attribute: shadows the method for this model only
        return model

    monkeypatch.setattr(train_script.task, "build_model", build_model_with_nan_loss)
    assert train_script.main([*tiny_args, "--epochs", "2", "--resume", str(run_dir(tiny_args))]) == 1
    err = capsys.readouterr().err.strip()
    assert "loss is nan at step 8" in err and len(err.splitlines()) == 1
    assert (run_dir(tiny_args) / "last.pt").read_bytes() == good


def test_no_thread_left_behind(train_script, tiny_args):
    before = set(threading.enumerate())
    assert train_script.main([*tiny_args, "--max-steps-per-epoch", "2"]) == 0  # breaks out of the loader early
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]


@pytest.mark.parametrize(("flags", "threads"), [([], 0), (["--prefetch-depth", "2"], 1)], ids=["default", "depth-2"])
def test_prefetch_thread_only_when_asked_for_on_the_cpu(train_script, tiny_args, flags, threads):
    """On the CPU the default loads batches in the loop's thread; --prefetch-depth 2 starts one loader thread."""
    seen = []  # loader threads alive at each forward

    def count_loader_threads(*_: object) -> None:
        seen.append(sum(isinstance(t, train_script.data.BackgroundGenerator) for t in threading.enumerate()))

    args = train_script.get_args_parser().parse_args([*tiny_args, *flags, "--max-steps-per-epoch", "2"])
    session, state = train_script.setup(args)
    session.model.register_forward_pre_hook(count_loader_threads)
    assert run_one_epoch(train_script, session, state, args)
    session.logger.close()
    assert seen == [threads, threads]


def test_training_and_eval_modes_and_hooks(train_script, tiny_args):
    """Forward hooks fire (the model is called, never .forward()); train mode in training, eval mode in evaluation."""
    args = train_script.get_args_parser().parse_args([*tiny_args, "--max-steps-per-epoch", "2"])
    session, state = train_script.setup(args)
    modes = []
    session.model.register_forward_pre_hook(lambda module, inputs: modes.append(module.training))
    assert run_one_epoch(train_script, session, state, args)
    assert modes == [True, True]
    metrics = train_script.validate(session, args, session.wrapped)
    session.logger.close()
    assert modes[2:] and not any(modes[2:])  # every evaluation forward ran in eval mode
    assert session.model.training  # and evaluation restored train mode
    assert metrics["samples"] == 40


def messy_image_folder(root: Path) -> list[Path]:
    """root/{train,val}/{dark,light}/ with images in every mode PIL reads, and three unreadable files.

    Train: 8 images per class and 2 bad files (18: three batches of 6); val: 4 per class and 1 bad file.
    """
    rng = np.random.default_rng(0)
    for split, count in (("train", 8), ("val", 4)):
        for name, low in (("dark", 0), ("light", 160)):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                rgb = rng.integers(low, low + 96, (12, 10, 3), dtype=np.uint8)
                image = Image.fromarray(rgb)
                kind = i % 6
                if kind == 1:
                    image = image.convert("L")
                elif kind == 2:
                    image = image.convert("P")
                elif kind == 3:
                    image = image.convert("RGBA")
                elif kind == 4:
                    image = Image.fromarray(rgb[..., 0].astype(np.uint16) * 257)  # 16-bit gray
                if kind == 5:
                    exif = Image.Exif()
                    exif[0x0112] = 8  # orientation: turn to view
                    image.convert("CMYK").save(folder / f"{i}.jpg", exif=exif)
                else:
                    image.save(folder / f"{i}.png")
    bad = [
        root / "train" / "dark" / "garbage.jpg",
        root / "train" / "light" / "cut.png",
        root / "val" / "dark" / "cut.jpg",
    ]
    bad[0].write_bytes(rng.bytes(300))
    for path, fmt in zip(bad[1:], ("PNG", "JPEG"), strict=True):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buffer, fmt)
        path.write_bytes(buffer.getvalue()[:600])  # cut off: a copy that did not finish
    return bad


def test_unreadable_images_are_named_once_skipped_and_counted(train_script, test_script, tiny_args, tmp_path, capfd):
    """Two epochs with two loader workers over a folder with three unreadable files among images of
    every mode: each file is named once, the epoch lines and metrics.jsonl count them, the checkpoints
    are whole; test.py lists the one in val; --strict-data stops at the first with one line."""
    bad = messy_image_folder(tmp_path / "data")
    flags = [*tiny_args, "--data-dir", str(tmp_path / "data"), "--batch-size", "6", "--epochs", "2"]
    assert train_script.main([*flags, "--num-workers", "2"]) == 0
    out, err = capfd.readouterr()
    named = [line for line in err.splitlines() if line.startswith("skipping an unreadable image: cannot read")]
    assert sorted(line.split()[6] for line in named) == sorted(map(str, bad))  # once each, over two epochs
    assert out.count("skipped 3 unreadable image files") == 2  # both epoch lines
    records = [json.loads(line) for line in (run_dir(tiny_args) / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if r["split"] == "val"]
    assert [(r["unreadable_train"], r["unreadable_val"], r["samples"]) for r in val] == [(2, 1, 8)] * 2
    assert torch.load(run_dir(tiny_args) / "last.pt", weights_only=True)["run_state"]["global_step"] == 6

    assert test_script.main([str(run_dir(tiny_args) / "best.pt"), "--device", "cpu"]) == 0
    report = json.loads((run_dir(tiny_args) / "best.pt.eval.json").read_text())
    assert report["samples"] == 8 and report["unreadable_files"] == [str(bad[2])]
    assert "skipped 1 unreadable image files" in capfd.readouterr().out

    strict = [*flags, "--strict-data", "--run-name", "strict"]
    assert train_script.main(strict) == 2
    err = capfd.readouterr().err.strip()
    assert err.startswith("train.py: error: cannot read ") and len(err.splitlines()) == 1
    assert err.endswith("; --strict-data stops at the first unreadable file")


NO_SPACE = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fill_disk(monkeypatch, where: str) -> None:
    """Make one kind of write fail as on a full disk, after it wrote part of its bytes."""
    if where == "checkpoint":  # torch.save reports it as a RuntimeError

        def save(obj, path, *args, **kwargs):
            Path(path).write_bytes(b"PK" * 50)
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0\nException ...")

        monkeypatch.setattr(torch, "save", save)
    elif where == "checkpoint copy":  # epoch-2.pt to last.pt: the kind of write the issue saw fail

        def copyfile(src, dst, *args, **kwargs):
            Path(dst).write_bytes(Path(src).read_bytes()[:100])
            raise NO_SPACE

        monkeypatch.setattr(shutil, "copyfile", copyfile)
    elif where == "metrics.jsonl":
        real_open = Path.open

        def open_full(path, mode="r", *args, **kwargs):
            file = real_open(path, mode, *args, **kwargs)
            if path.name == "metrics.jsonl" and "a" in mode:
                file.write('{"split": "tr')  # part of the line makes it out
                file.flush()
                raise NO_SPACE
            return file

        monkeypatch.setattr(Path, "open", open_full)
    elif where == "TensorBoard":

        def add_scalar(*args, **kwargs):
            raise NO_SPACE

        monkeypatch.setattr(SummaryWriter, "add_scalar", add_scalar)
    else:  # args.json, before the first checkpoint
        real_write_text = Path.write_text

        def write_text(path, text, *args, **kwargs):
            if path.name == "args.json.tmp":
                real_write_text(path, text[:10])
                raise NO_SPACE
            return real_write_text(path, text, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", write_text)


@pytest.mark.parametrize("where", ["checkpoint", "checkpoint copy", "metrics.jsonl", "TensorBoard", "args.json"])
def test_a_full_disk_is_one_line_that_says_what_is_kept(train_script, tiny_args, monkeypatch, capsys, where):
    """Epoch 1 is saved, then a write fails as on a full disk: exit 1, one line naming the file and the
    checkpoint that is intact, no partial file left; with space again, --resume ends where the run
    left alone would have."""
    exact = ["--scheduler", "step", "--warmup-epochs", "0", "--keep-epochs", "1"]  # extending is exact
    straight = [*tiny_args[:-1], "straight", *exact, "--epochs", "2"]  # --run-name straight
    first = [*tiny_args, *exact, "--epochs", "1"]
    directory = run_dir(tiny_args)
    if where == "args.json":
        with monkeypatch.context() as patch:
            fill_disk(patch, where)
            assert train_script.main(first) == 1
        hint = f"no checkpoint had been written yet in {directory}"
    else:
        assert train_script.main(first) == 0
        kept = (directory / "last.pt").read_bytes()
        with monkeypatch.context() as patch:
            fill_disk(patch, where)
            assert train_script.main(["--resume", str(directory), "--epochs", "2"]) == 1
        assert (directory / "last.pt").read_bytes() == kept  # epoch 1's
        hint = f"the last good checkpoint {directory / 'last.pt'} is intact; free some space and resume"
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("train.py: error: cannot write ") and hint in err, err
    torch_says = "([enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0); "  # its first line
    assert ("(No space left on device); " if where != "checkpoint" else torch_says) in err
    assert not list(directory.glob("*.tmp"))
    if (directory / "metrics.jsonl").exists():
        assert all(json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines())
    if where == "args.json":
        return
    assert train_script.main(["--resume", str(directory), "--epochs", "2"]) == 0
    assert train_script.main(straight) == 0
    a = torch.load(run_dir(straight) / "last.pt", weights_only=True)["model"]
    b = torch.load(directory / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[key], b[key]) for key in a)


BAD_INPUTS = [
    (["--batch-size", "0"], "--batch-size: must be > 0"),
    (["--lr", "-1"], "--lr: must be > 0"),
    (["--epochs", "0"], "--epochs: must be > 0"),
    (["--dataset", "imagenet"], "invalid choice: 'imagenet'"),
    (["--data-dir", "{tmp}/missing"], "does not exist"),
    (["--data-dir", "{tmp}/empty"], "does not exist"),
    (["--resume", "{tmp}/missing.pt"], "does not exist"),
    (["--resume", "{tmp}/corrupt.pt"], "is corrupt or not a PyTorch file"),
    (["--resume", "{tmp}/other/run", "--widths", "8,32"], "--widths 8,32 differs from the run's 8,16"),
    (["--amp", "fp16"], "--amp fp16 needs a GPU"),
    (["--output-dir", "{tmp}/a-file"], "is a file, not a directory"),
    (["--device", "tpu"], "is not a device"),
    (["--data-dir", "{tmp}/no-images"], "has no images"),
    (["--run-name", "../escape"], "must be a plain directory name"),
    (["--seed", "-1"], "--seed: must be in [0, 4294967295]"),
    (["--dropout", "1.5"], "--dropout: must be in [0, 1)"),
    (["--label-smoothing", "2"], "--label-smoothing: must be in [0, 1)"),
    (["--momentum", "1"], "--momentum: must be in [0, 1)"),
    (["--scheduler", "plateau", "--lr-gamma", "1"], "--lr-gamma: must be in (0, 1)"),
    (["--lr", "nan"], "--lr: must be a finite number"),
    (["--clip-grad-norm", "inf"], "--clip-grad-norm: must be a finite number"),
    (["--mixup-alpha", "-0.5"], "--mixup-alpha: must be >= 0"),
    (["--hflip", "1.5"], "--hflip: must be in [0, 1], got 1.5"),
    (["--random-resized-crop", "0.5", "0.1"], "--random-resized-crop 0.5 0.1: need 0 < MIN <= MAX <= 1"),
    (["--random-resized-crop", "0", "1"], "--random-resized-crop: must be in (0, 1], got 0"),
    (["--auto-augment", "cutout"], "invalid choice: 'cutout'"),
    (["--warmup-epochs", "-1"], "--warmup-epochs: must be >= 0"),
    (["--widths", "8,,16"], "--widths: expected comma-separated integers"),
    (["--batch-size", "1"], "--batch-size 1 cannot train batch norm"),
    (["--shapes-train-size", "8"], "fewer than one batch of 16"),
]


@pytest.fixture(scope="module")
def bad_input_dir(tmp_path_factory, train_script) -> Path:
    """Files for the bad-input cases, and a finished run whose checkpoint must survive them all."""
    tmp = tmp_path_factory.mktemp("bad-input")
    (tmp / "empty").mkdir()
    for split in ("train", "val"):
        (tmp / "no-images" / split / "some_class").mkdir(parents=True)
    (tmp / "corrupt.pt").write_bytes(os.urandom(256))
    (tmp / "a-file").write_text("not a directory")
    flags = ["--device", "cpu", "--img-size", "16", "--widths", "8,16", "--shapes-train-size", "32",
             "--shapes-val-size", "16", "--batch-size", "16", "--epochs", "1", "--progress", "never",
             "--output-dir", str(tmp / "other"), "--run-name", "run"]  # fmt: skip
    assert train_script.main(flags) == 0
    return tmp


@pytest.mark.parametrize(("flags", "message"), BAD_INPUTS, ids=[" ".join(f) for f, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2(train_script, tiny_args, bad_input_dir, capsys, flags, message):
    tmp_path = bad_input_dir
    good = (tmp_path / "other" / "run" / "last.pt").read_bytes()
    capsys.readouterr()

    flags = [flag.replace("{tmp}", str(tmp_path)) for flag in flags]
    if "--resume" in flags:  # the run's own flags apply: give none but the one under test
        tiny_args = []
    assert exit_code(train_script.main, [*tiny_args, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert (tmp_path / "other" / "run" / "last.pt").read_bytes() == good  # nothing overwritten
    if tiny_args:
        assert not run_dir(tiny_args).exists()  # and no run directory left behind


def exit_code(main, argv: list[str]) -> int:
    """main()'s return value, or the code argparse exits with on a bad flag."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code
