"""The decoders lesson 16 generates with, trained by one deterministic command and verified on
load, like the encoder baseline (``core.checkpoints``):

    python -m course_lib.tools.checkpoints --decoders     # trains and writes generate/weights/

* the target: the course's block (width 128, 4 layers, 4 heads) as a language model of the
  reviews, pretrained with one key/value head per query head, then uptrained three ways, each
  from the same pretrained weights over the same windows: with its 4 key/value heads
  (``decoder_kv4``: multi-head), converted to 2 (``decoder_kv2``: grouped-query) and to 1
  (``decoder_kv1``: multi-query). The multi-head model is uptrained too, so the three differ in
  their key/value heads only;
* the draft: a one-layer model of width 64 (``draft``), trained on the same stream, that
  speculative decoding lets propose tokens.

Deterministic for a torch version, CPU and thread count (2); elsewhere the weights, and so
the checksums, can differ slightly: the manifests record the perplexity each reached.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from course_lib.core.checkpoints import save, verify
from course_lib.core.data import Corpus, load_corpus
from course_lib.generate.decoder import DecoderConfig, DecoderLM
from course_lib.generate.lm import (LMTraining, lm_vocab_size, perplexity, perplexity_ratio,
                                    review_nll, to_kv_heads, token_stream, train_lm)
from course_lib.measure.verdicts import Ratio, mean_and_se

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
KV_HEADS = (4, 2, 1)          # multi-head, grouped-query, multi-query: the stored targets


def target_name(kv_heads: int) -> str:
    return f"decoder_kv{kv_heads}"


@dataclass(frozen=True)
class DecoderRecipe:
    # The target: the encoder's shape (lesson 01's "teacher" width and depth). max_len 640 holds
    # the longest review (512 tokens) and its end with room for generating after a prompt.
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 256
    max_len: int = 640
    # Why 1,000 steps of 32 windows of 128 tokens (4.1 million tokens, three passes over the
    # 1.3 million of the training and transfer splits): the loss stops falling after a few
    # hundred steps (the grammar is small; the manifest keeps every step's loss), so the rest
    # settles the model near the grammar's own entropy. About 200 s on 2 cores.
    pretrain: LMTraining = LMTraining(steps=1000, lr=3e-3, seed=0)
    # Uptraining (Ainslie et al. use 5% of pretraining; 10% here): a lower peak rate, its own
    # data order, the same for every key/value-head count.
    uptrain: LMTraining = LMTraining(steps=100, lr=1e-3, seed=1)
    kv_heads: tuple[int, ...] = KV_HEADS
    # The draft: a quarter of the target's matrix work per token (one layer of width 64).
    draft_d_model: int = 64
    draft_layers: int = 1
    draft_heads: int = 2
    draft_d_ff: int = 128
    draft_training: LMTraining = LMTraining(steps=600, lr=3e-3, seed=0)
    model_seed: int = 0

    def target_config(self, vocab_size: int) -> DecoderConfig:
        return DecoderConfig(vocab_size=vocab_size, d_model=self.d_model, n_heads=self.n_heads,
                             n_layers=self.n_layers, d_ff=self.d_ff, max_len=self.max_len)

    def draft_config(self, vocab_size: int) -> DecoderConfig:
        return DecoderConfig(vocab_size=vocab_size, d_model=self.draft_d_model,
                             n_heads=self.draft_heads, n_layers=self.draft_layers,
                             d_ff=self.draft_d_ff, max_len=self.max_len)


def lm_stream(corpus: Corpus) -> torch.Tensor:
    """What the decoders train on: the training and transfer splits' reviews (no test review)."""
    return torch.cat([token_stream(corpus.train), token_stream(corpus.transfer)])


def pretrain(corpus: Corpus, recipe: DecoderRecipe = DecoderRecipe(), *,
             progress: bool = True) -> tuple[DecoderLM, dict]:
    torch.manual_seed(recipe.model_seed)
    model = DecoderLM(recipe.target_config(lm_vocab_size(corpus.train)))
    hist = train_lm(model, lm_stream(corpus), cfg=recipe.pretrain, progress=progress,
                    desc="pretraining the target")
    return model, hist


