"""The pytorch-styleguide rules that a machine can check, read from the code with ast (nothing is imported).

RULES[name](Project(root, package, model_module)) yields each violation of a rule as (file, line, what); rule
numbers (A.7, B.T3, ...) refer to the style guide checklist the template was built from.
"""

import ast
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

MODEL_PARTS = ("layers", "networks", "losses", "ops")
# What the scripts may import besides the model file: the dataset module, the task's own code, and
# the harness subpackage. Add your own such module here; never a model part.
INFRASTRUCTURE = ("data", "transforms", "figures", "pretrained", "evaluation", "task", "degradations", "harness")
HARNESS = "harness"  # the subpackage that trains, checkpoints and scales the model: it imports nothing above it
# Imports point one way: ops -> layers -> networks -> the model file; losses -> the model file. A module of your
# own for the model (attention.py, say): give it an entry of what it may import, and name it in its importers'.
MAY_IMPORT = {"ops": (), "layers": ("ops",), "networks": ("layers", "ops"), "losses": ("layers", "networks", "ops")}
# Calls that only build a constant, allowed at the top level of a script.
INERT_CALLS = {"frozenset", "set", "tuple", "list", "dict", "range", "sorted", "pathlib.Path", "logging.getLogger"}
INERT_CALLS |= {"re.compile", "collections.namedtuple", "typing.TypeVar", "os.path.dirname", "os.path.abspath"}
INERT_CALLS |= {"os.environ.get", "os.getenv"}
PURE_METHODS = {"resolve", "absolute", "expanduser", "joinpath", "with_name", "with_suffix"}  # Path(__file__).resolve()
# Expressions that build a plain container: modules in them are not registered on the module that keeps them.
CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.BinOp, ast.Starred)  # [conv, *blocks], blocks + [head]
CONTAINERS += (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)  # tuple(Block() for ...) too
SCRIPTS = None  # the module of a top-level script: p.files(SCRIPTS) are train.py, test.py, ...

Found = Iterator[tuple[str, int, str]]  # (file, line, what) for each violation


def nodes(tree: ast.AST, *kinds: type) -> Iterator:
    return (node for node in ast.walk(tree) if isinstance(node, kinds))


