"""train.py's training techniques, reached through its flags, each checked by what it does."""

import json
import math
import multiprocessing
import re
import time

import pytest
import torch
import torch.nn.functional as F
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

from conftest import CLASSES, build_model, records, run_dir, without

# What a stand-in for train.validate() returns (besides task.SCORE): the shapes' classes, the 16 preview images.
VALIDATED = {"loss": 1.0, "accuracy": 0.5, "samples": 40, "confusion_matrix": [[0] * CLASSES] * CLASSES}
VALIDATED["preview"] = torch.full((16, CLASSES), 1 / CLASSES)
SGD = ["--optimizer", "sgd", "--momentum", "0", "--weight-decay", "0", "--scheduler", "none", "--warmup-epochs", "0"]


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: as fast for these tiny tensors, and no stall when other work holds the other cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def changed(model: nn.Module, initial: dict[str, torch.Tensor]) -> set[str]:
    return {name for name, param in model.named_parameters() if not torch.equal(param, initial[name])}


def train(train_script, argv: list[str], prepare=None):
    """setup() and fit() as main() runs them, prepare(session) in between; (session, initial weights); finite losses."""
    parser = train_script.get_args_parser()
    args = parser.parse_args(argv)
    session, state = train_script.setup(args, parser.given(argv))
    initial = {name: param.detach().clone() for name, param in session.model.named_parameters()}
    if prepare is not None:
        prepare(session)
    with session.logger:
        session.logger.record_start(args, session.model, session.device, state.global_step, [])
        assert train_script.fit(session, state, args) == 0
    losses = [record["loss"] for record in records(session.run_dir, "train")]
    assert losses and all(math.isfinite(loss) for loss in losses)
    return session, initial


def record_rates(used: list[float]):
    """A prepare() for train(): the learning rate of every optimizer step goes into `used`."""
    return lambda session: session.optimizer.register_step_pre_hook(
        lambda opt, *_: used.append(opt.param_groups[-1]["lr"])
    )


@pytest.mark.parametrize(("train_size", "accum_steps", "steps"), [(32, 2, 2), (16, 4, 1)], ids=["full", "partial"])
def test_accumulated_micro_batches_equal_one_big_batch(
    train_script, tiny_args, monkeypatch, train_size, accum_steps, steps
):
    """Micro-batches of 8 give a batch of 16's losses and weights (no batch norm); a short last group is its own."""
    build_model = train_script.task.build_model

    def build_model_without_batch_norm(*args, **kwargs):
        model = build_model(*args, **kwargs)
        for name, module in list(model.named_modules()):
            if isinstance(module, nn.BatchNorm2d):
                model.set_submodule(name, nn.Identity())
        return model

    monkeypatch.setattr(train_script.task, "build_model", build_model_without_batch_norm)
    common = [*tiny_args, *SGD, "--lr", "0.5", "--shapes-train-size", str(train_size), "--log-interval", "1"]
    big, initial = train(train_script, [*common, "--hflip", "0", "--batch-size", "16"])
    accumulate = ["--hflip", "0", "--batch-size", "8", "--accum-steps", str(accum_steps), "--run-name", "accumulated"]
    accumulated, _ = train(train_script, [*common, *accumulate])
    assert not any(isinstance(m, nn.BatchNorm2d) for m in big.model.modules())
    assert changed(big.model, initial) == set(initial)  # plain SGD: the weights moved by the gradients alone
    torch.testing.assert_close(accumulated.model.state_dict(), big.model.state_dict(), rtol=1e-4, atol=1e-6)
    assert [r["step"] for r in records(accumulated.run_dir, "train")] == list(range(1, steps + 1))
    losses = [[r["loss"] for r in records(session.run_dir, "train")] for session in (accumulated, big)]
    assert losses[0] == pytest.approx(losses[1])


