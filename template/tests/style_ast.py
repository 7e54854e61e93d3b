"""Reading a project's code for the style rules in style_rules.py: parsed files, imports, classes, calls.

Everything works on the syntax tree (ast); no project module is imported.
"""

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Source:
    """A parsed file: `module` is its dotted name inside the package ("" for __init__), None for a script."""

    path: str  # relative to the project root, with forward slashes
    module: str | None
    tree: ast.Module
    names: dict[str, str]  # local name -> what it was imported as: {"np": "numpy", "nn": "torch.nn"}


class Project:
    """The package and the top-level scripts of a project, parsed."""

    def __init__(self, root: Path, package: str, model_module: str) -> None:
        self.package, self.model_module = package, model_module
        self.sources: list[Source] = []
        for path in sorted((root / package).rglob("*.py")) + sorted(root.glob("*.py")):
            rel = path.relative_to(root)
            module = None
            if rel.parts[0] == package and len(rel.parts) > 1:
                parts = [*rel.parts[1:-1], path.stem]
                module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
            self.sources.append(Source(rel.as_posix(), module, tree, import_names(tree)))
        self.modules = {s.module for s in self.sources if s.module is not None}
        self.module_classes = self._module_classes()  # file -> names of its nn.Module subclasses
        self.module_class_names = set().union(*self.module_classes.values())

    def package_files(self, *modules: str) -> Iterator[Source]:
        """The package's files, or those of the named modules."""
        return (s for s in self.sources if s.module is not None and (not modules or s.module in modules))

    def scripts(self) -> Iterator[Source]:
        """The top-level scripts: train.py, test.py and any other *.py next to them."""
        return (s for s in self.sources if s.module is None)

    def imports(self, src: Source) -> Iterator[tuple[str, int]]:
        """(module inside the package, line) for each import of project code; "" is the package itself."""
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    head, *rest = alias.name.split(".")
                    if head == self.package:
                        yield ".".join(rest), node.lineno
                continue
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level == 0:
                head, *base = (node.module or "").split(".")
                if head != self.package:
                    continue
            elif src.module is not None:  # relative: from the importing file's own package
                own = src.module.split(".") if src.module else []
                here = own if src.path.endswith("__init__.py") else own[:-1]
                base = here[: len(here) - node.level + 1] + (node.module.split(".") if node.module else [])
            else:
                continue
            for alias in node.names:
                candidate = ".".join([*base, alias.name])
                yield (candidate if candidate in self.modules else ".".join(base)), node.lineno

    def is_module_class(self, cls: ast.ClassDef, src: Source) -> bool:
        """True for a subclass of nn.Module: directly, through an nn class, or through a project module."""
        return cls.name in self.module_classes[src.path]

    def _module_classes(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {s.path: set() for s in self.sources}
        names: set[str] = set()
        changed = True
        while changed:  # a class may derive from a project module defined later or in another file
            changed = False
            for src in self.sources:
                for cls in classes(src.tree):
                    bases = [resolve(base, src.names) or "" for base in cls.bases]
                    if cls.name not in found[src.path] and any(is_nn(b) or b.split(".")[-1] in names for b in bases):
                        found[src.path].add(cls.name)
                        names.add(cls.name)
                        changed = True
        return found


def import_names(tree: ast.Module) -> dict[str, str]:
    """Local names bound by absolute imports: {"np": "numpy", "nn": "torch.nn", "F": "torch.nn.functional"}."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.split(".")[0]
                names[alias.asname or head] = alias.name if alias.asname else head
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def resolve(node: ast.expr, names: dict[str, str]) -> str | None:
    """The dotted name of `a.b.c` with `a` replaced by what it was imported as; None if not a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([names.get(node.id, node.id), *reversed(parts)])


def is_nn(name: str) -> bool:
    """Whether a resolved name is a class of torch.nn (nn.Module, nn.Conv2d, ...)."""
    return name.startswith("torch.nn.") and name.count(".") == 2 and name.split(".")[-1][:1].isupper()


def classes(tree: ast.AST) -> Iterator[ast.ClassDef]:
    """Every class defined in the tree, nested ones included."""
    return (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef))


def methods(cls: ast.ClassDef) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions defined directly in a class body."""
    return (node for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


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

    def __init__(self, cls: ast.ClassDef, project: Project, src: Source) -> None:
        super().__init__()
        self.known, self.names = project.module_class_names, src.names
        self.instances: set[str] = set()  # local names bound to one module: conv = nn.Conv2d(...)
        for _ in range(2):  # twice: a list may be filled below the line that stores it
            for node in ast.walk(cls):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    self._assigned(node)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and key(node.func.value):
                    args, added = node.args, node.func.attr
                    if (added in ("append", "insert") and args and self.is_module(args[-1])) or (
                        added == "extend" and args and self.holds(args[0])
                    ):
                        self.add(key(node.func.value))

    def _assigned(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> None:
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

    def is_module(self, node: ast.expr) -> bool:
        """Whether the expression is one module: a call of an nn or project module class, or a local bound to one."""
        if isinstance(node, ast.Name):
            return node.id in self.instances
        name = resolve(node.func, self.names) if isinstance(node, ast.Call) else None
        return bool(name) and (is_nn(name) or name.split(".")[-1] in self.known)

    def holds(self, node: ast.expr | None) -> bool:
        """Whether the expression builds a plain list, tuple, set or dict with modules in it."""
        if isinstance(node, ast.Starred):
            node = node.value
        if isinstance(node, (ast.Name, ast.Attribute)):
            return key(node) in self
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return any(self.is_module(e) or self.holds(e) for e in node.elts)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.is_module(node.elt) or self.holds(node.elt)
        if isinstance(node, ast.Dict):
            return any(v is not None and (self.is_module(v) or self.holds(v)) for v in node.values)
        if isinstance(node, ast.DictComp):
            return self.is_module(node.value)
        if isinstance(node, ast.BinOp):
            return self.holds(node.left) or self.holds(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple", "dict"):
            return any(self.holds(arg) for arg in node.args)
        return False


def is_main_guard(stmt: ast.stmt) -> bool:
    """Whether the statement is `if __name__ == "__main__":`."""
    return isinstance(stmt, ast.If) and ast.unparse(stmt.test) in ("__name__ == '__main__'", "'__main__' == __name__")


def is_inert(stmt: ast.stmt, names: dict[str, str], inert_calls: set[str]) -> bool:
    """Whether a top-level statement only defines things: imports, defs, constants, the main guard."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass)):
        return True
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, ast.Constant)  # the docstring
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        plain = all(isinstance(n, (ast.Name, ast.Tuple, ast.Store)) for t in targets for n in ast.walk(t))
        return plain and (stmt.value is None or only_calls(stmt.value, names, inert_calls))
    if isinstance(stmt, ast.If):
        if is_main_guard(stmt):
            return True
        inner, test_ok = stmt.body + stmt.orelse, only_calls(stmt.test, names, inert_calls)
    elif isinstance(stmt, ast.Try):  # e.g. an optional import
        inner, test_ok = stmt.body + [s for h in stmt.handlers for s in h.body] + stmt.orelse + stmt.finalbody, True
    else:
        return False
    return test_ok and all(is_inert(s, names, inert_calls) for s in inner)


def only_calls(node: ast.AST, names: dict[str, str], allowed: set[str]) -> bool:
    """Whether every call inside the expression is of one of the `allowed` (resolved) names."""
    return all(resolve(n.func, names) in allowed for n in ast.walk(node) if isinstance(n, ast.Call))
