"""The decoder and its key/value cache (lesson 16): cached and uncached
greedy generation give the same tokens, the attention matches the formula written out, the
model cannot look ahead, and the cache holds 2 × layers × kv_heads × head_dim numbers a token."""
import math

import pytest
import torch

from course_lib.generate.decoder import DecoderConfig, DecoderLM, KVCache, causal_alibi
from course_lib.generate.greedy import generate_cached, generate_uncached


def model(**changes):
    torch.manual_seed(0)
    cfg = DecoderConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=64,
                        **changes)
    return DecoderLM(cfg).eval()


@pytest.mark.parametrize("kv_heads", [None, 2, 1])
def test_cached_and_uncached_greedy_tokens_are_identical(kv_heads):
    m = model(n_kv_heads=kv_heads)
    prompt = torch.randint(0, 50, (3, 5), generator=torch.Generator().manual_seed(1))
    a = generate_uncached(m, prompt, new_tokens=30)
    b = generate_cached(m, prompt, new_tokens=30)
    assert a.shape == (3, 35) and torch.equal(a, b)
    assert torch.equal(a[:, :5], prompt)


def test_the_cache_gives_the_logits_of_the_whole_sequence():
    m = model(n_kv_heads=2)
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = m(ids)
        cache = KVCache(m.cfg, batch=2, max_len=12)
        parts = [m(ids[:, :7], cache=cache)] + [m(ids[:, t:t + 1], cache=cache)
                                                for t in range(7, 12)]
    assert cache.length == 12
    assert torch.allclose(torch.cat(parts, dim=1), full, atol=1e-5)


def test_attention_is_the_formula_written_out_and_cannot_look_ahead():
    m = model()
    attn, x = m.blocks[0].attn, torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        q = attn.q(x).view(1, 6, 4, 8).transpose(1, 2)
        k, v = (t.view(1, 6, 4, 8).transpose(1, 2) for t in attn.kv(x).chunk(2, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(8)
        i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
        scores = scores - attn.slopes[:, None, None] * (i - j)   # ALiBi: distance penalty
        scores = scores.masked_fill(j > i, float("-inf"))        # no key after the query
        want = attn.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 6, 32))
        assert torch.allclose(attn(x), want, atol=1e-5)
        ids = torch.randint(0, 50, (1, 10), generator=torch.Generator().manual_seed(4))
        changed = ids.clone()
        changed[0, 7] = (ids[0, 7] + 1) % 50
        # the past ignores the future
        assert torch.allclose(m(ids)[:, :7], m(changed)[:, :7], atol=1e-6)
        assert not torch.allclose(m(ids)[:, 7:], m(changed)[:, 7:])


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_cache_bytes_per_token_is_two_layers_kv_heads_head_dim_numbers(kv_heads):
    m = model(n_kv_heads=kv_heads)
    for dtype in (torch.float32, torch.bfloat16):
        cache = KVCache(m.cfg, batch=3, dtype=dtype, max_len=40)
        want = 2 * 2 * kv_heads * 8 * torch.tensor([], dtype=dtype).element_size()
        assert cache.bytes_per_token == want
        assert cache.nbytes == want * 3 * 40                 # what is allocated: per token,
                                                             # sequence
    assert causal_alibi(2, 5, torch.ones(1))[0, 0].tolist() == [
        [-3.0, -2.0, -1.0, -0.0, float("-inf")], [-4.0, -3.0, -2.0, -1.0, -0.0]]


@pytest.mark.parametrize("make, param", [
    (lambda: DecoderConfig(vocab_size=50, n_heads=4, n_kv_heads=3).validate(), "n_kv_heads"),
    (lambda: DecoderConfig(vocab_size=50, n_heads=4, n_kv_heads=0).validate(), "n_kv_heads"),
    (lambda: DecoderConfig(vocab_size=0).validate(), "vocab_size"),
    (lambda: generate_cached(model(), torch.zeros(1, 60, dtype=torch.long), new_tokens=10),
     "max_len"),
    (lambda: generate_uncached(model(), torch.zeros(1, 3, dtype=torch.long), new_tokens=0),
     "new_tokens"),
    (lambda: KVCache(model().cfg, batch=1, max_len=100), "max_len"),
])
def test_bad_shapes_name_the_parameter(make, param):
    with pytest.raises(ValueError, match=param):
        make()


