"""Stored teacher logits are used only when they match a live teacher call."""
import torch

from course_lib.core import checkpoints
from course_lib.distill import stored
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.distill.losses import DistillSet, teacher_logits
from course_lib.core.model import build_model


def _setup():
    corpus = load_corpus(CorpusConfig(n_train=20, n_val=4, n_test=4, n_transfer=12, max_length=48))
    data = DistillSet(corpus.train, corpus.transfer)
    teacher = build_model(len(corpus.vocab), preset="student", seed=0).eval()
    return data, teacher


def test_matching_file_is_used_and_a_stale_one_is_recomputed(tmp_path):
    data, teacher = _setup()
    right = teacher_logits(teacher, data)
    stored.save_teacher_logits(right, tmp_path)
    got, info = stored.teacher_logits_stored(teacher, data, directory=tmp_path, check_rows=8)
    assert (info["source"] == "stored" and info["checked_rows"] == 8
            and info["max_difference"] < 1e-4)
    assert torch.equal(got, right)

    stale = right.clone()
    stale[:, 0] += 1.0                      # another teacher's logits
    stored.save_teacher_logits(stale, tmp_path)
    got, info = stored.teacher_logits_stored(teacher, data, directory=tmp_path, check_rows=64)
    assert info["source"] == "computed now" and torch.allclose(got, right, atol=1e-5)

    stored.save_teacher_logits(right[:-1], tmp_path)   # one row short: another data set
    _, info = stored.teacher_logits_stored(teacher, data, directory=tmp_path)
    assert info["source"] == "computed now"


def test_no_file_computes(tmp_path):
    data, teacher = _setup()
    got, info = stored.teacher_logits_stored(teacher, data, directory=tmp_path)
    assert info["source"] == "computed now" and got.shape == (len(data), 2)


def test_baseline_or_stand_in_loads_the_checkpoint_or_trains_a_named_stand_in(tmp_path):
    corpus = load_corpus(CorpusConfig(n_train=40, n_val=4, n_test=4, n_transfer=4, max_length=48))
    model, info = checkpoints.baseline_or_stand_in(corpus, smoke=True)
    assert info["source"] == "checkpoint" and not model.training
    stand_in, info = checkpoints.baseline_or_stand_in(corpus, smoke=True, directory=tmp_path,
                                                      stand_in_steps=2)
    assert "stand-in trained for 2 steps" in info["source"]
    assert stand_in.cfg.n_layers == model.cfg.n_layers and not stand_in.training
