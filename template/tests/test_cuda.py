"""train.py on CUDA (the loader thread, pinned memory, fp16, channels_last, torch.compile), then test.py.

The CUDA cases skip without CUDA; their CPU twins run everywhere, with --prefetch-depth 2 for the loader thread.
"""

import threading

import pytest
import torch

from conftest import LARGE_MODEL, without

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CASES = {
    "fp32": [],
    "bf16": ["--amp", "bf16"],
    "fp16": ["--amp", "fp16"],
    "channels-last": ["--channels-last"],
    "compile": ["--channels-last", "--compile"],
    "large-ema": [*LARGE_MODEL, "--channels-last", "--amp", "bf16", "--ema-decay", "0.9"],
    "deterministic": ["--deterministic"],  # the models' ops without a deterministic CUDA kernel warn, not stop
}
CPU_CASES = ("fp32", "bf16", "channels-last")
# One GPU: "cuda" would spread over every GPU in the DataParallel variant (test_dataparallel.py), refusing bf16.
PARAMS = [pytest.param("cuda:0", name, marks=CUDA, id=f"cuda-{name}") for name in CASES]
PARAMS += [pytest.param("cpu", name, id=f"cpu-{name}") for name in CPU_CASES]


@pytest.mark.parametrize(("device", "case"), PARAMS)
def test_train_py_then_test_py(train_script, test_script, tiny_args, device, case, monkeypatch, after_step):
    """What the device changes: pinned memory, the loader thread, where the parameters live; that they train."""
    given = without(tiny_args, "--widths") if "--backbone" in CASES[case] else tiny_args  # its own model
    argv = [device if arg == "cpu" else arg for arg in given] + CASES[case]  # tiny_args: --device cpu
    argv += ["--prefetch-depth", "2"] if device == "cpu" else []
    built, threads = [], []  # setup()'s session with its initial parameters; loader threads alive at each step
    real_setup, loader_thread = train_script.setup, train_script.loaders.BackgroundGenerator

    def watched_setup(*args: object):
        session, state = real_setup(*args)
        built.append((session, [p.detach().clone() for p in session.model.parameters()]))
        return session, state

    monkeypatch.setattr(train_script, "setup", watched_setup)
    after_step(lambda: threads.append(sum(isinstance(t, loader_thread) for t in threading.enumerate())))
    assert train_script.main(argv) == 0
    [(session, before)] = built
    assert session.train_loader.pin_memory == (device != "cpu")
    # One loader thread from the first step (the default on a GPU, asked for on the CPU); 96 images / 16 per batch.
    assert len(threads) == 6 and threads[0] == max(threads) == 1, threads
    assert all(p.device == torch.device(device) for p in session.model.parameters())
    changed = [not torch.equal(b, p) for b, p in zip(before, session.model.parameters(), strict=True)]
    assert sum(changed) > len(changed) // 2  # fp16's scaler may skip a step while it finds its scale, not all

    state = torch.load(session.run_dir / "last.pt", weights_only=True)
    assert state["run_state"]["global_step"] == 6
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
    assert test_script.main([str(session.run_dir / "best.pt"), "--device", device]) == 0
    torch.use_deterministic_algorithms(False)  # as the next test's process would start (--deterministic sets it)
