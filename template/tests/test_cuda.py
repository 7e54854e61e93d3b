"""train.py's own loop on CUDA, then test.py on its checkpoint; the CPU twin runs the same calls.

On CUDA the loop takes paths that only a GPU takes: the BackgroundGenerator thread (on by
default there), pinned memory with non-blocking copies, the device sync of each log step, fp16
loss scaling, channels_last and torch.compile, and a torchvision backbone with a moving average
of its weights. The CUDA cases skip without CUDA; the CPU cases run the same calls everywhere
(with --prefetch-depth 2, so the loader thread runs there too).

Run: pytest tests/test_cuda.py
"""

import threading
from pathlib import Path

import pytest
import torch

from conftest import run_one_epoch

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CASES = {
    "fp32": [],
    "bf16": ["--amp", "bf16"],
    "fp16": ["--amp", "fp16"],
    "channels-last": ["--channels-last"],
    "compile": ["--channels-last", "--compile"],
    "resnet18-ema": ["--backbone", "resnet18", "--channels-last", "--amp", "bf16", "--ema-decay", "0.9"],
}
# The CPU twin leaves out fp16, which needs a GPU, and torch.compile, which takes half a minute
# to compile on a CPU (test_techniques.py compiles a smaller model there).
CPU_CASES = ("fp32", "bf16", "channels-last")
PARAMS = [pytest.param("cuda", name, marks=CUDA, id=f"cuda-{name}") for name in CASES]
PARAMS += [pytest.param("cpu", name, id=f"cpu-{name}") for name in CPU_CASES]


def device_args(tiny_args: list[str], device: str, case: str) -> list[str]:
    argv = [device if arg == "cpu" else arg for arg in tiny_args]  # tiny_args: --device cpu
    return argv + CASES[case] + (["--prefetch-depth", "2"] if device == "cpu" else [])


@pytest.mark.parametrize(("device", "case"), PARAMS)
def test_train_py_then_test_py(train_script, test_script, tiny_args, device, case):
    argv = device_args(tiny_args, device, case)
    assert train_script.main(argv) == 0
    run = Path(argv[argv.index("--output-dir") + 1]) / argv[argv.index("--run-name") + 1]
    state = torch.load(run / "last.pt", weights_only=True)
    assert state["run_state"]["global_step"] == 6  # 96 images / 16 per batch
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
    assert test_script.main([str(run / "best.pt"), "--device", device]) == 0


@pytest.mark.parametrize(("device", "case"), PARAMS)
def test_the_loop_on_the_device(train_script, tiny_args, device, case, monkeypatch):
    """What the device changes: pinned memory, the loader thread, where the parameters live, and that they train."""
    argv = [*device_args(tiny_args, device, case), "--max-steps-per-epoch", "3"]
    args = train_script.get_args_parser().parse_args(argv)
    session, state = train_script.setup(args)
    assert session.train_loader.pin_memory == (device == "cuda")
    threads, real_step = [], train_script.optimizer_step  # loader threads alive at each optimizer step

    def counting_step(*step_args: object) -> None:
        threads.append(sum(isinstance(t, train_script.loaders.BackgroundGenerator) for t in threading.enumerate()))
        real_step(*step_args)

    monkeypatch.setattr(train_script, "optimizer_step", counting_step)
    before = [p.detach().clone() for p in session.model.parameters()]
    assert run_one_epoch(train_script, session, state, args)
    session.logger.close()
    assert threads == [1, 1, 1]  # the default on a GPU with --num-workers 0; asked for on the CPU
    assert all(p.device.type == device for p in session.model.parameters())
    changed = [not torch.equal(b, p) for b, p in zip(before, session.model.parameters(), strict=True)]
    assert sum(changed) > len(changed) // 2  # fp16's scaler may skip a step while it finds its scale, not all
