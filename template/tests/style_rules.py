"""The pytorch-styleguide rules that a machine can check, read from the code (nothing is imported).

check(Project(root, package, model_module)) returns every violation, printed as
`<rule>: <file>:<line>: <what>`. tests/test_style.py runs each rule on this project and proves
on a small bad snippet that the rule catches what it should. Rule numbers (A.7, B.T3, ...)
refer to the style guide checklist the template was built from.
"""

import ast
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from style_ast import (
    ModuleContainers,
    Project,
    calls_of,
    classes,
    is_inert,
    is_main_guard,
    key,
    methods,
    resolve,
    short,
)

MODEL_PARTS = ("layers", "networks", "losses", "ops")
# What the scripts may import besides the model file: the dataset module, the task's own code, and
# the harness subpackage. Add your own such module here; never a model part.
INFRASTRUCTURE = ("data", "transforms", "figures", "pretrained", "evaluation", "task", "degradations", "harness")
HARNESS = "harness"  # the subpackage that trains, checkpoints and scales the model: it imports nothing above it
# Imports point one way: ops -> layers -> networks -> the model file; losses -> the model file.
MAY_IMPORT = {"ops": (), "layers": ("ops",), "networks": ("layers", "ops"), "losses": ("layers", "networks", "ops")}
# Calls that only build a constant, allowed at the top level of a script.
INERT_CALLS = {"frozenset", "set", "tuple", "list", "dict", "range", "sorted", "pathlib.Path", "logging.getLogger"}

Found = tuple[str, int, str]  # (file, line, what)
RULES: dict[str, Callable[[Project], Iterable[Found]]] = {}


@dataclass(frozen=True)
class Violation:
    """One broken rule at one place."""

    rule: str
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.path}:{self.line}: {self.what}"


def check(project: Project, rules: Iterable[str] | None = None) -> list[Violation]:
    """Run the named rules (default: all) and return their violations."""
    names = RULES if rules is None else list(rules)
    return [Violation(name, *found) for name in names for found in RULES[name](project)]


def rule(name: str) -> Callable:
    """Register a rule: a function of the Project yielding (file, line, what) for each violation."""

    def register(func: Callable[[Project], Iterable[Found]]) -> Callable[[Project], Iterable[Found]]:
        RULES[name] = func
        return func

    return register


@rule("model-files-exist")
def model_files_exist(p: Project) -> Iterator[Found]:
    """A.7, A.8: layers.py, networks.py, losses.py, ops.py and the file named after the model exist."""
    for name in (*MODEL_PARTS, p.model_module):
        if name not in p.modules:
            yield f"{p.package}/{name}.py", 0, "file is missing: each kind of model code has its own file"


@rule("scripts-import-only-the-model-file")
def scripts_import_only_the_model_file(p: Project) -> Iterator[Found]:
    """A.9: scripts take project code from the model file, the dataset module and infrastructure only."""
    allowed = {"", p.model_module, *INFRASTRUCTURE}
    for src in p.scripts():
        for module, line in p.imports(src):
            top = module.split(".")[0]
            if top in MODEL_PARTS:
                yield src.path, line, f"imports {p.package}.{module}; take the model from {p.package}.{p.model_module}"
            elif top not in allowed:
                yield src.path, line, f"imports {p.package}.{module}: not the model file, data or INFRASTRUCTURE"


