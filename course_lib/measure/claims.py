"""The claims the course checks: what the source articles say, as data.

Article ``000`` (why Transformers run out of memory; padding, batching, AMP, float formats) and
``004`` (ten optimization techniques) are the texts learners often arrive with. Each claim keeps
the original sentence, an English rendering, the lesson that checks it, the rule
(``course_lib.measure.verdicts.Rule``) its verdict follows and the condition that decides it.
A statement that follows from arithmetic (a count, a calculator, a FLOP formula) or is exact is
a ``Demonstration``, shown with its formula and never judged. The lesson measures, calls
``measure.judging.judge_over`` and records the verdict (``Recorder.verdict``); ``ui.verdicts``
draws its map and sentence; ``make report`` opens with the table of them all.
"""
from __future__ import annotations

from dataclasses import dataclass

from course_lib.measure.verdicts import Rule

# The most test accuracy (points) a technique may cost and still count as "keeping" accuracy.
# One table: the lessons' claims and lesson 14's ladder rungs use the same bounds.
ACCURACY_TOLERANCE_POINTS = {
    "amp": 0.5,      # a trained model run under 16-bit autocast (the ladder's rung)
    "prune": 1.0,    # pruning (lesson 05); the ladder's pruned rung gets a short fine-tune too
    "distill": 2.0,  # a distilled student against its teacher (lessons 06 and 14)
    "int8": 1.0,     # dynamic int8 against FP32, "without significantly lowering accuracy" (07)
    "order": 1.0,    # a batch order (the article's sorted, never-shuffled batches) against
                     # shuffled (02)
}
PRUNE_TOLERANCE = ACCURACY_TOLERANCE_POINTS["prune"]
DISTILL_TOLERANCE = ACCURACY_TOLERANCE_POINTS["distill"]
INT8_TOLERANCE = ACCURACY_TOLERANCE_POINTS["int8"]
ORDER_TOLERANCE = ACCURACY_TOLERANCE_POINTS["order"]

ARTICLES = {"000": "Transformer OOM and acceleration strategies (padding, batching, AMP, FP16)",
            "004": "Optimizing large Transformers: ten techniques",
            # Lesson 16 (generation) answers the works learners read on it, quoted as written:
            "Raschka": "S. Raschka, LLMs-from-scratch, ch04/03_kv-cache/README.md (the KV cache)",
            "Ainslie": "J. Ainslie et al., GQA: Training Generalized Multi-Query Transformer "
                       "Models from Multi-Head Checkpoints (EMNLP 2023), abstract",
            "Leviathan": "Y. Leviathan, M. Kalman, Y. Matias, Fast Inference from Transformers via "
                         "Speculative Decoding (ICML 2023), abstract"}


@dataclass(frozen=True)
class Condition:
    """What decides a claim: the quantity a lesson sweeps to find where the claim holds."""

    name: str             # as it reads before a value: "width", "length"
    unit: str = ""        # after the value: "tokens"; "" for none
    why: str = ""         # one line: why this, and not the budget, decides the claim
    over: str = ""        # the condition as a heading ("Verdict over pool size"); default: name

    def at(self, x: float) -> str:
        return f"{self.name} {x:,g}" + ("%" if self.unit == "%" else f" {self.unit}" if self.unit
                                        else "")


@dataclass(frozen=True)
class Claim:
    id: str
    article: str          # "000" or "004"
    original: str         # the article's own words
    english: str          # what it says, in English
    lesson: str           # the notebook stem that checks it
    rule: Rule
    condition: Condition | None = None   # what decides it (swept by ``judge_over``); None: a
                                         # claim the lesson still judges at one point
    value_format: str = ""               # how its values print (``Estimate`` format spec);
                                         # "": ".2f×" for a ratio, ".3g" otherwise
    axis: str = ""                       # the measured quantity as a short axis label (the map)
    exact_measurement: str = ""          # why a verdict of exact values (se 0) is still a
                                         # measurement that could come out otherwise; empty: an
                                         # all-exact sweep is arithmetic and is refused

    @property
    def fmt(self) -> str:
        """The format spec its values print with (``value_format``, or the default for its
        kind: a ratio with two decimals and its ×, anything else three significant digits)."""
        return self.value_format or (".2f×" if self.rule.log else ".3g")


@dataclass(frozen=True)
class Demonstration:
    """A fact the course shows exactly (a bit layout, an equivalence): not a verdict, because
    short of a bug it cannot come out otherwise. It is shown with its check and its numbers."""

    id: str
    article: str
    original: str
    english: str
    lesson: str
    check: str            # the exact check, in words
    shows: str            # what the check shows about the statement: true, false, or true when...
    formula: str = ""     # the arithmetic it follows from, when it is a count or a calculator


