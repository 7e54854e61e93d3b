"""Style rules that only running the code can prove: pytest tests/test_runtime_rules.py

Values kept across training steps carry no autograd graph (a running loss summed as a tensor,
`total += loss`, keeps every step's graph alive, and memory grows with each step), and a forward
hook on the model fires on every training step (calling model.forward() directly would skip it).
tests/test_train.py checks the train/eval modes; tests/test_style.py the rules read from the code.
"""

import gc

import torch
from torch import nn


def autograd_graph_size() -> int:
    """Autograd nodes reachable from every live tensor: the same at each step unless a graph leaks."""
    gc.collect()
    tensors = [obj for obj in gc.get_objects() if issubclass(type(obj), torch.Tensor)]
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    seen = {}  # id -> node, holding each node so that its id stays unique during the walk
    while stack:
        node = stack.pop()
        if node is not None and id(node) not in seen:
            seen[id(node)] = node
            stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


def test_the_graph_measure_sees_a_leaking_loop():
    """The measure notices the classic leak: losses summed as tensors across steps."""
    model, total, sizes = nn.Linear(4, 1), 0.0, []
    for _ in range(4):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        total = total + loss  # the bug: should be total += loss.item(), or loss.detach()
        sizes.append(autograd_graph_size())
    assert sizes[0] < sizes[1] < sizes[2] < sizes[3]


def test_values_kept_across_training_steps_carry_no_autograd_graph(train_script, tiny_args, monkeypatch):
    sizes = []
    real_build = train_script.task.build_model

    def build_and_watch(*args, **kwargs):
        model = real_build(*args, **kwargs)

        def measure(module, inputs, output):
            if module.training:  # training steps only, not evaluation
                sizes.append(autograd_graph_size())

        model.register_forward_hook(measure)
        return model

    monkeypatch.setattr(train_script.task, "build_model", build_and_watch)
    assert train_script.main([*tiny_args, "--max-steps-per-epoch", "5"]) == 0
    assert len(sizes) == 5, "the forward hook must fire once per training step"
    # Step 1 sees its own graph, later steps also the previous step's loss: then it stays flat.
    assert max(sizes[2:]) <= sizes[1], f"the autograd graph grows from step to step: {sizes}"
