"""The generated projects' style-rule engine, template/tests/style_rules.py, on planted code.

    pytest tests/test_style_rules.py

Every rule catches a small bad snippet, naming the line, and no rule fires on near misses:
look-alikes of the violations. A rendering runs the engine on its own code (tests/test_style.py);
test_conformance.py plants violations in a rendering and checks that its style test fails.
"""

import importlib.util
import textwrap
from pathlib import Path

import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("style_rules", REPO / "template" / "tests" / "style_rules.py")
style_rules = importlib.util.module_from_spec(spec)
spec.loader.exec_module(style_rules)

PACKAGE, MODEL_MODULE = "shape_classifier", "classifier"
MAIN = '\n\ndef main() -> int:\n    return 0\n\n\nif __name__ == "__main__":\n    main()\n'


def code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# (rule, file, code): "# <-" marks the line the violation must name; code None deletes the file.
BAD = [
    ("model-files-exist", "<pkg>/ops.py", None),
    ("model-files-exist", "<pkg>/<model>.py", None),
    ("scripts-import-only-the-model-file", "train.py", "from <pkg>.layers import ConvBlock  # <-\n" + MAIN),
    ("scripts-import-only-the-model-file", "test.py", "from <pkg> import data, networks  # <-\n" + MAIN),
    ("scripts-import-only-the-model-file", "train.py", "import <pkg>.ops  # <-\n" + MAIN),
    ("scripts-import-only-the-model-file", "train.py", "from <pkg>.helpers import tool  # <-\n" + MAIN),
    ("imports-point-one-way", "<pkg>/layers.py", "from .networks import Backbone  # <-\n"),
    ("imports-point-one-way", "<pkg>/ops.py", "from <pkg> import layers  # <-\n"),
    ("imports-point-one-way", "<pkg>/networks.py", "from .data import DataSplits  # <-\n"),
    ("imports-point-one-way", "<pkg>/harness/checkpoint.py", "import train  # <-\n"),
    ("harness-imports-only-the-harness", "<pkg>/harness/runs.py", "from <pkg> import data  # <-\n"),
    ("harness-imports-only-the-harness", "<pkg>/harness/loaders.py", "from ..transforms import Preprocessing  # <-\n"),
    ("harness-imports-only-the-harness", "<pkg>/harness/images.py", "from . import runs\nimport <pkg>.ops  # <-\n"),
    ("module-defines-forward", "<pkg>/layers.py", code("""
        from torch import nn


        class Block(nn.Module):  # <-
            def __init__(self) -> None:
                super().__init__()
                self.conv = nn.Conv2d(3, 3, 3)
    """)),
    ("no-call-override", "<pkg>/losses.py", code("""
        from torch import nn


        class GANLoss(nn.Module):
            def forward(self, x):
                return x.mean()

            def __call__(self, x):  # <-
                return x.mean()
    """)),
    ("no-call-override", "<pkg>/layers.py", code("""
        import torch


        class Wide(torch.nn.Linear):
            def __call__(self, x):  # <-
                return x
    """)),
    ("call-modules-not-forward", "train.py", "def step(model, x):\n    return model.forward(x)  # <-\n" + MAIN),
    ("call-modules-not-forward", "<pkg>/networks.py", code("""
        from torch import nn


        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.body = nn.Linear(2, 2)

            def forward(self, x):
                return self.body.forward(x)  # <-
    """)),
    ("no-numpy-in-forward", "<pkg>/layers.py", code("""
        import numpy as np
        from torch import nn


        class Scale(nn.Module):
            def forward(self, x):
                return x * float(np.sqrt(2.0))  # <-
    """)),
    ("no-numpy-in-forward", "<pkg>/<model>.py", code("""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                return torch.from_numpy(x.cpu().numpy())  # <-
    """)),
    ("losses-are-modules", "<pkg>/losses.py", code("""
        class L1Loss:  # <-
            def __call__(self, a, b):
                return (a - b).abs().mean()
    """)),
    ("ops-are-functions", "<pkg>/ops.py", code("""
        from torch import nn


        class Mix(nn.Module):  # <-
            def forward(self, x):
                return x
    """)),
    ("ops-are-functions", "<pkg>/ops.py", "CALLS = 0\n\n\ndef count():\n    global CALLS  # <-\n    CALLS += 1\n"),
    ("no-plain-list-of-modules", "<pkg>/layers.py", code("""
        from torch import nn


        class Stack(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.blocks = [nn.Linear(4, 4) for _ in range(n)]  # <-

            def forward(self, x):
                return x
    """)),
    ("no-plain-list-of-modules", "<pkg>/layers.py", code("""
        from torch import nn


        class Stack(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.blocks = tuple(nn.Linear(4, 4) for _ in range(n))  # <-
                self.heads = list(map(nn.Linear, [4] * n, [2] * n))  # <-

            def forward(self, x):
                return x
    """)),
    ("no-plain-list-of-modules", "<pkg>/layers.py", code("""
        import copy

        from torch import nn


        def make_block(width):
            return nn.Conv2d(width, width, 3)


        class Tower(nn.Module):
            def __init__(self, width: int, depth: int) -> None:
                super().__init__()
                self.blocks = [make_block(width) for _ in range(depth)]  # <-
                self.stages = [self._stage(width) for _ in range(depth)]  # <-
                block = make_block(width)
                self.copies = [copy.deepcopy(block) for _ in range(depth)]  # <-

            def _stage(self, width: int) -> nn.Sequential:
                return nn.Sequential(nn.Conv2d(width, width, 1))

            def forward(self, x):
                return x
    """)),
    ("no-plain-list-of-modules", "<pkg>/networks.py", code("""
        from torch import nn


        class Net(nn.Module):
            def __init__(self, n):
                super().__init__()
                blocks = []
                for _ in range(n):
                    blocks.append(nn.Conv2d(3, 3, 3))
                self.blocks = blocks  # <-

            def forward(self, x):
                return x
    """)),
    ("no-plain-list-of-modules", "<pkg>/<model>.py", code("""
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.heads = {}  # <-
                self.heads["a"] = nn.Linear(2, 2)
                self.tails = []  # <-
                self.tails.append(nn.Linear(2, 2))

            def forward(self, x):
                return x
    """)),
    ("no-plain-list-of-modules", "<pkg>/networks.py", code("""
        from torch import nn


        class Block(nn.Identity):
            pass


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                stem = nn.Conv2d(3, 8, 3)
                self.parts = [stem, Block()]  # <-
                blocks = [Block()]
                self.all = blocks + [nn.ReLU()]  # <-
                self.more = []  # <-
                self.more.extend(blocks)
                self.rest = []  # <-
                self.rest += [Block()]

            def forward(self, x):
                return x
    """)),
    ("no-variable", "train.py", "from torch.autograd import Variable  # <-\n" + MAIN),
    ("no-variable", "<pkg>/ops.py", "import torch\n\n\ndef wrap(x):\n    return torch.autograd.Variable(x)  # <-\n"),
    ("no-dot-data", "<pkg>/ops.py", "def snapshot(model):\n    return [p.data for p in model.parameters()]  # <-\n"),
    ("no-dot-data", "<pkg>/ops.py", "import torch\n\n\ndef zeros():\n    return torch.zeros(3).data  # <-\n"),
    ("no-dot-data", "<pkg>/ops.py", "def scale(dataset_tensor):\n    return dataset_tensor.data  # <-\n"),
    ("no-cuda-call", "<pkg>/layers.py", "def to_gpu(x):\n    return x.cuda()  # <-\n"),
    ("no-cuda-call", "<pkg>/ops.py", code("""
        import torch


        def on_gpu(x):
            return torch.ones(2, device="cuda:0") + x.to("cuda")  # <-
    """)),
    ("no-cuda-call", "<pkg>/ops.py", code("""
        import torch


        def device(rank):
            return torch.device("cuda" if torch.cuda.is_available() else "cpu"), f"cuda:{rank}"  # <-
    """)),
    ("torch-load-weights-only", "<pkg>/harness/checkpoint.py", code("""
        import torch


        def load(path):
            return torch.load(path, map_location="cpu")  # <-
    """)),
    ("torch-load-weights-only", "test.py", code("""
        import torch


        def load(path):
            return torch.load(path, weights_only=False)  # <-
    """) + MAIN),
    ("torch-load-weights-only", "<pkg>/pretrained.py", code("""
        from torch.hub import load_state_dict_from_url


        def fetch(url):
            return load_state_dict_from_url(url, map_location="cpu")  # <-
    """)),
    ("loaders-live-in-data", "train.py", code("""
        from torch.utils.data import DataLoader


        def loader(dataset):
            return DataLoader(dataset, batch_size=8)  # <-
    """) + MAIN),
    ("no-import-time-work", "train.py", "import torch\n\ntorch.manual_seed(1)  # <-\n" + MAIN),
    ("no-import-time-work", "train.py", "import torch\n\ntorch.backends.cudnn.benchmark = True  # <-\n" + MAIN),
    ("no-import-time-work", "test.py", "import json\n\nCONFIG = json.load(open('c.json'))  # <-\n" + MAIN),
    ("no-import-time-work", "test.py", "from pathlib import Path\n\nPath('runs').resolve().mkdir()  # <-\n" + MAIN),
    ("main-guard", "train.py", "def main() -> int:  # <-\n    return 0\n"),
]  # fmt: skip