def test_bf16_channels_last_and_mixup_feed_smoothed_soft_targets_to_the_loss(train_script, tiny_args):
    """bf16 forwards on channels-last inputs, float32 channels-last weights; the loss smooths mixed targets (N, C)."""
    plain = build_model(train_script, tiny_args)
    assert not any(p.is_contiguous(memory_format=torch.channels_last) for p in plain.parameters() if p.ndim == 4)
    seen, dims = [], []  # (logits dtype, input in channels last) of each forward; the targets' dims of each loss

    def prepare(session):
        def record(module, inputs, logits):
            seen.append((logits.dtype, inputs[0].is_contiguous(memory_format=torch.channels_last)))

        session.model.network.register_forward_hook(record)
        loss = session.model.loss
        session.model.loss = lambda logits, targets: dims.append(targets.dim()) or loss(logits, targets)  # this model

    flags = ["--amp", "bf16", "--channels-last", "--mixup-alpha", "0.4", "--label-smoothing", "0.3"]
    session, initial = train(train_script, [*tiny_args, *flags, "--max-steps-per-epoch", "2"], prepare)
    assert seen and set(seen) == {(torch.bfloat16, True)} and dims == [2, 2] and changed(session.model, initial)
    assert all(p.dtype == torch.float32 for p in session.model.parameters())
    conv_weights = [p for p in session.model.parameters() if p.ndim == 4]
    assert conv_weights and all(p.is_contiguous(memory_format=torch.channels_last) for p in conv_weights)
    images, targets = next(iter(session.train_loader))
    assert images.shape == (16, 3, 16, 16) and targets.shape == (16, CLASSES) and targets.dtype == torch.float32
    assert (targets.max(dim=1).values < 1).any()  # mixed (their sums and smoothing: test_data.py, test_losses.py)


@pytest.mark.filterwarnings("error:Detected call of")  # lr_scheduler.step() before optimizer.step()
def test_the_learning_rate_steps_with_each_optimizer_step_and_is_logged_as_used(train_script, tiny_args):
    """A warm-up epoch, then, resumed with --epochs 2, the rest of a 2-epoch cosine curve; each step's rate logged."""
    used = []
    flags = ["--scheduler", "cosine", "--warmup-epochs", "1", "--lr", "0.1", "--epochs", "1", "--log-interval", "1"]
    session, _ = train(train_script, [*tiny_args, *flags, "--shapes-train-size", "64"], record_rates(used))
    train(train_script, ["--resume", str(session.run_dir), "--epochs", "2", "--device", "cpu"], record_rates(used))
    factors = [(s + 1) / 4 if s < 4 else 0.5 * (1 + math.cos(math.pi * (s - 4) / 4)) for s in range(8)]
    assert used == pytest.approx([0.1 * factor for factor in factors])  # step s + 1 trains at factors[s]
    logged = records(session.run_dir, "train")
    assert [r["step"] for r in logged] == list(range(1, 9))
    assert [r["lr"] for r in logged] == pytest.approx(used)  # each step's own rate, not the next one's


