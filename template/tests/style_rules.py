"""The pytorch-styleguide rules that a machine can check, read from the code with ast (nothing is imported).

check(Project(root, package, model_module)) returns every violation as `<rule>: <file>:<line>: <what>`;
tests/test_style.py runs each rule on this project. Rule numbers (A.7, B.T3, ...) refer to the style
guide checklist the template was built from.
"""

import ast
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MODEL_PARTS = ("layers", "networks", "losses", "ops")
# What the scripts may import besides the model file: the dataset module, the task's own code, and
# the harness subpackage. Add your own such module here; never a model part.
INFRASTRUCTURE = ("data", "transforms", "figures", "pretrained", "evaluation", "task", "degradations", "harness")
HARNESS = "harness"  # the subpackage that trains, checkpoints and scales the model: it imports nothing above it
# Imports point one way: ops -> layers -> networks -> the model file; losses -> the model file.
MAY_IMPORT = {"ops": (), "layers": ("ops",), "networks": ("layers", "ops"), "losses": ("layers", "networks", "ops")}
# Calls that only build a constant, allowed at the top level of a script.
INERT_CALLS = {"frozenset", "set", "tuple", "list", "dict", "range", "sorted", "pathlib.Path", "logging.getLogger"}
# Expressions that build a plain container: what they hold is not registered on the module.
CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

Found = Iterator[tuple[str, int, str]]  # (file, line, what) for each violation
RULES: dict[str, Callable[["Project"], Found]] = {}


@dataclass
class Source:
    """A parsed file: `module` is its dotted name inside the package ("" for __init__), None for a script."""

    path: str  # relative to the project root, with forward slashes
    module: str | None
    tree: ast.Module
    names: dict[str, str]  # local name -> what it was imported as: {"np": "numpy", "nn": "torch.nn"}

    def resolve(self, node: ast.expr) -> str:
        """The dotted name of `a.b.c` with `a` replaced by what it was imported as; "" if not a name."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        return ".".join([self.names.get(node.id, node.id), *reversed(parts)]) if isinstance(node, ast.Name) else ""


class Project:
    """The package and the top-level scripts of a project, parsed."""

    def __init__(self, root: Path, package: str, model_module: str) -> None:
        self.package, self.model_module = package, model_module
        self.sources: list[Source] = []
        for path in sorted((root / package).rglob("*.py")) + sorted(root.glob("*.py")):
            rel = path.relative_to(root)
            # <package>/harness/runs.py -> "harness.runs", <package>/__init__.py -> "", train.py -> None
            module = ".".join(rel.with_suffix("").parts[1:]).removesuffix("__init__").rstrip(".")
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
            self.sources.append(Source(rel.as_posix(), module if len(rel.parts) > 1 else None, tree, names(tree)))
        self.modules = {s.module for s in self.sources if s.module is not None}
        self.module_classes: set[tuple[str, str]] = set()  # (file, class) of each nn.Module subclass
        while True:  # a class may derive from a project module defined later or in another file
            known = {name for _, name in self.module_classes}
            found = {
                (src.path, cls.name)
                for src in self.sources
                for cls in classes(src.tree)
                if any(is_nn(base) or base.split(".")[-1] in known for base in map(src.resolve, cls.bases))
            }
            if found == self.module_classes:
                break
            self.module_classes = found
        self.module_class_names = {name for _, name in self.module_classes}

    def package_files(self, *modules: str) -> Iterator[Source]:
        """The package's files, or those of the named modules."""
        return (s for s in self.sources if s.module is not None and (not modules or s.module in modules))

    def scripts(self) -> Iterator[Source]:
        """The top-level scripts: train.py, test.py and any other *.py next to them."""
        return (s for s in self.sources if s.module is None)

    def is_module(self, src: Source, cls: ast.ClassDef) -> bool:
        """Whether the class is an nn.Module: directly, through an nn class, or through a project module."""
        return (src.path, cls.name) in self.module_classes

    def imports(self, src: Source) -> Iterator[tuple[str, int]]:
        """(module inside the package, line) for each import of project code; "" is the package itself."""
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    head, *rest = alias.name.split(".")
                    if head == self.package:
                        yield ".".join(rest), node.lineno
                continue
            if not isinstance(node, ast.ImportFrom) or (node.level and src.module is None):
                continue
            if node.level == 0:
                head, *base = (node.module or "").split(".")
                if head != self.package:
                    continue
            else:  # relative: from the importing file's own package
                own = src.module.split(".") if src.module else []
                here = own if src.path.endswith("__init__.py") else own[:-1]
                base = here[: len(here) - node.level + 1] + (node.module.split(".") if node.module else [])
            for alias in node.names:
                candidate = ".".join([*base, alias.name])
                yield (candidate if candidate in self.modules else ".".join(base)), node.lineno


