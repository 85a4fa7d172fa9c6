"""The package's shape: layers that import only downward, and no import cycle — lazy imports inside functions and
imports under ``if TYPE_CHECKING`` included (read with ``ast``, not by importing)."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "memvault"

#: Each module's layer; a module may import modules of its own layer (without a cycle) or of lower layers.
LAYERS: dict[int, set[str]] = {
    1: {"errors", "validation", "config", "timeutil", "fsutil", "markup", "trust", "secrets", "dedup",
        "frontmatter_edit", "migrations", "timeq", "freshness"},
    2: {"facts", "episodes", "procedures", "gitstore", "state", "checks"},
    3: {"index", "index.db", "index.documents", "index.search", "index.sync", "index.postgres", "embeddings", "engine",
        "daemon"},
    4: {"gate", "lifecycle", "hits", "recall", "render", "gitsync", "stats", "team", "vault"},
    5: {"cli", "mcp_server", "githooks", "watch", "demo", "__main__", "__init__"},
}
LAYER_OF = {module: layer for layer, modules in LAYERS.items() for module in modules}
STORES = LAYERS[2]


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
            for alias in node.names:  # "from . import lifecycle" names a module
                candidate = f"{target}.{alias.name}" if target else alias.name
                if candidate in LAYER_OF:
                    found.add(candidate)
    return {f for f in found if f in LAYER_OF and f != name}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def test_every_module_has_a_layer():
    assert set(graph()) == set(LAYER_OF), "add new modules to LAYERS (and to README's module map)"


def test_layers_import_only_downward():
    wrong = [f"{a} (layer {LAYER_OF[a]}) imports {b} (layer {LAYER_OF[b]})"
             for a, deps in graph().items() for b in deps if LAYER_OF[b] > LAYER_OF[a]]
    assert not wrong, "\n".join(wrong)


def test_stores_import_neither_the_vault_nor_the_index():
    g = graph()
    for store in STORES:
        assert not {d for d in g[store] if d == "vault" or d.startswith("index") or LAYER_OF[d] > 2}, store


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
    probe = PACKAGE / "facts.py"
    deps = imports_of(probe)
    assert "errors" in deps and "validation" in deps
    # a lazy import inside a function counts (facts.Fact.review_after imports timeutil there)
    assert "timeutil" in deps
