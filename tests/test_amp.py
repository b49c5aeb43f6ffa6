"""course_lib.precision.amp: the AMP loop on CPU, the gradient scaler's reaction to inf, no
deprecations."""
import warnings

import pytest
import torch

from course_lib.core import train
from course_lib.core import precision as P
from course_lib.precision import amp
from course_lib.core.model import build_model


def toy_loader(n_batches=4, batch=8, length=12, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        ids = torch.randint(1, vocab, (batch, length), generator=g)
        labels = (ids[:, 0] > vocab // 2).long()   # learnable: depends on the first token
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool),
                    "labels": labels, "ratings": labels.float() * 4 + 1})
    return out


def tiny(n_outputs=2):
    torch.manual_seed(0)
    return build_model(50, preset="student", d_model=32, d_ff=64, n_outputs=n_outputs)


def test_bf16_loop_runs_and_lowers_the_loss():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        h = amp.amp_train(tiny(), toy_loader(), precision_name="bf16", steps=40, lr=3e-3)
    assert len(h.loss) == 40 and h.skipped_steps == 0 and set(h.scale) == {1.0}
    assert sum(h.loss[-8:]) / 8 < sum(h.loss[:8]) / 8


def test_injected_inf_skips_the_step_and_halves_the_scale():
    model = tiny()
    h = amp.amp_train(model, toy_loader(n_batches=2), precision_name="fp16", steps=4,
                      init_scale=256.0, inject_inf_at=[2])
    assert h.skipped == [False, False, True, False]
    assert h.scale[2] == h.scale[1] / 2
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_scaler_grows_after_growth_interval():
    h = amp.amp_train(tiny(), toy_loader(n_batches=2), precision_name="fp16", steps=3,
                      init_scale=8.0, growth_interval=1)
    assert h.scale == [16.0, 32.0, 64.0] and h.skipped_steps == 0


def test_regression_task_trains_on_the_ratings_with_mse():
    model, loader = tiny(n_outputs=1), toy_loader()
    b = loader[0]
    with torch.no_grad():   # the first step's loss is the untouched model's MSE on the ratings
        first = torch.nn.functional.mse_loss(model(b["input_ids"], b["attention_mask"]),
                                             b["ratings"])
    h = amp.amp_train(model, loader, precision_name="fp32", steps=3, task="regression")
    assert h.loss[0] == pytest.approx(float(first), rel=1e-5)
    assert len(h.loss) == 3


def test_layer_and_op_dtypes_under_bf16():
    rows = dict((n, d) for n, _, d in amp.layer_output_dtypes(
        tiny(), toy_loader()[0], device="cpu", dtype=torch.bfloat16))
    assert rows["blocks.0.ff.fc1"] == "bfloat16" and rows["blocks.0.attn.qkv"] == "bfloat16"
    assert rows["blocks.0.ln1"] == "float32" and rows["loss"] == "float32"
    ops = {op: (a, b) for op, a, b in amp.op_output_dtypes("cpu", torch.bfloat16)}
    assert ops["matmul"] == ("bfloat16", "bfloat16")        # autocast casts down
    assert ops["relu"] == ("float32", "bfloat16")           # left alone: follows its input
    # the second column separates "forced to FP32" from "left alone" (same first column)
    assert {ops["relu"][0], ops["layer_norm"][0]} == {"float32"}


def test_precision_choice_and_step_fn():
    assert P.choose_precision("cpu").name in ("bf16", "fp32")
    assert P.precision("fp16").use_scaler and not P.precision("bf16").use_scaler
    step = train.make_step_fn(tiny(), toy_loader()[0], precision_name="bf16", device="cpu")
    step()


def test_bad_input():
    with pytest.raises(ValueError, match="name must be one of"):
        P.precision("fp8")
    with pytest.raises(ValueError, match="steps must be"):
        amp.amp_train(tiny(), toy_loader(), steps=0)
    with pytest.raises(ValueError, match="init_scale"):
        P.make_scaler("cpu", init_scale=float("inf"))


def test_evaluate_under_bf16_autocast_in_eval_mode():
    from torch.utils.data import Dataset

    class DS(Dataset):
        def __init__(self, b):
            self.items = [{"rating": float(r), "label": int(lab)}
                          for r, lab in zip(b["ratings"], b["labels"])]

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]

    class Loader(list):
        dataset = None

    b = dict(toy_loader(n_batches=1)[0], index=torch.arange(8))
    loader = Loader([b])
    loader.dataset = DS(b)
    model = tiny(n_outputs=1)
    got = amp.evaluate_amp(model, loader, task="regression", precision_name="bf16")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):   # by hand, in eval mode
        pred = model.eval()(b["input_ids"], b["attention_mask"]).float()
    assert got["mae"] == pytest.approx(float((pred - b["ratings"]).abs().mean()), rel=1e-6)
    assert got["mse"] == pytest.approx(float(((pred - b["ratings"]) ** 2).mean()), rel=1e-6)