@pytest.mark.filterwarnings("error:Detected call of")
@pytest.mark.parametrize(  # scores: the weights', epoch by epoch; best: best.pt's (epoch, score)
    ("flags", "higher", "scores", "rates", "best"),
    [
        (["--patience", "0"], True, [0.5] * 9, [0.1] * 7 + [0.05] * 2, (1, 0.5)),  # off; plateau's 5: halves after 7
        (["--patience", "3"], True, [0.5] * 4, [0.1] * 3 + [0.05], (1, 0.5)),  # plateau patience 1, then early stop
        (["--plateau-patience", "0", "--ema-decay", "0.5", "--patience", "2"], True, [0.5] * 9, [0.1] * 9, (9, 0.18)),
        (["--patience", "3"], False, [0.9, 0.5, 0.6, 0.5, 0.7], [0.1] * 4 + [0.05], (2, 0.5)),  # epochs 3, 4 above 0.5
    ],
    ids=["patience-off", "early-stop", "follows-the-average", "a-score-that-falls"],
)
def test_plateau_patience_and_best_pt_follow_the_score_and_act_when_it_stalls(
    train_script, tiny_args, monkeypatch, capsys, flags, higher, scores, rates, best
):
    """Plateau, --patience and best.pt follow the average with --ema-decay, and the lowest score if lower is better."""
    calls, scores = [], iter(scores)

    def validate(s, args, model, stop):
        calls.append(model)
        averaged = s.ema is not None and model is s.ema.module
        return {**VALIDATED, train_script.task.SCORE: len(calls) / 100 if averaged else next(scores)}

    monkeypatch.setattr(train_script, "validate", validate)
    monkeypatch.setattr(train_script.task, "HIGHER_IS_BETTER", higher)
    used = []
    argv = [*tiny_args, "--scheduler", "plateau", "--lr", "0.1", "--lr-gamma", "0.5", "--epochs", "9", *flags]
    session, _ = train(train_script, [*argv, "--max-steps-per-epoch", "1"], record_rates(used))
    assert used == pytest.approx(rates)  # one step per epoch
    assert ("early stop" in capsys.readouterr().out) == (len(rates) < 9)
    assert torch.load(session.run_dir / "last.pt", weights_only=True)["run_state"]["epoch"] == len(rates)
    assert len(records(session.run_dir, "val")) == len(rates)
    saved = torch.load(session.run_dir / "best.pt", weights_only=True)["run_state"]
    assert (saved["epoch"], saved["best_score"]) == (best[0], pytest.approx(best[1]))


def test_an_unupdated_average_is_not_saved_and_a_resume_after_task_score_changed_starts_best_and_plateau_afresh(
    train_script, tiny_args, monkeypatch, capsys
):
    """An average never updated is neither validated nor saved; a best of another task.SCORE is not compared with."""
    flags = ["--ema-decay", "0.9", "--ema-every", "5", "--scheduler", "plateau", "--max-steps-per-epoch", "2"]
    monkeypatch.setattr(train_script.task, "SCORE", "samples")  # 40 images: a best no accuracy reaches
    session, _ = train(train_script, [*tiny_args, *flags])  # 2 steps: no update of the average
    monkeypatch.undo()
    run = session.run_dir
    assert torch.load(run / "best.pt", weights_only=True)["run_state"]["score"] == "samples"
    state = torch.load(run / "last.pt", weights_only=True)
    assert state["ema"] is None and not records(run, "val_ema") and records(run, "val")  # test.py scores the weights
    state["scheduler"]["threshold"] = 1e-4  # a run saved before any gain counted as progress (torch's default)
    torch.save(state, run / "last.pt")
    resumed, _ = train(train_script, ["--resume", str(run), "--epochs", "2", "--patience", "3", "--device", "cpu"])
    score = train_script.task.SCORE
    assert f"val {score} replaces samples as the score: best.pt and --patience start afresh" in capsys.readouterr().out
    best = torch.load(run / "best.pt", weights_only=True)["run_state"]
    assert (best["epoch"], best["score"]) == (2, score)
    assert resumed.scheduler.best == best["best_score"]  # the plateau's best too
    assert (session.scheduler.patience, resumed.scheduler.patience) == (5, 1)  # at most --patience - 2
    assert resumed.scheduler.threshold == 0  # any gain is progress, as for best.pt


@pytest.mark.parametrize("clip", [None, 0.01])
def test_clip_grad_norm_bounds_the_step(train_script, tiny_args, clip):
    """Plain SGD at lr 1 moves the weights by exactly the gradient: with clipping its norm is the limit."""
    norms = []

    def record_norm(optimizer, *_):
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))

    argv = [*tiny_args, *SGD, "--lr", "1", "--max-steps-per-epoch", "1"]
    argv += [] if clip is None else ["--clip-grad-norm", str(clip)]
    session, initial = train(train_script, argv, lambda s: s.optimizer.register_step_pre_hook(record_norm))
    steps = [(p.detach() - initial[n]).double().pow(2).sum() for n, p in session.model.named_parameters()]
    assert len(norms) == 1 and math.sqrt(sum(steps)) == pytest.approx(norms[0], rel=1e-3)
    assert norms[0] > 10 * 0.01 if clip is None else norms[0] == pytest.approx(clip, rel=1e-3)


