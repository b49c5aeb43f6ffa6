"""Lesson 06's student arms: the right data and targets per arm, deterministic per seed."""
import pytest
import torch

from course_lib.data import CorpusConfig, load_corpus
from course_lib.distill import UNLABELLED, DistillSet
from course_lib.student_runs import ARMS, StudentRecipe, hard_label_targets, train_student


def test_hard_label_targets_keep_labels_and_fill_in_the_teachers_top_class():
    labels = torch.tensor([1, UNLABELLED, 0, UNLABELLED])
    index = torch.tensor([0, 5, 2, 3])
    logits = torch.zeros(6, 2)
    logits[5] = torch.tensor([0.0, 3.0])     # teacher says positive
    logits[3] = torch.tensor([2.0, -1.0])    # teacher says negative
    logits[0] = torch.tensor([5.0, 0.0])     # ignored: item 0 has its own label
    assert hard_label_targets(labels, index, logits).tolist() == [1, 1, 0, 0]


@pytest.fixture(scope="module")
def small():
    corpus = load_corpus(CorpusConfig(n_train=24, n_val=4, n_test=8, n_transfer=16, max_length=64))
    data = DistillSet(corpus.train, corpus.transfer)
    torch.manual_seed(0)
    return corpus, data, torch.randn(len(data), 2)


def params(m):
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def test_every_arm_trains_and_is_deterministic_per_seed(small):
    corpus, data, cached = small
    recipe = StudentRecipe(steps=2, batch_size=8)
    for arm in ARMS:
        a = train_student(arm, corpus=corpus, distill_set=data, cached_logits=cached, seed=1, recipe=recipe)
        b = train_student(arm, corpus=corpus, distill_set=data, cached_logits=cached, seed=1, recipe=recipe)
        assert torch.equal(params(a), params(b)), arm
        assert torch.isfinite(params(a)).all(), arm


def test_labelled_only_arm_never_reads_the_transfer_logits(small):
    corpus, data, cached = small
    poisoned = cached.clone()
    poisoned[len(corpus.train):] = float("nan")     # the transfer split's teacher logits
    recipe = StudentRecipe(steps=3, batch_size=8)
    ok = train_student("distilled_labelled_only", corpus=corpus, distill_set=data,
                       cached_logits=poisoned, seed=0, recipe=recipe)
    assert torch.isfinite(params(ok)).all()
    bad = train_student("distilled", corpus=corpus, distill_set=data, cached_logits=poisoned,
                        seed=0, recipe=recipe)
    assert not torch.isfinite(params(bad)).all()    # the full set does read them


def test_bad_arm_and_steps_name_the_parameter(small):
    corpus, data, cached = small
    with pytest.raises(ValueError, match="arm"):
        train_student("teacher", corpus=corpus, distill_set=data, cached_logits=cached, seed=0)
    with pytest.raises(ValueError, match="steps"):
        train_student("scratch", corpus=corpus, distill_set=data, cached_logits=cached, seed=0,
                      recipe=StudentRecipe(steps=0))
