"""Other models than all-MiniLM-L6-v2, built here from its packaged weights (no network): tests show that what
recall reads from cosines follows the model, not a constant of one model."""
from __future__ import annotations

from pathlib import Path


def projected_minilm(dest: Path, dims: int = 256, shift: float = 1.0, seed: int = 17) -> Path:
    """all-MiniLM-L6-v2 followed by a fixed random projection to ``dims`` dimensions plus a constant ``shift``
    vector, normalised again: a 256-dimension model whose cosines sit much higher than MiniLM's (unrelated texts
    around 0.5, as bge-small's do), saved as a sentence-transformers directory."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

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


def tiny_cross_encoder(dest: Path, seed: int = 5) -> Path:
    """A cross-encoder small enough to build in a test: a 2-layer, 32-wide BERT with one output label and
    all-MiniLM-L6-v2's tokenizer, its weights drawn from a fixed seed (its scores mean nothing; they are the same
    on every run), saved as a directory sentence-transformers' ``CrossEncoder`` loads."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from memvault.models.embeddings import resolve_model_path

    if (dest / "config.json").is_file():
        return dest
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, num_labels=1)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    with torch.no_grad():  # spread its scores over 0..1 (a random head barely moves a sigmoid off 0.5)
        model.classifier.weight.mul_(300.0)
    model.save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))
    return dest
