"""The package's shape: layers that import only downward, and no import cycle — lazy imports inside functions and
imports under ``if TYPE_CHECKING`` included (read with ``ast``, not by importing)."""
from __future__ import annotations

import ast
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


def imports_of(path: Path) -> set[str]:
    """Every memvault module ``path`` imports, wherever the import statement is."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path)
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == "__init__":
        package = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("memvault."):
                    found.add(alias.name[len("memvault."):])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join([*base, node.module] if node.module else base)
            elif node.module and node.module.startswith("memvault"):
                target = node.module[len("memvault"):].lstrip(".")
            else:
                continue
            if target:
                found.add(target)
            for alias in node.names:  # "from ..core import lifecycle" names a module
                candidate = f"{target}.{alias.name}" if target else alias.name
                if candidate in MODULES:
                    found.add(candidate)
    return {f for f in found if f in MODULES and f != name}


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


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
    g = graph()
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
