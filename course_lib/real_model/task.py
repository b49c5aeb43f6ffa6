"""A labelled task for the real model: which part of Python's library a sentence documents.

An embedding is made for a task (retrieval, clustering, classification), and "without
significantly lowering accuracy" is judged on one. The task here ships with every Python: the
docstring sentences of the standard library, each labelled with the topic of the module it
documents (``TOPICS``: e-mail, the web, XML, IP addresses, ...). A linear head (``fit_probe``)
is fitted on the FP32 embeddings of some docstrings (MTEB's classification protocol) and scored on
the sentences of other docstrings (cross-validated by docstring: every sentence is tested once,
and no test sentence has a near-copy in training):

- ``accuracy``: the FP32-trained head on each variant's embeddings (the head a deployed system
  already has when its encoder is quantized), and its paired difference from FP32 sentence by
  sentence (``diff_points``, with its standard error: the noise of the test set's size);
- ``ratio``: the variant's accuracy over FP32's, as Sentence-Transformers reports quantized
  models ("retains 99% of the performance");
- ``refit_accuracy``: a head trained on the variant's own embeddings (MTEB's protocol applied
  to the variant).

The sentences depend on the Python version (its docstrings change); the lesson states it.
"""
from __future__ import annotations

import math

import random
import sys
import sysconfig
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.real_model.encoder import docstring_sentences

# Topic -> standard-library modules (a package's every module, tests excluded). Only modules that
# Python 3.10 to 3.13 all ship; a module a later Python drops is skipped, not an error.
TOPICS: dict[str, tuple[str, ...]] = {
    "async I/O": ("asyncio",),
    "e-mail": ("email", "smtplib", "mailbox", "imaplib", "poplib"),
    "web": ("http", "urllib", "wsgiref", "xmlrpc", "socketserver"),
    "imports": ("importlib", "pkgutil", "zipimport"),
    "logging": ("logging",),
    "XML": ("xml",),
    "turtle graphics": ("turtle",),
    "decimal and statistics": ("_pydecimal", "fractions", "statistics", "numbers"),
    "testing": ("unittest", "doctest"),
    "typing and introspection": ("typing", "inspect", "ast", "dis"),
    "processes and threads": ("multiprocessing", "threading", "concurrent", "queue", "subprocess"),
    "debugging": ("pdb", "bdb", "traceback"),
    "archives": ("tarfile", "zipfile", "gzip", "bz2", "lzma"),
    "files and paths": ("pathlib", "shutil", "tempfile", "glob", "fnmatch"),
    "IP addresses": ("ipaddress",),
    "configuration and command lines": ("configparser", "argparse", "optparse", "getopt", "cmd"),
    "dates": ("datetime", "calendar"),
    "text comparison": ("difflib", "textwrap"),
}

__all__ = ["TOPICS", "TopicTask", "stdlib_topics", "group_folds", "fit_probe", "task_scores",
           "mean_se", "pool_runs", "FOLDS", "run", "recipes_figure"]


@dataclass(frozen=True)
class TopicTask:
    sentences: list[str]
    labels: list[int]          # index into ``topics``
    groups: list[int]          # the docstring each sentence came from (a split keeps them together)
    topics: tuple[str, ...]
    python: str                # the version whose docstrings these are

    def __len__(self) -> int:
        return len(self.sentences)

    def counts(self) -> dict[str, int]:
        return {t: self.labels.count(i) for i, t in enumerate(self.topics)}

    def folds(self, k: int = 5, *, seed: int = 0) -> list[list[int]]:
        """``k`` disjoint folds of sentence indices covering every sentence, each docstring's
        sentences in one fold (its docstrings dealt round-robin in a seeded order)."""
        return group_folds(self.groups, k, seed=seed)


def group_folds(groups: Sequence[int], k: int, *, seed: int = 0) -> list[list[int]]:
    """Indices ``0 .. len(groups) - 1`` in ``k`` folds, all items of one group in one fold."""
    keys = sorted(set(groups))
    if not 2 <= k <= len(keys):
        raise ValueError(f"k must be in [2, {len(keys)}] (the number of groups), got {k}")
    order = torch.randperm(len(keys), generator=torch.Generator().manual_seed(seed)).tolist()
    fold_of = {keys[j]: n % k for n, j in enumerate(order)}
    return [[i for i, g in enumerate(groups) if fold_of[g] == f] for f in range(k)]


