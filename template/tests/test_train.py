"""train.py and test.py end to end on CPU: smoke run, exact resume, signals, bad input.

Run: pytest tests/test_train.py
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, run_one_epoch


def run_dir(args: list[str]) -> Path:
    return Path(args[args.index("--output-dir") + 1]) / args[args.index("--run-name") + 1]


def test_help_lists_the_documented_flags():
    result = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0
    for flag in ("--dataset", "--data-dir", "--download", "--img-size", "--epochs", "--batch-size", "--lr", "--device",
                 "--num-workers", "--seed", "--output-dir", "--log-interval", "--max-steps-per-epoch", "--resume",
                 "--prefetch-depth"):  # fmt: skip
        assert flag in result.stdout
    assert "(default: 5)" in result.stdout  # ArgumentDefaultsHelpFormatter shows the real defaults


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


def train_losses(directory: Path) -> list[float]:
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["split"] == "train"]


def test_resume_is_exact(train_script, tiny_args, tmp_path):
    """Two epochs in one run == one epoch, then --resume for the second: same losses, same weights, bit for bit."""
    common = [*tiny_args, "--scheduler", "step", "--step-epochs", "1", "--lr-gamma", "0.5", "--warmup-epochs", "0",
              "--mixup-alpha", "0.4"]  # fmt: skip
    assert train_script.main([*common, "--epochs", "2", "--output-dir", str(tmp_path / "a")]) == 0
    assert train_script.main([*common, "--epochs", "1", "--output-dir", str(tmp_path / "b")]) == 0
    assert train_script.main([*common, "--epochs", "2", "--resume", str(tmp_path / "b" / "run")]) == 0

    straight, resumed = tmp_path / "a" / "run", tmp_path / "b" / "run"
    assert train_losses(straight) == train_losses(resumed)
    a = torch.load(straight / "last.pt", weights_only=True)
    b = torch.load(resumed / "last.pt", weights_only=True)
    assert a["run_state"] == b["run_state"]
    assert all(torch.equal(a["model"][key], b["model"][key]) for key in a["model"])
    assert (resumed / "args-resume-step6.json").is_file()  # the first run's args.json is kept


def test_signal_saves_a_resumable_checkpoint(train_script, tiny_args, monkeypatch):
    """SIGTERM mid-epoch: the step finishes, last.pt is written, exit 143; --resume then finishes the run."""
    real_step, calls = train_script.optimizer_step, []

    def step_then_signal(*args, **kwargs):
        real_step(*args, **kwargs)
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(train_script, "optimizer_step", step_then_signal)
    # --log-interval 1: with several processes the stop is agreed on at log steps.
    assert train_script.main([*tiny_args, "--log-interval", "1"]) == 128 + signal.SIGTERM
    state = torch.load(run_dir(tiny_args) / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 0 and state["run_state"]["batch_in_epoch"] == 3

    monkeypatch.setattr(train_script, "optimizer_step", real_step)
    assert train_script.main([*tiny_args, "--resume", str(run_dir(tiny_args))]) == 0
    state = torch.load(run_dir(tiny_args) / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == 1 and state["run_state"]["global_step"] == 6  # 96 images / 16 per batch


def test_non_finite_loss_stops_and_keeps_the_good_checkpoint(train_script, tiny_args, monkeypatch, capsys):
    assert train_script.main(tiny_args) == 0  # epoch 1 written
    good = (run_dir(tiny_args) / "last.pt").read_bytes()
    real_build = train_script.build_model

    def build_model_with_nan_loss(*args, **kwargs):
        model = real_build(*args, **kwargs)
        real_loss, calls = model.loss, []

        def loss(logits, targets):
            calls.append(1)
            value = real_loss(logits, targets)
            return value * float("nan") if len(calls) == 2 else value

        model.loss = loss  # instance attribute: shadows the method for this model only
        return model

    monkeypatch.setattr(train_script, "build_model", build_model_with_nan_loss)
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
    metrics = train_script.validate(session, args)
    session.logger.close()
    assert modes[2:] and not any(modes[2:])  # every evaluation forward ran in eval mode
    assert session.model.training  # and evaluation restored train mode
    assert metrics["samples"] == 40


BAD_INPUTS = [
    (["--batch-size", "0"], "--batch-size: must be > 0"),
    (["--lr", "-1"], "--lr: must be > 0"),
    (["--epochs", "0"], "--epochs: must be > 0"),
    (["--dataset", "imagenet"], "invalid choice: 'imagenet'"),
    (["--data-dir", "{tmp}/missing"], "does not exist"),
    (["--data-dir", "{tmp}/empty"], "does not exist"),
    (["--resume", "{tmp}/missing.pt"], "does not exist"),
    (["--resume", "{tmp}/corrupt.pt"], "is corrupt or not a PyTorch file"),
    (["--resume", "{tmp}/other/run", "--widths", "8,32"], "different model config"),
    (["--amp", "fp16"], "--amp fp16 needs a GPU"),
    (["--output-dir", "{tmp}/a-file"], "is a file, not a directory"),
    (["--device", "tpu"], "is not a device"),
    (["--data-dir", "{tmp}/no-images"], "has no images"),
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
    assert exit_code(train_script.main, [*tiny_args, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert (tmp_path / "other" / "run" / "last.pt").read_bytes() == good  # nothing overwritten


def exit_code(main, argv: list[str]) -> int:
    """main()'s return value, or the code argparse exits with on a bad flag."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code