def names(tree: ast.Module) -> dict[str, str]:
    """Local names bound by absolute imports: {"np": "numpy", "nn": "torch.nn", "F": "torch.nn.functional"}."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.split(".")[0]
                bound[alias.asname or head] = alias.name if alias.asname else head
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def is_nn(name: str) -> bool:
    """Whether a resolved name is a class of torch.nn (nn.Module, nn.Conv2d, ...)."""
    return name.startswith("torch.nn.") and name.count(".") == 2 and name.split(".")[-1][:1].isupper()


def classes(tree: ast.AST) -> Iterator[ast.ClassDef]:
    """Every class defined in the tree, nested ones included."""
    return (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef))


def methods(cls: ast.ClassDef, name: str | None = None) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions defined directly in a class body (those called `name`, if given)."""
    functions = (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return (f for f in functions if name is None or f.name == name)


def calls_of(tree: ast.AST, method: str) -> Iterator[ast.Call]:
    """Every call of the form `x.method(...)`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
            yield node


def key(node: ast.expr) -> str | None:
    """The text of a Name ("blocks") or of an attribute of self ("self.blocks"); None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def short(node: ast.AST) -> str:
    """The node's source text, cut to one short line for a message."""
    text = ast.unparse(node).splitlines()[0]
    return text if len(text) <= 60 else text[:57] + "..."


class ModuleContainers(set):
    """The names in one class ("blocks", "self.blocks") that hold modules in a plain list, tuple or dict."""

    def __init__(self, cls: ast.ClassDef, src: Source, module_classes: set[str]) -> None:
        super().__init__()
        self.src, self.known = src, module_classes
        self.instances: set[str] = set()  # local names bound to one module: conv = nn.Conv2d(...)
        for _ in range(2):  # twice: a list may be filled below the line that stores it
            for node in ast.walk(cls):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    self.assigned(node)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and key(node.func.value):
                    added, args = node.func.attr, node.args  # blocks.append(nn.Conv2d(...)), blocks.extend([...])
                    if args and (
                        (added in ("append", "insert") and self.is_module(args[-1]))
                        or (added == "extend" and self.holds(args[0]))
                    ):
                        self.add(key(node.func.value))

    def assigned(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> None:
        """Note the names an assignment fills with modules, or binds to one module."""
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        annotation = ast.unparse(node.annotation) if isinstance(node, ast.AnnAssign) else ""
        for target in targets:  # self.heads["a"] = nn.Linear(...) fills a plain dict
            if isinstance(target, ast.Subscript) and key(target.value) and self.is_module(node.value):
                self.add(key(target.value))
        for name in filter(None, map(key, targets)):
            if self.holds(node.value) or (annotation.startswith(("list", "tuple")) and "Module" in annotation):
                self.add(name)
            elif node.value is not None and self.is_module(node.value) and "." not in name:
                self.instances.add(name)

    def is_module(self, node: ast.expr | None) -> bool:
        """Whether the expression is one module: a call of an nn or project module class, or a local bound to one."""
        if isinstance(node, ast.Name):
            return node.id in self.instances
        name = self.src.resolve(node.func) if isinstance(node, ast.Call) else ""
        return is_nn(name) or name.split(".")[-1] in self.known

    def holds(self, node: ast.expr | None) -> bool:
        """Whether the expression builds a plain list, tuple, set or dict with modules in it."""
        if isinstance(node, (ast.Name, ast.Attribute)):
            return key(node) in self
        plain = (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple", "dict")
        )
        if not (plain or isinstance(node, (*CONTAINERS, ast.BinOp, ast.Starred))):
            return False
        parts = node.args if plain else ast.iter_child_nodes(node)  # [conv, *blocks], blocks + [head], list(blocks)
        return any(self.is_module(part) or self.holds(part) for part in parts)


def is_inert(stmt: ast.stmt, src: Source) -> bool:
    """Whether a top-level statement only defines things: imports, defs, constants, the main guard."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass)):
        return True
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, ast.Constant)  # the docstring
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        plain = all(isinstance(n, (ast.Name, ast.Tuple, ast.Store)) for t in targets for n in ast.walk(t))
        return plain and (stmt.value is None or only_inert_calls(stmt.value, src))
    if isinstance(stmt, ast.If):
        return is_main_guard(stmt) or (
            only_inert_calls(stmt.test, src) and all(is_inert(s, src) for s in stmt.body + stmt.orelse)
        )
    if isinstance(stmt, ast.Try):  # e.g. an optional import
        inner = stmt.body + [s for h in stmt.handlers for s in h.body] + stmt.orelse + stmt.finalbody
        return all(is_inert(s, src) for s in inner)
    return False


def only_inert_calls(node: ast.AST, src: Source) -> bool:
    """Whether every call inside the expression is one of INERT_CALLS."""
    return all(src.resolve(n.func) in INERT_CALLS for n in ast.walk(node) if isinstance(n, ast.Call))


def is_main_guard(stmt: ast.stmt) -> bool:
    """Whether the statement is `if __name__ == "__main__":`."""
    return isinstance(stmt, ast.If) and ast.unparse(stmt.test) in ("__name__ == '__main__'", "'__main__' == __name__")


def check(project: Project, rules: Iterable[str] = RULES) -> list[str]:
    """Run the named rules (default: all); each violation as `<rule>: <file>:<line>: <what>`."""
    return [f"{name}: {path}:{line}: {what}" for name in rules for path, line, what in RULES[name](project)]


def rule(func: Callable[[Project], Found]) -> Callable[[Project], Found]:
    """Register a rule under its function's name: model_files_exist checks "model-files-exist"."""
    RULES[func.__name__.replace("_", "-")] = func
    return func


@rule
def model_files_exist(p: Project) -> Found:
    """A.7, A.8: layers.py, networks.py, losses.py, ops.py and the file named after the model exist."""
    for name in (*MODEL_PARTS, p.model_module):
        if name not in p.modules:
            yield f"{p.package}/{name}.py", 0, "file is missing: each kind of model code has its own file"


@rule
def scripts_import_only_the_model_file(p: Project) -> Found:
    """A.9: scripts take project code from the model file, the dataset module and infrastructure only."""
    for src in p.scripts():
        for module, line in p.imports(src):
            top = module.split(".")[0]
            if top in MODEL_PARTS:
                yield src.path, line, f"imports {p.package}.{module}; take the model from {p.package}.{p.model_module}"
            elif top not in ("", p.model_module, *INFRASTRUCTURE):
                yield src.path, line, f"imports {p.package}.{module}: not the model file, data or INFRASTRUCTURE"


@rule
def imports_point_one_way(p: Project) -> Found:
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
            imported = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                imported = [node.module]
            for name in (n for n in imported if n.split(".")[0] in scripts):
                yield src.path, node.lineno, f"imports the script {name}.py; move shared code into the package"


@rule
def harness_imports_only_the_harness(p: Project) -> Found:
    """The harness serves the project's own code and never reaches into it: its imports stay inside it."""
    for src in (s for s in p.package_files() if s.module.split(".")[0] == HARNESS):
        for module, line in p.imports(src):
            if module.split(".")[0] != HARNESS:
                what = f"{p.package}.{module}" if module else p.package
                yield src.path, line, f"{src.module} imports {what}: the harness imports only itself"


@rule
def module_defines_forward(p: Project) -> Found:
    """A.12: every direct nn.Module subclass defines forward (a method, or a name assigned in the class body)."""
    for src in p.sources:
        for cls in classes(src.tree):
            assigned = {key(t) for n in cls.body if isinstance(n, ast.Assign) for t in n.targets}
            defined = "forward" in assigned or any(methods(cls, "forward"))
            if not defined and any(src.resolve(b) == "torch.nn.Module" for b in cls.bases):
                yield src.path, cls.lineno, f"class {cls.name}(nn.Module) has no forward method"


@rule
def no_call_override(p: Project) -> Found:
    """A.12, A.13: no nn.Module overrides __call__: hooks and tracing run in nn.Module.__call__."""
    for src in p.sources:
        for cls in (c for c in classes(src.tree) if p.is_module(src, c)):
            for method in methods(cls, "__call__"):
                yield src.path, method.lineno, f"{cls.name} overrides __call__; compute in forward instead"


@rule
def call_modules_not_forward(p: Project) -> Found:
    """A.13, A.44: call a module, model(x), never model.forward(x) (it skips hooks); super().forward() is fine."""
    for src in p.sources:
        for call in calls_of(src.tree, "forward"):
            target = call.func.value
            if not (isinstance(target, ast.Call) and key(target.func) == "super"):
                yield src.path, call.lineno, f"{short(call)} skips hooks; call {short(target)}(...) instead"


@rule
def no_numpy_in_forward(p: Project) -> Found:
    """A.38: forward methods of layers, networks, losses and the model use torch, not NumPy."""
    for src in p.package_files(*MODEL_PARTS, p.model_module):
        numpy = {name for name, target in src.names.items() if target.split(".")[0] == "numpy"}
        for cls in classes(src.tree):
            for forward in methods(cls, "forward"):
                for node in ast.walk(forward):
                    if isinstance(node, ast.Name) and node.id in numpy:
                        yield src.path, node.lineno, f"{cls.name}.forward uses NumPy ({node.id}); use torch"
                for call in calls_of(forward, "numpy"):
                    yield src.path, call.lineno, f"{cls.name}.forward calls .numpy(); stay in torch"


@rule
def losses_are_modules(p: Project) -> Found:
    """A.11, A.17: every class in losses.py is an nn.Module."""
    for src in p.package_files("losses"):
        for cls in (c for c in classes(src.tree) if not p.is_module(src, c)):
            yield src.path, cls.lineno, f"class {cls.name} is not an nn.Module subclass"


@rule
def ops_are_functions(p: Project) -> Found:
    """A.7: ops.py holds pure tensor functions: no nn.Module, no global state."""
    for src in p.package_files("ops"):
        for node in ast.walk(src.tree):
            if isinstance(node, ast.ClassDef) and p.is_module(src, node):
                yield src.path, node.lineno, f"class {node.name} is an nn.Module; modules go in layers.py"
            elif isinstance(node, ast.Global):
                yield src.path, node.lineno, f"global {', '.join(node.names)}: ops keep no state"


@rule
def no_plain_list_of_modules(p: Project) -> Found:
    """B.T3: modules kept on self go in nn.Sequential or nn.ModuleList, never a plain list (they would not register)."""
    unseen = "unseen by .to(), parameters() and state_dict(); use nn.ModuleList"
    for src in p.sources:
        for cls in (c for c in classes(src.tree) if p.is_module(src, c)):
            filled = ModuleContainers(cls, src, p.module_class_names)
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


@rule
def no_variable(p: Project) -> Found:
    """A.54: no torch.autograd.Variable (gone since PyTorch 0.4): tensors carry autograd themselves."""
    for src in p.sources:
        for node in ast.walk(src.tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.autograd"):
                if any(alias.name == "Variable" for alias in node.names):
                    yield src.path, node.lineno, "imports Variable; use plain tensors"
            elif isinstance(node, ast.Attribute) and src.resolve(node).startswith("torch.autograd.V"):
                yield src.path, node.lineno, f"{short(node)}; use plain tensors"


@rule
def no_dot_data(p: Project) -> Found:
    """A.43: no tensor `.data`: use .detach(), .item(), or torch.no_grad() for in-place updates."""
    for src in p.sources:
        # self.data of a Dataset or any other class that is not a module is its own attribute.
        own = {
            id(n) for c in classes(src.tree) if not p.is_module(src, c) for n in ast.walk(c) if key(n) == "self.data"
        }
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Attribute) and node.attr == "data" and id(node) not in own:
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if not (isinstance(root, ast.Name) and root.id in src.names):  # torch.utils.data is a module
                    yield src.path, node.lineno, f"{short(node)}; use .detach() or torch.no_grad()"


@rule
def no_cuda_call(p: Project) -> Found:
    """B.T1, D.27: no .cuda(); choose the device once, then .to(device) and device= on factories."""
    for src in p.sources:
        for call in calls_of(src.tree, "cuda"):
            yield src.path, call.lineno, f"{short(call)}; use .to(device)"


@rule
def torch_load_weights_only(p: Project) -> Found:
    """D.4: torch.load always with weights_only=True: unpickling arbitrary objects can run code."""
    for src in p.sources:
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Call) and src.resolve(node.func) == "torch.load":
                flag = next((k.value for k in node.keywords if k.arg == "weights_only"), None)
                if not (isinstance(flag, ast.Constant) and flag.value is True):
                    yield src.path, node.lineno, f"{short(node)}; pass weights_only=True"


@rule
def loaders_live_in_data(p: Project) -> Found:
    """A.39: the scripts build no DataLoader themselves; the dataset module does."""
    for src in p.scripts():
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Call) and src.resolve(node.func).endswith("DataLoader"):
                yield src.path, node.lineno, f"{short(node)}; build loaders in data.py"


@rule
def no_import_time_work(p: Project) -> Found:
    """A.20, A.21: importing a script does nothing: no seeds, backend flags, files or training at the top level."""
    for src in p.scripts():
        for stmt in (s for s in src.tree.body if not is_inert(s, src)):
            yield src.path, stmt.lineno, f"runs at import: {short(stmt)}; move it into main()"


@rule
def main_guard(p: Project) -> Found:
    """A.21: a script starts its work under `if __name__ == "__main__":`."""
    for src in p.scripts():
        if not any(is_main_guard(stmt) for stmt in src.tree.body):
            yield src.path, 1, 'no `if __name__ == "__main__":` guard calling main()'