def focal(logits: torch.Tensor, targets: torch.Tensor, gamma: float, smoothing: float) -> torch.Tensor:
    """Focal loss with label smoothing, written out independently of the package."""
    soft = F.one_hot(targets, logits.shape[1]).float() * (1 - smoothing) + smoothing / logits.shape[1]
    log_p = F.log_softmax(logits, dim=1)
    return -(soft * (1 - log_p.exp()) ** gamma * log_p).sum(dim=1).mean()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], lambda logits, targets: F.cross_entropy(logits, targets)),
        (["--label-smoothing", "0.2"], lambda logits, targets: F.cross_entropy(logits, targets, label_smoothing=0.2)),
        (["--loss", "focal", "--focal-gamma", "1.5", "--label-smoothing", "0.1"], lambda x, y: focal(x, y, 1.5, 0.1)),
    ],
    ids=["cross-entropy", "label-smoothing", "focal"],
)
def test_the_loss_flags_reach_the_models_loss(train_script, tiny_args, flags, expected):
    """The flags choose the model's loss (its per-image call: test_model.py); the weights do not depend on them."""
    model, plain = build_model(train_script, [*tiny_args, *flags]), build_model(train_script, tiny_args)
    torch.manual_seed(1)
    images, targets = torch.randn(8, 3, 16, 16), torch.randint(0, 6, (8,))
    torch.testing.assert_close(model(images), plain(images))
    logits = 3 * torch.randn(8, 6)  # confident logits: smoothing changes the loss visibly
    torch.testing.assert_close(model.loss(logits, targets), expected(logits, targets))


@pytest.mark.parametrize(("optimizer", "decay", "freeze"), [("adamw", 0.05, False), ("sgd", 1e-4, True)])
def test_backbone_lr_scale_or_freezing_the_logged_peak_rate_and_the_optimizers_usual_weight_decay(
    train_script, tiny_args, capsys, optimizer, decay, freeze
):
    """torchvision's weight decay for each optimizer, saved; the backbone trains at its scaled rate or, frozen, not."""
    flags = ["--optimizer", optimizer, "--lr", "0.1", "--scheduler", "none", "--warmup-epochs", "0"]
    flags += ["--max-steps-per-epoch", "2", *(["--freeze-backbone"] if freeze else ["--backbone-lr-scale", "0.25"])]
    session, initial = train(train_script, [*tiny_args, *flags])
    assert ("without --weights trains a head on a random, frozen backbone" in capsys.readouterr().out) == freeze
    rates = {id(param): group["lr"] for group in session.optimizer.param_groups for param in group["params"]}
    backbone = {id(param) for param in session.model.backbone.parameters()}
    head = {id(param) for param in session.model.parameters()} - backbone
    assert backbone and head and set(rates) == (head if freeze else head | backbone)  # a frozen one is left out
    for key, rate in rates.items():
        assert rate == pytest.approx(0.025 if key in backbone else 0.1)
    assert records(session.run_dir, "train")[0]["lr"] == pytest.approx(0.1)  # the peak rate, not the backbone's
    assert {group["weight_decay"] for group in session.optimizer.param_groups} == {0.0, decay}
    assert json.loads((session.run_dir / "args.json").read_text())["weight_decay"] == decay
    moved = {id(param) for name, param in session.model.named_parameters() if name in changed(session.model, initial)}
    assert moved & head and bool(moved & backbone) != freeze
    assert all(param.requires_grad != freeze for param in session.model.backbone.parameters())