def _module_files(stdlib: Path, name: str) -> list[Path]:
    pkg, mod = stdlib / name, stdlib / f"{name}.py"
    if pkg.is_dir():
        return sorted(p for p in pkg.rglob("*.py")
                      if not any(part in ("test", "tests") or part.startswith("test_")
                                 for part in p.relative_to(pkg).parts))
    return [mod] if mod.exists() else []


def stdlib_topics(*, topics: Mapping[str, Sequence[str]] = TOPICS, per_topic: int | None = None,
                  seed: int = 0, min_words: int = 4, max_words: int = 60,
                  stdlib: Path | None = None) -> TopicTask:
    """The labelled sentences of ``topics`` from this Python's standard library. A sentence found
    under two topics is dropped from both (its label would be a coin toss). ``per_topic`` keeps a
    seeded sample of at most that many sentences per topic (None: all of them)."""
    if per_topic is not None and per_topic < 2:
        raise ValueError(f"per_topic must be >= 2 or None, got {per_topic}")
    if len(topics) < 2:
        raise ValueError(f"topics must name at least 2 topics, got {len(topics)}")
    root = Path(sysconfig.get_paths()["stdlib"]) if stdlib is None else Path(stdlib)
    found: dict[str, tuple[list[str], list[int]]] = {}
    for topic, modules in topics.items():
        paths = [p for m in modules for p in _module_files(root, m)]
        found[topic] = docstring_sentences(paths, min_words=min_words, max_words=max_words)
    owners: dict[str, set[str]] = {}
    for topic, (sents, _) in found.items():
        for s in sents:
            owners.setdefault(s, set()).add(topic)
    rng = random.Random(seed)
    sentences, labels, groups = [], [], []
    for i, (topic, (sents, docs)) in enumerate(found.items()):
        keep = [k for k, s in enumerate(sents) if len(owners[s]) == 1]
        if per_topic is not None and len(keep) > per_topic:
            keep = sorted(rng.sample(keep, per_topic))
        if len(keep) < 2:
            raise ValueError(f"topic {topic!r} has {len(keep)} sentences in {root} (at least 2 "
                             f"needed): are its modules {tuple(topics[topic])} missing?")
        sentences += [sents[k] for k in keep]
        labels += [i] * len(keep)
        groups += [i * 1_000_000 + docs[k] for k in keep]   # docstring numbers, unique per topic
    return TopicTask(sentences, labels, groups, tuple(topics),
                     f"{sys.version_info.major}.{sys.version_info.minor}")


def fit_probe(x: torch.Tensor, y: torch.Tensor, *, n_classes: int, alpha: float = 1.0) -> nn.Linear:
    """A linear classifier head on the rows of ``x``, fitted in closed form: ridge regression of
    the one-hot labels on the (centred) rows, ``alpha`` times the squared weights as penalty,
    the intercept unpenalised; a row's class is its largest output. This is scikit-learn's
    ``RidgeClassifier`` (its default ``alpha`` is 1.0); MTEB fits a logistic regression instead,
    which on this task scores within a point of it. Closed form: deterministic, no training
    loop, milliseconds per fit."""
    if x.dim() != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"need x (N, d) and y (N,), got {tuple(x.shape)} and {tuple(y.shape)}")
    if n_classes < 2 or int(y.max()) >= n_classes or int(y.min()) < 0:
        raise ValueError(f"labels must lie in [0, n_classes), n_classes >= 2; got labels "
                         f"{int(y.min())}..{int(y.max())}, n_classes {n_classes}")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    xd, yd = x.double(), F.one_hot(y, n_classes).double()
    x_mean, y_mean = xd.mean(0), yd.mean(0)
    xc, yc = xd - x_mean, yd - y_mean
    w = torch.linalg.solve(xc.T @ xc + alpha * torch.eye(x.shape[1], dtype=torch.float64),
                           xc.T @ yc)
    head = nn.Linear(x.shape[1], n_classes)
    with torch.no_grad():
        head.weight.copy_(w.T)
        head.bias.copy_(y_mean - x_mean @ w)
    return head.requires_grad_(False)