def uptrain(pretrained: DecoderLM, corpus: Corpus, kv_heads: int, *,
            cfg: LMTraining, progress: bool = True) -> tuple[DecoderLM, dict]:
    """The pretrained multi-head model converted to ``kv_heads`` (``to_kv_heads``; unchanged at
    ``n_heads``) and trained ``cfg.steps`` more steps."""
    model = to_kv_heads(pretrained, kv_heads)
    hist = train_lm(model, lm_stream(corpus), cfg=cfg, progress=progress,
                    desc=f"uptraining with {kv_heads} key/value heads")
    return model, hist


def train_decoders(corpus: Corpus, recipe: DecoderRecipe = DecoderRecipe(), *,
                   progress: bool = True) -> dict[str, tuple[DecoderLM, dict]]:
    """Every stored decoder with its manifest entries (config, losses, seconds, perplexity on
    the validation split)."""
    out = {}
    base, hist = pretrain(corpus, recipe, progress=progress)
    for kv in recipe.kv_heads:
        model, up = uptrain(base, corpus, kv, cfg=recipe.uptrain, progress=progress)
        out[target_name(kv)] = (model, {"pretrain_losses": hist["losses"],
                                        "pretrain_seconds": hist["seconds"],
                                        "uptrain_losses": up["losses"],
                                        "uptrain_seconds": up["seconds"]})
    torch.manual_seed(recipe.model_seed)
    draft = DecoderLM(recipe.draft_config(lm_vocab_size(corpus.train)))
    d = train_lm(draft, lm_stream(corpus), cfg=recipe.draft_training, progress=progress,
                 desc="training the draft")
    out["draft"] = (draft, {"losses": d["losses"], "seconds": d["seconds"]})
    for name, (model, info) in out.items():
        info.update(config=model.cfg.to_dict(), torch=torch.__version__,
                    parameters=sum(p.numel() for p in model.parameters()),
                    val_perplexity=perplexity(review_nll(model, corpus.val)))
    return out


NAMES = tuple(target_name(kv) for kv in KV_HEADS) + ("draft",)


def save_decoders(trained: dict[str, tuple[DecoderLM, dict]], directory: Path = WEIGHTS_DIR
                  ) -> list[Path]:
    return [save(model, info, name=name, directory=directory)
            for name, (model, info) in trained.items()]


def load_decoders(corpus: Corpus, *, smoke: bool = False, directory: Path = WEIGHTS_DIR,
                  progress: bool = True, stand_in_steps: int = 30
                  ) -> tuple[dict[str, DecoderLM], dict]:
    """The stored decoders (eval mode, CPU) by name (``NAMES``) and their manifests. Without a
    valid set: the recipe's training now on the whole corpus (about 5 minutes, with progress
    bars), or in smoke mode stand-ins trained ``stand_in_steps`` steps each on ``corpus``, whose
    manifests say so."""
    infos = {name: verify(name, directory) for name in NAMES}
    if all(infos.values()):
        models = {}
        for name, info in infos.items():
            model = DecoderLM(DecoderConfig(**info["config"]))
            model.load_state_dict(torch.load(directory / f"{name}.pt", map_location="cpu",
                                             weights_only=True))
            models[name] = model.eval()
            info["source"] = "checkpoint"
        return models, infos
    recipe = DecoderRecipe()
    if smoke:
        quick = lambda t: replace(t, steps=stand_in_steps)   # noqa: E731
        recipe = replace(recipe, pretrain=quick(recipe.pretrain), uptrain=quick(recipe.uptrain),
                         draft_training=quick(recipe.draft_training))
        source = (f"stand-ins trained {stand_in_steps} steps each (no checkpoint stored): "
                  "they mean little")
    else:
        print("No valid decoder checkpoints found: training them now (about 5 minutes on 2 cores).")
        source = "trained now"
        # the recipe's stream: the whole corpus, whatever the lesson loaded
        corpus = load_corpus()
    trained = train_decoders(corpus, recipe, progress=progress)
    return ({n: m for n, (m, _) in trained.items()},
            {n: {**info, "source": source} for n, (_, info) in trained.items()})




UPTRAIN_BUDGETS = (10, 30, 100)   # uptraining steps the evidence tries (the recipe's is the last)


