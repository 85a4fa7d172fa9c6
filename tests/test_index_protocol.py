"""One index seam: both index backends, a team's index and its fallback implement the one index interface
(memvault.index.protocol) with the same signatures, and nothing outside ``memvault.index`` asks an index for anything
else or asks which backend it holds (read from the code: every attribute of an index object, every ``hasattr``,
``isinstance`` and ``getattr`` on one)."""
from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

import memvault
from memvault.core.recall import Parts
from memvault.core.team import TeamIndex
from memvault.index import Index
from memvault.index.postgres import SharedIndex
from memvault.index.protocol import SearchIndex, VaultIndex

PACKAGE = Path(memvault.__file__).parent


def protocol_methods(protocol: type) -> dict[str, inspect.Signature]:
    names = {n for n in dir(protocol) if not n.startswith("_") and callable(getattr(protocol, n))}
    return {n: inspect.signature(getattr(protocol, n)) for n in names}


def protocol_members(protocol: type) -> set[str]:
    """Every method and attribute a protocol declares (its own and its bases')."""
    out: set[str] = set()
    for cls in protocol.__mro__:
        if cls.__module__ != "memvault.index.protocol":
            continue
        out |= {n for n in vars(cls) if not n.startswith("_")}
        out |= set(vars(cls).get("__annotations__", {}))
    return out


def compatible(got: inspect.Signature, expected: inspect.Signature) -> bool:
    """Every parameter of the protocol's method, with its name, kind and default, in the same order; anything more
    the implementation takes is optional (annotations are strings under postponed evaluation: not compared)."""
    want = [(p.name, p.kind, p.default) for p in expected.parameters.values()]
    have = [(p.name, p.kind, p.default) for p in got.parameters.values()]
    extra = [p for p in got.parameters.values() if p.name not in {w[0] for w in want}]
    return [h for h in have if h[0] in {w[0] for w in want}] == want and all(
        p.default is not inspect.Parameter.empty or p.kind is inspect.Parameter.VAR_KEYWORD for p in extra)


def check_implements(cls: type, protocol: type) -> list[str]:
    problems = []
    for name, expected in protocol_methods(protocol).items():
        if not hasattr(cls, name):
            problems.append(f"{cls.__name__} lacks {name}")
            continue
        got = inspect.signature(getattr(cls, name))
        if not compatible(got, expected):
            problems.append(f"{cls.__name__}.{name}{got} is not {protocol.__name__}.{name}{expected}")
    return problems


@pytest.mark.parametrize(("cls", "protocol"), [(Index, SearchIndex), (SharedIndex, SearchIndex),
                                               (TeamIndex, SearchIndex), (Index, VaultIndex),
                                               (TeamIndex, VaultIndex)],
                         ids=["sqlite-search", "postgres-search", "team-search", "sqlite-vault", "team-vault"])
def test_each_index_implements_the_protocol_with_its_signatures(cls, protocol):
    assert check_implements(cls, protocol) == []


def test_the_signature_check_fails_for_a_missing_or_different_method():
    class Short:
        def exists(self) -> bool:
            return True

        def search_keywords(self, query, limit):
            return []

    problems = check_implements(Short, SearchIndex)
    assert "Short lacks meta_get" in problems
    assert any(p.startswith("Short.search_keywords(") for p in problems)


def test_every_index_object_of_a_vault_is_recognised_as_the_protocol(tmp_path):
    from memvault import Vault

    vault = Vault.init(tmp_path / "v")
    assert isinstance(vault.index, VaultIndex) and isinstance(vault.index, SearchIndex)
    shared = SharedIndex("postgresql://nobody@127.0.0.1:1/x", "v")
    assert isinstance(shared, SearchIndex) and not isinstance(shared, VaultIndex)
    # a team host's index and the parts it is made of: its overlay and fallback (SQLite) and the shared index
    team = TeamIndex(overlay=Index(tmp_path / "o", vault.index.sources), fallback=Index(tmp_path / "f",
                     vault.index.sources), open_shared=lambda: shared, git=lambda: None, track_episodes=False)
    assert isinstance(team, VaultIndex)
    for part in (team.overlay, team.fallback, team.shared):
        assert isinstance(part, SearchIndex)