def test_a_full_cache_refuses_more_tokens():
    m = model()
    cache = KVCache(m.cfg, batch=1, max_len=4)
    with torch.no_grad():
        m(torch.zeros(1, 4, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="max_len=4"):
            m(torch.zeros(1, 1, dtype=torch.long), cache=cache)


@pytest.mark.parametrize("draft_len", [1, 3, 6])
def test_speculative_decoding_gives_the_targets_greedy_tokens(draft_len):
    from course_lib.generate.speculative import generate_speculative
    target = model()
    torch.manual_seed(9)
    draft = DecoderLM(DecoderConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                    max_len=64)).eval()
    for length in (1, 4):
        prompt = torch.randint(0, 50, (1, length), generator=torch.Generator().manual_seed(length))
        want = generate_uncached(target, prompt, new_tokens=25)
        got, counts = generate_speculative(target, draft, prompt, new_tokens=25,
                                           draft_len=draft_len)
        assert torch.equal(got, want)
        assert 0 <= counts["accepted"] <= counts["proposed"]
    same, counts = generate_speculative(target, target, prompt, new_tokens=25, draft_len=draft_len)
    assert torch.equal(same, want) and counts["accepted"] == counts["proposed"]   # a perfect draft
    # prefill + rounds
    assert counts["target_passes"] == 1 + math.ceil(25 / (draft_len + 1))


def test_speculative_decoding_refuses_what_it_cannot_do():
    from course_lib.generate.speculative import generate_speculative
    m = model()
    with pytest.raises(ValueError, match="batch"):
        generate_speculative(m, m, torch.zeros(2, 3, dtype=torch.long), new_tokens=4, draft_len=2)
    with pytest.raises(ValueError, match="draft_len"):
        generate_speculative(m, m, torch.zeros(1, 3, dtype=torch.long), new_tokens=4, draft_len=0)
    other = DecoderLM(DecoderConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                    max_len=64))
    with pytest.raises(ValueError, match="vocab_size"):
        generate_speculative(m, other, torch.zeros(1, 3, dtype=torch.long), new_tokens=4,
                             draft_len=2)
    cache = KVCache(m.cfg, batch=1, max_len=8)
    with pytest.raises(ValueError, match="length"):
        cache.truncate(1)   # nothing in it yet


def test_decode_speed_times_both_ways_interleaved_and_counts_tokens():
    from course_lib.generate.speed import decode_speed
    m = model()
    res = decode_speed({"fp32": m}, prompt_len=4, new_tokens=6, repeats=2, warmup=0)
    assert list(res) == ["fp32, no cache", "fp32, cache"]
    for r in res.values():
        assert len(r["timing"].samples) == 2
        assert r["tokens_per_s"] == pytest.approx(6 / r["timing"].median)
    with pytest.raises(ValueError, match="vocab_size"):
        decode_speed({"a": m, "b": DecoderLM(DecoderConfig(vocab_size=7, d_model=16, n_heads=2,
                                                           n_layers=1))},
                     prompt_len=2, new_tokens=2)