_CLAIMS = [
    Claim("activations_grow_with_length", "000",
          "自注意力機制……導致計算復雜度和內存需求隨著輸入長度的增加而顯著增加。"
          "激活和中間狀態存儲……增加了額外的內存負擔。",
          "Memory grows markedly with input length, through attention and the stored "
          "activations: faster than in proportion (nearer L² than L).",
          "00_welcome",
          Rule("k, the local growth exponent of the stored activations at this length (the "
               "log-log slope of the curve c + a·L + b·L² the counts follow; 1: in proportion, "
               "2: quadratic, 1.5: halfway)", ">=", 1.5),
          Condition("length", "tokens", why="every layer stores L × width numbers per review "
                                            "plus, with attention as written, heads × L² scores: "
                                            "the L² term wins once L is large against the width. "
                                            "A fused kernel (SDPA) keeps no L² scores, only the "
                                            "ALiBi bias, one heads × L² tensor shared by the "
                                            "batch"),
          value_format=".2f",
          exact_measurement="the bytes are what autograd saves for backward, counted by hooks on a "
                            "real forward pass of each attention: a kernel that stored the scores "
                            "(or did not) would change them, so the count could come out otherwise",
          axis="growth exponent k (memory ∝ L^k)"),
    Claim("fixed_pad_snippet_keeps_tokens", "000",
          "通過這種固定長度填充和相應的處理方法，可以使得基于Transformer的模型能夠有效地處理不同長度的"
          "序列數據。",
          "The article's fixed_pad_sequences (with the attention mask it is paired with) lets a "
          "Transformer handle sequences of different lengths.",
          "01_padding",
          Rule("test accuracy (points, paired over the test reviews) at each max_length minus "
               "at full length, the reviews fixed-padded as the article's fixed_pad_sequences "
               "does (it truncates longer ones without a report) and given the attention mask",
               ">=", -2.0),
          Condition("max_length", "tokens",
                    why="the snippet keeps every token of a review shorter than max_length and "
                        "cuts the rest: what it costs depends on how many reviews are longer, "
                        "and on whether the tokens that decide the label are among those cut"),
          value_format="+.1f",
          axis="accuracy change vs full length (points)"),
    Claim("dynamic_padding_faster", "000",
          "這樣雖然每個批次的長度是不同的，但是批次內部的長度是相同的，可以加快處理速度。",
          "Dynamic padding (pad each batch to its own longest sequence) speeds up processing.",
          "01_padding",
          Rule("inference speed-up of dynamic padding over padding to 512 (×; the geometric mean "
               "over random test batches of each batch's interleaved speed-up)", ">=", 1.1,
               log=True),
          Condition("batch size",
                    why="a batch is as wide as its longest review: the more reviews it holds, the "
                        "nearer that is to 512 and the less dynamic padding saves"),
          value_format=".2f×",
          axis="dynamic ÷ pad-to-512 speed (×)"),
    Claim("uniform_length_faster", "000",
          "通過等長匹配的策略，減少了填充量，這樣也可以加速計算",
          "Grouping sequences of similar length reduces padding and speeds up computation.",
          "02_batching",
          Rule("training speed-up of an epoch of length-grouped batches (bucketed: sorted within "
               "pools, batch order shuffled) over an epoch of random batches with dynamic padding "
               "(×; sampled steps of both, interleaved, fitted against batch width and summed "
               "over each epoch's batches: verdicts.regression_ratio)", ">=", 1.1, log=True),
          Condition("a pool of", "reviews", over="pool size",
                    why="a batch of similar lengths needs reviews to choose from: sorted within a "
                        "pool of 128 reviews, a batch of 32 holds a quarter of the pool, short to "
                        "long; within thousands, almost nothing is padding"),
          value_format=".2f×",
          axis="grouped ÷ random epoch speed (×)"),
    Claim("sorted_batches_keep_accuracy", "000",
          "等長匹配通過基于序列長度將數據集劃分為桶，然后從這些桶中采樣批次來實現的。",
          "Length matching splits the data into buckets by length and samples batches from them "
          "(while its snippet sorts once and walks the batches in order).",
          "02_batching",
          Rule("test accuracy of the student trained on the article's sorted, never-shuffled "
               "batches minus on shuffled buckets (points; same reviews, initialisation and "
               "schedule, paired by seed)", ">=", -ORDER_TOLERANCE),
          Condition("a budget of", "epochs", over="training budget",
                    why="the sorted order ends every epoch on the longest reviews, the same way "
                        "each time; what that costs can change as training goes on, so it is "
                        "judged at budgets up to where test accuracy stops improving"),
          value_format="+.1f",
          axis="sorted − bucketed accuracy (points)"),
    Claim("fp16_faster_training", "000",
          "所以Fp16可以提高內存節省，并可以大大提高模型訓練的速度。",
          "FP16 greatly speeds up training.",
          "04_mixed_precision",
          Rule("training-step speed-up of FP16 autocast with a GradScaler over FP32 on this "
               "device (×; geometric mean of interleaved paired repeats)", ">=", 1.2, log=True),
          Condition("batch size",
                    why="a small step is bound by kernel launches and by the work autocast leaves "
                        "in FP32; only as the batch grows do the matmuls, the part 16 bits speeds "
                        "up, take over the step"),
          value_format=".2f×",
          axis="FP16 ÷ FP32 step speed (×)"),
    Claim("fp16_bad_for_regression", "000",
          "對于回歸這種需要精確數值的任務Fp16的表現并不好。",
          "FP16 does badly on regression, which needs precise values.",
          "04_mixed_precision",
          Rule("regression test error (MAE) with FP16 autocast + GradScaler ÷ with FP32, "
               "geometric mean over seeds", ">=", 1.1, log=True),
          Condition("an offset of", "stars",
                    why="under autocast the prediction is itself a 16-bit number, on steps of up "
                        "to 1/1,024 of its size (FP16): ratings of 1-5 stars sit on steps of at "
                        "most 0.004 stars, far below the error a model makes; the same ratings "
                        "stored as offset + stars (an unstandardised target) sit on steps of up to "
                        "offset/1,024, which from some offset is the error",
                    over="target offset (stars added to every rating)"),
          value_format=".2f×",
          axis="FP16 ÷ FP32 test MAE (×)"),
    Claim("pruning_keeps_accuracy", "004",
          "去除冗余的参数和连接，可以大幅减小模型大小和计算复杂度，同时保持甚至提高模型精度。",
          "Pruning redundant weights shrinks the model while keeping or even improving accuracy.",
          "05_pruning",
          Rule("test accuracy change of the pruned model after its fine-tune, points (mean over "
               "seeds; the cut alone at 0 steps)", ">=", -PRUNE_TOLERANCE),
          Condition("fine-tune budget", "steps",
                    why="the cut takes accuracy away and fine-tuning gives it back: a pruned model "
                        "keeps the dense model's accuracy after enough steps or not at all, so one "
                        "short fine-tune only reports the budget",
                    over="fine-tune budget (steps of batch 32 after the cut)"),
          value_format="+.2f",
          axis="pruned − dense accuracy (points)"),
    Claim("pruning_cuts_compute", "004",
          "去除冗余的参数和连接，可以大幅减小……计算复杂度",
          "Pruning redundant weights greatly cuts the computation.",
          "05_pruning",
          Rule("inference speed-up of the pruned model over the dense one (batch 32, "
               "interleaved repeats, geometric mean of paired ratios)", ">=", 1.2, log=True),
          Condition("weights removed", "%",
                    why="a dense kernel multiplies zeros as fast as any number: only weights that "
                        "are gone, or a sparse kernel at a sparsity that outruns its index cost, "
                        "save time",
                    over="share of the weights removed (%)"),
          value_format=".2f×",
          axis="pruned ÷ dense speed (×)"),
    Claim("distillation_keeps_accuracy", "004",
          "利用预训练的大型Transformer模型，我们可以将知识迁移到更小的学生模型中，从而实现高效推理。",
          "Distillation moves the big model's knowledge into a smaller student, for efficient "
          "inference (the student keeps the teacher's accuracy).",
          "06_distillation",
          Rule("test accuracy of a student that learned from the teacher minus the teacher's, "
               "in points (mean over seeds, the same steps for every student of a size); the "
               "course's bound, shared with lesson 14", ">=", -DISTILL_TOLERANCE),
          Condition("transfer set", "reviews",
                    why="the teacher can only pass on what it is asked about: with no unlabelled "
                        "reviews it adds soft targets to the labels the student has anyway, with "
                        "many it labels data nobody labelled; and a student too small for the "
                        "task stays below the teacher whatever it is given",
                    over="transfer set (unlabelled reviews the teacher labels)"),
          value_format="+.2f",
          axis="student − teacher accuracy (points)"),
    Claim("distillation_soft_targets_help", "004",
          "利用预训练的大型Transformer模型，我们可以将知识迁移到更小的学生模型中",
          "The teacher's knowledge moves into the student: its probabilities (dark knowledge) "
          "teach more than its answers alone.",
          "06_distillation",
          Rule("test accuracy of the student trained on the teacher's soft targets minus the same "
               "student trained on hard labels for the same reviews (the teacher's top class on "
               "the transfer set), same steps and seeds, paired by seed, in points", ">=", 0.0),
          Condition("transfer set", "reviews",
                    why="soft targets matter most where the hard labels are few: with only the "
                        "4,000 labelled reviews they add the teacher's confidence to each; with "
                        "12,000 reviews the teacher labelled, its answers alone may carry most "
                        "of what it knows",
                    over="transfer set (unlabelled reviews the teacher labels)"),
          value_format="+.2f",
          axis="soft − hard targets accuracy (points)"),
    Claim("quantization_raises_throughput", "004",
          "将Transformer模型的参数和激活函数转换为低精度格式（如 int8 或 float16），"
          "我们可以大幅减少计算成本并提高吞吐量",
          "Converting weights and activations to int8 (or float16) greatly cuts compute cost and "
          "raises throughput.",
          "07_quantization",
          Rule("speed-up of the low-precision model over FP32 (PyTorch's dynamic int8 or a BF16 "
               "cast on a CPU), interleaved repeats, geometric mean of paired ratios",
               ">=", 1.2, log=True),
          Condition("width", "",
                    why="int8 and BF16 make the matrix multiply cheaper and add conversions around "
                        "it (quantize and rescale, casts): the multiply's work grows as width², "
                        "the conversions' as width, so narrow layers lose and wide ones can win, "
                        "by how much depending on the CPU's int8 and BF16 instructions",
                    over="width (model dimension d of a d → 2d → d block)"),
          value_format=".2f×",
          axis="low precision ÷ FP32 speed (×)"),
    Claim("quantization_keeps_accuracy", "004",
          "……而不会显著降低模型精度。",
          "... without significantly lowering accuracy.",
          "07_quantization",
          Rule("test accuracy change of the dynamic int8 model (points)", ">=", -INT8_TOLERANCE),
          value_format="+.2f"),
    Claim("quantization_keeps_accuracy_real_model", "004",
          "……而不会显著降低模型精度。",
          "... without significantly lowering accuracy: checked on a real pretrained model.",
          "15_real_model",
          Rule("topic accuracy under dynamic int8 minus FP32 (all-MiniLM-L6-v2's embeddings, "
               "the head trained on FP32's; the standard library's docstrings by topic), in "
               "points", ">=", -INT8_TOLERANCE),
          Condition("activations of", "bits",
                    why="what int8 loses is its rounding: PyTorch's dynamic int8 rounds each "
                        "batch's activations to 7 bits by default and the weights with one scale "
                        "per tensor; an 8th bit halves the activations' rounding step (where the "
                        "CPU's int8 arithmetic allows it) and a scale per output channel shrinks "
                        "the weights' where rows differ in range",
                    over="activation bits (weights: one scale per tensor or per output "
                         "channel)"),
          value_format="+.2f",
          axis="int8 − FP32 topic accuracy (points)"),
    Claim("ddp_improves_stability", "004",
          "分布式训练……可以显著缩短训练时间，同时提高模型的稳定性和鲁棒性。",
          "Distributed training shortens training and also makes the model more stable and "
          "robust.",
          "08_ddp",
          Rule("final test accuracy (2,000 reviews) at the global batch that DDP's ranks train "
               "minus at one device's batch (16), same steps and recipe, paired by seed, in points",
               ">=", 0.0),
          Condition("global batch", "sequences",
                    why="DDP changes nothing but the global batch (it computes exactly what one "
                        "process computes with N·b sequences): whatever it does to the model is "
                        "what a larger batch does, which one device gets too, with gradient "
                        "accumulation",
                    over="global batch (one device's 16 × ranks)"),
          value_format="+.2f",
          axis="large − small batch accuracy (points)"),
    Claim("ddp_shortens_training", "004",
          "分布式训练就像在一个庞大的计算机网络中同时训练多个模型。它可以显著缩短训练时间……",
          "Distributed training markedly shortens training time.",
          "08_ddp",
          Rule("speed of a DDP step on N ranks, each on a core of its own, ÷ one process on one "
               "core, same global batch and steps (per-round ratio, rounds interleaved)", ">=",
               1.2, log=True),
          Condition("batch per rank", "sequences",
                    why="each rank computes on its own batch, while what a step costs beyond "
                        "that (the all-reduce of the whole gradient, the processes' own overheads) "
                        "does not shrink with it: the work per step decides whether the time a "
                        "rank saves outweighs it"),
          axis="DDP ÷ one core step speed (×)"),
    Claim("multicore_speeds_up", "004",
          "并行化利用多核CPU、GPU或TPU等并行计算架构，可以同时处理多个任务，显著加快训练和推理速度。",
          "Parallelism over multi-core CPUs (or GPUs, TPUs) markedly speeds up training.",
          "08_ddp",
          Rule("speed of a training step of one process using every CPU core ÷ the same step on "
               "one thread (per-round ratio, rounds interleaved)", ">=", 1.2, log=True),
          Condition("batch", "sequences",
                    why="threads split each operation's work, and every parallel region costs "
                        "a fixed synchronisation: small operations do not fill the cores"),
          axis="all cores ÷ one thread speed (×)"),
    Claim("sparse_attention_cuts_compute", "004",
          "优化注意力机制的计算，如使用稀疏注意力……可以大幅减少计算复杂度并降低内存消耗。",
          "Sparse attention greatly reduces the computation of attention (the memory half of "
          "the sentence is measured beside it, not judged).",
          "11_sparse_attention",
          Rule("time of a kernel that skips the tiles a ±64-token window leaves empty "
               "(FlexAttention's block mask where it runs, else the course's tiled kernel) ÷ "
               "dense SDPA's time without a mask, same inputs, interleaved", "<=", 0.5, log=True),
          Condition("length", "tokens",
                    why="a fixed window touches about 3 / (L / block) of the tiles: the work a "
                        "skipping kernel saves grows with L, while each kept tile costs more "
                        "than a tile of SDPA's fused kernel; short sequences have few tiles to "
                        "skip"),
          axis="skipping kernel ÷ dense SDPA time (×)"),
    Claim("lowrank_attention_cuts_compute", "004",
          "优化注意力机制的计算，如使用……分解注意力……可以大幅减少计算复杂度并降低内存消耗。",
          "Factorized (low-rank) attention greatly reduces the computation of attention.",
          "11_sparse_attention",
          Rule("time of low-rank attention (keys and values pooled to a fixed rank r, "
               "Linformer-style) ÷ dense SDPA's time, same inputs, interleaved", "<=", 0.5,
               log=True),
          Condition("length", "tokens", over="length (tokens), at a fixed rank r",
                    why="Linformer keeps the rank k fixed as the sequence grows: the work falls "
                        "from dense attention's 4·L²·d FLOPs to about 8·L·r·d (scores, weighted "
                        "values and the r × L projections of K and V), while the softmax and each "
                        "call's fixed cost stay: at short lengths, a few times r, nothing is "
                        "saved; whether and from where it pays is measured, not counted"),
          axis="low rank ÷ dense SDPA time (×)"),
    Claim("optimizations_keep_accuracy", "004",
          "优化通常不会显著降低模型精度，甚至可能会通过减少过拟合来提高精度。",
          "Optimization usually does not significantly lower accuracy, and may even raise it.",
          "14_capstone",
          Rule("test accuracy of the teacher with every technique of the ladder that keeps it "
               "stacked (bucketing, SDPA, mixed precision where it runs, int8, pruning with its "
               "fine-tune), minus the baseline's (points, paired over the test reviews); the "
               "distilled student, another model, is reported beside it", ">=", -2.0)),
    Claim("adaptive_optimizers_converge_faster", "004",
          "选择合适的优化器，如Adam、AdamW或LAMB，可以加快模型收敛速度，缩短训练时间。",
          "Choosing a suitable optimizer such as Adam, AdamW or LAMB speeds up convergence and "
          "shortens training time (judged: convergence over the budget; the lesson reads training "
          "time on its live run's clock beside it, not judged).",
          "12_optimizers",
          Rule("mean test accuracy over the run (the area under the learning curve: "
               "convergence speed) of the best of Adam/AdamW/LAMB minus the best SGD variant, "
               "each at the best of a learning-rate grid chosen on the validation split, same "
               "steps, schedule and seeds, no gradient clipping (points, paired by seed)",
               ">=", 2.0),
          Condition("a budget of", "steps", over="training budget",
                    why="how soon a run gets good depends on how long it is: over a few dozen "
                        "steps the optimizer whose first steps are largest leads; given enough "
                        "steps every optimizer that can reach the optimum does, and only the "
                        "early part of the curve tells them apart"),
          axis="adaptive − SGD mean accuracy (points)"),
    Claim("kv_cache_speeds_generation", "Raschka",
          "a KV cache stores intermediate key (K) and value (V) computations for reuse during "
          "inference, which results in a substantial speed-up when generating responses",
          "A KV cache gives a substantial speed-up when generating text.",
          "16_generation",
          Rule("tokens/s of greedy decoding with the cache ÷ without it (the whole sequence "
               "recomputed each step), same model, prompt and tokens, batch 1, interleaved "
               "repeats; 'substantial': at least 2×", ">=", 2.0, log=True),
          Condition("an output of", "tokens", over="tokens generated",
                    why="without the cache step t recomputes the prompt and all t tokens before "
                        "it, so the work grows as the square of the output; with it each step "
                        "computes one position. While the sequence is short, recomputing it costs "
                        "little more than one position, because each pass's fixed cost per call "
                        "(Python, small kernels) dominates: the cache pays as the sequence grows"),
          value_format=".2f×",
          axis="cached ÷ uncached tokens/s (×)"),
    Claim("gqa_keeps_quality", "Ainslie",
          "We show that uptrained GQA achieves quality close to multi-head attention with "
          "comparable speed to MQA.",
          "Uptrained grouped-query attention reaches quality close to multi-head attention "
          "(the speed half is measured beside it, not judged).",
          "16_generation",
          Rule("test perplexity of the decoder converted to fewer key/value heads and uptrained "
               "÷ the multi-head decoder uptrained the same steps from the same weights "
               "(paired over the test reviews; mean over uptraining seeds); 'close': within "
               "0.5%, about half the distance between the target and the one-layer draft with "
               "a tenth of its parameters (about 1%): the small grammar leaves every model near "
               "its floor, so a looser bar would pass any model", "<=", 1.005, log=True),
          Condition("uptraining of", "steps", over="uptraining budget (steps after the conversion)",
                    why="the conversion averages each group's key/value projections, which loses "
                        "what the heads held apart; uptraining repairs it, and the fewer "
                        "key/value heads are kept the more there is to repair"),
          value_format=".3f×",
          axis="fewer KV heads ÷ multi-head perplexity (×)"),
    Claim("speculative_decoding_speeds_generation", "Leviathan",
          "we demonstrate a 2X-3X acceleration compared to the standard T5X implementation, "
          "with identical outputs",
          "Speculative decoding accelerates generation with identical outputs (the identity "
          "is a test; the acceleration is judged, its 2-3× size is set by the models' costs and "
          "compared with Leviathan et al.'s formula).",
          "16_generation",
          Rule("speed of speculative decoding (the draft proposes, the target checks) ÷ the "
               "target's cached greedy decoding, batch 1, same prompts, interleaved; judged is "
               "the acceleration, at 1.1× (a tenth faster); the paper's 2-3× is a magnitude "
               "that Leviathan et al.'s formula ties to the draft's relative cost c, which the "
               "lesson measures and puts beside the verdict", ">=", 1.1, log=True),
          Condition("draft length", "", over="draft length (tokens proposed per round)",
                    why="each round costs k draft passes plus one target pass and keeps the "
                        "accepted tokens: a longer draft saves more target passes while it is "
                        "right, and wastes more draft passes once it disagrees. Two more "
                        "quantities decide it, measured beside the verdict: how often the draft "
                        "is right (α) and what a draft pass costs against a target pass (c)"),
          value_format=".2f×",
          axis="speculative ÷ greedy speed (×)"),
    Claim("quantization_speeds_decoding", "004",
          "将Transformer模型的参数和激活函数转换为低精度格式（如 int8 或 float16），"
          "我们可以大幅减少计算成本并提高吞吐量",
          "Converting weights and activations to int8 greatly raises throughput: checked on "
          "generation, one token at a time.",
          "16_generation",
          Rule("tokens/s of cached greedy decoding (batch 1) with PyTorch's dynamic int8 ÷ "
               "FP32, same untrained decoder of each width, interleaved repeats", ">=", 1.2,
               log=True),
          Condition("width", "", over="width (d_model of a 2-layer decoder)",
                    why="a batch of one reads every weight to do two FLOPs with it: the "
                        "matrices' bytes grow as width², the per-call costs (quantizing the "
                        "activations, Python, small kernels) stay; a model whose weights fit "
                        "in the CPU's caches saves no memory traffic at all"),
          value_format=".2f×",
          axis="int8 ÷ FP32 tokens/s (×)"),
]
CLAIMS: dict[str, Claim] = {c.id: c for c in _CLAIMS}