@rule("imports-point-one-way")
def imports_point_one_way(p: Project) -> Iterator[Found]:
    """Imports point one way: ops -> layers -> networks -> model file; losses -> model file; no one imports a script."""
    order = {**MAY_IMPORT, p.model_module: MODEL_PARTS}
    for src in p.package_files(*order):
        for module, line in p.imports(src):
            top = module.split(".")[0]
            if top and top not in order[src.module]:
                allowed = ", ".join(order[src.module]) or "nothing of the package"
                yield src.path, line, f"{src.module} imports {top}; it may import {allowed}"
    scripts = {Path(s.path).stem for s in p.scripts()}
    for src in p.sources:
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                names = [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                if name.split(".")[0] in scripts:
                    yield src.path, node.lineno, f"imports the script {name}.py; move shared code into the package"


@rule("harness-imports-only-the-harness")
def harness_imports_only_the_harness(p: Project) -> Iterator[Found]:
    """The harness serves the project's own code and never reaches into it: its imports stay inside it."""
    for src in p.package_files():
        if src.module.split(".")[0] != HARNESS:
            continue
        for module, line in p.imports(src):
            if module.split(".")[0] != HARNESS:
                what = f"{p.package}.{module}" if module else p.package
                yield src.path, line, f"{src.module} imports {what}: the harness imports only itself"


@rule("module-defines-forward")
def module_defines_forward(p: Project) -> Iterator[Found]:
    """A.12: every direct nn.Module subclass defines forward."""
    for src in p.sources:
        for cls in classes(src.tree):
            defined = {m.name for m in methods(cls)} | {
                key(t) for n in cls.body if isinstance(n, ast.Assign) for t in n.targets
            }
            if "forward" not in defined and any(resolve(b, src.names) == "torch.nn.Module" for b in cls.bases):
                yield src.path, cls.lineno, f"class {cls.name}(nn.Module) has no forward method"


@rule("no-call-override")
def no_call_override(p: Project) -> Iterator[Found]:
    """A.12, A.13: no nn.Module overrides __call__: hooks and tracing run in nn.Module.__call__."""
    for src in p.sources:
        for cls in classes(src.tree):
            for method in methods(cls):
                if method.name == "__call__" and p.is_module_class(cls, src):
                    yield src.path, method.lineno, f"{cls.name} overrides __call__; compute in forward instead"


@rule("call-modules-not-forward")
def call_modules_not_forward(p: Project) -> Iterator[Found]:
    """A.13, A.44: call a module, model(x), never model.forward(x) (it skips hooks); super().forward() is fine."""
    for src in p.sources:
        for call in calls_of(src.tree, "forward"):
            target = call.func.value
            if not (isinstance(target, ast.Call) and key(target.func) == "super"):
                yield src.path, call.lineno, f"{short(call)} skips hooks; call {short(target)}(...) instead"


@rule("no-numpy-in-forward")
def no_numpy_in_forward(p: Project) -> Iterator[Found]:
    """A.38: forward methods of layers, networks, losses and the model use torch, not NumPy."""
    for src in p.package_files(*MODEL_PARTS, p.model_module):
        numpy = {name for name, target in src.names.items() if target.split(".")[0] == "numpy"}
        for cls in classes(src.tree):
            for method in (m for m in methods(cls) if m.name == "forward"):
                for node in ast.walk(method):
                    if isinstance(node, ast.Name) and node.id in numpy:
                        yield src.path, node.lineno, f"{cls.name}.forward uses NumPy ({node.id}); use torch"
                for call in calls_of(method, "numpy"):
                    yield src.path, call.lineno, f"{cls.name}.forward calls .numpy(); stay in torch"


@rule("losses-are-modules")
def losses_are_modules(p: Project) -> Iterator[Found]:
    """A.11, A.17: every class in losses.py is an nn.Module."""
    for src in p.package_files("losses"):
        for cls in classes(src.tree):
            if not p.is_module_class(cls, src):
                yield src.path, cls.lineno, f"class {cls.name} is not an nn.Module subclass"


@rule("ops-are-functions")
def ops_are_functions(p: Project) -> Iterator[Found]:
    """A.7: ops.py holds pure tensor functions: no nn.Module, no global state."""
    for src in p.package_files("ops"):
        for node in ast.walk(src.tree):
            if isinstance(node, ast.ClassDef) and p.is_module_class(node, src):
                yield src.path, node.lineno, f"class {node.name} is an nn.Module; modules go in layers.py"
            elif isinstance(node, ast.Global):
                yield src.path, node.lineno, f"global {', '.join(node.names)}: ops keep no state"


@rule("no-plain-list-of-modules")
def no_plain_list_of_modules(p: Project) -> Iterator[Found]:
    """B.T3: modules kept on self go in nn.Sequential or nn.ModuleList, never a plain list (they would not register)."""
    unseen = "unseen by .to(), parameters() and state_dict(); use nn.ModuleList"
    for src in p.sources:
        for cls in (c for c in classes(src.tree) if p.is_module_class(c, src)):
            filled = ModuleContainers(cls, p, src)
            stores = [
                (node, key(target))
                for node in ast.walk(cls)
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if (key(target) or "").startswith("self.")
            ]
            # An attribute that ends up as nn.ModuleList(...) or nn.Sequential(...) is registered.
            registered = {name for node, name in stores if filled.is_module(node.value)}
            for node, name in stores:
                if name not in registered and (name in filled or filled.holds(node.value)):
                    yield src.path, node.lineno, f"{name} holds modules in a plain container, {unseen}"


@rule("no-variable")
def no_variable(p: Project) -> Iterator[Found]:
    """A.54: no torch.autograd.Variable (gone since PyTorch 0.4): tensors carry autograd themselves."""
    for src in p.sources:
        for node in ast.walk(src.tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.autograd"):
                if any(alias.name == "Variable" for alias in node.names):
                    yield src.path, node.lineno, "imports Variable; use plain tensors"
            elif isinstance(node, ast.Attribute) and (resolve(node, src.names) or "").startswith("torch.autograd.V"):
                yield src.path, node.lineno, f"{short(node)}; use plain tensors"


@rule("no-dot-data")
def no_dot_data(p: Project) -> Iterator[Found]:
    """A.43: no tensor `.data`: use .detach(), .item(), or torch.no_grad() for in-place updates."""
    for src in p.sources:
        exempt = set()  # self.data of a Dataset or any other class that is not a module
        for cls in (c for c in classes(src.tree) if not p.is_module_class(c, src)):
            exempt |= {id(n) for n in ast.walk(cls) if isinstance(n, ast.Attribute) and key(n) == "self.data"}
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Attribute) and node.attr == "data" and id(node) not in exempt:
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if not (isinstance(root, ast.Name) and root.id in src.names):  # torch.utils.data is a module
                    yield src.path, node.lineno, f"{short(node)}; use .detach() or torch.no_grad()"


@rule("no-cuda-call")
def no_cuda_call(p: Project) -> Iterator[Found]:
    """B.T1, D.27: no .cuda(); choose the device once, then .to(device) and device= on factories."""
    for src in p.sources:
        for call in calls_of(src.tree, "cuda"):
            yield src.path, call.lineno, f"{short(call)}; use .to(device)"


@rule("torch-load-weights-only")
def torch_load_weights_only(p: Project) -> Iterator[Found]:
    """D.4: torch.load always with weights_only=True: unpickling arbitrary objects can run code."""
    for src in p.sources:
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Call) and resolve(node.func, src.names) == "torch.load":
                flag = next((k.value for k in node.keywords if k.arg == "weights_only"), None)
                if not (isinstance(flag, ast.Constant) and flag.value is True):
                    yield src.path, node.lineno, f"{short(node)}; pass weights_only=True"


@rule("loaders-live-in-data")
def loaders_live_in_data(p: Project) -> Iterator[Found]:
    """A.39: the scripts build no DataLoader themselves; the dataset module does."""
    for src in p.scripts():
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Call) and (resolve(node.func, src.names) or "").endswith("DataLoader"):
                yield src.path, node.lineno, f"{short(node)}; build loaders in data.py"


@rule("no-import-time-work")
def no_import_time_work(p: Project) -> Iterator[Found]:
    """A.20, A.21: importing a script does nothing: no seeds, backend flags, files or training at the top level."""
    for src in p.scripts():
        for stmt in src.tree.body:
            if not is_inert(stmt, src.names, INERT_CALLS):
                yield src.path, stmt.lineno, f"runs at import: {short(stmt)}; move it into main()"


@rule("main-guard")
def main_guard(p: Project) -> Iterator[Found]:
    """A.21: a script starts its work under `if __name__ == "__main__":`."""
    for src in p.scripts():
        if not any(is_main_guard(stmt) for stmt in src.tree.body):
            yield src.path, 1, 'no `if __name__ == "__main__":` guard calling main()'