def test_weight_only_int8_stores_int8_rows_and_stays_close_to_fp32():
    from course_lib.quant.weight_only import WeightOnlyInt8Linear, quantize_weights_int8
    m = model()
    q = quantize_weights_int8(m)
    layers = [x for x in q.modules() if isinstance(x, WeightOnlyInt8Linear)]
    assert len(layers) == 5 * m.cfg.n_layers + 1          # q, kv, proj, fc1, fc2 per block, and the
                                                          # head
    lin = m.blocks[0].ff.fc1
    w8 = q.blocks[0].ff.fc1
    assert w8.weight_int8.dtype == torch.int8
    # each row's error is at most half its step (symmetric per-row scale: max |w| / 127)
    step = lin.weight.detach().abs().amax(dim=1, keepdim=True) / 127
    err = (w8.weight_int8.float() * w8.scale - lin.weight.detach()).abs()
    assert bool((err <= step / 2 + 1e-7).all())
    ids = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        a, b = m(ids), q(ids)
    assert float((a - b).norm() / a.norm()) < 0.05         # close to the FP32 logits
    assert torch.equal(generate_cached(q, ids[:, :3], new_tokens=5),
                       generate_uncached(q, ids[:, :3], new_tokens=5))
    with pytest.raises(ValueError, match="linear"):
        WeightOnlyInt8Linear(torch.nn.Conv1d(2, 2, 1))


def test_speculative_sampling_keeps_the_targets_distribution():
    """Leviathan et al.'s rule: whatever the draft, each output token follows the target's own
    distribution. Exact marginals of the first two tokens (the target's softmax, summed over
    the first token for the second) against 3,000 speculative samples with a draft that
    disagrees (another random model)."""
    from course_lib.generate.speculative import generate_speculative
    torch.manual_seed(0)
    cfg = DecoderConfig(vocab_size=6, d_model=16, n_heads=2, n_layers=1, d_ff=16, max_len=32)
    target = DecoderLM(cfg).eval()
    torch.manual_seed(1)
    draft = DecoderLM(cfg).eval()
    with torch.no_grad():
        for m in (target, draft):      # sharper distributions, so the two models really differ
            m.head.weight.mul_(8)
    prompt = torch.tensor([[1, 4, 2]])
    with torch.no_grad():
        p1 = torch.softmax(target(prompt)[0, -1], -1)
        p2 = sum(p1[x] * torch.softmax(target(torch.cat([prompt, torch.tensor([[x]])], 1))[0, -1],
                                       -1)
                 for x in range(6))
        q1 = torch.softmax(draft(prompt)[0, -1], -1)
    assert (p1 - q1).abs().sum() / 2 > 0.2                            # a draft that disagrees
    g = torch.Generator().manual_seed(0)
    n, counts1, counts2, accepted = 3000, torch.zeros(6), torch.zeros(6), 0
    for _ in range(n):
        ids, c = generate_speculative(target, draft, prompt, new_tokens=2, draft_len=2,
                                      temperature=1.0, generator=g)
        counts1[ids[0, 3]] += 1
        counts2[ids[0, 4]] += 1
        accepted += c["accepted"]
    assert (counts1 / n - p1).abs().max() < 0.035, (counts1 / n, p1)
    assert (counts2 / n - p2).abs().max() < 0.035, (counts2 / n, p2)
    assert 0 < accepted < n * 2                                        # both paths were taken
    with pytest.raises(ValueError, match="temperature"):
        generate_speculative(target, draft, prompt, new_tokens=2, draft_len=2, temperature=0.0)


def test_sampled_next_token_measures_the_distance_to_the_target():
    from course_lib.generate.speculative import sampled_next_token
    torch.manual_seed(0)
    cfg = DecoderConfig(vocab_size=5, d_model=16, n_heads=2, n_layers=1, d_ff=16, max_len=16)
    target = DecoderLM(cfg).eval()
    torch.manual_seed(1)
    draft = DecoderLM(cfg).eval()
    r = sampled_next_token(target, draft, torch.tensor([[1, 2]]), samples=400, draft_len=2)
    assert float(r["frequencies"].sum()) == pytest.approx(1.0)
    assert r["tv_draft"] == pytest.approx(float((r["draft"] - r["target"]).abs().sum() / 2))
    p = r["target"]
    assert r["tv_expected"] == pytest.approx(
        float(sum(math.sqrt(float(x * (1 - x)) / 400) for x in p)) * math.sqrt(2 / math.pi) / 2)
    assert r["tv_sampled"] < 4 * r["tv_expected"]                    # the target's distribution
    same = sampled_next_token(target, target, torch.tensor([[1, 2]]), samples=10, draft_len=2)
    assert same["tv_draft"] == 0.0