# Code every rule must leave alone: look-alikes of the violations above.
NEAR_MISSES = {
    "<pkg>/losses.py": code("""
        from dataclasses import dataclass


        @dataclass
        class LossWeights:  # no loss: the weights of its terms
            pixel: float = 1.0
    """),
    "<pkg>/layers.py": code("""
        import numpy as np
        import torch
        from torch import nn

        GAIN = float(np.sqrt(2.0))  # NumPy outside forward


        def half(width: int) -> int:
            return width // 2


        class Block(nn.Module):
            def __init__(self, widths: list[int]) -> None:
                super().__init__()
                self.widths = list(widths)  # numbers, not modules
                self.halves = [half(w) for w in widths]  # numbers from a helper that builds no module
                layers: list[nn.Module] = [nn.Linear(w, w) for w in widths]
                self.body = nn.Sequential(*layers)
                self.heads = nn.ModuleList([nn.Linear(2, 2)])
                self.tails = []
                self.tails.append(nn.Linear(2, 2))
                self.tails = nn.ModuleList(self.tails)  # registered in the end
                branches = nn.ModuleList()
                branches.append(nn.Conv2d(2, 2, 1))
                self.branches = branches  # a ModuleList filled by name: registered
                self.widths_out = [layer.out_features for layer in layers]  # numbers read off the modules
                self.data = {}  # the module's own attribute, not a tensor's .data
                self.register_buffer("scale", torch.ones(()))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.body(x) * GAIN

            def regroup(self, layers: list[int]) -> int:
                self.depths = layers  # numbers: `layers` holds modules in __init__ alone
                return len(layers)


        class Stack(nn.Sequential):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return nn.Sequential.forward(self, x) + x  # the base class's forward


        class Wide(nn.Linear):  # inherits forward
            def forward(self, x):
                return super().forward(x) * 2
    """),
    "<pkg>/data.py": code("""
        import torch
        from torch.utils.data import DataLoader, Dataset


        class Table(Dataset):
            def __init__(self, data: list[float]) -> None:
                self.data = data  # a dataset's own attribute

            def __getitem__(self, i: int) -> float:
                return self.data[i]


        class Block:  # a plain callable, named like the module in layers.py
            def __call__(self, x: float) -> float:
                return x


        def loader(dataset: Dataset) -> torch.utils.data.DataLoader:
            return DataLoader(dataset)


        def pixels(dataset, train_set, loader: DataLoader) -> tuple:
            return dataset.data, train_set.data, loader.dataset.data  # a torchvision dataset's array (MNIST's)


        def on_gpu() -> bool:
            return torch.cuda.is_available()
    """),
    "<pkg>/harness/checkpoint.py": code("""
        import torch


        def load(path):
            return torch.load(path, map_location="cpu", weights_only=True)


        def gpu(rank):
            return torch.device("cuda", rank)  # the harness chooses the device
    """),
    "train.py": code("""
        "Train a model."

        import argparse
        import os
        import re
        from pathlib import Path

        import torch

        from <pkg> import UsageError, data
        from <pkg>.<model> import Model

        DEFAULTS = {"lr": 1e-3}
        ROOT = Path(__file__).resolve().parent
        DATA = os.environ.get("DATA_DIR", "data")
        ACTS_ONLY_WITH = {"warmup": ("--scheduler cosine", lambda args: args.scheduler.startswith("cos"))}  # at a call
        RUN_NAME = re.compile(r"[a-z0-9-]+")
        CHOICES = tuple(sorted(["b", "a"]))
        try:
            import torchinfo
        except ImportError:
            torchinfo = None


        def main() -> int:
            torch.manual_seed(0)
            args = argparse.Namespace(data="photos")  # a flag named --data, as pytorch/examples' ImageNet has
            return len(args.data)


        if __name__ == "__main__":
            main()
    """),
}


