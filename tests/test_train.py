import pytest
import torch

from course_lib.core.batching import make_loader
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.core.model import build_model
from course_lib.core.train import TrainConfig, train, warmup_cosine
from course_lib.core.evaluate import evaluate, predict


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(scale=0.05)


def small(corpus, **kw):
    torch.manual_seed(0)
    return build_model(len(corpus.vocab), d_model=32, n_heads=2, n_layers=1, d_ff=32,
                       max_len=512, **kw)


def test_training_lowers_the_loss_and_is_deterministic(corpus):
    loader = make_loader(corpus.train, batch_size=16, seed=0)
    cfg = TrainConfig(epochs=3, lr=3e-3)
    h1 = train(small(corpus), loader, cfg=cfg, progress=False)
    h2 = train(small(corpus), make_loader(corpus.train, batch_size=16, seed=0), cfg=cfg,
               progress=False)
    assert h1.step_loss == h2.step_loss
    first, last = sum(h1.step_loss[:5]) / 5, sum(h1.step_loss[-5:]) / 5
    assert last < first


def test_callback_autocast_and_regression(corpus):
    loader = make_loader(corpus.train, batch_size=16, seed=0)
    seen = []
    h = train(small(corpus, n_outputs=1), loader,
              cfg=TrainConfig(epochs=1, task="regression"), autocast_dtype=torch.bfloat16,
              callback=lambda step, loss, m: seen.append(step), max_steps=4, progress=False)
    assert seen == [0, 1, 2, 3] and len(h.step_loss) == 4
    reg = small(corpus, n_outputs=1)
    val = make_loader(corpus.val, batch_size=32, shuffle=False)
    m = evaluate(reg, val, task="regression")
    with torch.no_grad():   # by hand: every review once, its rating beside its prediction
        err = torch.cat([reg.eval()(b["input_ids"], b["attention_mask"]) - b["ratings"]
                         for b in val])
    assert len(err) == len(corpus.val)
    assert m["mse"] == pytest.approx(float((err ** 2).mean()), rel=1e-5)
    assert m["mae"] == pytest.approx(float(err.abs().mean()), rel=1e-5)


def test_evaluate_accuracy_equals_hand_count(corpus):
    model = small(corpus)
    loader = make_loader(corpus.val, batch_size=8, bucketed=True, shuffle=True)
    acc = evaluate(model, loader)["accuracy"]
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(len(corpus.val)):
            item = corpus.val[i]
            pred = model(item["input_ids"][None]).argmax(-1).item()
            correct += pred == item["label"]
    assert acc == pytest.approx(correct / len(corpus.val), abs=1e-6)


def test_warmup_cosine_schedule():
    assert warmup_cosine(0, 100, 10) == pytest.approx(0.1)
    assert warmup_cosine(9, 100, 10) == pytest.approx(1.0)
    assert warmup_cosine(100, 100, 10) == pytest.approx(0.0)


@pytest.mark.parametrize("kw, match", [(dict(epochs=0), "epochs"), (dict(lr=0), "lr"),
                                        (dict(task="ranking"), "task")])
def test_bad_train_config(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kw).validate()


def test_evaluate_under_bf16_autocast_matches_fp32_closely(corpus):
    model = small(corpus)
    loader = make_loader(corpus.val, batch_size=16, shuffle=False)
    la, _ = predict(model, loader)
    lb, _ = predict(model, loader, autocast_dtype=torch.bfloat16)
    assert not torch.equal(la, lb)                              # BF16 did run
    assert torch.allclose(la, lb, atol=0.05, rtol=0.02)         # to BF16's 8 bits of mantissa
    sure = (la[:, 1] - la[:, 0]).abs() > 0.1                    # decisions BF16 cannot flip
    assert sure.any() and torch.equal(la[sure].argmax(-1), lb[sure].argmax(-1))
    labels = torch.tensor([r.label for r in corpus.val.reviews])
    b = evaluate(model, loader, autocast_dtype=torch.bfloat16)["accuracy"]
    assert b == pytest.approx(float((lb.argmax(-1) == labels).float().mean()))


def test_predict_enters_the_context_around_every_forward_pass():
    import contextlib
    from course_lib.core.batching import make_loader
    from course_lib.core.data import CorpusConfig, load_corpus
    from course_lib.core.model import build_model
    from course_lib.core.evaluate import evaluate, predict
    corpus = load_corpus(CorpusConfig(n_train=8, n_val=4, n_test=20, n_transfer=4))
    torch.manual_seed(0)
    model = build_model(len(corpus.vocab), preset="student")
    loader = make_loader(corpus.test, batch_size=8, shuffle=False)
    entered = []

    @contextlib.contextmanager
    def ctx():
        entered.append(torch.is_grad_enabled())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    plain, i1 = predict(model, loader)
    under, i2 = predict(model, loader, context=ctx)
    assert len(entered) == len(loader) and not any(entered)   # once per batch, under no_grad
    assert torch.equal(i1, i2)
    assert not torch.equal(plain, under) and torch.allclose(plain, under, atol=0.05)  # bf16 ran
    assert evaluate(model, loader, context=ctx)["accuracy"] == pytest.approx(
        float((under.argmax(-1)
               == torch.tensor([corpus.test[int(i)]["label"] for i in i2])).float().mean()))


