"""train.py and test.py end to end on CPU: a run's outputs, exact resume, signals, full disks, bad input."""

import argparse
import contextlib
import errno
import io
import itertools
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from conftest import ROOT, SHAPES_SIZES, TINY, records, run_dir, without, write_images


def contents(directory: Path) -> dict[str, bytes]:
    """Every file of a run directory by name, to show that a command wrote nothing."""
    return {path.name: path.read_bytes() for path in directory.iterdir()}


def same_weights(a: Path, b: Path) -> None:
    """Two checkpoints hold the same counters, weights and moving average, bit for bit."""
    a, b = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    assert a["run_state"] == b["run_state"]
    for key in ("model", "ema"):
        assert [name for name in a[key] if not torch.equal(a[key][name], b[key][name])] == [], key


def exit_code(main, argv: list[str]) -> int:
    """main()'s return value, or the code argparse exits with on a bad flag."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


def test_help_lists_the_flags_and_the_readme_table_of_augmentation_flags(train_script, capsys):
    """--help shows every flag and the real defaults; README.md's "Augment" table, each augmentation flag's default."""
    assert exit_code(train_script.main, ["--help"]) == 0  # python train.py --help
    out = capsys.readouterr().out
    parser = train_script.get_args_parser()
    assert all(flag in out for action in parser._actions for flag in action.option_strings)
    text = " ".join(out.split())  # argparse wraps lines
    default = parser.get_default  # a list shown as typed: 16,32,64
    assert f"(default: {default('epochs')})" in text and f"channels per stage (default: {default('widths')})" in text
    assert "(default: None)" not in text and "(default: the start time" in text
    readme = (ROOT / "README.md").read_text().split("\n## Augment\n")[1].split("\n## ")[0]
    table = dict(re.findall(r"^\| `(--[\w-]+)[^|]*\| ([^|]*) \|", readme, flags=re.MULTILINE))  # flag: default
    group = out.split("\naugmentation")[1].split("\n\n")[0]
    assert set(table) == {word for word in group.split() if word.startswith("--")}, "README.md's Augment table"
    for flag, shown in table.items():
        default = parser.get_default(flag[2:].replace("-", "_"))
        assert shown == ("off" if default is None else f"{default:g}" if isinstance(default, float) else str(default))


@pytest.fixture(scope="module")
def finished(train_script, tmp_path_factory) -> tuple[Path, str]:
    """(run directory, what train.py printed) of a 3-epoch run with a moving average; no test changes it."""
    out = tmp_path_factory.mktemp("finished")
    argv = [*TINY, "--output-dir", str(out), "--run-name", "run", "--epochs", "3", "--ema-decay", "0.5"]
    argv += ["--ema-every", "2", "--keep-epochs", "2"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert train_script.main(argv) == 0
    return out / "run", printed.getvalue()


def test_a_run_writes_its_files_and_pictures_and_test_py_evaluates_the_moving_average(
    finished, train_script, test_script, monkeypatch, capsys
):
    """The logged pictures are the saved average's, drawn as by test.py; a finished or refused resume writes nothing."""
    directory, out = finished
    assert '"batch_size": 16' in out  # the arguments are printed at start
    score = train_script.task.SCORE  # accuracy, or what a researcher chose
    assert score in train_script.task.LOGGED, "task.py: put SCORE in LOGGED, or metrics.jsonl leaves out the score"
    assert "efficiency" in out and f"best val {score}" in out and out.count(f"EMA val {score}") == 3
    names = {p.name for p in directory.iterdir()}
    assert {"args.json", "environment.json", "metrics.jsonl", "last.pt", "best.pt"} <= names
    assert {name for name in names if name.startswith("epoch-")} == {"epoch-2.pt", "epoch-3.pt"}  # --keep-epochs 2
    saved = json.loads((directory / "args.json").read_text())
    assert saved["batch_size"] == 16 and saved["num_workers"] == 0  # the built-in shapes are in memory
    assert all(0.0 <= r["compute_efficiency"] <= 1.0 for r in records(directory, "train"))
    state = torch.load(directory / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 3 and state["run_state"]["global_step"] == 18  # 96 images / 16, 3 times
    assert state["ema_updates"] == 9  # one update every 2 steps
    ema = records(directory, "val_ema")
    assert [r["epoch"] for r in ema] == [1, 2, 3] and all(r["samples"] == 40 for r in ema)
    best = max if train_script.task.HIGHER_IS_BETTER else min
    assert state["run_state"]["best_score"] == best(r[score] for r in ema)  # the average's
    assert any(not torch.equal(state["ema"][key], state["model"][key]) for key in state["model"])

    for extra, weights, split in ((["--no-ema"], "model", "val"), ([], "ema", "val_ema")):  # the average's: below
        report = directory.parent / weights / "report.json"  # its pictures beside it
        assert test_script.main([str(directory / "last.pt"), "--device", "cpu", "--json", str(report), *extra]) == 0
        report = json.loads(report.read_text())
        assert (report["weights"], report["samples"], set(report["per_class"])) == (weights, 40, set(state["classes"]))
        assert report["checkpoint"] == str(directory / "last.pt") and report["data"] is None  # its folder made
        assert report["accuracy"] == records(directory, split)[-1]["accuracy"]  # test.py evaluates what validation did
    before, build = contents(directory), train_script.task.build_model
    assert train_script.main(["--resume", str(directory)]) == 0  # the requeued job of a finished run
    assert "is finished (epoch 3 of --epochs 3); resume with a larger --epochs" in capsys.readouterr().out
    assert contents(directory) == before  # nothing written

    events = EventAccumulator(str(directory), size_guidance={"images": 0}).Reload()
    assert set(events.Tags()["images"]) == {"val/predictions", "val/confusion_matrix"}
    assert [event.step for event in events.Images("val/predictions")] == [6, 12, 18]  # once per epoch

    model = getattr(train_script.task, state["model_name"]).from_checkpoint(state)
    prep = train_script.task.transforms.from_checkpoint(state)
    val = train_script.task.data.build_datasets("shapes", None, prep, splits=("val",), val_size=40).val
    preview = train_script.evaluation.preview_batch(val)  # (16, 3, 16, 16), (16,)
    metrics = {"preview": train_script.evaluation.predict(model, preview[0], torch.device("cpu")), **report}
    drawn = train_script.task.pictures(preview, metrics, state["classes"], prep)
    for tag, image in drawn.items():
        logged = Image.open(io.BytesIO(events.Images(tag)[-1].encoded_image_string)).convert("RGB")
        assert logged.tobytes() == image.convert("RGB").tobytes(), tag
    matrix = Image.open(directory.parent / "ema" / "report.confusion_matrix.png").convert("RGB")
    assert matrix.tobytes() == drawn["val/confusion_matrix"].convert("RGB").tobytes()  # the same model and images
    shown = min(16, report["samples"] - round(report["accuracy"] * report["samples"]))  # the wrong ones
    tile_w, tile_h = test_script.figures.TILE + 4, test_script.figures.TILE + 4 + 2 * 12 + 2
    with Image.open(directory.parent / "ema" / "report.mistakes.png") as mistakes:
        assert mistakes.size == (min(8, shown) * (tile_w + 4) + 4, -(-shown // 8) * (tile_h + 4) + 4)

    def build_model(args, *rest):  # the model's code changed since the run: another dropout
        return build(argparse.Namespace(**{**vars(args), "dropout": 0.5}), *rest)

    monkeypatch.setattr(train_script.task, "build_model", build_model)
    assert train_script.main(["--resume", str(directory), "--epochs", "4"]) == 2
    assert "different model config: dropout" in capsys.readouterr().err
    assert contents(directory) == before  # not even an empty TensorBoard file


@pytest.fixture(scope="module")
def straight(train_script, tmp_path_factory) -> dict[str, Path]:
    """{"straight": a run of 2 epochs left alone, "first": its first epoch alone}: what resumed runs must equal."""
    out = tmp_path_factory.mktemp("exact")
    # Every random augmentation, a moving average and a step schedule (so that extending a run is exact too).
    exact = ["--hflip", "0.5", "--vflip", "0.5", "--random-resized-crop", "0.5", "1", "--auto-augment",
             "trivialaugment", "--random-erasing", "0.5", "--mixup-alpha", "0.4", "--cutmix-alpha", "1",
             "--dropout", "0.2", "--ema-decay", "0.9", "--scheduler", "step", "--step-epochs", "1",
             "--lr-gamma", "0.5", "--warmup-epochs", "0", "--keep-epochs", "1"]  # fmt: skip
    for name, epochs in (("straight", "2"), ("first", "1")):
        assert train_script.main([*TINY, *exact, "--epochs", epochs, "--output-dir", str(out), "--run-name", name]) == 0
    return {"straight": out / "straight", "first": out / "first"}


def sigterm_twice() -> None:
    """SIGTERM to this process twice, as SLURM and torchrun send it."""
    for _ in range(2):
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("stop", ["extend", "sigterm-thread", "sigterm-workers"])
def test_resume_is_bit_exact_with_every_augmentation_also_after_sigterm_mid_epoch(
    straight, train_script, tmp_path, monkeypatch, after_step, stop
):
    """--epochs 2 == --epochs 1 then --resume --epochs 2, bit for bit, also when SIGTERM stops epoch 2 early."""
    directory = shutil.copytree(straight["first"], tmp_path / "first")
    if stop != "extend":
        after_step(sigterm_twice, step=3)
        workers = ["--num-workers", "2", "--prefetch-depth", "2"] if stop == "sigterm-workers" else []
        argv = ["--resume", str(directory), "--epochs", "2", "--log-interval", "50", *workers]
        assert train_script.main(argv) == 128 + signal.SIGTERM
        state = torch.load(directory / "last.pt", weights_only=True)
        assert state["run_state"]["epoch"] == 1 and state["run_state"]["batch_in_epoch"] == 3
        assert state["args"]["log_interval"] == 50  # a flag a resumed run may change
        monkeypatch.undo()
    assert train_script.main(["--resume", str(directory), "--epochs", "2"]) == 0
    same_weights(straight["straight"] / "last.pt", directory / "last.pt")
    if stop == "extend":
        alone, resumed = ([r["loss"] for r in records(run, "train")] for run in (straight["straight"], directory))
        assert alone == resumed
        saved = torch.load(directory / "last.pt", weights_only=True)["args"]
        assert (saved["img_size"], saved["batch_size"], saved["widths"], saved["cutmix_alpha"]) == (16, 16, [8, 16], 1)
        assert saved["random_resized_crop"] == [0.5, 1.0] and saved["device"] == "auto"  # this invocation's
        assert {"args-resume-step6.json", "environment-resume-step6.json"} <= {p.name for p in directory.iterdir()}
        assert json.loads((directory / "args.json").read_text())["random_resized_crop"] == [0.5, 1.0]


def test_a_signal_during_validation_ends_it_and_the_resumed_run_validates(train_script, tiny_args, monkeypatch, capsys):
    """The epoch is saved unvalidated; a late second Ctrl-C stops at once in one line; epochs are logged, then saved."""
    validate = train_script.validate  # a long validation outlasts a launcher's 30 s before SIGKILL: the signal ends it
    monkeypatch.setattr(train_script, "validate", lambda *args: os.kill(os.getpid(), signal.SIGINT) or validate(*args))
    run = run_dir(tiny_args)
    assert train_script.main([*tiny_args, "--epochs", "1", "--max-steps-per-epoch", "1"]) == 128 + signal.SIGINT
    monkeypatch.undo()
    state = torch.load(run / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 0 and state["run_state"]["batch_in_epoch"] == 1 and not records(run, "val")
    assert f"resume with: python train.py --resume {run}" in capsys.readouterr().out
    assert train_script.main(["--resume", str(run)]) == 0  # validates the epoch it trained: finished
    assert [r["epoch"] for r in records(run, "val")] == [1] and len(records(run, "train")) == 1

    real_save = train_script.save_checkpoints

    def save_then_die(s, state, args, end_of_epoch):  # a late second Ctrl-C (runtime.StopSignal), or a kill -9
        real_save(s, state, args, end_of_epoch)
        if end_of_epoch:
            raise KeyboardInterrupt  # as nothing after the write ran

    monkeypatch.setattr(train_script, "save_checkpoints", save_then_die)
    assert train_script.main(["--resume", str(run), "--epochs", "2"]) == 130
    kept = f"the last good checkpoint {run / 'last.pt'} is intact; resume: python train.py --resume"
    assert capsys.readouterr().err == f"train.py: interrupted; {kept} {run}\n"
    assert [r["epoch"] for r in records(run, "val")] == [1, 2]  # none lost: a resume trims the rows after last.pt


def test_the_reports_of_the_average_and_of_the_trained_weights_are_kept_apart(finished, test_script, tmp_path):
    """test.py names its --no-ema report apart from the moving average's (the default), which stays."""
    best = shutil.copy(finished[0] / "best.pt", tmp_path)
    for extra in ([], ["--no-ema"]):
        assert test_script.main([str(best), "--device", "cpu", *extra]) == 0
    reports = {name: json.loads((tmp_path / f"best.pt{name}.eval.json").read_text()) for name in ("", ".no-ema")}
    assert {name: report["weights"] for name, report in reports.items()} == {"": "ema", ".no-ema": "model"}


def test_a_loss_that_diverges_before_the_first_checkpoint_advises_a_new_run(train_script, tiny_args, capsys):
    """No checkpoint to resume: the message says so, and what to change (--clip-grad-norm given: a lower one)."""
    assert train_script.main([*tiny_args, "--lr", "1e30", "--clip-grad-norm", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert f"(epoch 1); no checkpoint had been written yet in {run_dir(tiny_args)}; a new run with a lower --lr" in err
    assert err.endswith("or with a lower --clip-grad-norm may stay finite") and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("signal_at", "message"),  # the steps of this run: 1 is step 19, 2 step 20; the log step is 20, or 50
    [(None, "loss is nan at step 20"), (2, "loss is nan at step 20"), (1, "the weights are not finite after step 19")],
    ids=["at-a-log-step", "at-a-stop-signal", "weights-at-a-stop-signal"],
)
def test_non_finite_loss_stops_and_keeps_the_good_checkpoint(
    finished, train_script, tmp_path, monkeypatch, capsys, signal_at, message
):
    directory = shutil.copytree(finished[0], tmp_path / "run")
    good = (directory / "last.pt").read_bytes()
    real_step, steps = train_script.optimizer_step, []

    def step_to_nan_weights(s, clip):  # step 19 trains, step 20's loss is nan; a preemption then, before a log step
        real_step(s, clip)
        for param in s.model.parameters():
            param.detach().fill_(float("nan"))
        steps.append(1)
        if len(steps) == signal_at:
            sigterm_twice()

    monkeypatch.setattr(train_script, "optimizer_step", step_to_nan_weights)
    flags = [] if signal_at is None else ["--log-interval", "50"]
    assert train_script.main(["--epochs", "4", "--resume", str(directory), *flags]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    again = "resumed as it is, it diverges again; a new run with a lower --lr or with --clip-grad-norm may"
    assert err.endswith(f"checkpoint {directory / 'last.pt'} is intact; {again} stay finite")
    assert (directory / "last.pt").read_bytes() == good


@pytest.mark.parametrize("signalled", ["", "as-it-ends", "before-its-first-batch"], ids=lambda s: s or "none")
def test_weights_that_only_validation_finds_overflowing_stop_the_run_and_keep_the_good_checkpoint(
    finished, train_script, tmp_path, monkeypatch, capsys, signalled
):
    directory = shutil.copytree(finished[0], tmp_path / "run")
    evaluate = train_script.task.evaluate

    def evaluate_and_stop(model, batches, *args, **kwargs):  # a signal as validation starts or ends: no save of it
        if isinstance(batches, list):  # set-up's check of task.py's SCORE and LOGGED, on the preview batch
            return evaluate(model, batches, *args, **kwargs)
        if signalled == "before-its-first-batch":  # no batch evaluated: a loss of 0.0, the preview NaN
            os.kill(os.getpid(), signal.SIGINT)
        report = evaluate(model, batches, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return report

    if signalled:
        monkeypatch.setattr(train_script.task, "evaluate", evaluate_and_stop)
    good, real_step, steps = (directory / "last.pt").read_bytes(), train_script.optimizer_step, itertools.count(19)

    def step_to_huge_weights(s, clip):  # step 24, the last of epoch 4: no training step sees its weights
        real_step(s, clip)
        if next(steps) == 24:
            for param in s.model.parameters():
                param.detach().mul_(1e30)  # finite (a --lr far too high), but the logits overflow

    monkeypatch.setattr(train_script, "optimizer_step", step_to_huge_weights)
    assert train_script.main(["--epochs", "4", "--resume", str(directory)]) == 1
    err = capsys.readouterr().err
    what = "outputs are not finite" if signalled == "before-its-first-batch" else "loss is (nan|inf)"
    assert re.match(rf"train.py: error: the validation {what} after step 24; the last good checkpoint ", err)
    assert (directory / "last.pt").read_bytes() == good and len(err.splitlines()) == 1


def test_the_same_command_line_again_continues_the_run_and_unreadable_images_are_skipped(
    train_script, test_script, tmp_path, monkeypatch, capfd
):
    """A requeued job (slurm.sbatch's, say); unreadable files named once, counted and skipped, by test.py too; an
    error in-process (--strict-data's) ends the loaders' workers with it."""
    monkeypatch.chdir(tmp_path)  # relative paths, as the flag gives them
    rng, data = np.random.default_rng(0), Path("data")  # {train,val}/{dark,light}/: 8 and 4 images, 3 unreadable ones
    for (split, count), (name, low) in itertools.product((("train", 8), ("val", 4)), (("dark", 0), ("light", 160))):
        write_images(data / split / name, range(count), low)
    bad = [data / "train/dark/garbage.jpg", data / "train/light/cut.png", data / "val/dark/cut.jpg"]
    bad[0].write_bytes(rng.bytes(300))  # every mode of an unreadable file: test_images.py
    for path in bad[1:]:  # PNG, JPEG
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path)
        path.write_bytes(path.read_bytes()[:600])  # cut off: a copy that did not finish
    argv = ["--device", "cpu", "--data-dir", "./data", "--img-size", "16", "--widths", "8,16", "--batch-size", "6",
            "--random-resized-crop", "0.5", "1", "--auto-augment", "trivialaugment", "--optimizer", "sgd",
            "--lr", "1e-2", "--channels-last", "--epochs", "2", "--progress", "never",
            "--output-dir", "runs", "--run-name", "job-17", "--auto-resume"]  # fmt: skip
    # python train.py as a job runs it: its loader workers' lines too, however they start (Python 3.14: forkserver)
    done = subprocess.run([sys.executable, ROOT / "train.py", *argv], capture_output=True, text=True)
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err
    named = [line.split()[6] for line in err.splitlines() if line.startswith("skipping an unreadable image: cannot")]
    assert sorted(map(os.path.relpath, named)) == sorted(map(str, bad))  # once each, over two epochs
    assert out.count("skipped 3 unreadable image files") == 2  # both epoch lines
    val = records(tmp_path / "runs" / "job-17", "val")
    assert [(r["unreadable_train"], r["unreadable_val"], r["samples"]) for r in val] == [(2, 1, 8)] * 2
    assert train_script.main(argv) == 0  # the requeued job: nothing left to train, and no flag refused
    assert "runs/job-17 is finished (epoch 2 of --epochs 2)" in capfd.readouterr().out
    assert train_script.main([*argv, "--epochs", "3", "--no-channels-last"]) == 0  # more epochs, a flag turned off
    state = torch.load(tmp_path / "runs" / "job-17" / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 3 and state["run_state"]["global_step"] == 9  # 16 images in batches of 6
    assert state["classes"] == ["dark", "light"] and state["args"]["dataset"] == "imagefolder"  # what was used
    assert state["args"]["num_workers"] >= 1 and not state["args"]["channels_last"]  # image files' default; off

    assert test_script.main(["runs/job-17", "--device", "cpu", "--json", "report.json"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["samples"] == 8 and list(map(os.path.relpath, report["unreadable_files"])) == [str(bad[2])]
    assert "skipped 1 unreadable image files" in capfd.readouterr().out
    # In this process (a notebook's), an error ends the loaders' workers with it, not when the collector frees them.
    workers, strict = set(multiprocessing.active_children()), "--strict-data stops at the first unreadable file\n"
    assert test_script.main(["runs/job-17", "--device", "cpu", "--strict-data"]) == 2  # in a worker
    assert capfd.readouterr().err.endswith(strict) and set(multiprocessing.active_children()) <= workers
    bad[2].unlink()  # validation readable: train.py's workers meet train/'s unreadable files
    assert train_script.main([*argv[:-2], "strict", "--strict-data"]) == 2
    assert capfd.readouterr().err.endswith(strict) and set(multiprocessing.active_children()) <= workers

    def read_only(*args, **kwargs):  # a new error each time: mock's side_effect would hold one, and its frames
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert train_script.main([*argv[:-2], "read-only"]) == 1  # rank 0's error, shared; validation's workers started
    assert "(Permission denied)" in capfd.readouterr().err and set(multiprocessing.active_children()) <= workers


@pytest.mark.parametrize("where", ["checkpoint", "checkpoint copy", "metrics.jsonl", "TensorBoard", "args.json"])
def test_a_full_disk_is_one_line_that_says_what_is_kept(
    straight, train_script, tiny_args, tmp_path, monkeypatch, capsys, where
):
    """Exit 1, one line naming the file and the intact checkpoint, no partial file; then --resume ends as if alone."""
    if where == "args.json":  # a new run's, before its first checkpoint
        directory, argv = run_dir(tiny_args), tiny_args
        hint = f"no checkpoint had been written yet in {directory}"
    else:
        directory = shutil.copytree(straight["first"], tmp_path / "first")
        argv, kept = ["--resume", str(directory), "--epochs", "2"], (directory / "last.pt").read_bytes()
        hint = f"the last good checkpoint {directory / 'last.pt'} is intact; free some space and resume"
    torch_says = "[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0"  # torch.save's RuntimeError
    owner, name = {"checkpoint": (torch, "save"), "checkpoint copy": (shutil, "copyfile"),
                   "metrics.jsonl": (Path, "open"), "TensorBoard": (SummaryWriter, "add_scalar"),
                   "args.json": (Path, "write_text")}[where]  # fmt: skip
    real = getattr(owner, name)

    def write(*args, **kwargs):  # this kind of write fails as on a full disk, after it wrote part of its bytes
        if where == "checkpoint":
            Path(args[1]).write_bytes(b"PK" * 50)
            raise RuntimeError(f"{torch_says}\nException ...")
        if where == "checkpoint copy":  # epoch-2.pt to last.pt, a copy that a full disk cuts short
            Path(args[1]).write_bytes(Path(args[0]).read_bytes()[:100])
        elif where == "metrics.jsonl" and args[0].name == where and "a" in (*args[1:], kwargs.get("mode", "r"))[0]:
            with real(args[0], "a") as file:
                file.write('{"split": "tr')  # part of the line makes it out
        elif where == "args.json" and args[0].name == "args.json.tmp":
            real(args[0], args[1][:10])
        elif where in ("metrics.jsonl", "args.json"):
            return real(*args, **kwargs)  # not the write that fails
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(owner, name, write)
        assert train_script.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("train.py: error: cannot write ") and hint in err, err
    said = "No space left on device" if where != "checkpoint" else f"{torch_says}; is the disk full?"
    assert f"({said}); " in err  # the error's first line
    assert not list(directory.glob("*.tmp"))
    if (directory / "metrics.jsonl").exists():
        assert all(json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines())
    if where != "args.json":
        assert (directory / "last.pt").read_bytes() == kept  # epoch 1's
        assert train_script.main(argv) == 0
        same_weights(straight["straight"] / "last.pt", directory / "last.pt")


BAD_INPUTS = [
    (["--batch-size", "0"], "--batch-size: must be > 0"),
    (["--lr", "-1"], "--lr: must be > 0"),
    (["--epochs", "0"], "--epochs: must be > 0"),
    (["--dataset", "imagenet"], "invalid choice: 'imagenet'"),
    (["--data-dir", "{tmp}/missing"], "does not exist"),
    (["--data-dir", "{tmp}/empty"], "empty has no images: no class folder in it"),
    (["--resume", "{tmp}/missing.pt"], "does not exist"),
    (["--resume", "{tmp}/corrupt.pt"], "is corrupt or not a PyTorch file"),
    (["--resume", "{tmp}/model.pt"], "model.pt holds no training state to resume (no optimizer, rng, run_state"),
    (["--resume", "{tmp}/unet.pt", "--lr", "1"], "unet.pt holds a UNet model, not "),  # before its flags
    (["--amp", "fp16"], "--amp fp16 needs a GPU"),
    (["--output-dir", "{tmp}/a-file"], "is a file, not a directory"),
    (["--output-dir", "{tmp}/a-file/runs"], "a-file, a file, not a directory"),
    (["--device", "tpu"], "is not a device"),
    (["--data-dir", "{tmp}/no-images"], "has a class folder without images"),
    (["--run-name", "../escape"], "must be a plain directory name"),
    (["--run-name", "r" * 256], "r...: longer than file systems take (a name 255 bytes)"),
    (["--output-dir", "{tmp}", "--run-name", "empty"], "empty already exists; pick another --run-name"),
    (["--seed", "-1"], "--seed: must be in [0, 4294967295]"),
    (["--val-fraction", "0.2"], "--val-fraction acts only with data without a validation split of its own"),
    (["--ema-every", "2"], "--ema-every acts only with --ema-decay above 0; leave it out"),
    (["--momentum", "0.5"], "--momentum acts only with --optimizer sgd or sgd_nesterov"),  # adamw, the default
    (["--dataset", "shapes", "--data-dir", "{tmp}/empty"], "--data-dir acts only with a --dataset of files"),
    (["--download"], "--download acts only with a torchvision --dataset; leave it out"),
    # Refused before the data is looked for (with --download, downloaded): not "mnist not found under ...".
    (["--dataset", "mnist", "--data-dir", "{tmp}/empty", "--focal-gamma", "1"], "--focal-gamma acts only"),
    (["--backbone", "resnet18"], "--widths acts only with --backbone builtin"),  # TINY's --widths
    (["--data-dir", "{tmp}/unreadable-val", "--shapes-val-size", "8"], "--shapes-val-size acts only with the built-in"),
    (["--backbone-lr-scale", "0.1", "--freeze-backbone"], "--backbone-lr-scale acts only with a backbone that trains"),
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
    (["--shapes-train-size", "8"], "fewer than one batch (--batch-size 16)"),
    (["--data-dir", "{tmp}/unreadable-val", "--strict-data"], "; --strict-data stops at the first unreadable file"),
    # A run made in a folder of class folders (before train.py refused it) is no class: the reason is given.
    (["--data-dir", "{tmp}/with-runs", "--output-dir", "{tmp}/with-runs/runs"], "every image of which is data"),
    # A resumed run keeps its flags and its directory, and never overwrites a newer checkpoint.
    (["--resume", "{run}", "--epochs", "4", "--batch-size", "32"], "--batch-size 32 differs from the run's 16"),
    (["--resume", "{run}", "--epochs", "4", "--img-size", "32"], "--img-size 32 differs from the run's 16"),
    (["--resume", "{run}", "--epochs", "4", "--lr", "0.1"], "--lr 0.1 differs from the run's 0.002"),
    (["--resume", "{run}", "--epochs", "4", "--data-dir", "x"], "/x differs from the run's (not set)"),
    (["--resume", "{run}", "--epochs", "4", "--output-dir", "x"], "--resume continues in the checkpoint's own dir"),
    (["--resume", "{run}", "--epochs", "4", "--run-name", "x"], "--resume continues in the checkpoint's own dir"),
    (["--resume", "{run}/epoch-2.pt", "--epochs", "4"], "would overwrite"),  # an older checkpoint of the run
]


def test_a_download_is_made_by_the_main_process_first(train_script, monkeypatch):
    """Under torchrun the others wait, then read its files: two processes never write one file."""
    first = []
    monkeypatch.setattr(train_script.task.distributed, "main_process_first", lambda work: first.append(work) or work())
    monkeypatch.setattr(train_script.task.data, "build_datasets", lambda *args, **options: options["download"])
    args = train_script.get_args_parser().parse_args(["--dataset", "mnist", "--data-dir", "data"])
    for download in (False, True):
        args.download = download
        assert train_script.task.build_datasets(args, None) is download
    assert len(first) == 1


@pytest.fixture(scope="module")
def bad_input_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("bad-input")
    (tmp / "empty").mkdir()
    for split in ("train", "val"):
        (tmp / "no-images" / split / "some_class").mkdir(parents=True)
    (tmp / "corrupt.pt").write_bytes(os.urandom(256))
    torch.save({"model": {}, "model_name": "M", "model_config": {}, "classes": [], "args": {}}, tmp / "model.pt")
    other = {key: {} for key in ("args", "optimizer", "scheduler", "scaler", "model", "model_config")}
    other |= {"model_name": "UNet", "classes": [], "rng": [{}], "run_state": {"epoch": 1, "global_step": 4}}
    torch.save(other, tmp / "unet.pt")  # another model's run (no model_name answer is UNet)
    for name in ("a_class", "another"):
        write_images(tmp / "with-runs" / name, ["0"], 0)
        write_images(tmp / "unreadable-val" / "train" / name, ["0"], 0)
        (tmp / "unreadable-val" / "val" / name).mkdir(parents=True)
        (tmp / "unreadable-val" / "val" / name / "0.png").write_bytes(b"not a PNG")
    (tmp / "a-file").write_text("not a directory")
    (tmp / "with-runs" / "runs" / "old").mkdir(parents=True)  # its checkpoints, no image
    return tmp


@pytest.mark.parametrize(("flags", "message"), BAD_INPUTS, ids=[" ".join(f) for f, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2(finished, train_script, tiny_args, bad_input_dir, capsys, flags, message):
    before = contents(finished[0])
    flags = [flag.replace("{tmp}", str(bad_input_dir)).replace("{run}", str(finished[0])) for flag in flags]
    given = [] if "--resume" in flags else tiny_args  # a resumed run's own flags apply: give none but the one tested
    given = without(given, *SHAPES_SIZES) if "--data-dir" in flags else given
    assert exit_code(train_script.main, [*given, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert contents(finished[0]) == before  # nothing overwritten
    assert not run_dir(tiny_args).exists()  # and no run directory left behind


def test_no_readable_validation_image_stops_the_run_before_it_writes_anything(
    train_script, tiny_args, bad_input_dir, capsys
):
    flags = ["--data-dir", str(bad_input_dir / "unreadable-val")]
    assert train_script.main([*without(tiny_args, *SHAPES_SIZES), *flags]) == 2
    err = capsys.readouterr().err.splitlines()  # the file skipped, then why the run cannot start
    assert err[0].startswith("skipping an unreadable image: cannot read ") and len(err) == 3
    assert err[2] == "train.py: error: none of the 2 validation images can be read"
    assert not run_dir(tiny_args).exists()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [("LOGGED", ("loss", "acuracy"), "task.py names 'acuracy' in SCORE or LOGGED; task.evaluate returns ["),
     ("SCORE", "per_class", "task.py's SCORE 'per_class' is a dict, not a Python number: return float(...)")],
)  # fmt: skip
def test_a_logged_name_validation_lacks_or_a_score_that_is_no_number_stops_the_run_before_it_writes_anything(
    train_script, tiny_args, monkeypatch, capsys, name, value, message
):
    monkeypatch.setattr(train_script.task, name, value)  # a typo in task.py, or a metric that is no number
    assert train_script.main(tiny_args) == 2
    assert message in capsys.readouterr().err
    assert not run_dir(tiny_args).exists()


def test_a_numpy_score_is_kept_as_a_python_float_and_a_metric_json_cannot_hold_is_refused_before_the_run(
    train_script, tiny_args, monkeypatch, capsys
):
    evaluate, kind = train_script.task.evaluate, np.float32

    def with_numpy(*args, **kwargs):
        metrics = evaluate(*args, **kwargs)
        return {**metrics, "accuracy": kind(metrics["accuracy"]), "f1": kind(0.5)}

    monkeypatch.setattr(train_script.task, "evaluate", with_numpy)
    monkeypatch.setattr(train_script.task, "SCORE", "f1")
    assert train_script.main(tiny_args) == 2 and not run_dir(tiny_args).exists()
    assert "task.py's SCORE 'f1' is a float32, not a Python number" in capsys.readouterr().err
    monkeypatch.setattr(train_script.task, "SCORE", "loss")
    assert train_script.main(tiny_args) == 2 and not run_dir(tiny_args).exists()
    assert "task.evaluate's 'accuracy' is a float32, which JSON (metrics.jsonl, " in capsys.readouterr().err
    monkeypatch.setattr(train_script.task, "SCORE", "accuracy")
    kind = np.float64  # what np.mean returns: a float, but saved as a NumPy scalar, which safe loading refuses
    assert train_script.main(tiny_args) == 0
    state = torch.load(run_dir(tiny_args) / "best.pt", weights_only=True)
    (logged,) = records(run_dir(tiny_args), "val")
    assert type(state["run_state"]["best_score"]) is float and state["run_state"]["best_score"] == logged["accuracy"]


def test_runs_are_refused_in_the_folders_whose_every_image_is_data_alone(train_script, bad_input_dir):
    def folders(*flags: str) -> list:
        return train_script.task.data_folders(train_script.get_args_parser().parse_args(flags))

    split = bad_input_dir / "unreadable-val"  # DIR/train/ and DIR/val/: a DIR/runs/ beside them is not read
    assert folders("--data-dir", str(split)) == [split / "train", split / "val"]
    assert folders("--data-dir", str(split / "train")) == [split / "train"]  # DIR/<class>/: all of DIR is read
    assert folders("--labels", "x.csv", "--dataset", "imagefolder", "--data-dir", str(split)) == []  # refused later
    assert folders("--data-dir", str(split / "gone")) == folders("--dataset", "mnist", "--data-dir", "m") == []


def test_a_gpu_out_of_memory_is_one_line_that_says_what_needs_less(train_script, tiny_args, monkeypatch, capsys):
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of")
    monkeypatch.setattr(train_script, "fit", mock.Mock(side_effect=oom))
    assert train_script.main(tiny_args) == 1
    assert capsys.readouterr().err == (
        "train.py: error: CUDA out of memory. Tried to allocate 2.00 GiB; a smaller --batch-size (--accum-steps keeps "
        "a step's batch) or mixed precision (--amp) needs less; a resumed run may change --amp, not its batch\n"
    )
