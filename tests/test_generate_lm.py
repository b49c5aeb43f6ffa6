"""The decoder as a language model (``generate.lm``), its stored recipe (``generate.stored``),
the speed sweeps (``generate.speed``) and the cache's measured memory (``generate.memory``)."""
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.generate import lm
from course_lib.generate.decoder import DecoderConfig, DecoderLM, KVCache
from course_lib.generate.greedy import generate_cached, generate_uncached


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(CorpusConfig(n_train=40, n_val=10, n_test=20, n_transfer=20))


def test_stream_ends_every_review_with_eos(corpus):
    s = lm.token_stream(corpus.train)
    eos = lm.eos_id(corpus.train)
    assert eos == len(corpus.vocab) and lm.lm_vocab_size(corpus.train) == eos + 1
    assert int((s == eos).sum()) == len(corpus.train)            # one end per review
    assert len(s) == sum(corpus.train.lengths) + len(corpus.train)   # nothing dropped
    first = corpus.train.ids[0]
    assert torch.equal(s[:len(first)], first) and int(s[len(first)]) == eos
    text = lm.decode(corpus.train, s[:len(first) + 1])
    assert text.startswith(corpus.train.reviews[0].text) and text.endswith("¶")


def test_windows_are_next_token_pairs(corpus):
    s = lm.token_stream(corpus.train)
    g = torch.Generator().manual_seed(0)
    x, y = lm.windows(s, context=16, batch=4, generator=g)
    assert x.shape == y.shape == (4, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])                      # targets are inputs shifted
    with pytest.raises(ValueError, match="context"):
        lm.windows(s, context=len(s), batch=1, generator=g)


def _tiny(corpus, **kw):
    torch.manual_seed(0)
    return DecoderLM(DecoderConfig(vocab_size=lm.lm_vocab_size(corpus.train), d_model=32,
                                   n_heads=4, n_layers=2, d_ff=64, max_len=600, **kw)).eval()


def test_review_nll_matches_cross_entropy_by_hand(corpus):
    m = _tiny(corpus)
    s, c = lm.review_nll(m, corpus.val, batch=3)
    eos = lm.eos_id(corpus.val)
    for i in (0, 7):
        ids = corpus.val.ids[i]
        x = torch.cat([torch.tensor([eos]), ids])[None]
        y = torch.cat([ids, torch.tensor([eos])])
        with torch.no_grad():
            ref = F.cross_entropy(m(x)[0], y, reduction="sum")
        assert int(c[i]) == len(ids) + 1
        assert float(s[i]) == pytest.approx(float(ref), rel=1e-4)
    assert lm.perplexity((s, c)) == pytest.approx(math.exp(float(s.sum() / c.sum())))


def test_perplexity_ratio_is_paired_and_exact_for_identical(corpus):
    m = _tiny(corpus)
    a = lm.review_nll(m, corpus.val)
    r = lm.perplexity_ratio(a, a)
    assert r.value == 1.0 and r.se == 0.0
    b = (a[0] + 0.1 * a[1].double(), a[1])                       # 0.1 nats worse per token
    r = lm.perplexity_ratio(b, a)
    assert r.value == pytest.approx(math.exp(0.1)) and r.se == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="same reviews"):
        lm.perplexity_ratio(a, (a[0][:-1], a[1][:-1]))


def test_training_lowers_the_loss(corpus):
    m = _tiny(corpus)
    before = lm.perplexity(lm.review_nll(m, corpus.val))
    h = lm.train_lm(m, lm.token_stream(corpus.train),
                    cfg=lm.LMTraining(steps=40, batch=8, context=32), progress=False)
    assert len(h["losses"]) == 40 and not m.training
    assert lm.perplexity(lm.review_nll(m, corpus.val)) < 0.5 * before


def test_to_kv_heads_averages_groups_and_is_identity_at_n_heads(corpus):
    m = _tiny(corpus)
    same = lm.to_kv_heads(m, 4)
    x = torch.randint(0, m.cfg.vocab_size, (1, 10))
    with torch.no_grad():
        assert torch.allclose(same(x), m(x))
    g = lm.to_kv_heads(m, 2)
    assert g.cfg.kv_heads == 2
    w = m.blocks[0].attn.kv.weight.view(2, 4, 8, 32)             # (k|v, head, head_dim, d)
    want = torch.stack([w[:, 0:2].mean(1), w[:, 2:4].mean(1)], 1).reshape(2 * 2 * 8, 32)
    assert torch.equal(g.blocks[0].attn.kv.weight, want)
    assert torch.equal(g.blocks[0].attn.q.weight, m.blocks[0].attn.q.weight)
    ids = generate_cached(g, x, new_tokens=5)                    # still generates both ways
    assert torch.equal(ids, generate_uncached(g, x, new_tokens=5))
    with pytest.raises(ValueError, match="multi-head"):
        lm.to_kv_heads(g, 1)