def check(project: style_rules.Project) -> list[str]:
    """Every rule on the project, each violation as the rendering's test_style.py reports it."""
    return [
        f"{name}: {path}:{line}: {what}"
        for name, rule in style_rules.RULES.items()
        for path, line, what in rule(project)
    ]


def fill(text: str) -> str:
    return text.replace("<pkg>", PACKAGE).replace("<model>", MODEL_MODULE)


def make_project(root: Path, files: dict[str, str | None]) -> style_rules.Project:
    """A minimal project: empty package modules and trivial scripts, then `files` (None deletes one)."""
    contents = {f"{PACKAGE}/{name}.py": "" for name in ("__init__", *style_rules.MODEL_PARTS, MODEL_MODULE, "data")}
    contents |= {"train.py": MAIN, "test.py": MAIN}
    contents |= {fill(path): None if text is None else fill(text) for path, text in files.items()}
    for path, text in contents.items():
        if text is not None:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
    return style_rules.Project(root, PACKAGE, MODEL_MODULE)


@pytest.mark.parametrize(("rule", "path", "snippet"), BAD, ids=[rule for rule, _, _ in BAD])
def test_rule_catches_a_violation(tmp_path, rule, path, snippet):
    found = check(make_project(tmp_path, {path: snippet}))
    marked = [i for i, line in enumerate(fill(snippet or "").splitlines(), 1) if line.endswith("# <-")] or [0]
    for line in marked:
        where = f"{rule}: {fill(path)}:{line}:"
        assert any(v.startswith(where) for v in found), f"expected {where} ..., got {found}"
    assert {v.split(":")[0] for v in found} == {rule}, "the snippet breaks other rules too"


