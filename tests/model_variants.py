"""Other models than all-MiniLM-L6-v2, built here from its packaged weights (no network): tests show that what
recall reads from cosines follows the model, not a constant of one model."""
from __future__ import annotations

from pathlib import Path


def projected_minilm(dest: Path, dims: int = 256, shift: float = 1.0, seed: int = 17) -> Path:
    """all-MiniLM-L6-v2 followed by a fixed random projection to ``dims`` dimensions plus a constant ``shift``
    vector, normalised again: a 256-dimension model whose cosines sit much higher than MiniLM's (unrelated texts
    around 0.5, as bge-small's do), saved as a sentence-transformers directory."""
    import torch
    from sentence_transformers import SentenceTransformer, models

    from memvault.models.embeddings import resolve_model_path

    if (dest / "modules.json").is_file():
        return dest
    base = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2"), device="cpu")
    width = (getattr(base, "get_embedding_dimension", None) or base.get_sentence_embedding_dimension)()
    generator = torch.Generator().manual_seed(seed)
    dense = models.Dense(width, dims, bias=True, activation_function=torch.nn.Identity())
    with torch.no_grad():
        dense.linear.weight.copy_(torch.randn(dims, width, generator=generator) / width ** 0.5)
        bias = torch.randn(dims, generator=generator)
        dense.linear.bias.copy_(bias / bias.norm() * shift)
    modules = list(base)  # Transformer, Pooling, Normalize
    model = SentenceTransformer(modules=[*modules, dense, models.Normalize()], device="cpu")
    model.save(str(dest))
    return dest
