"""memvault.core.stats: sizes that can be trusted — no projection from a handful of rows, a rebuild's size
estimated within 20% of what it turns out to be, and projections that hold when the vault grows."""
from __future__ import annotations

import pytest

from memvault import Vault
from memvault.core import stats as stats_mod

DIMS = 384


@pytest.fixture
def big_models(models):
    models.dims["fake-big"] = DIMS  # vectors as large as MiniLM's, so the vector store has its real weight
    return models


def make_vault(tmp_path, models, n: int, name: str = "v") -> Vault:
    from fake_embedder import set_model

    v = Vault.init(tmp_path / name)
    set_model(v.root, "fake-big")
    for i in range(n):
        (v.root / "facts" / f"host{i}.md").write_text(
            f"Host web{i} serves the shop on port {8000 + i}; it restarts nightly at 0{i % 10}:15 UTC (job {i}).\n")
    return Vault.open(v.root, embedder_factory=models)


def test_a_small_vault_projects_nothing_and_says_why(tmp_path, big_models):
    v = make_vault(tmp_path, big_models, 25)
    v.reindex()
    data = v.stats()
    assert data["projected_bytes_at_100k_rows"] is None
    assert "too few rows (25)" in data["projection"]
    assert any("too few rows (25)" in line for line in data["summary"])
    assert not any("GiB" in line for line in data["summary"])  # the old projection said 6.6 GiB here


@pytest.mark.parametrize("n", [25, 1500])
@pytest.mark.parametrize("indexed_before", [False, True])
def test_a_rebuild_estimate_is_within_20_percent_of_the_real_size(tmp_path, big_models, n, indexed_before):
    v = make_vault(tmp_path, big_models, n)
    if indexed_before:
        v.reindex()
    estimate = v.estimate_reindex()["estimated_new_index_bytes"]
    v.reindex(full=True)
    real = v.index.stats()["file_bytes"]
    assert abs(estimate - real) <= 0.2 * real, (estimate, real)


def test_a_projection_from_a_thousand_rows_holds_at_four_thousand(tmp_path, big_models):
    small = make_vault(tmp_path, big_models, 1000, "small")
    small.reindex()
    projected = stats_mod.projected_bytes(small.index.stats(), 4000)
    large = make_vault(tmp_path, big_models, 4000, "large")
    large.reindex()
    real = large.index.stats()["used_bytes"]
    assert projected is not None and abs(projected - real) <= 0.2 * real, (projected, real)


def test_vector_storage_grows_by_whole_vec0_chunks():
    one_chunk = 1024 * 4 * DIMS
    assert stats_mod.vector_store_bytes(1, DIMS) == one_chunk
    assert stats_mod.vector_store_bytes(1024, DIMS) == one_chunk
    assert stats_mod.vector_store_bytes(1025, DIMS) == 2 * one_chunk


@pytest.mark.parametrize("value, floor, percent, shown", [
    (0.39, 0.388, False, "0.390 (floor 0.388)"),       # above: the old "0.39 (floor 0.388)" hid by how much
    (0.3879, 0.388, False, "0.3879 (floor 0.3880)"),   # below, though both round to 0.39
    (0.21, 0.388, False, "0.21 (floor 0.39)"),
    (0.449, 0.45, True, "44.9% (floor 45.0%)"),
    (0.5, 0.5, False, "0.50 (floor 0.50)"),
])
def test_a_figure_beside_its_floor_shows_which_side_it_is_on(value, floor, percent, shown):
    from memvault.core.hits import against

    assert against(value, floor, percent=percent) == shown