def test_rules_leave_near_misses_alone(tmp_path):
    assert check(make_project(tmp_path, NEAR_MISSES)) == []


def test_rules_read_what_python_reads_and_a_model_part_made_a_package(tmp_path):
    """A byte-order mark is Python, an editor's lock file (a dangling link) is not; a part split into files imports
    its own; a long statement is shown cut, not as "..." alone."""
    (tmp_path / PACKAGE).mkdir()
    (tmp_path / PACKAGE / ".#layers.py").symlink_to("user@host.1234:1701")  # as Emacs makes them
    split = {"<pkg>/layers.py": None, "<pkg>/layers/__init__.py": "from .conv import Block\n", "<pkg>/ops.py": "\ufeff"}
    assert check(make_project(tmp_path, {**split, "<pkg>/layers/conv.py": "Block = None\n"})) == []
    flag = "import torch\n\ntorch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False\n"
    shown = "torch.backends.cuda.matmul.allow_fp16_reduced_precision_r..."  # 57 characters and ...
    expected = f"no-import-time-work: train.py:3: runs at import: {shown}; move it into main()"
    assert check(make_project(tmp_path, {"train.py": flag + MAIN})) == [expected]


def test_a_module_of_the_users_in_may_import_is_imported_and_checked(tmp_path, monkeypatch):
    monkeypatch.setitem(style_rules.MAY_IMPORT, "attention", ("ops",))
    users = {"<pkg>/attention.py": "from .ops import softmax\n", "<pkg>/<model>.py": "from .attention import Block\n"}
    users["<pkg>/networks.py"] = "from .attention import Block\n"
    [found] = check(make_project(tmp_path, users))  # the model file may import it; networks, once its entry names it
    assert found.startswith(f"imports-point-one-way: {PACKAGE}/networks.py:1: networks imports attention;")
    monkeypatch.setitem(style_rules.MAY_IMPORT, "networks", ("attention", "layers", "ops"))
    assert check(make_project(tmp_path, users)) == []
    [found] = check(make_project(tmp_path, {**users, "<pkg>/attention.py": "from .networks import Net\n"}))
    assert found.endswith("attention imports networks; MAY_IMPORT lets it import ops")


def test_a_missing_model_file_says_where_a_renamed_one_is_named(tmp_path):
    [found] = check(make_project(tmp_path, {"<pkg>/<model>.py": None}))
    assert found.endswith("own file (a renamed model file: name it in tests/test_style.py)")


def test_every_rule_has_a_bad_snippet():
    assert {rule for rule, _, _ in BAD} == set(style_rules.RULES)