def test_speed_by_batch_pairs_each_precision_with_fp32_and_counts_real_tokens():
    from course_lib.precision import speed as amp_speed
    batches = {4: toy_loader(1, batch=4)[0], 8: toy_loader(1, batch=8)[0]}
    batches[8]["attention_mask"][:, 6:] = False          # half the positions are padding
    rows = amp_speed.by_batch(tiny, batches, device="cpu", repeats=2, warmup=0)
    assert [r["batch"] for r in rows] == [4, 8] and rows[1]["tokens"] == 8 * 6
    for r in rows:
        assert r["fp32"]["speedup"].value == 1.0 and r["fp32"]["speedup"].se == 0.0
        for p in ("bf16", "fp16"):
            assert r[p]["speedup"].dof == 1 and r[p]["speedup"].value > 0
            # tokens/s and the median agree with each other
            assert r[p]["tokens_per_s"] == pytest.approx(r["tokens"] / (r[p]["ms"] / 1e3))
    assert amp_speed.tokens_per_second(batches[8], 0.5) == 96.0
    with pytest.raises(ValueError, match="precisions must start"):
        amp_speed.by_batch(tiny, batches, device="cpu", precisions=("bf16", "fp32"))
    with pytest.raises(ValueError, match="precisions must be one of"):
        amp_speed.by_batch(tiny, batches, device="cpu", precisions=("fp32", "fp8"))
    with pytest.raises(ValueError, match=r"batches\[8\] holds 4"):
        amp_speed.by_batch(tiny, {8: batches[4]}, device="cpu")


def test_autocast_policy_reads_the_two_columns():
    assert amp.autocast_policy("bfloat16", "bfloat16", "bfloat16") == "casts to bfloat16"
    assert amp.autocast_policy("float32", "float32", "bfloat16") == "forces FP32"
    assert amp.autocast_policy("float32", "bfloat16", "bfloat16") == "follows its inputs"
    rows = {op: amp.autocast_policy(a, b, "bfloat16")
            for op, a, b in amp.op_output_dtypes("cpu", torch.bfloat16)}
    assert rows["linear"] == rows["matmul"] == "casts to bfloat16"   # autocast's whole point
    assert rows["add"] == "follows its inputs"


def test_speed_by_width_builds_each_width_and_measured_recipe_needs_the_whole_interval():
    from course_lib.precision import speed as amp_speed
    from course_lib.measure.verdicts import Estimate
    batch = toy_loader(1, batch=4)[0]
    rows = amp_speed.by_width(50, [16, 32], batch, device="cpu", precisions=("fp32", "bf16"),
                              repeats=2, warmup=0)
    assert [r["width"] for r in rows] == [16, 32] and all(r["batch"] == 4 for r in rows)
    assert all(set(r) >= {"fp32", "bf16"} and "fp16" not in r for r in rows)
    with pytest.raises(ValueError, match="widths must be multiples of 4"):
        amp_speed.by_width(50, [18], batch, device="cpu")
    # measured_recipe: the fastest recipe whose whole 95% interval is above 1, else fp32
    row = {"batch": 8, "fp32": {"speedup": Estimate(1.0, 0.0, 2)},
           "bf16": {"speedup": Estimate(1.5, 0.05, 4)},          # 1.5 - 2.78 * 0.05 > 1: pays
           "fp16": {"speedup": Estimate(1.8, 0.5, 2)}}           # 1.8 - 4.30 * 0.5 < 1: not shown
    assert amp_speed.measured_recipe(row) == "bf16"
    row["fp16"]["speedup"] = Estimate(1.8, 0.05, 4)
    assert amp_speed.measured_recipe(row) == "fp16"
    slow = {"fp32": {"speedup": Estimate(1.0, 0.0, 2)},
            "bf16": {"speedup": Estimate(0.06, 0.01, 2)}}
    assert amp_speed.measured_recipe(slow) == "fp32"


def test_profile_groups_self_time_and_amdahl_bounds_the_step():
    from course_lib.measure.profile import amdahl_bound, time_shares
    a = torch.randn(256, 256)
    prof = time_shares(lambda: a @ a, repeats=2)
    assert sum(prof["shares"].values()) == pytest.approx(1.0)
    assert prof["shares"]["matmul"] > 0.9 and prof["top"][0][0] == "aten::mm"
    mixed = time_shares(lambda: (a @ a).exp().sum(), repeats=2)
    assert mixed["shares"]["matmul"] < prof["shares"]["matmul"]
    assert amdahl_bound(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert amdahl_bound(0.0, 10.0) == 1.0 and amdahl_bound(1.0, 3.0) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="share must be in"):
        amdahl_bound(1.5, 2.0)
    with pytest.raises(ValueError, match="repeats must be"):
        time_shares(lambda: None, repeats=0)
