"""Lesson 06's students and arms: the right data and targets per arm, deterministic per seed."""
import pytest
import torch

from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.distill.losses import UNLABELLED, DistillSet
from course_lib.core.model import build_model
from course_lib.distill.students import (ARMS, STUDENTS, StudentRecipe, build_student,
                                     hard_label_targets, teacher_layers, train_student)


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
    teacher = build_model(len(corpus.vocab), preset="teacher", seed=3, d_model=32, n_heads=2,
                          d_ff=64).eval()
    return corpus, data, torch.randn(len(data), 2), teacher


def params(m):
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def test_students_have_their_shapes_and_the_teacher_initialised_one_its_layers(small):
    corpus, _, _, teacher = small
    v = len(corpus.vocab)
    s = build_student("small", vocab_size=v, teacher=None, seed=0)
    assert (s.cfg.n_layers, s.cfg.d_model) == (1, 64)
    h = build_student("half", vocab_size=v, teacher=teacher, seed=0)
    assert (h.cfg.n_layers, h.cfg.d_model, h.cfg.d_ff) == (2, 32, 64)
    t = build_student("half_from_teacher", vocab_size=v, teacher=teacher, seed=0)
    assert (teacher_layers(4) == [0, 2] and teacher_layers(2) == [0]
            and teacher_layers(5) == [0, 2, 4])
    for new, old in enumerate(teacher_layers(teacher.cfg.n_layers)):
        for (_, a), (_, b) in zip(t.blocks[new].state_dict().items(),
                                  teacher.blocks[old].state_dict().items()):
            assert torch.equal(a, b)
    assert (torch.equal(t.tok.weight, teacher.tok.weight)
            and torch.equal(t.head.weight, teacher.head.weight))
    assert not torch.equal(h.blocks[0].ff.fc1.weight, teacher.blocks[0].ff.fc1.weight)
    with pytest.raises(ValueError, match="student"):
        build_student("tiny", vocab_size=v, teacher=teacher, seed=0)
    with pytest.raises(ValueError, match="teacher"):
        build_student("half", vocab_size=v, teacher=None, seed=0)


def test_every_arm_trains_every_student_and_is_deterministic_per_seed(small):
    corpus, data, cached, teacher = small
    recipe = StudentRecipe(steps=2, batch_size=8)
    for student in STUDENTS:
        for arm in ARMS:
            kw = dict(student=student, corpus=corpus, distill_set=data, cached_logits=cached,
                      seed=1, recipe=recipe, teacher=teacher)
            a, b = train_student(arm, **kw), train_student(arm, **kw)
            assert torch.equal(params(a), params(b)), (student, arm)
            assert torch.isfinite(params(a)).all(), (student, arm)
            assert not a.training


def test_hidden_arm_differs_from_kl_only_through_the_hidden_term(small):
    corpus, data, cached, teacher = small
    kw = dict(student="half", corpus=corpus, distill_set=data, cached_logits=cached, seed=2,
              teacher=teacher)
    off = train_student("hidden", recipe=StudentRecipe(steps=3, batch_size=8, hidden_weight=0.0),
                        **kw)
    kl = train_student("distilled", recipe=StudentRecipe(steps=3, batch_size=8), **kw)
    on = train_student("hidden", recipe=StudentRecipe(steps=3, batch_size=8), **kw)
    assert torch.allclose(params(off), params(kl), atol=1e-6)   # weight 0: the KL arm exactly
    assert not torch.allclose(params(on), params(kl), atol=1e-4)


def test_labelled_only_arm_never_reads_the_transfer_logits(small):
    corpus, data, cached, _ = small
    poisoned = cached.clone()
    poisoned[len(corpus.train):] = float("nan")     # the transfer split's teacher logits
    recipe = StudentRecipe(steps=3, batch_size=8)
    ok = train_student("distilled_labelled_only", corpus=corpus, distill_set=data,
                       cached_logits=poisoned, seed=0, recipe=recipe)
    assert torch.isfinite(params(ok)).all()
    bad = train_student("distilled", corpus=corpus, distill_set=data, cached_logits=poisoned,
                        seed=0, recipe=recipe)
    assert not torch.isfinite(params(bad)).all()    # the full set does read them


def test_bad_arm_steps_and_missing_teacher_name_the_parameter(small):
    corpus, data, cached, _ = small
    kw = dict(corpus=corpus, distill_set=data, cached_logits=cached, seed=0)
    with pytest.raises(ValueError, match="arm"):
        train_student("teacher", **kw)
    with pytest.raises(ValueError, match="steps"):
        train_student("scratch", recipe=StudentRecipe(steps=0), **kw)
    with pytest.raises(ValueError, match="teacher"):
        train_student("hidden", **kw)


def test_transfer_cells_use_the_first_n_transfer_reviews_and_name_bad_arguments(small):
    from course_lib.distill import transfer
    corpus, data, cached, teacher = small
    recipe = StudentRecipe(steps=2, batch_size=8)
    n = 5
    got = transfer.train_cell(corpus, cached, student="small", arm="hard", n=n, seed=0,
                              recipe=recipe)
    from course_lib.core.data import ReviewDataset
    want = train_student("hard_labels", student="small", corpus=corpus, seed=0, recipe=recipe,
                         distill_set=DistillSet(corpus.train,
                                                ReviewDataset(corpus.transfer.reviews[:n],
                                                              corpus.vocab)),
                         cached_logits=cached[:len(corpus.train) + n])
    assert torch.equal(params(got), params(want))
    zero = transfer.train_cell(corpus, cached, student="small", arm="soft", n=0, seed=0,
                               recipe=recipe)
    only = train_student("distilled_labelled_only", student="small", corpus=corpus,
                         distill_set=data, cached_logits=cached, seed=0, recipe=recipe)
    assert torch.equal(params(zero), params(only))
    with pytest.raises(ValueError, match="arm must be one of"):
        transfer.train_cell(corpus, cached, student="small", arm="kl", n=0, seed=0, recipe=recipe)
    with pytest.raises(ValueError, match=r"n must be in \[0, 16\]"):
        transfer.train_cell(corpus, cached, student="small", arm="soft", n=17, seed=0,
                            recipe=recipe)


def test_transfer_run_trains_every_cell_once_per_seed(small):
    from course_lib.distill import transfer
    corpus, _, cached, teacher = small
    body = transfer.run(corpus, teacher, cached, seeds=(0,), sizes=(0, 4), steps=1,
                        log=lambda _: None)
    assert [(r["student"], r["arm"], r["transfer"]) for r in body["runs"]] == [
        ("small", "scratch", 0), ("small", "soft", 0), ("small", "hard", 4), ("small", "soft", 4),
        ("half_from_teacher", "scratch", 0), ("half_from_teacher", "soft", len(corpus.transfer))]
    assert body["recipe"]["steps"] == 1 and 0 <= body["recipe"]["teacher_test_accuracy"] <= 1