def test_recall_types_its_index_as_the_protocol():
    hints = inspect.get_annotations(Parts)
    assert hints["index"] == "VaultIndex"


# -- what callers outside memvault.index ask of an index, read from the code ----------------------------------------
#: Annotations that make a name an index object (the protocol's types; a concrete backend's own type is what a
#: caller holds when it built that backend itself, as a team's index does with its parts, and is not a seam).
PROTOCOL_TYPES = {"VaultIndex", "SearchIndex"}
#: Lower layers cannot hold an index (tests/test_layers.py): only these are read.
CALLER_LAYERS = ("core", "interfaces")


def _mentions_protocol(node: ast.AST | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return False
    return any(isinstance(n, ast.Name) and n.id in PROTOCOL_TYPES for n in ast.walk(node))


def _protocol_positions(node: ast.AST | None) -> set[int] | None:
    """For a return annotation: None when it is not about an index; {-1} when it is an index (or None); else the
    positions of the index in the tuples of ``list[tuple[...]]``."""
    if not _mentions_protocol(node):
        return None
    if isinstance(node, ast.Constant):
        node = ast.parse(node.value, mode="eval").body
    tuples = [n for n in ast.walk(node) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
              and n.value.id == "tuple" and isinstance(n.slice, ast.Tuple)]
    if not tuples:
        return {-1}
    return {i for i, elt in enumerate(tuples[0].slice.elts) if _mentions_protocol(elt)}


def _config_like(node: ast.AST) -> bool:
    """``config.index`` is the index's settings, not an index."""
    return (isinstance(node, ast.Name) and node.id in ("config", "cfg", "settings")) or \
        (isinstance(node, ast.Attribute) and node.attr in ("config", "settings"))


class _Reader(ast.NodeVisitor):
    """The attributes read on index objects in one module, and the branches on one (see the module doc)."""

    def __init__(self, returns: dict[str, set[int]]) -> None:
        self.returns = returns          # function name -> positions of the index in what it returns
        self.names: list[set[str]] = [set()]
        self.found: list[tuple[int, str]] = []     # (line, attribute)
        self.branches: list[tuple[int, str]] = []  # (line, what)

    def is_index(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "index" and not _config_like(node.value):
            return True
        return isinstance(node, ast.Name) and node.id in self.names[-1]

    def _returned(self, call: ast.AST) -> set[int] | None:
        if not isinstance(call, ast.Call):
            return None
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        return self.returns.get(name) if name else None

    def bind(self, target: ast.AST, value: ast.AST, *, element: bool = False) -> None:
        """``target`` (of an assignment, or of a loop over ``value`` when ``element``) names an index when ``value``
        is one (or a call that returns one, or a list of tuples holding one)."""
        if not element and self.is_index(value) and isinstance(target, ast.Name):
            self.names[-1].add(target.id)
            return
        positions = self._returned(value)
        if positions is None:
            return
        if isinstance(target, ast.Name) and (-1 in positions):
            self.names[-1].add(target.id)
        elif isinstance(target, ast.Tuple) and element:
            for i, elt in enumerate(target.elts):
                if i in positions and isinstance(elt, ast.Name):
                    self.names[-1].add(elt.id)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.names.append(set(self.names[-1]))
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if _mentions_protocol(arg.annotation):
                self.names[-1].add(arg.arg)
        self.generic_visit(node)
        self.names.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        # a lambda handed an index by its caller (``lambda index: index.search_keywords``): its parameter named so
        self.names.append(set(self.names[-1]) | {a.arg for a in node.args.args if a.arg in ("index", "part")})
        self.generic_visit(node)
        self.names.pop()

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.bind(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if _mentions_protocol(node.annotation) and isinstance(node.target, ast.Name):
            self.names[-1].add(node.target.id)
        elif node.value is not None:
            self.bind(node.target, node.value)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self.bind(node.target, node.iter, element=True)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.bind(node.target, node.iter, element=True)
        self.generic_visit(node)

    def _visit_comp(self, node: ast.AST) -> None:
        # generators first: their targets are bound before the element that reads them
        for gen in node.generators:  # type: ignore[attr-defined]
            self.visit(gen)
        for field in ("elt", "key", "value"):
            if hasattr(node, field):
                self.visit(getattr(node, field))

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _visit_comp

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self.is_index(node.value):
            self.found.append((node.lineno, node.attr))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("hasattr", "isinstance", "getattr", "type") and node.args \
                and self.is_index(node.args[0]):
            attr = node.args[1] if len(node.args) > 1 else None
            if func.id == "getattr" and isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                self.found.append((node.lineno, attr.value))
            else:
                self.branches.append((node.lineno, f"{func.id}({ast.unparse(node.args[0])}, ...)"))
        self.generic_visit(node)


def index_reads(source: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(line, attribute) of every attribute read on an index object in ``source``, and (line, call) of every
    ``hasattr``/``isinstance``/``getattr`` (with a computed name)/``type`` of one.

    An index object is what an ``.index`` attribute holds (``self.index``, ``vault.index``, ``parts.index``, a
    candidate's ``c.index``; not ``config.index``, the settings), a name assigned from one, a parameter or variable
    annotated with a protocol type, and what a function annotated to return one (or a list of tuples holding one)
    gives."""
    tree = ast.parse(source)
    returns = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positions = _protocol_positions(node.returns)
            if positions is not None:
                returns[node.name] = positions
    reader = _Reader(returns)
    reader.visit(tree)
    return reader.found, reader.branches


def caller_modules() -> list[Path]:
    return sorted(p for layer in CALLER_LAYERS for p in (PACKAGE / layer).rglob("*.py")) + \
        sorted(PACKAGE.glob("*.py"))


def test_every_attribute_callers_read_on_an_index_is_in_the_protocol():
    declared = protocol_members(VaultIndex)
    undeclared, branches, seen = [], [], set()
    for path in caller_modules():
        found, branched = index_reads(path.read_text())
        rel = path.relative_to(PACKAGE.parent)
        seen |= {attr for _, attr in found}
        undeclared += [f"{rel}:{line}: .{attr}" for line, attr in found if attr not in declared]
        branches += [f"{rel}:{line}: {what}" for line, what in branched]
    assert undeclared == [], "read on an index but not declared in memvault/index/protocol.py"
    assert branches == [], "a branch on which backend an index is, outside memvault/index"
    # the reader does see the callers (a reader that finds nothing would pass the two checks above)
    assert {"search_keywords", "chunk_docs", "meta_get", "doc_vectors", "unknown_words", "search_feedback",
            "exists", "refresh", "changes", "scan"} <= seen


def test_the_code_reader_finds_an_undeclared_attribute_and_a_backend_branch():
    source = textwrap.dedent('''
        from __future__ import annotations

        def listing(vault):
            return vault.index.connection().execute("SELECT 1")

        def calibrate(index: VaultIndex):
            return index.undeclared_store()

        def by_hand(parts):
            holder = parts.index
            if hasattr(holder, "meta_get"):
                return holder.meta_get("x")
            return isinstance(self.index, Index)

        class Team:
            def _parts(self) -> list[tuple[SearchIndex, int]]:
                return []

            def search(self):
                return [index.private_sql() for index, _sign in self._parts()]

        def settings(config):
            return config.index.url  # the settings, not an index: not read as one
    ''')
    found, branches = index_reads(source)
    declared = protocol_members(VaultIndex)
    assert [a for _, a in found if a not in declared] == ["connection", "undeclared_store", "private_sql"]
    assert [b for _, b in branches] == ["hasattr(holder, ...)", "isinstance(self.index, ...)"]
    assert "meta_get" in [a for _, a in found]
