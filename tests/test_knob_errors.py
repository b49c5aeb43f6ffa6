"""Bad input gets a clear error naming the parameter (and its allowed values), instead of a
hang, an AttributeError, or a silent no-op."""
import pytest
from torch.utils.data import Subset

from course_lib.core import data as D
from course_lib.precision.amp import amp_train
from course_lib.core.batching import make_loader
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.distributed.ddp import WorkerConfig
from course_lib.core.model import build_model
from course_lib.core.train import TrainConfig, train
from course_lib.core.evaluate import evaluate
from course_lib.core.task import task_loss


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(scale=0.02)


@pytest.mark.parametrize("kw, match", [
    (dict(max_opinions=0), r"max_opinions must be an integer >= 1"),
    (dict(min_margin=9.0), r"min_margin must be in \[0, 4\]"),
    (dict(min_margin=2.5, p_intensify=0.0), r"min_margin must be in \[0, 2\]"),
    (dict(min_margin=-1.0), r"min_margin must be in"),
])
def test_corpus_settings_that_would_loop_forever_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        CorpusConfig(**kw).validate()


def test_the_generator_gives_up_with_a_message_instead_of_hanging(monkeypatch):
    monkeypatch.setattr(D, "_MAX_REDRAWS", 0)
    with pytest.raises(RuntimeError, match="min_margin"):
        D.generate(1, cfg=CorpusConfig(), seed=0)


def test_a_dataset_without_lengths_needs_them_for_bucketing(corpus):
    sub = Subset(corpus.train, range(10))
    with pytest.raises(ValueError, match="lengths must be given for a Subset"):
        make_loader(sub, batch_size=4)
    assert len(make_loader(sub, batch_size=4,
                           lengths=[corpus.train.lengths[i] for i in range(10)])) >= 1


def test_training_on_nothing_is_an_error(corpus):
    empty = Subset(corpus.train, [])
    with pytest.raises(ValueError, match="loader yields no batches"):
        train(build_model(len(corpus.vocab), preset="student"),
              make_loader(empty, batch_size=4, bucketed=False, shuffle=False), progress=False)


@pytest.mark.parametrize("kw, match", [(dict(grad_clip=-1.0), "grad_clip must be >= 0"),
                                        (dict(task="regresion"), "task must be one of"),
                                        (dict(weight_decay=-0.1), "weight_decay")])
def test_train_config_names_the_bad_knob(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kw).validate()


def test_a_misspelt_task_is_not_silently_classification(corpus):
    with pytest.raises(ValueError, match="task must be one of"):
        task_loss("regresion")
    loader = make_loader(corpus.test, batch_size=8, shuffle=False)
    with pytest.raises(ValueError, match="task must be one of"):
        evaluate(build_model(len(corpus.vocab), preset="student"), loader, task="regresion")


def test_amp_train_names_its_own_parameter(corpus):
    loader = make_loader(corpus.train, batch_size=4)
    with pytest.raises(ValueError, match=r"precision_name must be one of \['fp32'"):
        amp_train(build_model(len(corpus.vocab), preset="student"), loader,
                  precision_name="bf8", steps=1)


def test_worker_config_names_one_parameter_at_a_time():
    with pytest.raises(ValueError, match="threads must be >= 0") as err:
        WorkerConfig(threads=-1).validate()
    assert "timeout_s" not in str(err.value)
    with pytest.raises(ValueError, match="timeout_s must be > 0") as err:
        WorkerConfig(timeout_s=0).validate()
    assert "threads" not in str(err.value)