# Facts the course shows exactly: each is a demonstration, listed apart from the verdicts.
_DEMONSTRATIONS = [
    Demonstration("params_drive_memory", "000",
                  "參數數量龐大：Transformer模型通常包含大量的參數……這些參數需要大量的內存來存儲權重和梯度。",
                  "The many parameters are why Transformers run out of memory (weights and "
                  "gradients).",
                  "00_welcome",
                  "parameter state (FP32 weights, gradients, AdamW's two moments) against the "
                  "activations training stores, for the teacher's shape at widths 64 to 8,192, on "
                  "typical and on the longest reviews; the calculator's activations at the "
                  "teacher's own width equal a direct count of what autograd saves",
                  "true only from the width where the parameter state overtakes the activations, "
                  "and that width grows with the inputs: small models on long inputs are driven by "
                  "their activations",
                  formula="parameter state = 16 bytes × P, P ≈ 8 · layers · width² (4 width² "
                          "of attention and 4 of a feed-forward twice as wide, + the "
                          "embeddings); stored activations = (a + b · width) · batch + c, the "
                          "constants counted at widths 64 and 128"),
    Demonstration("fp16_saves_memory", "000",
                  "所以Fp16可以提高內存節省",
                  "FP16 saves memory.",
                  "04_mixed_precision",
                  "training memory (FP32 parameter state + stored activations) of the teacher "
                  "under FP16 autocast ÷ in FP32, counted exactly at each batch; the ratio falls "
                  "as the batch grows, as the formula says",
                  "true for the activations only: the FP32 parameter state stays, so the saving "
                  "grows with the batch, towards the activations' own 16-bit ratio, and is small "
                  "where the parameter state dominates",
                  formula="FP32: 16·P + A(batch); FP16 autocast: 16·P + A₁₆(batch), where A₁₆ "
                          "counts the activations autocast stores in 16 bits and the 16-bit "
                          "copies of the weights it casts; the ratio tends to A₁₆ / A as the "
                          "batch grows"),
    Demonstration("pruning_shrinks_model", "004",
                  "去除冗余的参数和连接，可以大幅减小模型大小",
                  "Pruning redundant weights greatly shrinks the model.",
                  "05_pruning",
                  "bytes of the pruned model stored as it can be: removed structure (a smaller "
                  "dense model's parameters) or CSR (values plus int64 column indices and row "
                  "pointers, torch's default; int32 beside it), against the dense FP32 bytes; "
                  "torch's CSR tensors hold exactly the formula's bytes",
                  "removing structure shrinks the model in proportion to what is removed; CSR "
                  "shrinks it only past a sparsity of 2/3 with int64 indices (1/2 with int32)",
                  formula="dense: 4·n bytes; CSR: 4·nnz values + 8·nnz column indices + "
                          "8·(rows + 1) row pointers (int32: 4 + 4), so CSR < dense once nnz/n < "
                          "1/3 (int64) or 1/2 (int32)"),
    Demonstration("activations_dominate_training_memory", "000",
                  "激活和中間狀態存儲：在訓練過程中，需要存儲前向傳播中的中間激活狀態……這增加了額外的內存負擔。",
                  "Training must store the forward pass's activations for backward: an extra "
                  "memory burden.",
                  "09_memory",
                  "the activations' share of a training step's peak from the calculator "
                  "(memory.anatomy) at each length, width and batch; the lesson checks the "
                  "calculator against measured peaks of real steps",
                  "true for long inputs and narrow models; short inputs on a wide model leave the "
                  "parameter state (weights, gradients, AdamW state) in charge",
                  formula="peak ≈ 16 bytes × P (weights, gradients, AdamW) + activations(batch, "
                          "length, width); the activations grow as batch × length × width (plus "
                          "heads × L² for the ALiBi bias), P as width² and not with length"),
    Demonstration("fixed_size_inputs", "000",
                  "許多機器學習模型（尤其是基于Transformer的模型）需要輸入數據具有固定的尺寸",
                  "Transformers need inputs of one fixed size.",
                  "01_padding",
                  "the course model runs on batches of several different lengths (up to its "
                  "max_len, the one size limit it has); a length it refuses would be listed",
                  "the statement is false for the model: a Transformer takes any length up to "
                  "its max_len. Fixed shapes matter to compilers and graph capture (XLA, CUDA "
                  "graphs, TensorRT), not to the architecture"),
    Demonstration("padding_must_not_affect", "000",
                  "填充部分不應影響到模型的學習。因此通常需要使用注意力掩碼",
                  "Padding must not affect the model, which is what the attention mask is for.",
                  "01_padding",
                  "the largest change of any logit when reviews are padded, with the mask, is at "
                  "float rounding (≤ 1e-5); without the mask it is not",
                  "true, and the mask is what makes it true: with it padding changes no output "
                  "beyond float rounding; without it the outputs move"),
    Demonstration("pure_fp16_adamw_eps", "000",
                  "對于回歸這種需要精確數值的任務Fp16的表現并不好。",
                  "FP16 does badly on regression (when the whole model is cast with model.half()).",
                  "04_mixed_precision",
                  "one AdamW step on the model cast to FP16 (model.half()) with AdamW's default "
                  "eps = 1e-8 leaves NaN weights, for the regression head and the classifier "
                  "alike; with eps = 1e-4, which FP16 can store, it leaves none",
                  "model.half() breaks on the optimizer's arithmetic, not on regression: 1e-8 "
                  "rounds to 0 in FP16, so a weight whose gradient is exactly 0 gets the update "
                  "0 / (0 + 0) = NaN, whatever the task",
                  formula="FP16's smallest subnormal is 2⁻²⁴ ≈ 6.0e-8, so eps = 1e-8 is "
                          "stored as 0, and a weight whose gradient is 0 gets the update "
                          "m̂ / (√v̂ + eps) = 0 / (0 + 0) = NaN"),
    Demonstration("masks_do_not_shrink", "004",
                  "去除冗余的参数和连接，可以大幅减小模型大小",
                  "Pruning greatly shrinks the model (done with torch.nn.utils.prune's masks).",
                  "05_pruning",
                  "the state_dict of a model pruned with torch.nn.utils.prune holds weight_orig "
                  "and a float weight_mask for every pruned tensor, so its bytes exceed the dense "
                  "model's; after prune.remove they equal the dense model's (to within 1%)",
                  "false for masks: they are how pruning is found, not how it is stored; the "
                  "size falls only when the zeros leave (structure removed, or a sparse format)",
                  formula="a pruned tensor of n weights stores weight_orig (4·n bytes) and a float "
                          "weight_mask (4·n): twice its dense bytes; "
                          "after prune.remove, 4·n again"),
    Demonstration("masks_keep_dense_compute", "004",
                  "去除冗余的参数和连接，可以大幅减小……计算复杂度",
                  "Pruning greatly cuts the computation (done with torch.nn.utils.prune's masks).",
                  "05_pruning",
                  "every weight a masked model multiplies is a dense tensor of the dense model's "
                  "shape, recomputed as weight_orig * weight_mask by a forward pre-hook before "
                  "each call: the same matrix products plus one multiply per weight",
                  "false for masks: the zeros are multiplied like any other number, so the "
                  "masked model does at least the dense model's work",
                  formula="a masked Linear does the dense matmul's 2·n·tokens FLOPs, plus n "
                          "multiplies for weight_orig * weight_mask before each call"),
    Demonstration("ddp_equals_large_batch", "004",
                  "分布式训练……可以显著缩短训练时间，同时提高模型的稳定性和鲁棒性。",
                  "Distributed training ... makes the model more stable and robust (than what?).",
                  "08_ddp",
                  "DDP on N ranks of batch b, one process with batch N·b, and one process "
                  "accumulating N micro-batches of b end with the same parameters after the same "
                  "plain-SGD steps, to float rounding (largest difference ≤ 1e-4)",
                  "DDP itself makes no model steadier: it computes the large-batch update, so its "
                  "stability is the large batch's, which the claim's verdict measures",
                  formula="the gradient of the mean loss over N·b examples is the mean over the N "
                          "ranks of each rank's gradient over its b: "
                          "∇(1/(N·b) Σ ℓ) = 1/N Σ_rank ∇(1/b Σ_rank ℓ), "
                          "which is what DDP's all-reduce averages"),
    Demonstration("float_layouts", "000",
                  "雙精度(FP64)……有效精度為52位。單精度(FP32)……有效精度為23位。半精度(FP16)……有效精度為10位。",
                  "FP64/FP32/FP16 have 52/23/10 bits of precision.",
                  "03_floating_point",
                  "the fraction bits torch stores (torch.finfo) for each format equal the "
                  "article's numbers",
                  "true of the stored fraction bits; the precision of a normal number is one bit "
                  "more (53, 24, 11), because the leading 1 is implicit",
                  formula="precision = stored fraction bits + 1 (the implicit leading 1 of a "
                          "normal number): 52 + 1, 23 + 1, 10 + 1"),
]
DEMONSTRATIONS: dict[str, Demonstration] = {d.id: d for d in _DEMONSTRATIONS}