def task_scores(embeddings: Mapping[str, torch.Tensor], labels: Sequence[int] | torch.Tensor, *,
                folds: Sequence[Sequence[int]], reference: str, n_classes: int,
                groups: Sequence[int] | None = None, refit: bool = True
                ) -> dict[str, dict[str, float]]:
    """Each variant's topic accuracy, cross-validated: every sentence of ``folds`` is classified
    by a head trained on ``reference``'s embeddings of the other folds, so each is tested once.
    Per variant: the accuracy, its paired difference from the reference in points with the
    standard error of that difference (the noise of the test's size: over sentences, or with
    ``groups`` over docstrings, since sentences of one docstring rise and fall together), the
    ratio of the accuracies, the share of sentences whose verdict changed, and (``refit``) the
    accuracy of heads trained on the variant's own embeddings and its paired difference."""
    if reference not in embeddings:
        raise ValueError(f"reference must be one of {list(embeddings)}, got {reference!r}")
    every = [i for f in folds for i in f]
    if len(folds) < 2 or len(set(every)) != len(every):
        raise ValueError(f"folds must be at least 2 disjoint index lists, got {len(folds)} "
                         f"holding {len(every) - len(set(every))} repeated indices")
    y = torch.as_tensor(labels)
    right = {k: torch.zeros(len(y), dtype=torch.float64) for k in embeddings}
    own = {k: torch.zeros(len(y), dtype=torch.float64) for k in embeddings}
    for f, fold in enumerate(folds):
        te = torch.as_tensor(list(fold))
        tr = torch.as_tensor([i for g, other in enumerate(folds) if g != f for i in other])
        head = fit_probe(embeddings[reference][tr], y[tr], n_classes=n_classes)
        for k, e in embeddings.items():
            right[k][te] = (head(e[te]).argmax(-1) == y[te]).double()
            if refit:
                mine = fit_probe(e[tr], y[tr], n_classes=n_classes)
                own[k][te] = (mine(e[te]).argmax(-1) == y[te]).double()
    idx = torch.as_tensor(every)
    cluster = None if groups is None else torch.as_tensor(list(groups))[idx]
    base, n = right[reference][idx], len(idx)
    out = {}
    for k in embeddings:
        r = right[k][idx]
        d = 100 * (r - base)
        row = {"accuracy": float(r.mean()), "diff_points": float(d.mean()),
               "diff_se": mean_se(d, cluster), "ratio": float(r.mean() / base.mean()),
               "changed": float((r != base).double().mean()), "n": n}
        if refit:
            mine = own[k][idx]
            row["refit_accuracy"] = float(mine.mean())
            row["refit_diff_points"] = float(100 * (mine - base).mean())
            row["refit_diff_se"] = mean_se(100 * (mine - base), cluster)
        out[k] = row
    return out


def mean_se(values: torch.Tensor, clusters: torch.Tensor | None = None) -> float:
    """The standard error of the mean of ``values``: over independent items, or, with
    ``clusters``, over clusters (the cluster-robust estimate: each cluster's summed deviation
    from the mean, squared, summed, over n²), which does not count correlated items as news."""
    n = len(values)
    if n < 2:
        return math.inf        # one value: its noise is unknown (verdicts.mean_and_se's convention)
    v = values.double()
    if clusters is None:
        return float(v.std() / n ** 0.5)
    keys, inverse = torch.unique(clusters, return_inverse=True)
    if len(keys) < 2:
        raise ValueError("need at least 2 clusters for a cluster-robust standard error")
    dev = torch.zeros(len(keys), dtype=torch.float64).index_add_(0, inverse, v - v.mean())
    g = len(keys)
    return float((dev.pow(2).sum() * g / (g - 1)) ** 0.5 / n)


def pool_runs(runs: Sequence[Mapping], name: str) -> dict[str, float]:
    """One variant's result over several fold assignments of the same sentences (``run``'s
    ``runs``): the mean difference, and a standard error that keeps the test's own noise (the
    runs share their sentences, so averaging them does not shrink it: the mean of their squared
    standard errors) and adds the spread the heads' training data causes (the runs' variance over
    their number)."""
    diffs = torch.tensor([r["scores"][name]["diff_points"] for r in runs], dtype=torch.float64)
    ses = torch.tensor([r["scores"][name]["diff_se"] for r in runs], dtype=torch.float64)
    from course_lib.measure.verdicts import over_seeds

    k = len(runs)
    pooled = over_seeds(diffs.tolist(), ses.tolist())
    return {"diff_points": pooled.value, "diff_se": pooled.se,
            "test_se": float(ses.pow(2).mean() ** 0.5),
            "between_sd": float(diffs.std()) if k > 1 else 0.0,
            "runs": k, "ratio": float(sum(r["scores"][name]["ratio"] for r in runs) / k),
            "accuracy": float(sum(r["scores"][name]["accuracy"] for r in runs) / k)}