def targets(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def methods(cls: ast.ClassDef, name: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name]


def key(node: ast.AST) -> str:
    """The text of a Name ("blocks") or of an attribute of self ("self.blocks"); "" for anything else."""
    of_self = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    return ast.unparse(node) if isinstance(node, ast.Name) or of_self else ""


def short(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())  # not textwrap.shorten: it drops a first word of over 60 characters
    return text if len(text) <= 60 else f"{text[:57]}..."


class Source:
    """A parsed file; `module` is its dotted name in the package ("harness.runs", "" for __init__), None in a script."""

    def __init__(self, root: Path, path: Path) -> None:
        self.path = path.relative_to(root).as_posix()
        parts = self.path.removesuffix(".py").removesuffix("/__init__").split("/")
        self.module = ".".join(parts[1:]) if "/" in self.path else SCRIPTS
        self.top = self.module and self.module.split(".")[0]  # "harness" for harness.runs
        self.tree = ast.parse(path.read_bytes(), filename=self.path)  # bytes: a byte-order mark, a coding line
        self.names = {}  # local name -> what it was imported as: {"np": "numpy", "F": "torch.nn.functional"}
        self.imported = []  # (dotted name, line) of each import, relative ones made absolute
        here = self.path.split("/")[:-1]  # the file's own package: `from . import x` is here.x
        for node in nodes(self.tree, ast.Import, ast.ImportFrom):
            for alias in node.names:
                if isinstance(node, ast.Import):
                    name, local = alias.name, alias.asname or alias.name.split(".")[0]
                    self.names[local] = name if alias.asname else local
                else:
                    up = here[: len(here) + 1 - node.level] if node.level else []  # `..` is one package up
                    name = ".".join(filter(None, [*up, node.module, alias.name]))
                    self.names[alias.asname or alias.name] = name
                self.imported.append((name, node.lineno))

    def resolve(self, node: ast.AST) -> str:
        """The dotted name `a.b.c` with `a` replaced by what it was imported as: nn.Conv2d is torch.nn.Conv2d."""
        head, dot, rest = ast.unparse(node).partition(".")
        return self.names.get(head, head) + dot + rest


class Project:
    """The package and the top-level scripts of a project, parsed."""

    def __init__(self, root: Path, package: str, model_module: str) -> None:
        self.package, self.model_module = package, model_module
        paths = sorted((root / package).rglob("*.py")) + sorted(root.glob("*.py"))
        # Not an editor's lock file (.#layers.py, a dangling link) nor what lies in a hidden folder.
        paths = [p for p in paths if p.is_file() and not any(s.startswith(".") for s in p.relative_to(root).parts)]
        self.sources = [Source(root, path) for path in paths]
        self.modules = {s.module for s in self.sources} - {SCRIPTS}
        self.module_classes: set[str] = set()  # the project's nn.Module subclasses: "pkg.layers.Block", "train.Net"
        classes = list(self.walk(ast.ClassDef))
        for _ in classes:  # a class may derive from a module class defined below it or in another file
            self.module_classes |= {self.qualified(s, c.name) for s, c in classes if self.defines_module(s, c)}
        # Functions and methods that build a module ("pkg.layers.make_block"): a call of one makes a module too.
        self.builders: set[str] = set()  # empty while the set is made: builders of module classes alone
        self.builders = {self.qualified(s, f.name) for s, f in self.walk(ast.FunctionDef) if self.builds_module(s, f)}

    def files(self, *tops: str | None) -> list[Source]:
        """All the files, or those of the named top-level modules (SCRIPTS for the scripts)."""
        return [s for s in self.sources if not tops or s.top in tops]

    def walk(self, *kinds: type, tops: Iterable[str | None] = ()) -> Iterator[tuple[Source, ast.AST]]:
        return ((src, node) for src in self.files(*tops) for node in nodes(src.tree, *kinds))

    def method_calls(self, method: str) -> Iterator[tuple[Source, ast.Call]]:
        """(file, call) for every call of the form `x.method(...)`."""
        return ((src, call) for src, call in self.walk(ast.Call) if getattr(call.func, "attr", "") == method)

    def qualified(self, src: Source, name: str) -> str:
        """A class name as resolved in `src` (src.resolve), made whole: Block defined there is pkg.layers.Block."""
        where = [self.package, src.module] if src.module is not SCRIPTS else [Path(src.path).stem]
        return name if "." in name else ".".join(filter(None, [*where, name]))

    def is_module(self, name: str, src: Source) -> bool:
        """Whether a class name resolved in `src` is an nn.Module: torch.nn's, or a project subclass of one."""
        of_nn = name.startswith("torch.nn.") and name.count(".") == 2 and name[9:10].isupper()
        return of_nn or name.startswith("torch.nn.modules.") or self.qualified(src, name) in self.module_classes

    def makes_module(self, src: Source, node: ast.AST) -> bool:
        """Whether an expression is a call of a module class or of a function that builds a module."""
        called = src.resolve(node.func) if isinstance(node, ast.Call) else ""
        return bool(called) and (
            self.is_module(called, src) or self.qualified(src, called.removeprefix("self.")) in self.builders
        )

    def builds_module(self, src: Source, func: ast.FunctionDef) -> bool:
        """Whether a function returns a module: its return annotation names one, or each `return` makes one."""
        if func.returns is not None:
            return self.is_module(src.resolve(func.returns), src)
        returned = [node.value for node in nodes(func, ast.Return)]
        return bool(returned) and all(self.makes_module(src, value) for value in returned)

    def defines_module(self, src: Source, cls: ast.ClassDef) -> bool:
        """Whether the class is an nn.Module subclass (one of another file named alike is another class)."""
        return any(self.is_module(src.resolve(base), src) for base in cls.bases)

    def imports(self, *tops: str | None) -> Iterator[tuple[Source, str, int]]:
        """(file, module inside the package, line) for each import of project code; "" is the package itself."""
        for src in self.files(*tops):
            for name, line in src.imported:
                head, _, module = name.partition(".")
                if head == self.package:  # `from pkg import data` imports a module, `from pkg.data import X` a name
                    yield src, (module if module in self.modules else module.rpartition(".")[0]), line


class Contents:
    """What one class keeps where: the names ("conv", "blocks", "self.blocks") bound to one module or to a plain
    container with modules in it."""

    def __init__(self, p: Project, src: Source, cls: ast.ClassDef) -> None:
        self.p, self.src = p, src
        self.kinds: dict[str, str] = {}  # name -> "module" or "plain"; "" gathers what has no name (x.y[0] = conv)
        # A local name is its method's own ("forward:layers"): `layers` may hold ints in one method, blocks in another.
        self.scope = {id(n): f.name for f in nodes(cls, ast.FunctionDef, ast.AsyncFunctionDef) for n in ast.walk(f)}
        for _ in range(2):  # twice: a list may be filled below the line that stores it
            for node in nodes(cls, ast.Call, ast.Assign, ast.AnnAssign, ast.AugAssign):
                if isinstance(node, ast.Call):  # blocks.append(conv), blocks.insert(0, conv), blocks.extend([...])
                    added = getattr(node.func, "attr", "")
                    if added in ("append", "insert", "extend") and node.args and self.kind(node.args[-1]):
                        self.kinds.setdefault(self.key(node.func.value), "plain")  # an nn.ModuleList stays one
                    continue
                found = self.kind(node.value)
                for target in targets(node):
                    if isinstance(target, ast.Subscript) and found:  # self.heads["a"] = nn.Linear(2, 2)
                        self.kinds[self.key(target.value)] = "plain"
                    elif found == "plain" or (found and isinstance(target, ast.Name)):
                        self.kinds[self.key(target)] = found

    def key(self, node: ast.AST) -> str:
        """key(node), a local name prefixed with its method's: "self.blocks", "__init__:blocks"."""
        name = key(node)
        return name if name.startswith("self.") or not name else f"{self.scope.get(id(node), '')}:{name}"

    def kind(self, node: ast.expr | None) -> str:
        """What the expression is: "module" (a call of a module class, or a local bound to one), "plain" (a plain
        list, tuple, set or dict with modules in it) or ""."""
        if self.p.makes_module(self.src, node):
            return "module"
        if isinstance(node, ast.Call) and self.src.resolve(node.func) == "copy.deepcopy" and node.args:
            return self.kind(node.args[0])  # a copy of a module is one
        if isinstance(node, ast.Call) and key(node.func) == "map" and node.args:  # map(Block, widths): Block(...)s
            return "plain" if self.kind(ast.Call(node.args[0], [], [])) else ""
        if key(node):
            return self.kinds.get(self.key(node), "")
        plain = isinstance(node, ast.Call) and key(node.func) in ("list", "tuple", "dict")  # list(blocks)
        parts = node.args if plain else ast.iter_child_nodes(node) if isinstance(node, CONTAINERS) else []
        return "plain" if any(self.kind(part) for part in parts) else ""  # [conv, *blocks], blocks + [head]


def is_main_guard(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and ast.unparse(stmt.test) in ("__name__ == '__main__'", "'__main__' == __name__")


def inert(call: ast.Call, src: Source) -> bool:
    """Whether a call only builds a constant: one of INERT_CALLS, or one of PURE_METHODS on what such a call built."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and func.attr in PURE_METHODS:
        return inert(func.value, src)
    return src.resolve(func) in INERT_CALLS


def runs_at_import(stmt: ast.stmt, src: Source) -> bool:
    """Whether a top-level statement does work: a call beyond INERT_CALLS (and PURE_METHODS of what one built), or
    a store into an attribute or item."""
    defined = nodes(stmt, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)  # run when called
    bodies = {id(n) for d in defined for n in ast.walk(d)}
    return not is_main_guard(stmt) and any(
        (isinstance(n, ast.Call) and not inert(n, src))
        or (isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store))
        for n in ast.walk(stmt)
        if id(n) not in bodies
    )


class Rules(Project):
    """One method per rule, named after it: model_files_exist checks "model-files-exist"."""

    def model_files_exist(self) -> Found:
        """A.7, A.8: layers.py, networks.py, losses.py, ops.py and the file named after the model exist."""
        for name in (*MODEL_PARTS, self.model_module):
            if name not in self.modules:
                what = " (a renamed model file: name it in tests/test_style.py)" * (name == self.model_module)
                yield f"{self.package}/{name}.py", 0, f"file is missing: each kind of model code has its own file{what}"

    def scripts_import_only_the_model_file(self) -> Found:
        """A.9: scripts take project code from the model file, the dataset module and INFRASTRUCTURE only."""
        for src, module, line in self.imports(SCRIPTS):
            if module.split(".")[0] not in ("", self.model_module, *INFRASTRUCTURE):
                what = f"scripts take {self.model_module} and INFRASTRUCTURE"
                yield src.path, line, f"imports {self.package}.{module}; {what}"

    def imports_point_one_way(self) -> Found:
        """Imports point one way: ops -> layers -> networks -> model file; losses -> model file; none a script."""
        order = {**MAY_IMPORT, self.model_module: tuple(MAY_IMPORT)}  # the model file: any of them
        for src, module, line in self.imports(*order):
            top, allowed = module.split(".")[0], order[src.top]
            if top and top != src.top and top not in allowed:  # a model part split into files imports its own
                may = ", ".join(allowed) or "no module of the package"
                yield src.path, line, f"{src.module} imports {top}; MAY_IMPORT lets it import {may}"
        scripts = {Path(s.path).stem for s in self.files(SCRIPTS)}
        for src in self.files():
            for name, line in src.imported:
                if (script := name.split(".")[0]) in scripts:
                    yield src.path, line, f"imports the script {script}.py; move shared code into the package"

    def harness_imports_only_the_harness(self) -> Found:
        """The harness serves the project's own code and never reaches into it: its imports stay inside it."""
        for src, module, line in self.imports(HARNESS):
            if module.split(".")[0] != HARNESS:
                what = f"{self.package}.{module}".rstrip(".")
                yield src.path, line, f"{src.module} imports {what}: the harness imports only itself"

    def module_defines_forward(self) -> Found:
        """A.12: every direct nn.Module subclass defines forward (a method, or a name assigned in the class body)."""
        for src, cls in self.walk(ast.ClassDef):
            assigned = {key(t) for n in cls.body if isinstance(n, ast.Assign) for t in n.targets}
            direct = any(src.resolve(base) == "torch.nn.Module" for base in cls.bases)
            if direct and "forward" not in assigned and not methods(cls, "forward"):
                yield src.path, cls.lineno, f"class {cls.name}(nn.Module) has no forward method"

    def no_call_override(self) -> Found:
        """A.12, A.13: no nn.Module overrides __call__: hooks and tracing run in nn.Module.__call__."""
        for src, cls in self.walk(ast.ClassDef):
            for method in methods(cls, "__call__") if self.defines_module(src, cls) else []:
                yield src.path, method.lineno, f"{cls.name} overrides __call__; compute in forward instead"

    def call_modules_not_forward(self) -> Found:
        """A.13, A.44: call a module, model(x), never model.forward(x) (it skips hooks); a base class's is fine:
        super().forward(x), nn.Sequential.forward(self, x)."""
        for src, call in self.method_calls("forward"):
            target = call.func.value
            of_base = bool(call.args) and key(call.args[0]) == "self"  # nn.Sequential.forward(self, x) in a subclass
            if not (isinstance(target, ast.Call) and key(target.func) == "super") and not of_base:
                yield src.path, call.lineno, f"{short(call)} skips hooks; call {short(target)}(...) instead"

    def no_numpy_in_forward(self) -> Found:
        """A.38: forward methods of layers, networks, losses and the model use torch, not NumPy."""
        for src, cls in self.walk(ast.ClassDef, tops=(*MODEL_PARTS, self.model_module)):
            for node in (n for forward in methods(cls, "forward") for n in nodes(forward, ast.Name, ast.Attribute)):
                if (src.resolve(node).split(".")[0] if isinstance(node, ast.Name) else node.attr) == "numpy":
                    yield src.path, node.lineno, f"{cls.name}.forward uses NumPy ({short(node)}); stay in torch"

    def losses_are_modules(self) -> Found:
        """A.11, A.17: every loss in losses.py (a class that computes: forward or __call__) is an nn.Module."""
        for src, cls in self.walk(ast.ClassDef, tops=["losses"]):
            computes = methods(cls, "forward") or methods(cls, "__call__")  # not a dataclass of weights, say
            if computes and not self.defines_module(src, cls):
                yield src.path, cls.lineno, f"class {cls.name} is not an nn.Module subclass"

    def ops_are_functions(self) -> Found:
        """A.7: ops.py holds pure tensor functions: no nn.Module, no global state."""
        for src, node in self.walk(ast.ClassDef, ast.Global, tops=["ops"]):
            if isinstance(node, ast.Global):
                yield src.path, node.lineno, f"global {', '.join(node.names)}: ops keep no state"
            elif self.defines_module(src, node):
                yield src.path, node.lineno, f"class {node.name} is an nn.Module; modules go in layers.py"

    def no_plain_list_of_modules(self) -> Found:
        """B.T3: modules kept on self go in nn.Sequential or nn.ModuleList, never a plain list (unregistered)."""
        for src, cls in self.walk(ast.ClassDef):
            if not self.defines_module(src, cls):
                continue
            contents = Contents(self, src, cls)
            stores = [(n, key(t)) for n in nodes(cls, ast.Assign, ast.AnnAssign) for t in targets(n) if n.value]
            stores = [(node, name) for node, name in stores if name.startswith("self.")]
            # An attribute that ends up as nn.ModuleList(...) or nn.Sequential(...) is registered.
            registered = {name for node, name in stores if contents.kind(node.value) == "module"}
            for node, name in stores:
                if name not in registered and "plain" in (contents.kinds.get(name), contents.kind(node.value)):
                    what = "unseen by .to(), parameters() and state_dict(); use nn.ModuleList or nn.ModuleDict"
                    yield src.path, node.lineno, f"{name} holds modules in a plain container, {what}"

    def no_variable(self) -> Found:
        """A.54: no torch.autograd.Variable (gone since PyTorch 0.4): tensors carry autograd themselves."""
        for src, node in self.walk(ast.ImportFrom, ast.Attribute):
            names = [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
            if any(n.startswith("torch.autograd") and n.endswith(".Variable") for n in [*names, src.resolve(node)]):
                yield src.path, node.lineno, f"{short(node)}: Variable is a plain tensor since PyTorch 0.4"

    def no_dot_data(self) -> Found:
        """A.43: no tensor `.data` (self.data is the object's own, args.data a flag): use .detach() or no_grad()."""
        for src, node in self.walk(ast.Attribute):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            imported = isinstance(root, ast.Name) and root.id in src.names  # torch.utils.data is a module
            flags = isinstance(node.value, ast.Name) and node.value.id in ("args", "opts", "cfg", "config", "hparams")
            owner = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
            dataset = owner == "dataset" or owner.endswith(("_dataset", "_set"))  # torchvision's MNIST.data, ...
            if node.attr == "data" and key(node) != "self.data" and not (imported or flags or dataset):
                yield src.path, node.lineno, f"{short(node)}; use .detach() or torch.no_grad()"

    def no_cuda_call(self) -> Found:
        """B.T1, D.27: no .cuda(), nor "cuda" written into .to(), torch.device() or device= outside the harness;
        the harness chooses the device once, then .to(device) and device= on factories."""
        for src, call in self.method_calls("cuda"):
            yield src.path, call.lineno, f"{short(call)}; use .to(device)"
        for src, call in self.walk(ast.Call):
            to_device = getattr(call.func, "attr", "") == "to" or src.resolve(call.func) == "torch.device"
            given = [*(call.args if to_device else []), *(k.value for k in call.keywords if k.arg == "device")]
            named = [n.value for a in given for n in ast.walk(a) if isinstance(n, ast.Constant)]  # f"cuda:{rank}" too
            if src.top != HARNESS and any(str(value)[:4] == "cuda" for value in named):
                yield src.path, call.lineno, f"{short(call)} names the GPU; pass the device the harness chose"

    def torch_load_weights_only(self) -> Found:
        """D.4: torch.load always with weights_only=True: unpickling arbitrary objects can run code. So is torch.hub's
        loader of a URL's state dict, whose default is False."""
        loads = {"torch.load", "torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url"}
        for src, call in self.walk(ast.Call):
            flag = next((k.value for k in call.keywords if k.arg == "weights_only"), None)
            if src.resolve(call.func) in loads and not (isinstance(flag, ast.Constant) and flag.value is True):
                yield src.path, call.lineno, f"{short(call)}; pass weights_only=True"

    def loaders_live_in_data(self) -> Found:
        """A.39: the scripts build no DataLoader themselves; the package does (task.build_loaders)."""
        for src, call in self.walk(ast.Call, tops=[SCRIPTS]):
            if src.resolve(call.func).endswith("DataLoader"):
                yield src.path, call.lineno, f"{short(call)}; build loaders in the package, as task.build_loaders does"

    def no_import_time_work(self) -> Found:
        """A.20, A.21: importing a script does nothing: no seeds, backend flags, files or training at the top level."""
        for src in self.files(SCRIPTS):
            for stmt in (s for s in src.tree.body if runs_at_import(s, src)):
                yield src.path, stmt.lineno, f"runs at import: {short(stmt)}; move it into main()"

    def main_guard(self) -> Found:
        """A.21: a script starts its work under `if __name__ == "__main__":`."""
        for src in self.files(SCRIPTS):
            if not any(is_main_guard(stmt) for stmt in src.tree.body):
                yield src.path, 1, 'no `if __name__ == "__main__":` guard calling main()'


RULES: dict[str, Callable[[Project], Found]] = {n.replace("_", "-"): f for n, f in vars(Rules).items() if n[0] != "_"}
