"""train.py's training techniques, each checked by what it does rather than by the exit code alone.

Gradient accumulation, bf16 autocast, learning-rate schedules with warm-up, gradient clipping,
label smoothing and focal loss, mixup, weight decay groups, seeds and deterministic mode, channels
last, torch.compile, a frozen backbone and its learning-rate scale, a moving average of the
weights, early stopping, epoch
checkpoints, loader workers, the progress bar, logging intervals and TensorBoard, image folders,
and a missing torchvision dataset. Everything is reached through train.py (the `train_script`
fixture), so no package or model name appears here.

Run: pytest tests/test_techniques.py
"""

import json
import math
import multiprocessing
import re
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

# What a stand-in for train.validate() returns: the shapes' 6 classes, the 16 preview images.
VALIDATED = {"loss": 1.0, "samples": 40, "confusion_matrix": [[0] * 6] * 6, "preview": torch.full((16, 6), 1 / 6)}
SGD = ["--optimizer", "sgd", "--momentum", "0", "--weight-decay", "0", "--scheduler", "none", "--warmup-epochs", "0"]


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: as fast for these tiny tensors, and no stall when other work holds the other cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def flag(argv: list[str], name: str) -> str:
    """The value of the last `name` in argv: the one argparse keeps."""
    return argv[len(argv) - argv[::-1].index(name)]


def run_dir(argv: list[str]) -> Path:
    return Path(flag(argv, "--output-dir")) / flag(argv, "--run-name")