@pytest.fixture
def backend_flags(monkeypatch):
    """Restore the global deterministic and cuDNN flags that train.py sets."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # undone afterwards, unlike train.py's setdefault
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn


def test_seeds_deterministic_mode_and_runs_started_in_the_same_second(
    train_script, tiny_args, tmp_path, monkeypatch, backend_flags
):
    """The same seed gives the same losses, another seed others; --deterministic sets the global flags, else not."""
    monkeypatch.setattr(train_script.runs.time, "strftime", lambda fmt: "20260101-000000")
    argv = [*without(tiny_args, "--run-name"), "--max-steps-per-epoch", "3", "--log-interval", "1"]
    for seed, extra in ((2, ["--deterministic"]), (1, []), (1, [])):
        assert train_script.main([*argv, "--seed", str(seed), *extra]) == 0
        if extra:
            assert torch.are_deterministic_algorithms_enabled()
            assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic
            with pytest.warns(UserWarning, match="put_ does not have a deterministic implementation"):
                torch.zeros(2).put_(torch.tensor([0, 0]), torch.ones(2))  # warns, as AdaptiveAvgPool2d would on CUDA
            torch.use_deterministic_algorithms(False)  # a fresh process starts this way
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic
    names = ["20260101-000000", "20260101-000000-2", "20260101-000000-3"]
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == names
    deterministic, first, second = ([r["loss"] for r in records(tmp_path / "runs" / name, "train")] for name in names)
    assert len(first) == 3 and first == second != deterministic


def test_compile_trains_and_saves_bare_keys(train_script, tiny_args, monkeypatch):
    """--compile trains through the compiled wrapper and saves the bare model's keys (aot_eager: no C++ build)."""
    calls, real_compile = [], torch.compile
    spy = lambda model, **kwargs: calls.append(model) or real_compile(model, **kwargs, backend="aot_eager")  # noqa: E731
    monkeypatch.setattr(torch, "compile", spy)
    try:
        flags = ["--compile", "--widths", "8", "--img-size", "8", "--max-steps-per-epoch", "2"]
        session, initial = train(train_script, [*tiny_args, *flags, "--shapes-val-size", "16"])
    finally:
        torch._dynamo.reset()  # no compiled code outlives the test
    assert calls == [session.model] and session.wrapped is not session.model and changed(session.model, initial)
    keys = set(torch.load(session.run_dir / "last.pt", weights_only=True)["model"])
    assert keys == set(session.model.state_dict()) and not [key for key in keys if "_orig_mod" in key]


def test_log_interval_counts_steps_over_a_resume_whose_bar_carries_the_numbers_and_whose_workers_end(
    train_script, tiny_args, after_step, capsys
):
    """5 optimizer steps of 2 micro-batches an epoch: every 2nd step (counted over the run) and an epoch's last."""
    flags = ["--shapes-train-size", "80", "--batch-size", "8", "--accum-steps", "2", "--log-interval", "2"]
    assert train_script.main([*tiny_args, *flags, "--progress", "auto"]) == 0  # auto: log lines without a terminal
    assert len([line for line in capsys.readouterr().out.splitlines() if "efficiency" in line]) == 3
    before, workers = set(multiprocessing.active_children()), []
    after_step(lambda: workers.append(len(set(multiprocessing.active_children()) - before)))
    resume = ["--resume", str(run_dir(tiny_args)), "--epochs", "2", "--device", "cpu", "--num-workers", "2"]
    assert train_script.main([*resume, "--progress", "always"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"epoch 2: +\d+%\|", captured.err) and "efficiency" not in captured.out  # a bar, no log lines
    assert workers == [4] * 5  # both loaders' workers (validation's start with the loaders), at each step
    deadline = time.monotonic() + 10
    while set(multiprocessing.active_children()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(multiprocessing.active_children()) - before
    logged = [(r["epoch"], r["step"]) for r in records(run_dir(tiny_args), "train")]
    assert logged == [(1, 2), (1, 4), (1, 5), (2, 6), (2, 8), (2, 10)]  # as the val rows: 1 and 2
    events = EventAccumulator(str(run_dir(tiny_args))).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/samples_per_s", "train/compute_efficiency", "val/accuracy"} <= tags
    assert [event.step for event in events.Scalars("train/loss")] == [2, 4, 5, 6, 8, 10]
    assert [event.step for event in events.Scalars("val/accuracy")] == [5, 10]