def test_stored_decoders_verify_and_load():
    from course_lib.core.checkpoints import verify
    from course_lib.generate.stored import NAMES, WEIGHTS_DIR, DecoderRecipe
    for name in NAMES:
        info = verify(name, WEIGHTS_DIR)
        assert info is not None, f"{name}: missing or checksum mismatch"
        assert info["val_perplexity"] > 1
    r = DecoderRecipe()
    heads = [verify(f"decoder_kv{kv}", WEIGHTS_DIR)["config"]["n_kv_heads"] for kv in r.kv_heads]
    assert heads == [4, 2, 1]


def test_gqa_sweep_combines_seeds_and_the_shared_test_error():
    from course_lib.generate.stored import gqa_sweep
    ev = {"kv_heads": [4, 2], "budgets": [10],
          "converted_only": {"2": {"ratio": {"value": 1.3, "se": 0.002, "dof": 99}}},
          "runs": [{"steps": 10, "ratio": {"2": {"value": 1.01, "se": 0.001, "dof": 9}}},
                   {"steps": 10, "ratio": {"2": {"value": 1.03, "se": 0.001, "dof": 9}}}]}
    sweep = gqa_sweep(ev)
    assert set(sweep) == {2} and set(sweep[2]) == {0, 10}
    assert sweep[2][0].value == 1.3 and sweep[2][0].dof == 99      # the conversion alone
    r = sweep[2][10]
    assert r.value == pytest.approx(math.sqrt(1.01 * 1.03))
    seeds_se = abs(math.log(1.03) - math.log(1.01)) / 2          # sd/sqrt(2) of two values
    test = ((0.001 / 1.01) ** 2 + (0.001 / 1.03) ** 2) / 2
    assert r.se == pytest.approx(r.value * math.sqrt(seeds_se ** 2 + test))
    assert r.dof == 1


def test_cache_memory_grows_as_the_formula_says():
    from course_lib.generate.memory import measured_cache_bytes
    cfg = DecoderConfig(vocab_size=50, d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=64,
                        max_len=2048)
    out = measured_cache_bytes(cfg, batch=64, lengths=(256, 1024), prompt_len=4)
    assert (out[1024]["predicted_bytes"] == KVCache(cfg, batch=64, max_len=1024).nbytes
            == 64 * 1024 * (2 * 2 * 2 * 16 * 4))
    row = out[1024]
    assert row["predicted_per_token"] == 2 * 2 * 2 * 16 * 4                 # bytes_per_token
    # Above the cache itself: the step's transients (SDPA's CPU path expands one layer's grouped
    # keys and values to every head), sized by the allocator: 1.04-1.11x in three runs, once
    # 1.33x (exactly 32 MiB more). A cache kept per query head would measure 2x.
    assert 0.8 < row["measured_per_token"] / row["predicted_per_token"] < 1.5
    with pytest.raises(ValueError, match="prompt_len"):
        measured_cache_bytes(cfg, batch=1, lengths=(4,), prompt_len=4)


def test_speed_sweeps_return_every_point():
    from course_lib.generate.speed import cache_speed_over, speculative_speed, speed_over_width
    torch.manual_seed(0)
    m = DecoderLM(DecoderConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=16,
                                max_len=64)).eval()
    r = cache_speed_over(m, prompt_lens=(4,), new_tokens=(3, 6), repeats=2)
    assert set(r[4]) == {3, 6} and r[4][6]["cache"]["tokens_per_s"] > 0
    prompts = [torch.randint(0, 20, (1, 5)) for _ in range(2)]
    s = speculative_speed(m, {"self": m}, prompts, new_tokens=6, draft_lens=(1, 3), repeats=1)
    assert s["self"][3]["acceptance"] == 1.0 and s["self"][3]["identical"]   # a perfect draft
    # c of a model against itself is 1 up to timing noise: one repeat per prompt of a tiny model
    # on a loaded machine can stray far, so only its order of magnitude is checked
    assert s["self"][3]["alpha"] == 1.0 and 0.1 < s["self"][3]["cost_ratio"] < 10
    assert s["self"][1]["tokens_per_target_pass"] > 1
    s = speculative_speed(m, {"a": m, "b": m}, prompts, new_tokens=6,
                          draft_lens={"a": (1, 2), "b": (2,)}, repeats=1)
    assert set(s["a"]) == {1, 2} and set(s["b"]) == {2}
    with pytest.raises(ValueError, match="draft_lens"):
        speculative_speed(m, {"a": m}, prompts, new_tokens=6, draft_lens={"b": (1,)})
    w = speed_over_width((16, 32), lambda mm: {"FP32": mm, "again": mm}, vocab_size=20,
                         n_layers=1, prompt_len=4, new_tokens=3, repeats=2)
    assert set(w) == {16, 32} and list(w[16]) == ["FP32", "again"]


