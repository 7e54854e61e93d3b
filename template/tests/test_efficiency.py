"""The training loop's own costs: its reported efficiency is true, it reads the device only to log, keeps no graph."""

import contextlib
import gc
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, records

STEPS, LOG_INTERVAL = 18, 6  # three log lines, three efficiencies to check
DATA_DELAY = 0.04  # seconds of sleep per batch, in the loader: a slow disk
COMPUTE_DELAY = 0.02  # seconds of sleep per step, in forward: a bigger model


def threads_started(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not in `before`, but for tqdm's monitor, which lives as long as the process."""
    return [thread for thread in set(threading.enumerate()) - before if thread.name != "tqdm_monitor"]


@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "default"])
def test_reported_efficiency_matches_an_independent_clock(train_script, tiny_args, monkeypatch, prefetch):
    """Each log line's efficiency is at least compute (forward pre-hook to step post-hook) / wall time, its data time
    holds every wait for a batch; on the CPU batches load in the loop's thread unless --prefetch-depth."""
    flags = [*tiny_args, "--shapes-train-size", str(16 * STEPS), "--log-interval", str(LOG_INTERVAL)]
    args = train_script.get_args_parser().parse_args([*flags, *(["--prefetch-depth", "2"] if prefetch else [])])
    threads_before, modes = set(threading.enumerate()), []  # (loader threads alive, training mode) at each forward
    session, state = train_script.setup(args)
    collate = session.train_loader.collate_fn

    def slow_collate(samples):  # a slow disk: every batch costs DATA_DELAY more to load
        time.sleep(DATA_DELAY)
        return collate(samples)

    session.train_loader.collate_fn = slow_collate
    starts, ends, logged = [], [], []

    def record_start(module, inputs):
        starts.append(time.perf_counter())
        alive = sum(isinstance(t, train_script.loaders.BackgroundGenerator) for t in threading.enumerate())
        modes.append((alive, module.training))

    session.model.register_forward_pre_hook(record_start)
    session.model.register_forward_hook(lambda *_: time.sleep(COMPUTE_DELAY))
    session.optimizer.register_step_post_hook(lambda *_: ends.append(time.perf_counter()))
    log_train = session.logger.log_train

    def log_train_and_clock(*args, **kwargs):
        log_train(*args, **kwargs)
        logged.append(time.perf_counter())

    session.logger.log_train = log_train_and_clock
    waits, background_batches = [], train_script.loaders.background_batches  # seconds the loop waited for each batch

    def timed(batches):
        start = time.perf_counter()
        for batch in batches:
            waits.append(time.perf_counter() - start)
            yield batch
            start = time.perf_counter()

    @contextlib.contextmanager
    def timed_batches(*args):
        with background_batches(*args) as batches:
            yield timed(batches)

    monkeypatch.setattr(train_script.loaders, "background_batches", timed_batches)
    logged.append(time.perf_counter())
    with train_script.runtime.StopSignal() as stop:  # train_one_epoch() as fit() calls it
        assert train_script.train_one_epoch(session, state, args, stop)
    validated = train_script.validate(session, args, session.wrapped, train_script.runtime.StopSignal())
    session.logger.close()

    training = [mode for _, mode in modes]  # STEPS forwards in train mode, then evaluation's in eval mode
    assert len(ends) == STEPS < len(modes) and training == [True] * STEPS + [False] * (len(modes) - STEPS)
    assert session.model.training and validated["samples"] == 40  # train mode again after evaluation
    assert [alive for alive, _ in modes[:2]] == [int(prefetch)] * 2  # a loading thread, or none
    deadline = time.monotonic() + 5
    while threads_started(threads_before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not threads_started(threads_before)
    train = records(session.run_dir, "train")
    assert len(train) == STEPS // LOG_INTERVAL
    for k, record in enumerate(train):
        steps = slice(k * LOG_INTERVAL, (k + 1) * LOG_INTERVAL)
        compute = sum(end - start for start, end in zip(starts[steps], ends[steps], strict=True))
        measured = compute / (ends[steps][-1] - logged[k])
        reported = record["compute_efficiency"]
        message = f"window {k}: reported {reported:.3f}, measured {measured:.3f}"
        assert reported >= measured - 0.01, message  # the loop's compute spans hold the hooks'
        # A wait for data counted as compute would show here: each wait lies inside the loop's data span.
        waited = sum(waits[steps])
        assert record["data_ms"] * LOG_INTERVAL / 1000 >= waited - 1e-4, f"window {k}: data waits {waited:.3f} s"
    if not prefetch:  # every batch was waited for in full: the data time holds at least the sleep
        assert all(record["data_ms"] >= 1000 * DATA_DELAY for record in train)


INPUT_PIPELINE = ("data.py", "loaders.py", "samplers.py", "shapes.py", "transforms.py")  # tensors on the host anyway


class HostReads(torch.overrides.TorchFunctionMode):
    """Records each line of the project's code outside INPUT_PIPELINE that reads a tensor's value on the host."""

    NAMES = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__format__")
    READS = frozenset(getattr(torch.Tensor, name) for name in NAMES)

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.READS:
            caller = sys._getframe(1)  # the code that called the method: tensor methods add no Python frame
            path = Path(caller.f_code.co_filename)
            ours = path.is_relative_to(ROOT) and "site-packages" not in path.parts
            if ours and path.name not in INPUT_PIPELINE:
                self.sites.append(f"{path.name}:{caller.f_lineno}")
        return func(*args, **(kwargs or {}))


def autograd_graph_size() -> int:
    """Autograd nodes reachable from every live tensor: the same at each step unless a graph leaks."""
    gc.collect()
    tensors = [obj for obj in gc.get_objects() if issubclass(type(obj), torch.Tensor)]  # isinstance can run code
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    seen = {}  # id -> node, holding each node so that its id stays unique during the walk
    while stack:
        node = stack.pop()
        if node is not None and id(node) not in seen:
            seen[id(node)] = node
            stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


def test_the_loop_reads_the_device_only_to_log_and_keeps_no_graph(train_script, tiny_args):
    """9 steps, a log line every 3: three host reads, all at one line; the live autograd graph does not grow."""
    args = train_script.get_args_parser().parse_args([*tiny_args, "--shapes-train-size", "144", "--log-interval", "3"])
    session, state = train_script.setup(args)
    sizes = []
    session.model.register_forward_hook(lambda *_: sizes.append(autograd_graph_size()))
    reads = HostReads()
    with reads, train_script.runtime.StopSignal() as stop:
        assert train_script.train_one_epoch(session, state, args, stop)
    session.logger.close()
    assert state.global_step == 9
    assert len(reads.sites) == 9 // 3 and len(set(reads.sites)) == 1, reads.sites
    assert len(sizes) == 9, "the forward hook must fire once per training step"
    # Step 1 sees its own graph, later steps also the previous step's loss: then it stays flat.
    assert max(sizes[2:]) <= sizes[1], f"the autograd graph grows from step to step: {sizes}"