# cross-validation folds: each sentence tested once, by a head trained on 80% of the rest
FOLDS = 5


def run(build_variants: Callable[[nn.Module], dict[str, nn.Module]], *, reference: str = "FP32",
        seeds: Sequence[int] = (0,), per_topic: int | None = None, batch_size: int = 32,
        max_length: int = 128, log=print) -> dict:
    """The evidence run (``tools.evidence int8_topic_task``): every sentence of ``TOPICS``
    embedded once by each model ``build_variants(bert)`` returns (``reference`` among them), then
    scored by ``FOLDS``-fold cross-validation over docstrings, one fold assignment per seed.
    Returns what ``tools.evidence`` stores."""
    import time

    from course_lib.core.batching import BucketBatchSampler
    from course_lib.real_model import encoder as R

    model, source = R.load_real_model(device="cpu")
    bert = R._bert(model).eval()
    task = stdlib_topics(per_topic=per_topic)
    ids, cut = R.tokenize(model.tokenizer, task.sentences, max_length=max_length)
    batches = list(BucketBatchSampler([len(x) for x in ids], batch_size=batch_size, seed=0))
    pad = model.tokenizer.pad_token_id
    emb, seconds = {}, {}
    for name, m in build_variants(bert).items():
        t0 = time.perf_counter()
        emb[name] = R.embed(m, ids, batches=batches, pad_id=pad)
        seconds[name] = time.perf_counter() - t0
        log(f"{name}: {len(ids)} sentences embedded in {seconds[name]:.0f} s")
    runs = []
    for seed in seeds:
        t0 = time.perf_counter()
        folds = task.folds(FOLDS, seed=seed)
        scores = task_scores(emb, task.labels, folds=folds, reference=reference,
                             n_classes=len(task.topics), groups=task.groups)
        for name, s in scores.items():
            s["mean_cosine"] = float((emb[name] * emb[reference]).sum(-1).mean())
        runs.append({"seed": seed, "folds": [len(f) for f in folds], "scores": scores})
        log(f"folds of seed {seed}: {reference} accuracy {scores[reference]['accuracy']:.4f} on "
            f"{len(task)} sentences ({time.perf_counter() - t0:.0f} s)")
    return {"model": source, "python": task.python, "sentences": len(task),
            "topics": task.counts(), "tokens_cut": cut, "max_length": max_length,
            "embed_seconds": seconds, "threads": torch.get_num_threads(), "runs": runs}


def recipes_figure(evidence: Mapping[str, Mapping[str, float]], *, names: Sequence[str],
                   live: Mapping | None = None, tolerance: float, evidence_label: str,
                   live_label: str = "this run"):
    """Each variant of ``names``' accuracy change (points, 95% interval) in the evidence and in
    this run's sample, beside the claim's bar at ``-tolerance``."""
    from course_lib.ui.plots import new_figure

    names = list(names)
    fig, ax = new_figure(width=7.5, height=3.6)
    for j, (scores, label, colour, shift) in enumerate(
            [(evidence, evidence_label, "#4C72B0", -0.12), (live, live_label, "#DD8452", 0.12)]):
        if scores is None:
            continue
        xs = [i + shift for i, n in enumerate(names) if n in scores]
        ys = [scores[n]["diff_points"] for n in names if n in scores]
        es = [1.96 * scores[n]["diff_se"] for n in names if n in scores]
        ax.errorbar(xs, ys, yerr=es, fmt="o", color=colour, capsize=3, label=label)
    ax.axhline(0, color="0.6", lw=0.8)
    ax.axhline(-tolerance, color="#C44E52", ls="--", lw=1,
               label=f"the claim's bar: {-tolerance:g} point")
    ax.set_xticks(range(len(names)), [n.replace("int8 ", "int8\n", 1).replace(", ", "\n")
                                      .replace(" (", "\n(") for n in names], fontsize=8)
    ax.set_xlabel("recipe")
    ax.set_ylabel("topic accuracy − FP32 (points)")
    ax.set_title("Topic accuracy change against FP32, by recipe (95% intervals)")
    ax.legend(fontsize=8, loc="lower right")
    return fig
