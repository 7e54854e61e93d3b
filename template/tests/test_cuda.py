"""One training step on CUDA: the loss is finite and the parameters move. Skipped without CUDA.

Run: pytest tests/test_cuda.py
"""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("amp", ["none", "bf16", "fp16"])
def test_cuda_training_step(train_script, amp):
    args = train_script.get_args_parser().parse_args(
        ["--device", "cuda", "--amp", amp, "--img-size", "32", "--shapes-train-size", "64", "--batch-size", "32",
         "--progress", "never", "--channels-last"]
    )  # fmt: skip
    splits = train_script.data.build_datasets("shapes", None, args.img_size, train_size=64, val_size=32)
    device = torch.device("cuda")
    model = train_script.build_model(args, splits, device)
    optimizer, _, scaler = train_script.build_optimization(model, args, batches_per_epoch=2, device=device)
    images, targets = next(iter(torch.utils.data.DataLoader(splits.train, batch_size=32)))
    images = images.to(device, non_blocking=True, memory_format=torch.channels_last)
    targets = targets.to(device, non_blocking=True)
    before = [p.detach().clone() for p in model.parameters()]

    for _ in range(3):  # fp16's loss scaler may skip the first steps while it finds its scale
        with train_script.runtime.autocast(device, amp):
            loss = model.loss(model(images), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    assert torch.isfinite(loss).item()
    assert all(p.device.type == "cuda" for p in model.parameters())
    changed = [not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True)]
    assert sum(changed) > len(changed) // 2
