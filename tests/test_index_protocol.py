"""Both index backends, and a team's index, implement the one index interface (memvault.index.protocol) with the
same signatures: callers (recall, the write gate, the Vault) never ask which one they hold."""
from __future__ import annotations

import inspect

import pytest

from memvault.core.recall import Parts
from memvault.core.team import TeamIndex
from memvault.index import Index
from memvault.index.postgres import SharedIndex
from memvault.index.protocol import SearchIndex, VaultIndex


def protocol_methods(protocol: type) -> dict[str, inspect.Signature]:
    names = {n for n in dir(protocol) if not n.startswith("_") and callable(getattr(protocol, n))}
    return {n: inspect.signature(getattr(protocol, n)) for n in names}


def compatible(got: inspect.Signature, expected: inspect.Signature) -> bool:
    """Every parameter of the protocol's method, with its name, kind and default, in the same order; anything more
    the implementation takes is optional (annotations are strings under postponed evaluation: not compared)."""
    want = [(p.name, p.kind, p.default) for p in expected.parameters.values()]
    have = [(p.name, p.kind, p.default) for p in got.parameters.values()]
    extra = [p for p in got.parameters.values() if p.name not in {w[0] for w in want}]
    return [h for h in have if h[0] in {w[0] for w in want}] == want and all(
        p.default is not inspect.Parameter.empty or p.kind is inspect.Parameter.VAR_KEYWORD for p in extra)


@pytest.mark.parametrize(("cls", "protocol"), [(Index, SearchIndex), (SharedIndex, SearchIndex),
                                               (Index, VaultIndex), (TeamIndex, VaultIndex)],
                         ids=["sqlite-search", "postgres-search", "sqlite-vault", "team-vault"])
def test_each_index_implements_the_protocol_with_its_signatures(cls, protocol):
    for name, expected in protocol_methods(protocol).items():
        assert hasattr(cls, name), f"{cls.__name__} lacks {name}"
        got = inspect.signature(getattr(cls, name))
        assert compatible(got, expected), f"{cls.__name__}.{name}{got} is not {protocol.__name__}.{name}{expected}"


def test_an_index_object_is_recognised_as_the_protocol(tmp_path):
    from memvault import Vault

    vault = Vault.init(tmp_path / "v")
    assert isinstance(vault.index, VaultIndex) and isinstance(vault.index, SearchIndex)
    assert isinstance(SharedIndex("postgresql://nobody@127.0.0.1:1/x", "v"), SearchIndex)
    assert not isinstance(SharedIndex("postgresql://nobody@127.0.0.1:1/x", "v"), VaultIndex)


def test_recall_types_its_index_as_the_protocol():
    hints = inspect.get_annotations(Parts)
    assert hints["index"] == "VaultIndex"
