"""Structured pruning of the course encoder: remove whole units, get a smaller dense model.

Structured pruning returns a smaller dense ``EncoderClassifier`` built from its config (so it
can be saved and rebuilt), removing the same number of units in every layer:

* feed-forward neurons (rows of ``fc1``, columns of ``fc2``), ranked by
  ``||[W1_j, b1_j]|| * ||W2_:j||``: a smaller ``d_ff``;
* attention heads (their rows of ``qkv``, their columns of ``proj``), ranked the same way:
  fewer ``n_heads`` at the same ``head_dim``;
* whole layers (``keep_layers``): a shallower model, which is also how lesson 06 initialises a
  student from the teacher's layers (DistilBERT's recipe).
"""
from __future__ import annotations


import torch

from course_lib.core.model import EncoderClassifier, no_masks, rebuilt
from course_lib.pruning.masks import _check_amount, _check_choice, effective_weight

__all__ = ["ffn_importance", "prune_ffn_neurons", "head_importance", "prune_heads"]




def ffn_importance(model: EncoderClassifier, *, score: str = "magnitude",
                   seed: int = 0) -> list[torch.Tensor]:
    """One importance per feed-forward neuron and layer.

    ``magnitude``: ``||[W1_j, b1_j]||_2 * ||W2_:j||_2``, which is exactly zero when the neuron
    can never change the output (its input row and bias are zero, so GELU gives 0, or its
    output column is zero). ``random``: uniform scores from ``seed`` (the control).
    """
    _check_choice(score, "score", ("magnitude", "random"))
    gen = torch.Generator().manual_seed(seed)
    scores = []
    for block in model.blocks:
        fc1, fc2 = block.ff.fc1, block.ff.fc2
        w1, w2 = effective_weight(fc1), effective_weight(fc2)
        if score == "random":
            scores.append(torch.rand(w1.shape[0], generator=gen))
            continue
        rows = torch.cat([w1, fc1.bias.detach()[:, None]], dim=1).norm(dim=1)
        scores.append((rows * w2.norm(dim=0)).float().cpu())
    return scores


def _kept(scores: torch.Tensor, keep: int) -> torch.Tensor:
    return torch.topk(scores, keep, sorted=False).indices.sort().values


def _count_to_keep(amount: float, total: int, what: str) -> int:
    keep = total - round(_check_amount(amount) * total)
    if keep < 1:
        raise ValueError(f"amount must leave at least one {what}: amount={amount} of {total}")
    return keep


def prune_ffn_neurons(model: EncoderClassifier, *, amount: float, score: str = "magnitude",
                      seed: int = 0) -> EncoderClassifier:
    """A new, smaller dense ``EncoderClassifier`` without the least important FFN neurons.

    ``round(amount * d_ff)`` neurons are removed in *every* layer (the same count, so the result
    is ``EncoderClassifier(replace(cfg, d_ff=kept))``); the input model is left unchanged.
    """
    no_masks(model)
    keep = _count_to_keep(amount, model.cfg.d_ff, "neuron")
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for i, s in enumerate(ffn_importance(model, score=score, seed=seed)):
        p = f"blocks.{i}.ff."
        idx = _kept(s, keep).to(state[p + "fc1.weight"].device)
        state[p + "fc1.weight"] = state[p + "fc1.weight"][idx]
        state[p + "fc1.bias"] = state[p + "fc1.bias"][idx]
        state[p + "fc2.weight"] = state[p + "fc2.weight"][:, idx]
    return rebuilt(model, state, d_ff=keep)


def head_importance(model: EncoderClassifier) -> list[torch.Tensor]:
    """One importance per attention head and layer: the norm of the head's query, key and
    value rows of ``qkv`` (weights and biases) times the norm of its columns of ``proj``."""
    h, d = model.cfg.n_heads, model.cfg.head_size
    scores = []
    for block in model.blocks:
        qkv = torch.cat([effective_weight(block.attn.qkv),
                         block.attn.qkv.bias.detach()[:, None]], 1)
        rows = qkv.reshape(3, h, d, -1).permute(1, 0, 2, 3).reshape(h, -1).norm(dim=1)
        cols = effective_weight(block.attn.proj).reshape(-1, h, d).permute(1, 0, 2).reshape(h, -1)
        scores.append((rows * cols.norm(dim=1)).float().cpu())
    return scores


def prune_heads(model: EncoderClassifier, *, amount: float) -> EncoderClassifier:
    """A new model with ``round(amount * n_heads)`` fewer heads in every layer (the least
    important by ``head_importance``); each kept head keeps its width (``head_dim``)."""
    no_masks(model)
    h, d = model.cfg.n_heads, model.cfg.head_size
    keep = _count_to_keep(amount, h, "head")
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for i, s in enumerate(head_importance(model)):
        p = f"blocks.{i}.attn."
        heads = _kept(s, keep)
        cols = (heads[:, None] * d + torch.arange(d)).reshape(-1)          # one head's channels
        rows = torch.cat([part * h * d + cols for part in range(3)])       # in q, k and v
        for name, index, dim in (("qkv.weight", rows, 0), ("qkv.bias", rows, 0),
                                 ("proj.weight", cols, 1), ("slopes", heads, 0)):
            t = state[p + name]
            state[p + name] = t.index_select(dim, index.to(t.device))
    return rebuilt(model, state, n_heads=keep, head_dim=d)


