"""The decoder as a language model of the course's reviews: the token stream it reads, the
training (nanoGPT's recipe: random windows of the stream, AdamW, warm-up then cosine), its
perplexity per review, and the conversion of a multi-head model to fewer key/value heads.

* ``token_stream``: every review's word ids followed by ``EOS`` ("end of review", the id after
  the corpus vocabulary), one long 1-D tensor: the model learns where a review ends too.
* ``train_lm``: ``steps`` updates on windows of ``context + 1`` tokens drawn from the stream
  by a seeded generator (the same seed, the same windows, in the same order), run by the
  course's one loop (``core.train.train``).
* ``review_nll``: each review scored on its own, after an ``EOS`` (as the model saw a review
  start in training): the summed negative log-likelihood of its words and its ``EOS``, and how
  many tokens that is. Perplexity and its paired comparisons are computed from these sums.
* ``to_kv_heads``: grouped-query attention from a multi-head model (Ainslie et al., 2023): each
  group's key and value projections are averaged into one head; uptraining then repairs the
  loss this costs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from course_lib.core.data import ReviewDataset
from course_lib.core.train import TrainConfig, train
from course_lib.generate.decoder import DecoderConfig, DecoderLM
from course_lib.measure.verdicts import Ratio


def eos_id(dataset: ReviewDataset) -> int:
    """The "end of review" token: the first id after the corpus vocabulary."""
    return len(dataset.vocab)


def lm_vocab_size(dataset: ReviewDataset) -> int:
    """The corpus vocabulary plus ``EOS``."""
    return len(dataset.vocab) + 1


def token_stream(dataset: ReviewDataset) -> torch.Tensor:
    """Every review's ids followed by ``EOS``, in the dataset's order, as one 1-D tensor."""
    if len(dataset) == 0:
        raise ValueError("dataset holds no reviews: there is no text to model")
    eos = torch.tensor([eos_id(dataset)])
    return torch.cat([t for ids in dataset.ids for t in (ids, eos)])


def decode(dataset: ReviewDataset, ids) -> str:
    """Words for ids, ``EOS`` written as " ¶ " (where one review ends and the next begins)."""
    end = eos_id(dataset)
    words = [" ¶" if int(i) == end else dataset.vocab.itos[int(i)] for i in ids]
    return " ".join(words).replace(" ¶ ", " ¶\n").strip()


def windows(stream: torch.Tensor, *, context: int, batch: int,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random windows: inputs ``(batch, context)`` and the next tokens (targets)."""
    if not isinstance(context, int) or not 1 <= context < len(stream):
        raise ValueError(f"context must be in [1, {len(stream) - 1}] (the stream's length - 1), "
                         f"got {context!r}")
    start = torch.randint(0, len(stream) - context, (batch,), generator=generator)
    rows = torch.stack([stream[s:s + context + 1] for s in start.tolist()])
    return rows[:, :-1], rows[:, 1:]


def next_token_loss(model: DecoderLM, batch: dict) -> torch.Tensor:
    """Cross-entropy of every position's logits against the next token (nats per token)."""
    return F.cross_entropy(model(batch["x"]).flatten(0, 1), batch["y"].flatten())