def test_generate_text_and_speculative_rounds(corpus):
    from course_lib.generate.speculative import generate_speculative
    m = _tiny(corpus)
    prompt = corpus.test.ids[0][:6][None]
    out = lm.generate_text(m, prompt, new_tokens=5, dataset=corpus.test)
    assert out["prompt"] == " ".join(corpus.test.reviews[0].text.split()[:6])
    assert len(out["continuation"].replace("\n", " ").split()) == 5
    torch.manual_seed(1)
    other = _tiny(corpus)
    ids, counts = generate_speculative(m, other, prompt, new_tokens=12, draft_len=3)
    assert sum(counts["rounds"]) == counts["accepted"]
    # one pass per round + prefill
    assert len(counts["rounds"]) == counts["target_passes"] - 1
    assert all(0 <= a <= 3 for a in counts["rounds"])
    assert torch.equal(ids, generate_cached(m, prompt, new_tokens=12))


def test_acceptance_rate_and_leviathan_formula():
    from course_lib.generate.speculative import acceptance_rate, predicted_speedup
    assert acceptance_rate([4, 4], 4) == 1.0                      # never rejected
    assert acceptance_rate([0, 0], 4) == 0.0
    assert acceptance_rate([2, 4], 4) == 6 / 7                    # one failure, in the first round
    assert predicted_speedup(0.0, 4, 0.5) == pytest.approx(1 / 3)  # one token for 4·c + 1 passes
    assert predicted_speedup(1.0, 4, 0.0) == 5                     # free, perfect draft: k + 1
    a = 0.8
    assert predicted_speedup(a, 3, 0.1) == pytest.approx((1 + a + a**2 + a**3) / 1.3)
    with pytest.raises(ValueError, match="alpha"):
        predicted_speedup(1.5, 2, 0.1)


def test_batch_speed_counts_every_sequence():
    from course_lib.generate.speed import batch_speed
    torch.manual_seed(0)
    m = DecoderLM(DecoderConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=16,
                                max_len=64)).eval()
    r = batch_speed(m, batches=(1, 4), prompt_len=4, new_tokens=5, repeats=2)
    for b in (1, 4):
        assert r[b]["tokens_per_s"] == pytest.approx(5 * b / r[b]["timing"].median)
        assert r[b]["per_sequence_tokens_per_s"] == pytest.approx(r[b]["tokens_per_s"] / b)
    with pytest.raises(ValueError, match="batches"):
        batch_speed(m, batches=(0,), prompt_len=4, new_tokens=5)


def test_pass_cost_times_many_positions_against_one():
    from course_lib.generate.speed import pass_cost
    torch.manual_seed(0)
    m = DecoderLM(DecoderConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=16,
                                max_len=64)).eval()
    r = pass_cost(m, torch.randint(0, 20, (1, 8)), positions=5, repeats=4)
    assert r.value > 0 and r.log                                   # a Ratio, with its interval
    with pytest.raises(ValueError, match="positions"):
        pass_cost(m, torch.randint(0, 20, (1, 8)), positions=0)


def test_work_grid_counts_the_positions_each_way():
    from course_lib.generate.figures import cache_picture, work_grid
    from course_lib.ui.plots import layout_problems
    p, n = 5, 4
    plain, cached = work_grid(p, n, cached=False), work_grid(p, n, cached=True)
    assert plain.shape == cached.shape == (n, p + n - 1)
    assert int((plain == 1).sum()) == sum(p + s for s in range(n))     # every step recomputes all
    assert int((cached == 1).sum()) == p + (n - 1)                     # prefill, then one each
    assert int((cached == 2).sum()) == sum(p + s - 1 for s in range(1, n))
    assert ((plain > 0) == (cached > 0)).all()                         # the same positions are seen
    assert layout_problems(cache_picture(4, 4)) == []
    with pytest.raises(ValueError, match="prompt_len"):
        work_grid(0, 3, cached=True)