def test_correct_is_per_item_in_dataset_order_and_can_drop_the_mask():
    from course_lib.core.evaluate import correct
    corpus = load_corpus(CorpusConfig(n_train=8, n_val=4, n_test=24, n_transfer=4, max_length=48))
    model = build_model(len(corpus.vocab), preset="student", seed=0)
    loader = make_loader(corpus.test, batch_size=5, seed=3)           # shuffled, bucketed
    got = correct(model, loader)
    logits, _ = predict(model, make_loader(corpus.test, batch_size=24, shuffle=False))
    labels = torch.tensor([r.label for r in corpus.test.reviews])
    assert torch.equal(got, logits.argmax(-1) == labels)
    # without the mask the padded rows see their padding: the outputs differ from the masked ones
    fixed = make_loader(corpus.test, batch_size=24, bucketed=False, shuffle=False, max_length=48)
    with torch.no_grad():
        b = next(iter(fixed))
        masked = model(b["input_ids"], b["attention_mask"])
        unmasked = model(b["input_ids"], torch.ones_like(b["attention_mask"]))
    assert not torch.allclose(masked, unmasked)
    assert torch.equal(correct(model, fixed, use_mask=False), unmasked.argmax(-1) == b["labels"])


def test_weight_decay_spares_norms_biases_and_embeddings():
    from course_lib.core.optimizers import param_groups
    model = build_model(50, preset="student", d_model=32, d_ff=64)
    decay, keep = param_groups(model, weight_decay=0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in keep["params"]}
    assert decay["weight_decay"] == 0.1 and keep["weight_decay"] == 0.0
    assert decayed == {f"{n}.weight" for n, m in model.named_modules()
                       if isinstance(m, torch.nn.Linear)}
    assert kept == set(names.values()) - decayed
    assert {"tok.weight", "ln_f.weight", "blocks.0.ln1.weight", "head.bias"} <= kept
    assert "head.weight" in decayed and "blocks.0.attn.qkv.weight" in decayed
    with pytest.raises(ValueError, match="weight_decay"):
        param_groups(model, weight_decay=-1.0)


def test_a_skipped_scaler_step_leaves_the_schedule_where_it_was():
    """train() with a GradScaler: an inf in step 1's gradients skips the optimizer step, and the
    learning-rate schedule does not advance past a step that was not taken."""
    torch.manual_seed(0)
    model = build_model(50, preset="student", d_model=32, d_ff=64)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 50, (8, 12), generator=g)
    batches = [{"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool),
                "labels": (ids[:, 0] > 25).long()}] * 8
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
    cfg = TrainConfig(epochs=1, lr=1e-3, warmup_frac=0.5)
    hist = train(model, batches, cfg=cfg, autocast_dtype=torch.bfloat16, scaler=scaler,
                 inject_inf_at=[1], progress=False)
    assert hist.step_skipped == [False, True] + [False] * 6 and hist.skipped_steps == 1
    assert hist.step_lr[1] == hist.step_lr[0]           # not advanced after the skipped step
    assert hist.step_lr[2] != hist.step_lr[1]
    assert hist.step_scale[1] == hist.step_scale[0] / 2 and len(hist.step_seconds) == 8


def test_accumulation_constant_rate_and_a_step_context(corpus):
    """``accum`` batches make one step (the loss their mean); ``schedule="constant"`` keeps the
    rate; ``step_context(step)`` is entered around each step, and only there."""
    import contextlib
    batches = [b for _, b in zip(range(6), make_loader(corpus.train, batch_size=4, seed=0))]
    entered = []

    @contextlib.contextmanager
    def mark(step):
        entered.append(step)
        yield

    cfg = TrainConfig(epochs=2, lr=1e-3, accum=2, schedule="constant", grad_clip=0.0)
    h = train(small(corpus, dropout=0.0), batches, cfg=cfg, step_context=mark, progress=False)
    assert len(h.step_loss) == 6 and entered == list(range(6))        # 6 batches / 2, 2 epochs
    assert set(h.step_lr) == {1e-3}
    # one accumulated step equals one step on both batches' summed losses, halved
    a, b = small(corpus, dropout=0.0), small(corpus, dropout=0.0)
    train(a, batches[:2], cfg=TrainConfig(epochs=1, accum=2, schedule="constant", grad_clip=0.0),
          progress=False)
    loss = lambda m, batch: sum(torch.nn.functional.cross_entropy(      # noqa: E731
        m(x["input_ids"], x["attention_mask"]), x["labels"]) for x in batch["pair"]) / 2
    train(b, [{"pair": batches[:2]}], loss_fn=loss, progress=False,
          cfg=TrainConfig(epochs=1, schedule="constant", grad_clip=0.0))
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    with pytest.raises(ValueError, match="accum must be"):
        TrainConfig(accum=0).validate()
    with pytest.raises(ValueError, match="schedule must be one of"):
        TrainConfig(schedule="linear").validate()


def test_a_sampler_that_yields_fewer_batches_than_it_said_and_set_epoch_on_request(corpus):
    """A token-budget sampler's batch count can change per epoch: the loop follows the batches
    (no StopIteration). ``set_epoch`` reaches a sampler only when asked (DDP's worker asks)."""
    batches = [b for _, b in zip(range(3), make_loader(corpus.train, batch_size=4, seed=0))]

    class Shrinking:
        def __init__(self):
            self.sampler, self.epochs = self, []

        def set_epoch(self, epoch):
            self.epochs.append(epoch)

        def __len__(self):
            return 4                     # says 4, yields 3

        def __iter__(self):
            return iter(batches)

    loader = Shrinking()
    h = train(small(corpus), loader, cfg=TrainConfig(epochs=2), progress=False)
    assert len(h.step_loss) == 6 and loader.epochs == []
    train(small(corpus), loader, cfg=TrainConfig(epochs=2), set_epoch=True, progress=False)
    assert loader.epochs == [0, 1]
