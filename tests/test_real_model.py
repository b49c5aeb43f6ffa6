"""Lesson 15's real model: our batched forward pass against sentence-transformers' own encode,
the fidelity measures against hand-made cases, FFN pruning, and clear errors."""
import builtins

import pytest
import torch

from course_lib.real_model import encoder as R
from course_lib.core.batching import BucketBatchSampler, random_batches

st = pytest.importorskip("sentence_transformers", reason="the [real] extra is not installed")


@pytest.fixture(scope="module")
def loaded():
    model, source = R.load_real_model()
    texts = R.course_sentences()[:48]
    ids, cut = R.tokenize(model.tokenizer, texts)
    return model, source, texts, ids


def test_our_batched_embeddings_equal_sentence_transformers_encode(loaded):
    model, source, texts, ids = loaded
    assert "offline" in source or "hub" in source
    want = torch.tensor(model.encode(texts, batch_size=16, convert_to_numpy=True))
    pad = model.tokenizer.pad_token_id
    for batches in (random_batches(len(ids), batch_size=16, seed=0),
                    list(BucketBatchSampler([len(x) for x in ids], batch_size=16, seed=0))):
        got = R.embed(model, ids, batches=batches, pad_id=pad)
        assert (got - want).abs().max() < 1e-5            # any batching, same vectors, same order
    fixed = R.embed(model, ids, batches=random_batches(len(ids), batch_size=16, seed=1),
                    pad_id=pad, fixed_length=256)
    assert (fixed - want).abs().max() < 1e-5               # the mask makes padding harmless
    with pytest.raises(ValueError, match="exactly once"):
        R.embed(model, ids, batches=[[0, 1]], pad_id=pad)


def test_tokenize_counts_what_it_cuts(loaded):
    model, _, texts, _ = loaded
    full, cut0 = R.tokenize(model.tokenizer, texts[:4], max_length=512)
    short, cut = R.tokenize(model.tokenizer, texts[:4], max_length=8)
    assert cut0 == 0 and cut == sum(max(0, len(x) - 8) for x in full)
    assert all(len(s) <= 8 and int(s[-1]) == int(f[-1]) for s, f in zip(short, full))  # [SEP] kept


def test_fidelity_on_hand_made_embeddings():
    e = torch.nn.functional.normalize(torch.eye(6)[:, :4] + 0.1 * torch.arange(24.).reshape(6, 4),
                                      dim=-1)
    same = R.fidelity(e, e, k=2)
    assert same["mean_cosine"] == pytest.approx(1.0) and same["top1_agreement"] == 1.0
    assert same["top2_agreement"] == 1.0 and same["n"] == 6
    flipped = R.fidelity(e, -e, k=2)
    assert flipped["mean_cosine"] == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="k must be"):
        R.fidelity(e, e, k=6)


def test_ffn_pruning_shrinks_the_layers_and_amount_zero_changes_nothing(loaded):
    model, _, _, ids = loaded
    b = random_batches(len(ids), batch_size=16, seed=0)
    ref = R.embed(model, ids, batches=b)
    same = R.prune_ffn_neurons_bert(model, amount=0.0)
    assert (R.embed(same, ids, batches=b) - ref).abs().max() < 1e-5
    half = R.prune_ffn_neurons_bert(model, amount=0.5)
    assert half.encoder.layer[0].intermediate.dense.out_features == 768
    assert R._bert(model).encoder.layer[0].intermediate.dense.out_features == 1536   # untouched
    assert R.fidelity(ref, R.embed(half, ids, batches=b))["mean_cosine"] < 0.999


def test_course_sentences_are_real_sentences_and_bounded():
    s = R.course_sentences(min_words=5, max_words=30)
    assert len(s) > 100 and len(set(s)) == len(s)
    assert all(5 <= len(x.split()) <= 30 for x in s)
    assert s == R.course_sentences(min_words=5, max_words=30)     # deterministic
    with pytest.raises(ValueError, match="min_words"):
        R.course_sentences(min_words=0)


def test_course_sentences_are_frozen_so_a_docstring_edit_moves_nothing(tmp_path, monkeypatch):
    """Lesson 15's text comes from the committed file, not from the library as it is now: a
    rebuilt file holds the installed library's docstring sentences, and course_sentences reads
    whatever file it is given."""
    from course_lib.real_model import encoder as E

    frozen = tmp_path / "frozen.json"
    frozen.write_text('{"source": "t", "sentences": ["One two three four five.", "Too short."], '
                      '"groups": [7, 8]}')
    monkeypatch.setattr(E, "SENTENCES_FILE", frozen)
    assert R.course_sentences(with_groups=True) == (["One two three four five."], [7])
    rebuilt = tmp_path / "rebuilt.json"
    n = E.write_course_sentences(rebuilt, source="this checkout")
    monkeypatch.setattr(E, "SENTENCES_FILE", rebuilt)
    assert n >= len(R.course_sentences()) > 100
    assert R.course_sentences(min_words=1, max_words=10_000) and n == len(
        R.course_sentences(min_words=1, max_words=10_000))


def test_missing_extra_is_a_clear_error(monkeypatch):
    real_import = builtins.__import__

    def no_st(name, *args, **kwargs):
        if name.startswith("sentence_transformers"):
            raise ImportError("No module named 'sentence_transformers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_st)
    with pytest.raises(ImportError, match=r"\.\[real\]"):
        R.load_real_model()


def test_recovery_brings_a_pruned_model_back_towards_fp32_on_unseen_sentences(loaded):
    model, _, texts, ids = loaded
    train, held = list(range(0, 32)), list(range(32, 48))
    ref = R.embed(model, ids, batches=random_batches(len(ids), batch_size=16, seed=0))
    pruned = R.prune_ffn_neurons_bert(model, amount=0.5)
    held_ids = [ids[i] for i in held]
    one = [list(range(len(held)))]
    before = R.fidelity(ref[held], R.embed(pruned, held_ids, batches=one), k=1)["mean_cosine"]
    losses = R.recover(pruned, [ids[i] for i in train], ref[train],
                       batches=[list(range(0, 16)), list(range(16, 32))], epochs=4, lr=1e-4)
    after = R.fidelity(ref[held], R.embed(pruned, held_ids, batches=one), k=1)["mean_cosine"]
    assert losses[-1] < losses[0] and after > before       # closer on sentences it never saw
    assert not R._bert(pruned).training