@dataclass(frozen=True)
class LMTraining:
    steps: int = 1000        # updates: the pretraining recipe's (``DecoderRecipe`` says why)
    batch: int = 32          # windows per update
    context: int = 128       # tokens per window: about two median reviews
    lr: float = 3e-3         # AdamW's peak rate; a small model on a small grammar takes a high one
    warmup_frac: float = 0.05
    weight_decay: float = 0.01
    seed: int = 0            # the windows drawn (the data order); the model's seed is separate

    def validate(self) -> None:
        for name in ("steps", "batch", "context"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


class Windows:
    """``steps`` batches of random windows of ``stream`` (``windows``), drawn with one seeded
    generator: the LM's "loader" for the course's training loop."""

    def __init__(self, stream: torch.Tensor, *, steps: int, context: int, batch: int, seed: int):
        self.stream, self.steps, self.context, self.batch = stream, steps, context, batch
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for _ in range(self.steps):
            x, y = windows(self.stream, context=self.context, batch=self.batch,
                           generator=self.generator)
            yield {"x": x, "y": y}


def train_lm(model: DecoderLM, stream: torch.Tensor, *, cfg: LMTraining = LMTraining(),
             progress: bool = True, desc: str = "training the decoder") -> dict:
    """Train ``model`` in place on windows of ``stream`` with the course's loop
    (``core.train.train``: AdamW with decay on the weight matrices only, warm-up and cosine,
    clipping at 1, in FP32); returns the loss of every step (nats per token) and the seconds."""
    cfg.validate()
    if cfg.context > model.cfg.max_len:
        raise ValueError(f"context ({cfg.context}) must fit the model's max_len "
                         f"({model.cfg.max_len})")
    loader = Windows(stream, steps=cfg.steps, context=cfg.context, batch=cfg.batch, seed=cfg.seed)
    hist = train(model, loader, cfg=TrainConfig(epochs=1, lr=cfg.lr, weight_decay=cfg.weight_decay,
                                                warmup_frac=cfg.warmup_frac, grad_clip=1.0,
                                                seed=cfg.seed),
                 loss_fn=next_token_loss, autocast_dtype=None, device="cpu", progress=progress,
                 desc=desc)
    model.eval()
    return {"losses": hist.step_loss, "seconds": hist.seconds}


@torch.inference_mode()
def review_nll(model: DecoderLM, dataset: ReviewDataset, *, max_reviews: int | None = None,
               batch: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Per review: the summed negative log-likelihood (nats) of its tokens and its ``EOS``,
    each predicted from the ``EOS`` before the review and the words so far; and the number of
    tokens predicted. Reviews longer than the model's context are an error, not cut."""
    n = len(dataset) if max_reviews is None else min(max_reviews, len(dataset))
    eos = eos_id(dataset)
    ids = dataset.ids[:n]
    longest = max(len(t) for t in ids) + 1
    if longest > model.cfg.max_len:
        raise ValueError(f"a review of {longest - 1} tokens (+ EOS) does not fit max_len "
                         f"{model.cfg.max_len}: pass max_reviews or a longer model")
    model.eval()
    sums, counts = [], []
    order = sorted(range(n), key=lambda i: len(ids[i]))     # similar lengths share a batch
    for b in range(0, n, batch):
        rows = [ids[i] for i in order[b:b + batch]]
        width = max(len(r) for r in rows) + 1
        x = torch.full((len(rows), width), eos)
        y = torch.full((len(rows), width), -100)
        for r, t in enumerate(rows):
            x[r, 1:len(t) + 1] = t                 # EOS, then the review
            y[r, :len(t)] = t
            y[r, len(t)] = eos                     # ... and where it ends
        logits = model(x).float()                 # the loss in FP32, whatever the model computes in
        nll = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none",
                              ignore_index=-100).view(len(rows), width)
        sums.append(nll.sum(1))
        counts.append((y != -100).sum(1))
    s, c = torch.cat(sums), torch.cat(counts)
    back = torch.empty(n, dtype=torch.long)
    back[torch.tensor(order)] = torch.arange(n)
    return s[back].double(), c[back]


def perplexity(nll: tuple[torch.Tensor, torch.Tensor]) -> float:
    """``exp(total nats / total tokens)`` over the reviews ``review_nll`` scored."""
    s, c = nll
    return math.exp(float(s.sum()) / float(c.sum()))


def perplexity_ratio(a: tuple[torch.Tensor, torch.Tensor],
                     b: tuple[torch.Tensor, torch.Tensor]) -> Ratio:
    """Perplexity of model ``a`` ÷ model ``b`` on the same reviews, paired review by review:
    ``exp(D)`` with ``D`` the difference in nats per token, its standard error from the
    reviews' spread (a ratio estimator: each review's difference against its token count,
    N - 1 degrees of freedom). Above 1: ``a`` predicts the reviews worse."""
    (sa, ca), (sb, cb) = a, b
    if len(sa) != len(sb) or not torch.equal(ca, cb):
        raise ValueError("a and b must score the same reviews (the same token counts)")
    if len(sa) < 2:
        raise ValueError("need at least 2 reviews for the noise of a paired comparison")
    d, n = (sa - sb), ca.double()
    per_token = float(d.sum() / n.sum())
    resid = d - per_token * n
    se = math.sqrt(float((resid ** 2).sum()) / (len(d) - 1) * len(d)) / float(n.sum())
    value = math.exp(per_token)
    return Ratio(value, value * se, len(d) - 1)


def to_kv_heads(model: DecoderLM, kv_heads: int) -> DecoderLM:
    """A copy of the multi-head ``model`` with ``kv_heads`` key/value heads: each group of
    ``n_heads / kv_heads`` heads' key and value projections averaged into one (mean pooling,
    as Ainslie et al. found best). Queries, output and feed-forward are copied unchanged."""
    cfg = model.cfg
    if cfg.kv_heads != cfg.n_heads:
        raise ValueError("model must be multi-head (n_kv_heads None or n_heads) to be converted")
    new_cfg = DecoderConfig(**{**cfg.to_dict(), "n_kv_heads": kv_heads})
    new_cfg.validate()
    out = DecoderLM(new_cfg)
    state = dict(model.state_dict())
    group, hs = cfg.n_heads // kv_heads, cfg.head_size
    for n in range(cfg.n_layers):
        for kind in ("weight", "bias"):
            key = f"blocks.{n}.attn.kv.{kind}"
            t = state[key]                                  # (2 · heads · hs, ...) : k then v
            t = t.view(2, kv_heads, group, hs, *t.shape[1:]).mean(2)
            state[key] = (t.reshape(2 * kv_heads * hs, *t.shape[3:]) if kind == "weight"
                          else t.reshape(-1))
    out.load_state_dict(state)
    return out.eval()


def generate_text(model: DecoderLM, prompt: torch.Tensor, *, new_tokens: int,
                  dataset: ReviewDataset) -> dict[str, str]:
    """The prompt (1, length) and its greedy continuation (``generate_cached``), as words."""
    from course_lib.generate.greedy import generate_cached
    ids = generate_cached(model, prompt, new_tokens=new_tokens)[0]
    n = prompt.shape[1]
    return {"prompt": decode(dataset, ids[:n]), "continuation": decode(dataset, ids[n:])}
