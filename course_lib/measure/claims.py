"""The claims the course checks: what the two source articles say, and how a lesson judges it.

Article ``000`` (why Transformers run out of memory; padding, batching, AMP, float formats) and
``004`` (ten optimization techniques) are the texts learners often arrive with. Each claim keeps
the original sentence, an English rendering, the lesson that checks it and the rule
(``course_lib.measure.verdicts.Rule``) its verdict follows. The lesson measures, calls ``judge`` and
records the verdict (``Recorder.verdict``); ``make report`` opens with the table of them all.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from course_lib.measure.verdicts import Rule

# The most test accuracy (points) a technique may cost and still count as "keeping" accuracy.
# One table: the lessons' claims and lesson 11's ladder rungs use the same bounds.
ACCURACY_TOLERANCE_POINTS = {
    "amp": 0.5,      # a trained model run under 16-bit autocast (the ladder's rung)
    "prune": 1.0,    # pruning (lesson 05); the ladder's pruned rung gets a short fine-tune too
    "distill": 2.0,  # a distilled student against its teacher (lessons 06 and 11)
    "int8": 1.0,     # dynamic int8 against FP32, "without significantly lowering accuracy" (07)
}
PRUNE_TOLERANCE = ACCURACY_TOLERANCE_POINTS["prune"]
DISTILL_TOLERANCE = ACCURACY_TOLERANCE_POINTS["distill"]
INT8_TOLERANCE = ACCURACY_TOLERANCE_POINTS["int8"]

ARTICLES = {"000": "Transformer OOM and acceleration strategies (padding, batching, AMP, FP16)",
            "004": "Optimizing large Transformers: ten techniques"}


@dataclass(frozen=True)
class Claim:
    id: str
    article: str          # "000" or "004"
    original: str         # the article's own words
    english: str          # what it says, in English
    lesson: str           # the notebook stem that checks it
    rule: Rule


@dataclass(frozen=True)
class Verdict:
    claim: str
    outcome: str          # "holds", "fails" or "inconclusive"
    value: float | None
    se: float
    evidence: str         # the measurement in words, with the hardware it ran on
    dof: float = math.inf  # degrees of freedom behind se (inf: a large-sample normal interval)

    def as_dict(self) -> dict:
        return {"claim": self.claim, "outcome": self.outcome, "value": self.value,
                "se": self.se, "dof": None if math.isinf(self.dof) else self.dof,
                "evidence": self.evidence}

    def markdown(self) -> str:
        c = CLAIMS[self.claim]
        return (f"**Claim** ({c.article}): “{c.original}” — {c.english}  \n"
                f"**Evidence:** {self.evidence}  \n"
                f"**Rule:** {c.rule.text(exact=self.se == 0)}.  \n**Verdict: {self.outcome}.**")


_CLAIMS = [
    Claim("params_drive_memory", "000",
          "參數數量龐大：Transformer模型通常包含大量的參數……這些參數需要大量的內存來存儲權重和梯度。",
          "The many parameters are why Transformers run out of memory (weights and gradients).",
          "00_welcome",
          Rule("parameter memory (weights, gradients, AdamW state) ÷ stored activations, "
               "training the teacher on 32 reviews of 512 tokens", ">=", 1.0)),
    Claim("activations_grow_with_length", "000",
          "自注意力機制……導致計算復雜度和內存需求隨著輸入長度的增加而顯著增加。"
          "激活和中間狀態存儲……增加了額外的內存負擔。",
          "Memory grows markedly with input length: attention and the stored activations.",
          "00_welcome",
          Rule("the growth exponent k of the activations the teacher stores with attention as "
               "written (softmax(QKᵀ/√d)V, the score matrices kept), memory ∝ length^k between the "
               "lesson's two lengths; 1 = in proportion to length, 2 = quadratic: it holds when "
               "attention makes the growth closer to quadratic than to linear", ">=", 1.5)),
    Claim("fixed_size_inputs", "000",
          "許多機器學習模型（尤其是基于Transformer的模型）需要輸入數據具有固定的尺寸",
          "Transformers need inputs of one fixed size.",
          "01_padding",
          Rule("the number of different sequence lengths the model refused", ">=", 1.0)),
    Claim("padding_must_not_affect", "000",
          "填充部分不應影響到模型的學習。因此通常需要使用注意力掩碼",
          "Padding must not affect the model, which is what the attention mask is for.",
          "01_padding",
          Rule("the largest change of a logit caused by padding, with the mask", "<=", 1e-5)),
    Claim("fixed_pad_snippet_keeps_tokens", "000",
          "通過這種固定長度填充和相應的處理方法，可以使得基于Transformer的模型能夠有效地處理不同長度的"
          "序列數據。",
          "The article's fixed_pad_sequences lets a Transformer handle sequences of different "
          "lengths.",
          "01_padding",
          Rule("test accuracy of the model fed the article's fixed_pad_sequences (it truncates "
               "without a report and returns no mask) at lesson 01's SNIPPET_LENGTH, minus with "
               "pad_batch and the mask at full length (points, paired over test reviews)", ">=",
               -2.0)),
    Claim("dynamic_padding_faster", "000",
          "這樣雖然每個批次的長度是不同的，但是批次內部的長度是相同的，可以加快處理速度。",
          "Dynamic padding (pad each batch to its own longest sequence) speeds up processing.",
          "01_padding",
          Rule("inference speed-up of dynamic padding over padding to 512: the geometric mean over random test "
               "batches of each batch's interleaved speed-up", ">=", 1.1)),
    Claim("uniform_length_faster", "000",
          "通過等長匹配的策略，減少了填充量，這樣也可以加速計算",
          "Grouping sequences of similar length reduces padding and speeds up computation.",
          "02_batching",
          Rule("training speed-up of length-grouped batches over dynamic padding", ">=", 1.1)),
    Claim("float_layouts", "000",
          "雙精度(FP64)……有效精度為52位。單精度(FP32)……有效精度為23位。半精度(FP16)……有效精度為10位。",
          "FP64/FP32/FP16 have 52/23/10 bits of precision.",
          "03_floating_point",
          Rule("the number of formats whose stated bits differ from the stored fraction bits",
               "<=", 0.0)),
    Claim("fp16_faster_training", "000",
          "所以Fp16可以提高內存節省，并可以大大提高模型訓練的速度。",
          "FP16 greatly speeds up training.",
          "04_mixed_precision",
          Rule("training-step speed-up of FP16 autocast over FP32 on this device", ">=", 1.2)),
    Claim("fp16_saves_memory", "000",
          "所以Fp16可以提高內存節省",
          "FP16 saves memory.",
          "04_mixed_precision",
          Rule("training memory (FP32 parameter state + stored activations) under FP16 autocast "
               "÷ in FP32, counted exactly, on the teacher's own training batch", "<=", 0.8)),
    Claim("fp16_bad_for_regression", "000",
          "對于回歸這種需要精確數值的任務Fp16的表現并不好。",
          "FP16 does badly on regression, which needs precise values.",
          "04_mixed_precision",
          Rule("regression error (MAE) with FP16 + GradScaler ÷ with FP32", ">=", 1.1)),
    Claim("pruning_keeps_accuracy", "004",
          "去除冗余的参数和连接，可以大幅减小模型大小和计算复杂度，同时保持甚至提高模型精度。",
          "Pruning redundant weights shrinks the model while keeping or even improving accuracy.",
          "05_pruning",
          Rule("test accuracy change after pruning 20% of the weights (points)", ">=",
               -PRUNE_TOLERANCE)),
    Claim("pruning_shrinks_model", "004",
          "去除冗余的参数和连接，可以大幅减小模型大小",
          "Pruning redundant weights greatly shrinks the model.",
          "05_pruning",
          Rule("checkpoint bytes (torch.save of the state_dict) of the article's pruned model "
               "(random 20% per layer, as its snippet leaves it) ÷ the dense model's", "<=", 0.8)),
    Claim("pruning_cuts_compute", "004",
          "去除冗余的参数和连接，可以大幅减小……计算复杂度",
          "Pruning redundant weights greatly cuts the computation.",
          "05_pruning",
          Rule("inference speed-up of the article's pruned model over the dense one (batch 32, "
               "interleaved repeats, mean of paired ratios)", ">=", 1.2)),
    Claim("distillation_keeps_accuracy", "004",
          "利用预训练的大型Transformer模型，我们可以将知识迁移到更小的学生模型中，从而实现高效推理。",
          "Distillation moves the big model's knowledge into a smaller student, for efficient "
          "inference (the student keeps the teacher's accuracy).",
          "06_distillation",
          Rule("test accuracy of the best student trained here that learned from the teacher "
               "(chosen on validation) minus the teacher's, in points (noise: the test reviews, "
               "paired, for one seed; the seeds for several); the course's bound, shared with "
               "lesson 11", ">=", -DISTILL_TOLERANCE)),
    Claim("quantization_raises_throughput", "004",
          "将Transformer模型的参数和激活函数转换为低精度格式（如 int8 或 float16），"
          "我们可以大幅减少计算成本并提高吞吐量",
          "Converting weights and activations to int8 greatly cuts compute cost and raises "
          "throughput.",
          "07_quantization",
          Rule("batch-32 speed-up of PyTorch's dynamic int8 over the FP32 model, on the CPU",
               ">=", 1.2)),
    Claim("quantization_keeps_accuracy", "004",
          "……而不会显著降低模型精度。",
          "... without significantly lowering accuracy.",
          "07_quantization",
          Rule("test accuracy change of the dynamic int8 model (points)", ">=", -INT8_TOLERANCE)),
    Claim("quantization_keeps_accuracy_real_model", "004",
          "……而不会显著降低模型精度。",
          "... without significantly lowering accuracy: checked on a real pretrained model.",
          "12_real_model",
          Rule("share of sentences whose nearest neighbour under dynamic int8 is the FP32 "
               "model's (all-MiniLM-L6-v2)", ">=", 0.95)),
    Claim("ddp_improves_stability", "004",
          "分布式训练……可以显著缩短训练时间，同时提高模型的稳定性和鲁棒性。",
          "Distributed training shortens training and also makes the model more stable and "
          "robust.",
          "08_ddp",
          Rule("the largest parameter difference between DDP and one process trained on the "
               "same global batch (a model DDP changes must differ from it)", ">=", 1e-3)),
    Claim("ddp_shortens_training", "004",
          "分布式训练就像在一个庞大的计算机网络中同时训练多个模型。它可以显著缩短训练时间……",
          "Distributed training markedly shortens training time.",
          "08_ddp",
          Rule("speed of a DDP step on this machine's ranks ÷ the fastest single process, same "
               "global batch and steps (per-round ratio, rounds interleaved)", ">=", 1.2)),
    Claim("multicore_speeds_up", "004",
          "并行化利用多核CPU、GPU或TPU等并行计算架构，可以同时处理多个任务，显著加快训练和推理速度。",
          "Parallelism over multi-core CPUs (or GPUs, TPUs) markedly speeds up training.",
          "08_ddp",
          Rule("speed of a training step of one process using every CPU core ÷ the same step on "
               "one thread (per-round ratio, rounds interleaved)", ">=", 1.2)),
    Claim("sparse_attention_cuts_compute", "004",
          "优化注意力机制的计算，如使用稀疏注意力……可以大幅减少计算复杂度并降低内存消耗。",
          "Sparse attention greatly reduces the computation (and memory) of attention.",
          "09_attention",
          Rule("time of a kernel that skips the window's masked tiles (FlexAttention's block "
               "mask where it runs, else the course's tiled kernel) ÷ dense SDPA's time without a "
               "mask, same inputs, interleaved", "<=", 0.5)),
    Claim("lowrank_attention_cuts_compute", "004",
          "优化注意力机制的计算，如使用……分解注意力……可以大幅减少计算复杂度并降低内存消耗。",
          "Factorized (low-rank) attention greatly reduces the computation of attention.",
          "09_attention",
          Rule("time of low-rank attention (keys and values pooled to 256 rows, Linformer-style) ÷ "
               "dense SDPA's time, same inputs at 4,096 tokens, interleaved", "<=", 0.5)),
    Claim("optimizations_keep_accuracy", "004",
          "优化通常不会显著降低模型精度，甚至可能会通过减少过拟合来提高精度。",
          "Optimization usually does not significantly lower accuracy, and may even raise it.",
          "11_capstone",
          Rule("test accuracy of the model with every available technique of the ladder "
               "stacked, minus the baseline's (points, paired over the test reviews)", ">=", -2.0)),
    Claim("adaptive_optimizers_converge_faster", "004",
          "选择合适的优化器，如Adam、AdamW或LAMB，可以加快模型收敛速度，缩短训练时间。",
          "Choosing an optimizer such as Adam, AdamW or LAMB speeds up convergence.",
          "10_optimizers_compile_hardware",
          Rule("mean validation accuracy over the run (the area under the learning curve: "
               "convergence speed) of the best of Adam/AdamW/LAMB minus the best SGD variant, "
               "each at the best of a learning-rate grid chosen on the validation split and "
               "scored on the test split, same steps and schedule (points, per seed)", ">=", 2.0)),
]
CLAIMS: dict[str, Claim] = {c.id: c for c in _CLAIMS}


def judge(claim_id: str, value: float | None, *, se: float = 0.0, dof: float = math.inf,
          evidence: str) -> Verdict:
    """The verdict of ``claim_id`` for a measured ``value`` (standard error ``se`` from evidence
    with ``dof`` degrees of freedom: ``verdicts.Estimate`` carries all three)."""
    if claim_id not in CLAIMS:
        raise ValueError(f"claim_id must be one of {sorted(CLAIMS)}, got {claim_id!r}")
    outcome = CLAIMS[claim_id].rule.judge(value, se, dof)
    return Verdict(claim_id, outcome, None if value is None else float(value), float(se),
                   evidence, float(dof))


def for_lesson(stem: str) -> list[Claim]:
    return [c for c in _CLAIMS if c.lesson == stem]
