"""The compute efficiency train.py reports is true: with a known delay in data loading it matches a clock of its own.

Run: pytest tests/test_efficiency.py
"""

import json
import time

import pytest

STEPS, LOG_INTERVAL = 12, 4  # three log lines, three efficiencies to check
DATA_DELAY = 0.04  # seconds of sleep per batch, in the loader: a slow disk
COMPUTE_DELAY = 0.02  # seconds of sleep per step, in forward: a bigger model


class SlowCollate:
    """The loader's collate function, then a sleep: every batch costs DATA_DELAY more to load."""

    def __init__(self, collate, delay: float) -> None:
        self.collate = collate
        self.delay = delay

    def __call__(self, samples):
        time.sleep(self.delay)
        return self.collate(samples)


@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "no-prefetch"])
def test_reported_efficiency_matches_an_independent_clock(train_script, tiny_args, prefetch):
    """Each log line's efficiency is within 0.05 of compute / wall time, both timed here with hooks.

    Compute runs from the model's forward pre-hook to the optimizer's step post-hook; a window
    runs from the end of the previous window's last optimizer step (or the start) to its own.
    """
    flags = [*tiny_args, "--batch-size", "16", "--shapes-train-size", str(16 * STEPS)]
    flags += ["--log-interval", str(LOG_INTERVAL)] + (["--prefetch-depth", "2"] if prefetch else ["--no-prefetch"])
    args = train_script.get_args_parser().parse_args(flags)
    session, state = train_script.setup(args)
    session.train_loader.collate_fn = SlowCollate(session.train_loader.collate_fn, DATA_DELAY)
    starts, ends = [], []
    session.model.register_forward_pre_hook(lambda *_: starts.append(time.perf_counter()))
    session.model.register_forward_hook(lambda *_: time.sleep(COMPUTE_DELAY))
    session.optimizer.register_step_post_hook(lambda *_: ends.append(time.perf_counter()))

    with train_script.runtime.StopSignal() as stop:
        started = time.perf_counter()
        assert train_script.train_one_epoch(
            session.wrapped, session.optimizer, session.scheduler, session.scaler, session.train_loader,
            session.device, state, args, session.logger, stop,
        )  # fmt: skip
    session.logger.close()

    assert len(starts) == len(ends) == STEPS
    records = [json.loads(line) for line in (session.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert len(train) == STEPS // LOG_INTERVAL
    boundaries = [started, *ends[LOG_INTERVAL - 1 :: LOG_INTERVAL]]
    for k, record in enumerate(train):
        steps = slice(k * LOG_INTERVAL, (k + 1) * LOG_INTERVAL)
        compute = sum(end - start for start, end in zip(starts[steps], ends[steps], strict=True))
        measured = compute / (boundaries[k + 1] - boundaries[k])
        reported = record["compute_efficiency"]
        assert abs(reported - measured) <= 0.05, f"window {k}: reported {reported:.3f}, measured {measured:.3f}"
    if not prefetch:  # every batch was waited for in full: the data time holds at least the sleep
        assert all(record["data_ms"] >= 1000 * DATA_DELAY for record in train)
