"""The package's shape: layers that import only downward, and no import cycle — lazy imports inside functions and
imports under ``if TYPE_CHECKING`` included (read with ``ast``, not by importing)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "memvault"

#: The layer of each sub-package: a module's layer is read from its path (memvault/<layer>/...). A module may
#: import modules of its own layer (without a cycle) or of lower layers. Modules at the package's top level are
#: entry points (``python -m memvault.githooks``, ``memvault.mcp_server``, ``memvault.demo``, ``__main__``) and the
#: package itself: they sit above everything.
LAYER_DIRS = {"rules": 1, "stores": 2, "models": 3, "index": 3, "core": 4, "interfaces": 5}
TOP = 6


def layer_of(module: str) -> int:
    if module == "__init__":
        return TOP
    head = module.split(".")[0]
    if "." not in module and head not in LAYER_DIRS:
        return TOP
    if head not in LAYER_DIRS:
        raise AssertionError(f"memvault/{head}/ is not a layer: add it to LAYER_DIRS (and README's layer table)")
    return LAYER_DIRS[head]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


#: The package itself (``memvault/__init__.py``, the facade): it sits at the top, above every layer.
FACADE = "__init__"
#: A string that names a module to import or run: ``memvault.x.y``, ``memvault.x.y:function``, or a command line
#: holding ``-m memvault.x.y``. Prose and SQL (``memvault.toml``, ``memvault.vaults``) name no module.
_MODULE_STRING = re.compile(r"memvault(?:\.\w+)+(?::\w+)?")
_DASH_M = re.compile(r"(?:^|\s)-m\s+(memvault(?:\.\w+)*)")
_DYNAMIC = ("import_module", "__import__")


def _absolute(name: str) -> str | None:
    """``memvault.a.b`` (or ``memvault``) as a module key (``a.b``; the facade for the package), None otherwise."""
    if name == "memvault":
        return FACADE
    if name.startswith("memvault."):
        parts = name[len("memvault."):].split(".")
        for end in range(len(parts), 0, -1):  # "memvault.core.vault.Vault" names the module core.vault
            if ".".join(parts[:end]) in MODULES:
                return ".".join(parts[:end])
    return None


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def imports_of(path: Path, name: str | None = None, *, runs: bool = True) -> set[str]:
    """Every memvault module ``path`` (as module ``name``, read from its path by default) imports or starts,
    wherever the statement is: import statements (``from memvault import X`` and ``from .. import X`` are the
    package facade), ``importlib.import_module``/``__import__`` calls, and strings that name a module to import or
    run (``"memvault.x.y"``, ``"memvault.x:f"``, ``"-m memvault.x"``). A dynamic import whose target is not a
    string constant cannot be checked and counts as the facade. ``runs=False``: import statements and calls only
    (what can form an import cycle; a command line naming a module starts another process)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = name or module_name(path)
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == FACADE:
        package = []
    docs = _docstrings(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (target := _absolute(alias.name)) is not None:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join([*base, node.module] if node.module else base)
            elif node.module and (node.module == "memvault" or node.module.startswith("memvault.")):
                target = node.module[len("memvault"):].lstrip(".")
            else:
                continue
            modules = []
            for alias in node.names:  # "from ..core import lifecycle" names a module
                candidate = f"{target}.{alias.name}" if target else alias.name
                if candidate in MODULES:
                    modules.append(candidate)
            found.update(modules)
            if target:
                found.add(target)
            elif len(modules) < len(node.names):  # "from memvault import Vault": a name of the facade
                found.add(FACADE)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in _DYNAMIC and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _absolute(arg.value):
                    found.add(_absolute(arg.value))  # type: ignore[arg-type]
                elif not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    found.add(FACADE)  # what it imports is decided at run time: anything, the top included
                elif arg.value.startswith("."):  # relative to a package= argument: resolved like "from . import"
                    found.add(FACADE)
        elif not runs:
            continue
        elif isinstance(node, (ast.List, ast.Tuple)):  # [sys.executable, "-m", "memvault", ...]
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for flag, module in zip(items, items[1:]):
                if flag == "-m" and isinstance(module, str) and (target := _absolute(module)) is not None:
                    found.add(_run(target))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value.strip()
            named = [text.partition(":")[0]] if _MODULE_STRING.fullmatch(text) else _DASH_M.findall(text)
            for module in named:
                if (target := _absolute(module)) is not None:
                    found.add(_run(target))
    return {f for f in found if (f in MODULES or f == FACADE) and f != name}


def _run(module: str) -> str:
    """What naming ``module`` as a command or a target starts: for an entry point at the package's top (a shim such as
    ``memvault.githooks``, or the package's ``__main__`` for ``-m memvault``), the one interface module it wraps."""
    if module == FACADE:
        module = "__main__"
    if "." in module or module in LAYER_DIRS:
        return module
    wrapped = {d for d in _statement_imports(PACKAGE / f"{module}.py")}
    return wrapped.pop() if len(wrapped) == 1 else module


def _statement_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            out.add(node.module)
    return {m for m in out if m in MODULES}


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}


def graph(*, runs: bool = True) -> dict[str, set[str]]:
    return {module_name(p): imports_of(p, runs=runs) for p in PACKAGE.rglob("*.py")}


def test_every_module_lives_in_a_layer_folder():
    loose = sorted(m for m in MODULES if "." not in m and layer_of(m) == TOP
                   and m not in {"__init__", "__main__", "githooks", "mcp_server", "demo"} and m not in LAYER_DIRS)
    assert not loose, f"modules outside the layer folders: {loose}"
    for module in MODULES:
        layer_of(module)  # raises for a folder that is not a layer


def test_layers_import_only_downward():
    wrong = [f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
             for a, deps in graph().items() for b in deps if layer_of(b) > layer_of(a)]
    assert not wrong, "\n".join(wrong)


def test_stores_import_neither_the_vault_nor_the_index():
    g = graph()
    for store in (m for m in MODULES if m.startswith("stores")):
        assert not {d for d in g[store] if layer_of(d) > 2}, store


def test_no_module_is_longer_than_800_lines():
    long = {str(p.relative_to(REPO_ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 800}
    assert not long, f"split these by noun: {long}"


def test_no_import_cycle():
    g = graph(runs=False)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(g[node]):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(g):
        if node not in state:
            cycle = visit(node)
            assert cycle is None, " -> ".join(cycle)


def test_the_checker_sees_lazy_and_type_checking_imports(tmp_path):
    probe = PACKAGE / "stores" / "facts.py"
    deps = imports_of(probe)
    assert "rules.errors" in deps and "rules.validation" in deps
    # a lazy import inside a function counts (facts.Fact.review_after imports timeutil there)
    assert "rules.timeutil" in deps


#: Modules that reach a higher layer in each way the checker must see; each file's first line names the module it
#: pretends to be.
BAD = REPO_ROOT / "tests" / "fixtures" / "layers_bad"


def test_the_checker_catches_every_way_up(tmp_path):
    cases = sorted(BAD.glob("*.py"))
    assert len(cases) >= 8
    for case in cases:
        pretend, _, expect = case.read_text().splitlines()[0].lstrip("# ").partition(" -> ")
        deps = imports_of(case, pretend)
        assert expect in deps, f"{case.name}: {sorted(deps)}"
        assert layer_of(expect) > layer_of(pretend), case.name


def test_prose_and_sql_that_mention_memvault_name_no_module(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""Started as python -m memvault.interfaces.warm (a docstring)."""\n'
                     'A = "memvault.toml"\nB = "SELECT name FROM memvault.models"\nC = "memvault.watch"\n')
    assert imports_of(probe, "rules.probe") == set()
