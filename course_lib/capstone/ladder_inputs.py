"""What lesson 14 runs each rung on, and its accuracy: the inputs (``Inputs``: a *typical bucket*
of 32 test reviews of median length for latency and memory, and a random subset of the test set
timed at fixed padding, where every batch costs the same and the time scales to the whole set),
the rung's context (its precision and attention kernel, ``ladder.applied``) around every forward
pass (``core.evaluate.predict`` or a plain call), and the test accuracy of the model it serves.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch.utils.data import Subset

from course_lib.measure import bench
from course_lib.core.precision import choose_precision
from course_lib.core.batching import make_loader
from course_lib.capstone.ladder import Rung, Settings, applied
from course_lib.capstone.model_zoo import ModelZoo, model_device
from course_lib.core.padding import pad_batch
from course_lib.core.evaluate import predict


# A practitioner's first attempt, measured beside the fixed-512 baseline: the teacher in FP32
# with SDPA's fused kernel, each batch padded to its own longest review, batches in the data's
# order (dynamic padding, lesson 01; sorting by length would be bucketing, lesson 02).
PRACTITIONER = Rung("practitioner", sdpa=True)


@dataclass(frozen=True)
class Inputs:
    typical: list[torch.Tensor]   # token ids of test reviews of median length (a typical bucket)
    fixed_subset: list[int]       # test reviews timed at fixed padding


def choose_inputs(corpus, *, settings: Settings, seed: int = 0) -> Inputs:
    n = corpus.test.lengths
    mid = statistics.median(n)
    by_mid = sorted(range(len(n)), key=lambda i: abs(n[i] - mid))
    subset = torch.randperm(len(n), generator=torch.Generator().manual_seed(seed))
    return Inputs([corpus.test[i]["input_ids"] for i in by_mid[:32]],
                  sorted(subset[:settings.fixed_test_reviews].tolist()))


def rung_context(rung: Rung, device: torch.device) -> Callable:
    """A factory of the block ``rung`` runs in on ``device`` (for ``core.evaluate.predict``)."""
    dtype = choose_precision(device).dtype
    return lambda: applied(rung, device_type=device.type, dtype=dtype)


def forward_fn(model, rung: Rung, ids: torch.Tensor, mask: torch.Tensor) -> Callable:
    return bench.forward_call(model, ids, mask, context=rung_context(rung, ids.device))


def typical_batch(zoo: ModelZoo, inputs: Inputs, rung: Rung, size: int):
    """``size`` typical reviews, padded to the batch's longest with bucketing, else to
    ``fixed_length``, on the device of the model ``rung`` serves."""
    ids, mask, _ = pad_batch(inputs.typical[:size],
                             max_length=None if rung.bucketing else zoo.settings.fixed_length)
    dev = model_device(zoo.model(rung))
    return ids.to(dev), mask.to(dev)


def test_loader(zoo: ModelZoo, inputs: Inputs, rung: Rung, *, dynamic: bool = False):
    """The test split as ``rung`` runs it: bucketed, or ``fixed_test_reviews`` of it at fixed
    padding, or with ``dynamic`` the whole split in its order, each batch padded to its longest."""
    s, test = zoo.settings, zoo.corpus.test
    if dynamic:
        return make_loader(test, bucketed=False, batch_size=s.eval_batch, shuffle=False)
    if rung.bucketing:
        return make_loader(test, batch_size=s.eval_batch, shuffle=False)
    return make_loader(Subset(test, inputs.fixed_subset), bucketed=False,
                       batch_size=s.eval_batch, shuffle=False, max_length=s.fixed_length)


def run_test_set(zoo: ModelZoo, inputs: Inputs, rung: Rung, loader=None):
    """``rung``'s outputs over ``loader`` (default: its test loader) and the dataset indices."""
    model = zoo.model(rung)
    dev = model_device(model)
    return predict(model, loader or test_loader(zoo, inputs, rung), device=dev,
                   context=rung_context(rung, dev))


def rung_correct(zoo: ModelZoo, inputs: Inputs, rung: Rung) -> torch.Tensor:
    """Whether the model ``rung`` serves, in its precision, gets each test review right (in
    test-split order). Padding (masked) and the attention kernel change float rounding only
    (lessons 01, 10; checked by the tests), so it is scored with dynamic padding and the fused
    kernel."""
    r = replace(rung, bucketing=True, sdpa=True)
    model = zoo.model(r)
    dev = model_device(model)
    out, index = predict(model, test_loader(zoo, inputs, r), device=dev,
                         context=rung_context(r, dev))
    labels = torch.tensor([zoo.corpus.test.reviews[int(i)].label for i in index])
    return out.argmax(-1) == labels


def accuracy(zoo: ModelZoo, inputs: Inputs, rung: Rung) -> float:
    """Test accuracy of the model ``rung`` serves, in its precision (``correct``'s mean)."""
    return float(rung_correct(zoo, inputs, rung).float().mean())