def records(directory: Path, split: str = "train") -> list[dict]:
    lines = (directory / "metrics.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["split"] == split]


def parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def changed(model: nn.Module, initial: dict[str, torch.Tensor]) -> set[str]:
    """Names of the parameters that differ from `initial`."""
    return {name for name, param in model.named_parameters() if not torch.equal(param, initial[name])}


def train(train_script, argv: list[str], prepare=None):
    """setup() and fit() as main() runs them, with prepare(session) in between; returns (session, initial weights)."""
    args = train_script.get_args_parser().parse_args(argv)
    session, state = train_script.setup(args)
    initial = parameters(session.model)
    if prepare is not None:
        prepare(session)
    with session.logger:
        assert train_script.fit(session, state, args) == 0
    return session, initial


def build(train_script, argv: list[str], num_classes: int = 4):
    """The model train.py builds for these flags (seeded: same flags, same weights), without any data."""
    args = train_script.get_args_parser().parse_args(argv)
    splits = train_script.data.DataSplits(None, None, [f"class{i}" for i in range(num_classes)], 3)
    torch.manual_seed(0)
    return train_script.task.build_model(args, splits, torch.device("cpu")), args


def owners(optimizer: torch.optim.Optimizer) -> dict[int, dict]:
    """id(parameter) -> its parameter group; fails on a parameter listed twice."""
    owner = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            assert id(param) not in owner, "a parameter is in two groups"
            owner[id(param)] = group
    return owner


def assert_trained(session, initial) -> None:
    """Finite logged losses, and the weights moved."""
    losses = [record["loss"] for record in records(session.run_dir)]
    assert losses and all(math.isfinite(loss) for loss in losses)
    assert changed(session.model, initial)


# --accum-steps -------------------------------------------------------------------------------


@pytest.fixture
def no_batch_norm_no_flips(train_script, monkeypatch):
    """Models without batch norm (its statistics depend on the batch size) and data without random flips."""
    build_model, build_transforms = train_script.task.build_model, train_script.data.build_transforms

    def build_model_without_batch_norm(*args, **kwargs):
        model = build_model(*args, **kwargs)
        for module in list(model.modules()):
            for name, child in module.named_children():
                if isinstance(child, nn.BatchNorm2d):
                    setattr(module, name, nn.Identity())
        return model

    monkeypatch.setattr(train_script.task, "build_model", build_model_without_batch_norm)
    no_flips = lambda prep, augment=None, gray=False, sized=False: build_transforms(prep, None, gray, sized)  # noqa: E731
    monkeypatch.setattr(train_script.data, "build_transforms", no_flips)


@pytest.mark.parametrize(
    ("train_size", "accum_steps", "steps"),
    [(32, 2, 2), (16, 4, 1)],
    ids=["two-full-groups", "one-partial-group"],
)
def test_accumulated_micro_batches_equal_one_big_batch(
    train_script, tiny_args, tmp_path, monkeypatch, no_batch_norm_no_flips, train_size, accum_steps, steps
):
    """Micro-batches of 8 accumulate the gradient of a batch of 16, step for step.

    16 images with --accum-steps 4 make one group of only 2 micro-batches: it must be averaged
    over its own size (2), not over --accum-steps, to match the batch of 16.
    """
    gradients: list[list[dict[str, torch.Tensor]]] = []
    optimizer_step = train_script.optimizer_step

    def recording_step(model, *args):
        gradients[-1].append({name: p.grad.clone() for name, p in model.named_parameters()})
        optimizer_step(model, *args)

    monkeypatch.setattr(train_script, "optimizer_step", recording_step)
    common = [*tiny_args, *SGD, "--lr", "0.5", "--shapes-train-size", str(train_size), "--log-interval", "1"]
    sessions = []
    for batch_size, accum in ((16, 1), (8, accum_steps)):
        gradients.append([])
        argv = [*common, "--batch-size", str(batch_size), "--accum-steps", str(accum)]
        sessions.append(train(train_script, [*argv, "--output-dir", str(tmp_path / f"accum{accum}")]))

    (big, initial), (accumulated, _) = sessions
    assert not any(isinstance(m, nn.BatchNorm2d) for m in big.model.modules())
    assert len(gradients[0]) == len(gradients[1]) == steps
    for step_big, step_accumulated in zip(*gradients, strict=True):
        for name, grad in step_big.items():
            torch.testing.assert_close(step_accumulated[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert changed(big.model, initial) == set(initial)
    for name, param in big.model.named_parameters():
        torch.testing.assert_close(dict(accumulated.model.named_parameters())[name], param, rtol=1e-4, atol=1e-6)
    big_losses = [r["loss"] for r in records(big.run_dir)]
    assert [r["step"] for r in records(accumulated.run_dir)] == list(range(1, steps + 1))
    assert [r["loss"] for r in records(accumulated.run_dir)] == pytest.approx(big_losses, rel=1e-5)


# --amp -----------------------------------------------------------------------------------------


def test_amp_bf16_trains_on_cpu_under_autocast(train_script, tiny_args):
    dtypes = []

    def prepare(session):
        session.model.register_forward_hook(lambda module, inputs, logits: dtypes.append(logits.dtype))

    session, initial = train(train_script, [*tiny_args, "--amp", "bf16", "--max-steps-per-epoch", "2"], prepare)
    assert dtypes and set(dtypes) == {torch.bfloat16}  # training and validation forwards ran under autocast
    assert_trained(session, initial)
    assert all(p.dtype == torch.float32 for p in session.model.parameters())  # the weights stay float32


# --scheduler, --warmup-epochs --------------------------------------------------------------------

# 64 images in batches of 16, 2 epochs: 8 optimizer steps. factor(s) is the schedule's learning-rate
# factor after s scheduler steps, written out here independently of the package.
SCHEDULES = {
    "cosine-warmup": (
        ["--scheduler", "cosine", "--warmup-epochs", "1"],
        lambda s: (s + 1) / 4 if s < 4 else 0.5 * (1 + math.cos(math.pi * (s - 4) / 4)),
    ),
    "step": (
        ["--scheduler", "step", "--warmup-epochs", "0", "--step-epochs", "1", "--lr-gamma", "0.5"],
        lambda s: 0.5 ** (s // 4),
    ),
    "none-warmup": (
        ["--scheduler", "none", "--warmup-epochs", "1.5"],
        lambda s: (s + 1) / 6 if s < 6 else 1.0,
    ),
}


@pytest.mark.filterwarnings("error:Detected call of")  # lr_scheduler.step() before optimizer.step()
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_learning_rate_follows_the_schedule(train_script, tiny_args, schedule):
    flags, factor = SCHEDULES[schedule]
    used = []

    def prepare(session):
        session.optimizer.register_step_pre_hook(lambda opt, *_: used.append(opt.param_groups[-1]["lr"]))

    argv = [*tiny_args, *flags, "--lr", "0.1", "--epochs", "2", "--shapes-train-size", "64", "--log-interval", "1"]
    session, _ = train(train_script, argv, prepare)
    assert used == pytest.approx([0.1 * factor(s) for s in range(8)])  # step s + 1 trains at factor(s)
    logged = records(session.run_dir)
    assert [r["step"] for r in logged] == list(range(1, 9))
    assert [r["lr"] for r in logged] == pytest.approx([0.1 * factor(s) for s in range(1, 9)])  # the rate after it


@pytest.mark.filterwarnings("error:Detected call of")
def test_plateau_cuts_the_learning_rate_after_its_patience(train_script, tiny_args, monkeypatch):
    """Validation accuracy never improves: ReduceLROnPlateau (patience 5) cuts the rate after epoch 7."""
    monkeypatch.setattr(train_script, "validate", lambda s, args, model: {**VALIDATED, "accuracy": 0.5})
    used = []

    def prepare(session):
        session.optimizer.register_step_pre_hook(lambda opt, *_: used.append(opt.param_groups[-1]["lr"]))

    argv = [*tiny_args, "--scheduler", "plateau", "--lr", "0.1", "--lr-gamma", "0.5", "--epochs", "9"]
    train(train_script, [*argv, "--max-steps-per-epoch", "1"], prepare)
    assert used == pytest.approx([0.1] * 7 + [0.05] * 2)  # one step per epoch


# --clip-grad-norm ------------------------------------------------------------------------------


@pytest.mark.parametrize("clip", [None, 0.01])
def test_clip_grad_norm_bounds_the_step(train_script, tiny_args, clip):
    """Plain SGD at lr 1 moves the weights by exactly the gradient: with clipping its norm is the limit."""
    norms = []

    def prepare(session):
        def record_norm(optimizer, *_):
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))

        session.optimizer.register_step_pre_hook(record_norm)

    argv = [*tiny_args, *SGD, "--lr", "1", "--max-steps-per-epoch", "1"]
    session, initial = train(train_script, argv + ([] if clip is None else ["--clip-grad-norm", str(clip)]), prepare)
    moved = math.sqrt(
        sum(float((p.detach() - initial[name]).double().pow(2).sum()) for name, p in session.model.named_parameters())
    )
    assert len(norms) == 1
    assert moved == pytest.approx(norms[0], rel=1e-3)
    if clip is None:
        assert norms[0] > 10 * 0.01  # so the clipped run really had something to clip
    else:
        assert norms[0] == pytest.approx(clip, rel=1e-3)


# --label-smoothing, --loss focal ---------------------------------------------------------------


def test_label_smoothing_reaches_the_criterion(train_script, tiny_args):
    smoothed, _ = build(train_script, [*tiny_args, "--label-smoothing", "0.2"])
    plain, _ = build(train_script, tiny_args)
    assert smoothed.criterion.label_smoothing == 0.2 and plain.criterion.label_smoothing == 0.0
    torch.manual_seed(1)
    images, targets = torch.randn(8, 3, 16, 16), torch.randint(0, 4, (8,))
    torch.testing.assert_close(smoothed(images), plain(images))  # same weights: only the loss differs
    logits = 3 * torch.randn(8, 4)  # confident logits: smoothing changes the loss visibly
    loss, plain_loss = smoothed.loss(logits, targets), plain.loss(logits, targets)
    torch.testing.assert_close(loss, F.cross_entropy(logits, targets, label_smoothing=0.2))
    torch.testing.assert_close(plain_loss, F.cross_entropy(logits, targets))
    assert abs(float(loss) - float(plain_loss)) > 1e-3


def test_focal_loss_is_built_with_its_gamma_and_smoothing(train_script, tiny_args):
    model, _ = build(train_script, [*tiny_args, "--loss", "focal", "--focal-gamma", "1.5", "--label-smoothing", "0.1"])
    assert type(model.criterion).__name__ == "FocalLoss"
    torch.manual_seed(1)
    logits, targets = 3 * torch.randn(8, 4), torch.randint(0, 4, (8,))
    soft = F.one_hot(targets, 4).float() * 0.9 + 0.1 / 4
    log_p = F.log_softmax(logits, dim=1)
    expected = -(soft * (1 - log_p.exp()) ** 1.5 * log_p).sum(dim=1).mean()
    torch.testing.assert_close(model.loss(logits, targets), expected)


# --mixup-alpha ---------------------------------------------------------------------------------


def test_mixup_feeds_soft_targets_to_the_loss(train_script, tiny_args):
    dims = []

    def prepare(session):
        loss = session.model.loss

        def recording_loss(logits, targets):
            dims.append(targets.dim())
            return loss(logits, targets)

        session.model.loss = recording_loss  # instance attribute: shadows the method for this model only

    session, initial = train(train_script, [*tiny_args, "--mixup-alpha", "0.4", "--max-steps-per-epoch", "2"], prepare)
    assert dims == [2, 2]
    assert_trained(session, initial)

    images, targets = next(iter(session.train_loader))
    assert images.shape == (16, 3, 16, 16)
    assert targets.shape == (16, len(session.classes)) and targets.dtype == torch.float32
    torch.testing.assert_close(targets.sum(dim=1), torch.ones(16))
    assert (targets >= 0).all() and (targets.max(dim=1).values < 1).any()  # mixed, not one-hot


def test_label_smoothing_applies_with_mixup(train_script, tiny_args):
    """Mixed targets are built from smoothed labels: every class gets at least eps / C."""
    args = train_script.get_args_parser().parse_args([*tiny_args, "--mixup-alpha", "0.4", "--label-smoothing", "0.3"])
    session, _ = train_script.setup(args)
    session.logger.close()
    _, targets = next(iter(session.train_loader))  # (N, C)
    assert targets.min() >= 0.3 / len(session.classes) - 1e-6
    torch.testing.assert_close(targets.sum(dim=1), torch.ones(targets.shape[0]))


# --weight-decay, --freeze-backbone, --backbone-lr-scale ----------------------------------------


def test_weight_decay_spares_1d_parameters(train_script, tiny_args):
    model, args = build(train_script, [*tiny_args, "--weight-decay", "0.03"])
    optimizer, _, _ = train_script.build_optimization(model, args, 4, torch.device("cpu"))
    owner = owners(optimizer)
    assert set(owner) == {id(p) for p in model.parameters()}
    assert any(p.ndim == 1 for p in model.parameters()) and any(p.ndim > 1 for p in model.parameters())
    for name, param in model.named_parameters():
        assert owner[id(param)]["weight_decay"] == (0.0 if param.ndim == 1 else 0.03), name


def test_backbone_lr_scale_applies_to_backbone_groups_only(train_script, tiny_args):
    flags = ["--lr", "0.1", "--backbone-lr-scale", "0.25", "--scheduler", "none", "--warmup-epochs", "0"]
    model, args = build(train_script, [*tiny_args, *flags])
    optimizer, _, _ = train_script.build_optimization(model, args, 4, torch.device("cpu"))
    owner = owners(optimizer)
    backbone = {id(p) for p in model.backbone.parameters()}
    assert backbone and set(owner) - backbone
    for param in model.parameters():
        assert owner[id(param)]["lr"] == pytest.approx(0.025 if id(param) in backbone else 0.1)


def test_frozen_backbone_is_left_out_and_unchanged(train_script, tiny_args):
    in_optimizer = set()

    def prepare(session):
        in_optimizer.update(owners(session.optimizer))

    session, initial = train(train_script, [*tiny_args, "--freeze-backbone", "--max-steps-per-epoch", "2"], prepare)
    backbone = {id(p) for p in session.model.backbone.parameters()}
    assert backbone and not any(p.requires_grad for p in session.model.backbone.parameters())
    assert not backbone & in_optimizer
    assert in_optimizer == {id(p) for p in session.model.parameters() if id(p) not in backbone}
    moved = changed(session.model, initial)
    assert moved  # the head trained
    assert not {name for name, p in session.model.named_parameters() if id(p) in backbone} & moved


def test_logged_lr_is_the_peak_lr_not_the_scaled_backbone_lr(train_script, tiny_args):
    flags = ["--lr", "0.1", "--backbone-lr-scale", "0.25", "--scheduler", "none", "--warmup-epochs", "0"]
    session, _ = train(train_script, [*tiny_args, *flags, "--max-steps-per-epoch", "1"])
    assert records(session.run_dir)[0]["lr"] == pytest.approx(0.1)


# --seed, --deterministic -----------------------------------------------------------------------


def test_same_seed_same_losses_other_seed_other_losses(train_script, tiny_args, tmp_path):
    losses = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        argv = [*tiny_args, "--seed", str(seed), "--max-steps-per-epoch", "3", "--log-interval", "1"]
        assert train_script.main([*argv, "--output-dir", str(tmp_path / name)]) == 0
        losses[name] = [r["loss"] for r in records(tmp_path / name / "run")]
    assert len(losses["a"]) == 3
    assert losses["a"] == losses["b"]
    assert losses["a"] != losses["c"]


@pytest.fixture
def backend_flags(monkeypatch):
    """Restore the global deterministic and cuDNN flags that train.py sets."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # undone afterwards, unlike train.py's setdefault
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
    )
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[2:]


def test_deterministic_sets_the_global_flags(train_script, tiny_args, tmp_path, backend_flags):
    argv = [*tiny_args, "--max-steps-per-epoch", "1"]
    assert train_script.main([*argv, "--deterministic", "--output-dir", str(tmp_path / "a")]) == 0
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic

    torch.use_deterministic_algorithms(False)  # a fresh process starts this way
    assert train_script.main([*argv, "--output-dir", str(tmp_path / "b")]) == 0
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic


# --channels-last, --compile --------------------------------------------------------------------


def test_channels_last_weights_and_inputs(train_script, tiny_args):
    plain, _ = build(train_script, tiny_args)
    assert not any(p.is_contiguous(memory_format=torch.channels_last) for p in plain.parameters() if p.ndim == 4)
    layouts = []

    def prepare(session):
        def record(module, inputs):
            layouts.append(inputs[0].is_contiguous(memory_format=torch.channels_last))

        session.model.register_forward_pre_hook(record)

    session, initial = train(train_script, [*tiny_args, "--channels-last", "--max-steps-per-epoch", "2"], prepare)
    conv_weights = [p for p in session.model.parameters() if p.ndim == 4]
    assert conv_weights and all(p.is_contiguous(memory_format=torch.channels_last) for p in conv_weights)
    assert layouts and all(layouts)  # training and validation batches
    assert_trained(session, initial)


@pytest.fixture
def compile_spy(monkeypatch):
    """Count torch.compile calls; reset dynamo afterwards so no compiled code outlives the test."""
    calls = []
    real_compile = torch.compile

    def spy(model, *args, **kwargs):
        calls.append(model)
        return real_compile(model, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", spy)
    yield calls
    torch._dynamo.reset()


def test_compile_trains_and_saves_bare_keys(train_script, tiny_args, compile_spy):
    """A tiny model and two steps: torch.compile on CPU costs ~5 s with a warm cache, ~20 s cold."""
    flags = ["--compile", "--widths", "8", "--img-size", "8", "--max-steps-per-epoch", "2"]
    session, initial = train(train_script, [*tiny_args, *flags, "--shapes-val-size", "16"])
    assert compile_spy == [session.model] and session.wrapped is not session.model
    assert_trained(session, initial)
    keys = set(torch.load(session.run_dir / "last.pt", weights_only=True)["model"])
    assert keys == set(session.model.state_dict())
    assert not [key for key in keys if "_orig_mod" in key]


# --patience, --keep-epochs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accuracies", "epochs_run"), [([0.5] * 5, 3), ([0.1, 0.2, 0.3, 0.4, 0.5], 5)], ids=["flat", "rising"]
)
def test_patience_stops_after_epochs_without_improvement(
    train_script, tiny_args, monkeypatch, capsys, accuracies, epochs_run
):
    scores = iter(accuracies)
    monkeypatch.setattr(train_script, "validate", lambda *_: {**VALIDATED, "accuracy": next(scores)})
    argv = [*tiny_args, "--epochs", "5", "--patience", "2", "--max-steps-per-epoch", "1"]
    assert train_script.main(argv) == 0
    assert ("early stop" in capsys.readouterr().out) == (epochs_run < 5)
    state = torch.load(run_dir(argv) / "last.pt", weights_only=True)
    assert state["run_state"]["epoch"] == epochs_run
    assert len(records(run_dir(argv), "val")) == epochs_run


def test_the_moving_average_is_validated_logged_chosen_and_used(train_script, test_script, tiny_args, capsys):
    argv = [*tiny_args, "--epochs", "2", "--ema-decay", "0.5", "--ema-every", "2"]
    assert train_script.main(argv) == 0
    assert capsys.readouterr().out.count("EMA val accuracy") == 2
    directory = run_dir(argv)
    ema_records = records(directory, "val_ema")
    assert [r["epoch"] for r in ema_records] == [1, 2] and all(r["samples"] == 40 for r in ema_records)
    state = torch.load(directory / "last.pt", weights_only=True)
    assert state["ema_updates"] == 6  # 12 optimizer steps, one update every 2
    assert state["run_state"]["best_score"] == max(r["accuracy"] for r in ema_records)  # best.pt follows the EMA
    assert any(not torch.equal(state["ema"][key], state["model"][key]) for key in state["model"])

    reports = {}
    for extra, name in (([], "ema"), (["--no-ema"], "model")):
        out = directory / f"{name}.json"
        assert test_script.main([str(directory / "last.pt"), "--device", "cpu", "--json", str(out), *extra]) == 0
        reports[name] = json.loads(out.read_text())
        assert reports[name]["weights"] == name
    assert reports["ema"]["accuracy"] == ema_records[-1]["accuracy"]  # test.py evaluates what validation did
    assert reports["model"]["accuracy"] == records(directory, "val")[-1]["accuracy"]


def test_best_checkpoint_follows_the_moving_average(train_script, tiny_args, monkeypatch):
    calls: list[bool] = []

    def validate(s, args, model):  # the trained model keeps improving, its average gets worse
        ema = s.ema is not None and model is s.ema.module
        calls.append(ema)
        epoch = calls.count(ema)
        return {**VALIDATED, "accuracy": (0.9 - 0.1 * epoch) if ema else 0.1 * epoch}

    monkeypatch.setattr(train_script, "validate", validate)
    argv = [*tiny_args, "--epochs", "2", "--ema-decay", "0.9", "--max-steps-per-epoch", "1"]
    assert train_script.main(argv) == 0
    assert calls == [False, True, False, True]
    best = torch.load(run_dir(argv) / "best.pt", weights_only=True)
    assert best["run_state"]["epoch"] == 1 and best["run_state"]["best_score"] == pytest.approx(0.8)


def test_keep_epochs_keeps_the_newest_epoch_files(train_script, tiny_args):
    argv = [*tiny_args, "--epochs", "4", "--keep-epochs", "2", "--max-steps-per-epoch", "1"]
    assert train_script.main(argv) == 0
    directory = run_dir(argv)
    assert {p.name for p in directory.glob("*.pt*")} == {"epoch-3.pt", "epoch-4.pt", "last.pt", "best.pt"}
    for epoch in (3, 4):
        assert torch.load(directory / f"epoch-{epoch}.pt", weights_only=True)["run_state"]["epoch"] == epoch


# --num-workers, --progress, --log-interval ------------------------------------------------------


def test_loader_workers_are_gone_after_the_run(train_script, tiny_args, monkeypatch):
    before = set(multiprocessing.active_children())
    during = []
    optimizer_step = train_script.optimizer_step

    def counting_step(*args):
        during.append(len(set(multiprocessing.active_children()) - before))
        optimizer_step(*args)

    monkeypatch.setattr(train_script, "optimizer_step", counting_step)
    assert train_script.main([*tiny_args, "--num-workers", "2", "--max-steps-per-epoch", "2"]) == 0
    assert during == [2, 2]  # the training loader's workers
    deadline = time.monotonic() + 10
    while set(multiprocessing.active_children()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(multiprocessing.active_children()) - before


def test_progress_always_draws_a_bar_without_a_terminal(train_script, tiny_args, capsys):
    assert train_script.main([*tiny_args, "--progress", "always", "--max-steps-per-epoch", "2"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"epoch 0: +\d+%\|", captured.err)
    assert "efficiency" not in captured.out  # the bar carries the numbers instead of log lines


def test_progress_auto_prints_log_lines_without_a_terminal(train_script, tiny_args, capsys):
    assert train_script.main([*tiny_args, "--progress", "auto", "--max-steps-per-epoch", "2"]) == 0
    captured = capsys.readouterr()
    assert "%|" not in captured.err
    assert len([line for line in captured.out.splitlines() if "efficiency" in line]) == 1  # --log-interval 2


def test_log_interval_counts_optimizer_steps_in_metrics_and_tensorboard(train_script, tiny_args):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # 80 images, micro-batches of 8, 2 per step: 5 optimizer steps per epoch. Every 2nd optimizer step
    # is logged, counted over the run, and each epoch's last: 2, 4, 5, then 6, 8, 10.
    flags = ["--shapes-train-size", "80", "--batch-size", "8", "--accum-steps", "2", "--log-interval", "2"]
    argv = [*tiny_args, *flags, "--epochs", "2"]
    assert train_script.main(argv) == 0
    train_records = records(run_dir(argv))
    assert [r["step"] for r in train_records] == [2, 4, 5, 6, 8, 10]
    assert [sum(r["epoch"] == e for r in train_records) for e in (0, 1)] == [math.ceil(5 / 2)] * 2

    events = EventAccumulator(str(run_dir(argv)))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/samples_per_s", "train/compute_efficiency", "val/accuracy"} <= tags
    assert [event.step for event in events.Scalars("train/loss")] == [2, 4, 5, 6, 8, 10]
    assert [event.step for event in events.Scalars("val/accuracy")] == [5, 10]


# --dataset imagefolder, --dataset mnist ---------------------------------------------------------


def test_image_folder_from_data_dir_alone_trains_and_evaluates(train_script, test_script, tiny_args, tmp_path):
    root = tmp_path / "images"
    for split, count in (("train", 6), ("val", 2)):
        for name, value in (("dark", 40), ("light", 210)):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (12, 12), (value, value + i, value)).save(root / split / name / f"{i}.png")
    argv = [*tiny_args, "--data-dir", str(root), "--batch-size", "4"]
    assert train_script.main(argv) == 0
    state = torch.load(run_dir(argv) / "last.pt", weights_only=True)
    assert state["classes"] == ["dark", "light"]
    assert state["run_state"]["global_step"] == 3  # 12 images in batches of 4
    assert json.loads((run_dir(argv) / "args.json").read_text())["dataset"] == "imagefolder"  # what was used

    assert test_script.main([str(run_dir(argv) / "best.pt"), "--device", "cpu"]) == 0
    report = json.loads((run_dir(argv) / "best.pt.eval.json").read_text())
    assert report["samples"] == 4 and set(report["per_class"]) == {"dark", "light"}


def test_missing_mnist_without_download_fails_in_one_line(train_script, tiny_args, tmp_path, monkeypatch, capsys):
    def no_network(*args, **kwargs):
        raise AssertionError("train.py tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = [*tiny_args, "--dataset", "mnist", "--data-dir", str(empty)]
    assert train_script.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--download" in err and "mnist" in err and len(err.splitlines()) == 1
    assert not [p for p in empty.rglob("*") if p.is_file()]  # nothing was downloaded
    assert not run_dir(argv).exists()  # the run directory is made only once everything is set up