def gqa_uptrain_evidence(corpus: Corpus, *, seeds: tuple[int, ...] = (1, 2, 3),
                         budgets: tuple[int, ...] = UPTRAIN_BUDGETS,
                         recipe: DecoderRecipe = DecoderRecipe(), log=print) -> dict:
    """The evidence behind lesson 16's GQA verdict: the recipe's pretrained target, then for
    each uptraining budget and seed (its data order; seed 1 at the recipe's 100 steps is the
    stored models') every key/value-head count uptrained from the same weights, each budget
    with its own warm-up and cosine schedule, and scored on every test review: perplexity, and
    the paired ratio to the multi-head model of the same seed and budget. Also each conversion
    before any uptraining (budget 0), and the draft's perplexity (a model with a tenth of the
    parameters: the scale of a difference that matters on this grammar). One pretrained model:
    the seeds vary uptraining only."""
    base, hist = pretrain(corpus, recipe, progress=False)
    log(f"pretrained in {hist['seconds']:.0f} s")
    converted = {kv: review_nll(to_kv_heads(base, kv), corpus.test) for kv in recipe.kv_heads}
    torch.manual_seed(recipe.model_seed)
    draft = DecoderLM(recipe.draft_config(lm_vocab_size(corpus.train)))
    train_lm(draft, lm_stream(corpus), cfg=recipe.draft_training, progress=False)
    body: dict = {"seeds": list(seeds), "kv_heads": list(recipe.kv_heads), "budgets": list(budgets),
                  "uptrain_steps": recipe.uptrain.steps, "pretrain_steps": recipe.pretrain.steps,
                  "test_reviews": len(corpus.test),
                  "converted_only": {str(kv): {"perplexity": perplexity(nll),
                                               "ratio": _ratio_dict(perplexity_ratio(
                                                   nll, converted[recipe.n_heads]))}
                                     for kv, nll in converted.items()},
                  "runs": []}
    for steps in budgets:
        for seed in seeds:
            nlls = {}
            for kv in recipe.kv_heads:
                cfg = replace(recipe.uptrain, seed=seed, steps=steps)
                model, up = uptrain(base, corpus, kv, cfg=cfg, progress=False)
                nlls[kv] = review_nll(model, corpus.test)
                log(f"{steps} steps, seed {seed}, {kv} key/value heads: perplexity "
                    f"{perplexity(nlls[kv]):.4f} ({up['seconds']:.0f} s)")
            row = {"steps": steps, "seed": seed,
                   "perplexity": {str(kv): perplexity(n) for kv, n in nlls.items()},
                   "ratio": {str(kv): _ratio_dict(perplexity_ratio(n, nlls[recipe.n_heads]))
                             for kv, n in nlls.items() if kv != recipe.n_heads}}
            if steps == recipe.uptrain.steps:
                row["draft_ratio"] = _ratio_dict(perplexity_ratio(review_nll(draft, corpus.test),
                                                                  nlls[recipe.n_heads]))
            body["runs"].append(row)
    return body


def _ratio_dict(r) -> dict:
    return {"value": r.value, "se": r.se, "dof": r.dof}


def gqa_sweep(evidence: dict) -> dict[int, dict[int, Ratio]]:
    """The verdict's sweep from ``gqa_uptrain_evidence``: per key/value-head count below
    multi-head and per uptraining budget (0: the conversion alone), the geometric mean over
    seeds of the perplexity ratio to multi-head. Its error adds the seeds' spread (training
    noise, seeds - 1 degrees of freedom) and the test set's paired error, which every seed
    shares (the same reviews), so more seeds cannot shrink it."""
    import math

    out: dict[int, dict[int, Ratio]] = {}
    top = max(evidence["kv_heads"])
    for kv in evidence["kv_heads"]:
        if kv == top:
            continue
        c = evidence["converted_only"][str(kv)]["ratio"]
        out[kv] = {0: Ratio(c["value"], c["se"], c["dof"])}
        for steps in evidence["budgets"]:
            rows = [r["ratio"][str(kv)] for r in evidence["runs"] if r["steps"] == steps]
            logs = mean_and_se([math.log(r["value"]) for r in rows])
            test = sum((r["se"] / r["value"]) ** 2 for r in rows) / len(rows)
            seeds_var = logs.se ** 2 if math.isfinite(logs.se) else 0.0
            value = math.exp(logs.value)
            out[kv][steps] = Ratio(value, value * math.sqrt(seeds_var + test),
                                   max(1, len(rows) - 1))
    return out
