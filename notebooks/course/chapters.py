"""The course content: one list of cells per chapter, text in English and Chinese, code shared.
`make_course.py` turns it into notebooks/course/en/*.ipynb and zh/*.ipynb.

Every figure the chapters show is computed in the notebook from recorded data (tests/data) or
measured on the CPU; the text describes what the data show and never quotes a number the code
does not print."""
from __future__ import annotations

from typing import Tuple

Cell = Tuple[str, object]


def M(en: str, zh: str) -> Cell:
    """A text cell in both languages."""
    return ("md", {"en": en.strip(), "zh": zh.strip()})


def C(src: str) -> Cell:
    """A code cell, the same in both languages."""
    return ("code", src.strip())


def X(src: str) -> Cell:
    """The exercise cell the student fills in: its last line `name = <reference answer>   # your
    answer`; the notebooks ship it as `name = ...` (`make_course.py --solutions` keeps it)."""
    return ("exercise", src.strip())


def K(src: str) -> Cell:
    """The check cell after an exercise: prints a verdict, raises AssertionError when wrong."""
    return ("check", src.strip())


BUILDER = [
    M("""
# Course 1 · What the TensorRT builder does to your network

An ONNX file describes *operations*; a TensorRT engine holds *kernels*. Between the two, the
builder (1) folds away what needs no kernel, (2) **fuses** chains of nodes into one kernel, (3) adds
**reformat** layers where a kernel wants another layout or precision, and (4) hands whole
subgraphs to **Myelin**, its graph compiler. Here we read a real engine's layer information
(TensorRT 8.6 on an NVIDIA H200, torchvision ResNet-50 and a small BERT) and map every engine
layer back to the ONNX nodes it came from with `workbench.timing.LayerTable`.

No GPU needed: the engine information was recorded on the GPU and lives in `tests/data/fixtures`.

**Exercises.** Each one leaves its answer as `...`: replace it, run that cell, then the check cell
under it. Until then "Run all" stops at the first check, which says the exercise is not answered.
""", """
# 第 1 课 · TensorRT 构建器对网络做了什么

ONNX 文件描述的是一个个*算子*，TensorRT 引擎（engine）里装的却是一个个*内核*（kernel）。
从前者到后者，构建器（builder）要做四件事：(1) 去掉不需要内核的部分；(2) 把一串节点
**融合**（layer fusion）成一个内核；(3) 在内核需要另一种内存布局或精度的地方插入
**格式转换**层（reformat）；(4) 把整段子图交给它的图编译器 **Myelin**。
本课读取一个真实引擎的层信息（TensorRT 8.6，NVIDIA H200，torchvision ResNet-50 和一个小型 BERT），
并用 `workbench.timing.LayerTable` 把每个引擎层映射回它对应的 ONNX 节点。

不需要 GPU：引擎信息已在 GPU 上录好，存放在 `tests/data/fixtures` 中。

**练习。** 每道练习的答案处都写着 `...`：把它换成你的答案，运行那一格，再运行下面的检查格。
在此之前，“全部运行”会停在第一个检查格，并提示该练习尚未作答。

**关于英文输出。** 代码里的注释、课程自己打印的说明和表头都是中文。工具自己的输出保持英文原样：
workbench 的警告和报错、TensorRT 记录的层信息及其列名（`name` 层名、`type` 层类型、`n_onnx`
覆盖的 ONNX 节点数、`onnx_nodes` 这些节点、`mapping` 对应关系的来源、`tactic` 选中的内核、
`time_ms` 耗时，单位毫秒），以及 TensorRT 的内核名。各课在它们第一次出现时加以解释。
"""),
    C("""
import collections
from workbench.timing import LayerTable, fusion_stats

ONNX = cw.H200 / "resnet50.structure.onnx"   # the exact graph the engine was built from (no weights) ‖ 引擎正是由这张图构建的（不含权重）
fp16 = LayerTable.build(cw.H200 / "resnet50_fp16.layers.json", cw.H200 / "resnet50_fp16.profile.json",
                        onnx=ONNX)
df, onnx_index = fp16.df, fp16.index
compute = df[~df.is_constant & ~df.is_reformat & ~df.is_noop]
n_const, n_reformat, n_noop = int(df.is_constant.sum()), int(df.is_reformat.sum()), int(df.is_noop.sum())
print(cw.tr("ONNX nodes:", "ONNX 节点："), len(onnx_index.names), dict(collections.Counter(onnx_index.ops)))
print(cw.tr(f"engine layers: {len(df)} = {n_const} constants + {n_reformat} reformats + {n_noop} no-ops + {len(compute)} compute layers",
            f"引擎层：{len(df)} = {n_const} 个常量 + {n_reformat} 个格式转换 + {n_noop} 个空操作 + {len(compute)} 个计算层"))
"""),
    M("""
169 ONNX nodes became 56 compute layers. The constants are the weights; the 47 `Identity` nodes
(the exporter shares weights through them) show up as reformat layers that copy constants.
Which ONNX nodes does each compute layer cover? `onnx_nodes` says, and `mapping` says how we know
(`metadata`: TensorRT 8.6 records `[ONNX Layer: ...]` for every layer).
""", """
169 个 ONNX 节点变成了 56 个计算层。常量层就是权重；导出器借 47 个 `Identity` 节点共享权重，
它们在引擎里成了复制常量的格式转换层。每个计算层覆盖哪些 ONNX 节点？看 `onnx_nodes` 列；
`mapping` 列说明依据从何而来（`metadata`：TensorRT 8.6 会为每一层记下 `[ONNX Layer: ...]`）。
"""),
    C("""
patterns = collections.Counter(" + ".join(onnx_index.op(n) for n in nodes) for nodes in compute.onnx_nodes)
display(pd.DataFrame(patterns.most_common(), columns=[cw.tr("ONNX ops in one engine layer", "同一引擎层里的 ONNX 算子"),
                                                     cw.tr("layers", "层数")]))
compute[compute.n_onnx > 1][["name", "type", "n_onnx", "mapping"]].head(6)
"""),
    M("""
Conv + ReLU become one kernel: the activation is applied while the convolution's result is still
in registers, so the intermediate tensor is never written to memory. **Conv + Add + ReLU** goes
further: the residual branch's Add is done inside the convolution's epilogue.

**Exercise 1.** How many engine layers fuse a convolution, a residual `Add` and a `ReLU`? Put the
number in `conv_add_relu` (use `patterns` or `compute`).
""", """
Conv + ReLU 合成一个内核：卷积结果还在寄存器里时就做激活，中间张量根本不写回显存。
**Conv + Add + ReLU** 更进一步：残差分支的加法在卷积的收尾阶段（epilogue）里一并完成。

**练习 1.** 有多少个引擎层把卷积、残差 `Add` 和 `ReLU` 融合在了一起？把答案写进
`conv_add_relu`（可以用 `patterns` 或 `compute`）。
"""),
    X("""
conv_add_relu = patterns["Conv + Add + Relu"]   # your answer ‖ 你的答案
"""),
    K("""
cw.answered(conv_add_relu)
n_add = onnx_index.ops.count("Add")
cw.check(conv_add_relu == n_add == fusion_stats(fp16)["histogram"]["3"],
         en=f"count the layers whose ONNX ops read 'Conv + Add + Relu' (the model has {n_add} Add nodes)",
         zh=f"数一数 ONNX 算子为 'Conv + Add + Relu' 的层（模型里共有 {n_add} 个 Add 节点）")
print(cw.tr(f"every one of the {n_add} residual Adds was fused into a convolution: none runs as its own kernel",
            f"全部 {n_add} 个残差 Add 都融合进了卷积：没有一个单独作为内核运行"))
"""),
    M("""
## Myelin: a whole transformer in one layer

For the BERT engine the builder gave almost the whole graph to Myelin. Its layer is named
`{ForeignNode[first...last]}`; the workbench expands it to every ONNX node between the two.
""", """
## Myelin：整个 Transformer 只剩一层

对 BERT 引擎，构建器几乎把整张图都交给了 Myelin。这一层名为 `{ForeignNode[first...last]}`；
workbench 会把它展开成首尾两个节点之间的全部 ONNX 节点。
"""),
    C("""
bert = LayerTable.build(cw.H200 / "bert_small_fp16.layers.json", cw.H200 / "bert_small_fp16.profile.json",
                        onnx=cw.H200 / "bert_small.structure.onnx")
display(bert.df[["name", "type", "n_onnx", "mapping", "time_ms"]])
myelin = bert.df.loc[bert.df.n_onnx.idxmax()]
outside = [n for n in bert.index.names if n not in set(myelin.onnx_nodes)]
print(cw.tr("ONNX nodes not in the Myelin layer:", "不在 Myelin 层里的 ONNX 节点："), dict(collections.Counter(bert.index.op(n) for n in outside).most_common(6)))
"""),
    M("""
What stays outside is mostly what needs no kernel at all: `Identity` on weights, `Constant`s and
shape arithmetic the builder evaluates once at build time.

**Exercise 2.** What fraction of the BERT's ONNX nodes does the Myelin layer cover? Put a number
between 0 and 1 in `myelin_share`.
""", """
留在外面的大多根本不需要内核：作用在权重上的 `Identity`、`Constant`，以及构建器在构建时就能
一次算完的形状运算。

**练习 2.** Myelin 这一层覆盖了 BERT 的 ONNX 节点中的多大比例？在 `myelin_share` 里填一个
0 到 1 之间的数。
"""),
    X("""
myelin_share = myelin.n_onnx / len(bert.index.names)   # your answer ‖ 你的答案
"""),
    K("""
cw.answered(myelin_share)
cov = bert.coverage()
cw.check(cw.close(myelin_share, cov["onnx_nodes_covered"] / cov["onnx_nodes_total"]),
         en="divide the Myelin layer's n_onnx by the number of ONNX nodes (len(bert.index.names))",
         zh="用 Myelin 层的 n_onnx 除以 ONNX 节点总数（len(bert.index.names)）")
print(cw.tr(f"{myelin_share:.0%} of the graph runs as one Myelin layer",
            f"图中 {myelin_share:.0%} 的节点作为一个 Myelin 层运行"))
"""),
    M("""
**Take-away.** Count kernels, not nodes: the engine's layer list, mapped back to the ONNX, tells
you what the builder fused and what it dropped. Next: precision.
""", """
**小结.** 要数的是内核，不是节点：把引擎的层列表映射回 ONNX，就能看出构建器融合了什么、
丢掉了什么。下一课：精度。
"""),
]

PRECISION = [
    M("""
# Course 2 · FP16 and INT8: why calibration data must look like real data

FP16 halves the bits of every number; INT8 goes further and maps each tensor's range onto 255
steps with a **scale** per tensor (per output channel for weights), found by **calibration**: running the FP32 model on sample
inputs and recording the range of every activation. We convert `sample_models/resnet_tiny.onnx`
with `workbench.precision.convert` (FP16 casts, INT8 Q/DQ pairs) and measure the error against
FP32 on the CPU with onnxruntime, on the 32 representative images in `calib/resnet_tiny.npz`.
""", """
# 第 2 课 · FP16 与 INT8：校准数据为什么必须像真实数据

FP16 把每个数的位数减半；INT8 更进一步：每个张量用**缩放因子**（scale）把取值范围映射到
255 个台阶上（权重按输出通道各有一个）。缩放因子由**校准**（calibration）得到：在样本输入上运行 FP32 模型，记录每个激活
张量的取值范围。我们用 `workbench.precision.convert` 转换 `sample_models/resnet_tiny.onnx`
（FP16 插入 Cast，INT8 插入 Q/DQ 节点对），并在 CPU 上用 onnxruntime、以 `calib/resnet_tiny.npz`
中 32 张有代表性的图像为输入，测量与 FP32 的误差。
"""),
    C("""
import onnx
from workbench.precision.transform import convert, measure_error, activation_ranges
from workbench.precision.calibration import load_calibration, random_calibration

MODEL, CALIB = cw.SAMPLES / "resnet_tiny.onnx", cw.SAMPLES / "calib" / "resnet_tiny.npz"
real = load_calibration(CALIB, MODEL)          # 32 synthetic images, ImageNet-normalised ‖ 32 张合成图像，已按 ImageNet 归一化
noise, warning = random_calibration(MODEL)     # what --allow-random uses: 8 standard-normal batches ‖ --allow-random 用的就是它：8 个标准正态分布的 batch
print(warning)

ON_REAL = cw.tr("INT8, calibrated on real images", "INT8，用真实图像校准")
ON_NOISE = cw.tr("INT8, calibrated on random noise", "INT8，用随机噪声校准")
variants = {
    "FP16": convert(MODEL, "fp16", measure=False),
    ON_REAL: convert(MODEL, "int8", calibration=CALIB, calibrate_method="minmax", measure=False),
    ON_NOISE: convert(MODEL, "int8", allow_random=True, calibrate_method="minmax", measure=False),
}
rows = []
for name, result in variants.items():
    e = measure_error(MODEL, result.proto, real)["logits"]    # always measured on the real images ‖ 误差一律在真实图像上测量
    rows.append({cw.tr("variant", "变体"): name, cw.tr("rel err", "相对误差"): e["rel_err"],
                 cw.tr("cosine", "余弦相似度"): e["cosine"], cw.tr("top-1 agreement", "top-1 一致率"): e["top1_agreement"]})
errors = pd.DataFrame(rows).set_index(cw.tr("variant", "变体"))
errors
"""),
    M("""
`rel err` is the largest output error relative to the output's scale. FP16 is almost exact. INT8
calibrated on real images costs a little; INT8 calibrated on noise is an order of magnitude
worse and starts changing predictions. Why? Compare the activation ranges the two calibrations saw:
""", """
第一行英文是 workbench 自己的警告：用随机数据校准得到的 INT8 缩放因子不可信。
`相对误差` 是输出的最大误差与输出量级之比。FP16 几乎没有误差；用真实图像校准的 INT8 损失很小；
用随机噪声校准的 INT8 误差大了一个数量级，开始改变预测结果。原因何在？比较两次校准看到的激活范围：
"""),
    C("""
proto = onnx.load(str(MODEL))
seen_real, seen_noise = activation_ranges(proto, real), activation_ranges(proto, noise)
REAL, NOISE, RATIO = cw.tr("real images", "真实图像"), cw.tr("random noise", "随机噪声"), cw.tr("real / noise", "真实 / 噪声")
ranges = pd.DataFrame({REAL: seen_real, NOISE: seen_noise})
ranges[RATIO] = ranges[REAL] / ranges[NOISE]
ranges.sort_values(RATIO, ascending=False).head(5)
"""),
    M("""
Noise has no structure, so global average pooling averages it away: the pooled features of noise
span less than half the range of real images. Scales computed from noise are too small there, and
real activations are **clipped**. Layer-wise comparison (`workbench.compare.layerwise`) shows
where the error enters the network:
""", """
噪声没有结构，全局平均池化（global average pooling）会把它平均掉：噪声的池化特征范围还不到
真实图像的一半。由噪声算出的缩放因子在这里偏小，真实激活值于是被**截断**（clipping）。
逐层比较（`workbench.compare.layerwise`）可以看出误差从网络的哪一处进入：
"""),
    C("""
from workbench import compare
report = compare.layerwise(MODEL, variants[ON_NOISE].proto, calibration=CALIB)
pd.DataFrame([{cw.tr("node", "节点"): t.node, cw.tr("op", "算子"): t.op, cw.tr("error added (rel)", "新增误差（相对）"): t.added}
              for t in report.culprits()]).head(4)
"""),
    M("""
**Exercise.** Which node adds the most error in the noise-calibrated model? Put its name in
`culprit` (from `report.culprits()`).
""", """
**练习.** 在用噪声校准的模型中，哪个节点引入的误差最大？把它的名字写进 `culprit`
（来自 `report.culprits()`）。
"""),
    X("""
culprit = report.culprits()[0].node   # your answer ‖ 你的答案
"""),
    K("""
cw.answered(culprit)
worst = max(report.culprits(), key=lambda t: t.added)
cw.check(culprit == worst.node, en="take the first of report.culprits(): the node with the largest added error",
         zh="取 report.culprits() 的第一个：引入误差最大的节点")
out = next(n.output[0] for n in proto.graph.node if n.name == culprit)
print(cw.tr(f"{culprit} ({worst.op}): real images give its output x{ranges.loc[out, RATIO]:.2f} the range noise gave",
            f"{culprit}（{worst.op}）：真实图像下它的输出范围是噪声下的 {ranges.loc[out, RATIO]:.2f} 倍"))
"""),
    M("""
**Take-away.** INT8 scales are only as good as the data they were computed on: calibrate with
inputs from the real distribution (a few hundred are usually enough), and always measure the
error on real inputs, as `convert(..., calibration=...)` does. The workbench refuses INT8 without
calibration data unless you pass `allow_random=True`, and then every report carries a warning.
""", """
**小结.** INT8 缩放因子的好坏取决于计算它的数据：请用来自真实分布的输入校准（通常几百个样本就够），
并且始终在真实输入上测量误差——`convert(..., calibration=...)` 正是这样做的。没有校准数据时
workbench 拒绝生成 INT8，除非显式传入 `allow_random=True`，而那样生成的每份报告都会带上警告。
"""),
]

TACTICS = [
    M("""
# Course 3 · Kernel auto-tuning: tactics per layer, and the timing cache

For every layer the builder has many candidate kernels (**tactics**): different tile sizes,
memory layouts, Winograd or implicit GEMM, Tensor Cores or plain FMA. It *times* the candidates on
the GPU and keeps the fastest. The chosen tactic is in the layer information (`tactic`). We compare
the FP32 and FP16 ResNet-50 engines recorded on the H200.
""", """
# 第 3 课 · 内核自动调优：每层的策略与计时缓存

对每一层，构建器都有许多候选内核，称为**策略**（tactic）：分块大小、内存布局、Winograd 还是
隐式 GEMM（implicit GEMM）、用 Tensor Core 还是普通 FMA，各不相同。构建器在 GPU 上逐一*计时*，
留下最快的那个。选中的策略记录在层信息里（`tactic` 列）。下面比较在 H200 上录下的 FP32 与
FP16 两个 ResNet-50 引擎。
"""),
    C("""
from workbench.timing import LayerTable, load_layers

ONNX = cw.H200 / "resnet50.structure.onnx"
engines = {p: LayerTable.build(cw.H200 / f"resnet50_{p}.layers.json", cw.H200 / f"resnet50_{p}.profile.json", onnx=ONNX)
           for p in ("fp32", "fp16")}
convs = {p: t.df[t.df.type.str.contains("Convolution")] for p, t in engines.items()}
for p, c in convs.items():
    family = c.tactic.str.extract(r"^(sm\\d+)_xmma_fprop_(implicit_gemm|wngd|image_first_layer)")
    arch, algo = family[0].value_counts().to_dict(), family[1].value_counts().to_dict()
    print(cw.tr(f"{p}: {len(c)} convolution layers, {c.tactic.nunique()} distinct kernels; architecture: {arch} algorithm: {algo}",
                f"{p}：{len(c)} 个卷积层，{c.tactic.nunique()} 种不同的内核；架构：{arch} 算法：{algo}"))
"""),
    M("""
Reading the names: `sm80`/`sm90` is the GPU architecture the kernel was written for (the H200 is
sm90 and runs both), `implicit_gemm` computes a convolution as a matrix product, `wngd` is
Winograd, `f16f16` the input types, `hmma`/`tensor16x8x16` means Tensor Cores, `ffma` plain FP32
multiply-add, `nchw`/`nhwc` the layout. The same layer gets a different kernel in each engine:
""", """
内核名字怎么读：`sm80`/`sm90` 表示内核面向的 GPU 架构（H200 属于 sm90，两种都能跑）；
`implicit_gemm` 把卷积当作矩阵乘法来算；`wngd` 即 Winograd；`f16f16` 是输入类型；
`hmma`/`tensor16x8x16` 表示用了 Tensor Core；`ffma` 是普通的 FP32 乘加；`nchw`/`nhwc` 是内存布局。
同一层在两个引擎里选中的内核各不相同（列名来自层信息：`tactic_fp32`/`tactic_fp16` 是两个引擎
选中的内核，`time_ms_fp32`/`time_ms_fp16` 是各自的耗时，单位毫秒）：
"""),
    C("""
both = convs["fp32"].merge(convs["fp16"], on="name", suffixes=("_fp32", "_fp16"))
SPEEDUP = cw.tr("speed-up", "加速比")
both[SPEEDUP] = both.time_ms_fp32 / both.time_ms_fp16
cw.table(both[["name", "tactic_fp32", "tactic_fp16", "time_ms_fp32", "time_ms_fp16", SPEEDUP]].head(4))
"""),
    M("""
**Exercise.** How many distinct kernels did the builder choose for the FP16 engine's convolution
layers? Put the number in `n_kernels`.
""", """
**练习.** 构建器为 FP16 引擎的卷积层一共选了多少种不同的内核？把数字写进 `n_kernels`。
"""),
    X("""
n_kernels = convs["fp16"].tactic.nunique()   # your answer ‖ 你的答案
"""),
    K("""
cw.answered(n_kernels)
raw = {l.raw.get("TacticName") for l in load_layers(cw.H200 / "resnet50_fp16.layers.json").layers
       if "Convolution" in l.type}
cw.check(n_kernels == len(raw), en="count the distinct values of convs['fp16'].tactic",
         zh="数一数 convs['fp16'].tactic 中不同取值的个数")
"""),
    M("""
## The timing cache

Timing the candidates is usually where most of a build's time goes. TensorRT can save the measurements in a
**timing cache** keyed by the layer's configuration and the GPU; a later build that meets the same
layer on the same GPU and TensorRT version reuses the measurement instead of timing again, so
rebuilding (another profile, a changed head, the next CI run) gets much faster. The cache is meant
to change *how long* a build takes, not *what* it builds (it replays earlier measurements, where a
fresh timing might pick another of two equally fast kernels), so the workbench keeps it out of the
engine cache's key and stores one per backend and version in the workspace. With a build configuration
the cache becomes one flag of the equivalent `trtexec` line:
""", """
## 计时缓存

给候选内核计时，通常占去构建的大部分时间。TensorRT 可以把测量结果存进**计时缓存**
（timing cache），以层的配置和 GPU 为键；之后的构建在同一块 GPU、同一个 TensorRT 版本上遇到
相同的层时，直接复用测量结果而不再计时，所以重新构建（换一个 profile、改了输出头、下一次 CI）
会快得多。缓存要改变的是构建*花多长时间*，而不是构建*出什么*（它复用以前的测量结果；重新计时的话，
两个一样快的内核之间可能选中另一个），因此 workbench 不把它计入引擎缓存的键，并在工作区里按后端
和版本各存一份。在构建配置里，它对应等价 `trtexec` 命令的一个参数：
"""),
    C("""
from workbench.engines.spec import BuildConfig
from workbench.engines.export import trtexec_command
from workbench.precision.profiles import parse_profile_arg

config = BuildConfig(precision="fp16", timing_cache="resnet50.timing.cache",
                     profiles=[parse_profile_arg("input:1x3x224x224:8x3x224x224:32x3x224x224")])
print(trtexec_command(config, "resnet50.onnx", "resnet50.engine", route="legacy-flags"))
"""),
    C("""
import json
print(cw.tr("how the A100 engine was tuned:", "A100 引擎的调优设置："), json.loads((cw.A100 / "resnet-fp16.engine.build.metadata.json").read_text())["build_options"])
"""),
    M("""
`minTiming` is the minimum number of timing iterations trtexec used to choose each kernel,
`avgTiming` the number of runs averaged per iteration. The recorded data
here hold the tactics the tuner chose, not build durations, so this course shows no build-time
figures; the workbench's GPU tests check on the H200 that a second build loads the cache the
first one saved. With TensorRT-RTX
the timing-cache calls are no-ops (it builds ahead of time, without a GPU); the build notes then say
"timing cache not used".
""", """
`minTiming` 是 trtexec 为挑选内核至少计时的迭代次数，`avgTiming` 是每次迭代取平均的运行次数。这里录下的数据只有调优器选中的策略，
没有构建耗时，所以本课不给出构建时间的数字；workbench 的 GPU 测试会在 H200 上验证：第二次
构建加载了第一次保存的缓存。在 TensorRT-RTX 中，计时缓存的调用不起作用（它是预先（ahead of time）
构建的，不需要 GPU），构建说明中会写明 "timing cache not used"（未使用计时缓存）。
"""),
    M("""
**Take-away.** A tactic is a measured choice, not a fixed mapping: the same layer gets a different
kernel per precision and per GPU, and the layer information tells you which one won. The timing
cache replays those measurements, so rebuilds get faster; it belongs to one GPU and TensorRT version.
Next: dynamic shapes.
""", """
**小结.** 战术（tactic）是测出来的选择，而不是固定的对应关系：同一层在不同精度、不同 GPU 上会选到
不同的内核，层信息会告诉你最后选中了哪一个。计时缓存（timing cache）重放这些测量结果，让重新构建更快；
它只对应一种 GPU 和一个 TensorRT 版本。下一课：动态形状。
"""),
]

SHAPES = [
    M("""
# Course 4 · Dynamic shapes: what an optimization profile changes

An ONNX input like `[batch, 3, 32, 32]` has a dynamic axis. TensorRT needs, per dynamic input, an
**optimization profile**: the smallest (`min`), typical (`opt`) and largest (`max`) shape. The
engine accepts any shape in between; the tuner picks kernels for **opt**, and memory is sized for
**max**. `workbench.precision.profiles` writes, checks and proposes profiles (`workbench profiles`
on the command line).
""", """
# 第 4 课 · 动态形状：优化配置文件改变了什么

像 `[batch, 3, 32, 32]` 这样的 ONNX 输入带有动态维度。TensorRT 要求每个动态输入都有一个
**优化配置文件**（optimization profile）：最小形状（`min`）、典型形状（`opt`）和最大形状（`max`）。
引擎接受介于两者之间的任何形状；调优器按 **opt** 挑选内核，显存按 **max** 分配。
`workbench.precision.profiles` 负责编写、检查和推荐配置文件（命令行中是 `workbench profiles`）。
"""),
    C("""
from workbench.core.errors import WorkbenchError
from workbench.precision.profiles import parse_profile_arg, validate_profiles, check_samples, wide_findings
from workbench.precision.calibration import load_calibration
from workbench.core.inputs import model_inputs

BERT = cw.SAMPLES / "bert_tiny.onnx"
for spec in model_inputs(BERT):
    print(spec.name, spec.dims, spec.dtype)
try:   # batch and seq are shared by both inputs, so their ranges must agree ‖ 两个输入共用 batch 和 seq 两个维度，所以它们的范围必须一致
    validate_profiles(BERT, [parse_profile_arg("input_ids:1x16:4x64:8x128,attention_mask:1x16:4x32:8x128")])
except WorkbenchError as e:
    print(cw.tr("refused:", "被拒绝："), e)
for f in wide_findings([parse_profile_arg("input_ids:1x1:8x64:64x512,attention_mask:1x1:8x64:64x512")]):
    print(f)
"""),
    M("""
A profile spanning 1..512 is legal but costly: kernels tuned for 64 may run slowly at 512, and memory
is reserved for 64x512 whatever you feed. What does a profile change in a real engine? The
ResNet engines on the H200 were built with one profile (min 1, opt 8, max 32). Their layer
information, exported with an execution context at the opt shape, shows concrete shapes; the
same engine inspected without a context shows `-1` for the dynamic axis:
""", """
上面英文的几行是 workbench 的原话：第一条（“refused”）说两个输入共用的维度取值范围不一致，
配置文件被拒绝；后面几条提醒范围太宽。

跨越 1..512 的配置文件合法，但代价不小：为 64 调优的内核在 512 时可能跑得慢，而且不管实际输入多大，
显存都按 64x512 预留。那么在真实引擎里，配置文件到底改变了什么？H200 上的 ResNet 引擎用一个
配置文件构建（min 1、opt 8、max 32）。带执行上下文（execution context）、按 opt 形状导出的层信息
给出具体形状；同一个引擎不带上下文查看时，动态维度显示为 `-1`：
"""),
    C("""
from workbench.timing import load_layers, load_profile
with_context = load_layers(cw.TIMING / "resnet_tiny_fp32.layers.json")
without = load_layers(cw.TIMING / "resnet_tiny_nocontext.layers.json")
print(cw.tr("with a context:   ", "有执行上下文："), with_context.layers[5].inputs)
print(cw.tr("without a context:", "无执行上下文："), without.layers[5].inputs)
print(without.warnings[0].message)
run = load_profile(cw.TIMING / "resnet_tiny_fp16.profile.json")
print(cw.tr("profile:", "配置文件："), run.extra["profile_shapes"])
pd.DataFrame(run.throughput)
"""),
    M("""
One engine served batch 1, 8 and 32: on this tiny model the GPU is far from busy, so the latency
barely moves and throughput grows with the batch. Now propose a profile from data. The calibration
file holds one batch of 64 padded sequences; the advisor also reads the attention mask to find
the real lengths:
""", """
中间那行英文警告是 workbench 读取层信息时给出的：这份导出没有执行上下文，所以动态维度是 `-1`。
表中 `batch` 是批大小，`p50_ms`/`p99_ms` 是延迟的分位数（毫秒），`items_per_s` 是每秒处理的样本数。

同一个引擎服务了 batch 1、8 和 32：这个模型很小，GPU 远没有跑满，所以延迟几乎不变，吞吐量随
batch 增大。接下来根据数据推荐配置文件。校准文件里是一个 batch，共 64 条补齐（padding）过的序列；
推荐器还会读取 attention mask，找出序列的真实长度。下面是 `workbench profiles` 命令的原样输出（英文）：
它列出数据中的形状，并给出可以直接用于 `--profile` 的配置文件。
"""),
    C("""
import contextlib, io
from workbench.cli import main as workbench
samples = load_calibration(cw.SAMPLES / "calib" / "bert_tiny.npz", BERT)
print({k: v.shape for k, v in samples[0].items()})
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    workbench(["profiles", str(BERT), "--calib", str(cw.SAMPLES / "calib" / "bert_tiny.npz")])
print(buf.getvalue())
"""),
    M("""
**Exercise.** Write a profile for both inputs that (1) is valid for the model and (2) holds the
calibration batch with opt at its shape, so `check_samples` reports no error and no warning.
Format: `input:MINxMIN:OPTxOPT:MAXxMAX`, inputs separated by commas.
""", """
**练习.** 为两个输入写一个配置文件，要求：(1) 对模型合法；(2) 能容纳校准数据的这个 batch，且
opt 就是它的形状，使 `check_samples` 既不报错误也不报警告。格式为
`输入名:MINxMIN:OPTxOPT:MAXxMAX`，不同输入之间用逗号分隔。
"""),
    X("""
my_profile = "input_ids:1x8:64x32:64x64,attention_mask:1x8:64x32:64x64"   # your answer ‖ 你的答案
"""),
    K("""
cw.answered(my_profile)
try:
    profiles = validate_profiles(BERT, [parse_profile_arg(my_profile)])
    problems = [f for f in check_samples(profiles, samples) if f.severity in ("error", "warning")]
except WorkbenchError as e:
    profiles, problems = [], [e]
for p in problems:
    print(p)
cw.check(profiles and not problems,
         en="both inputs need the same ranges; max must reach the data's shape 64x32 and opt should equal it",
         zh="两个输入的范围必须一致；max 要能容纳数据的形状 64x32，opt 最好正好等于它")
"""),
    M("""
**Take-away.** A profile is a promise about the shapes you will feed: kernels are tuned for `opt`
and memory is reserved for `max`, so derive it from real data (`workbench profiles --calib`) rather
than the widest range the model allows. Next: the runtime.
""", """
**小结.** 优化配置（profile）是对你将要输入的形状的承诺：内核按 `opt` 调优，内存按 `max` 预留。
所以要从真实数据推出它（`workbench profiles --calib`），而不是取模型允许的最宽范围。下一课：运行时。
"""),
]

RUNTIME = [
    M("""
# Course 5 · The runtime: latency percentiles and throughput versus batch

A served model is judged by its **latency distribution** (the median P50 and the tail P99: one
request in a hundred is slower than P99) and by its **throughput** (items per second). Both come
from timing many runs. The workbench's capture on the H200 (`tests/data/timing`) and `trtexec
--exportTimes` on an A100 (`tests/data/fixtures/trex-a100-resnet`) recorded every run.
""", """
# 第 5 课 · 运行时：延迟分位数与吞吐量随 batch 的变化

评价一个在线服务的模型，要看它的**延迟分布**（中位数 P50 和尾部 P99：每一百个请求中有一个比 P99
慢），以及它的**吞吐量**（throughput，每秒处理的样本数）。两者都来自对大量推理的计时。
workbench 在 H200 上的采集（`tests/data/timing`）和 A100 上 `trtexec --exportTimes` 的导出
（`tests/data/fixtures/trex-a100-resnet`）记下了每一次推理。
"""),
    C("""
import json
import numpy as np
from workbench.timing import load_profile, latency_stats

capture = json.loads((cw.TIMING / "resnet_tiny_fp16.profile.json").read_text())
samples_ms = np.array(capture["latency"]["samples_ms"])
n, b, cc = len(samples_ms), capture["shapes"]["input"][0], capture["compute_capability"]
print(cw.tr(f"{n} runs at batch {b} on compute capability {cc}", f"batch {b}，计算能力 {cc}，共 {n} 次推理"))
print({k: round(v, 4) for k, v in latency_stats(samples_ms).items()})
a100 = load_profile(cw.A100 / "resnet-fp16.engine.timing.json")
print(cw.tr("A100 trtexec, ResNet FP16 batch 32:", "A100 trtexec，ResNet FP16，batch 32："),
      {k: round(v, 4) for k, v in a100.latency_stats().items()})
"""),
    M("""
The mean hides the tail: a few runs are much slower than the median, and P99 is what a user
waits for once in a hundred requests.

**Exercise 1.** Compute the P99 latency of the H200 samples with numpy; put it in `p99`.
""", """
字典的键是 workbench 的统计名：`n` 次数、`mean_ms` 均值、`min_ms`/`max_ms` 最小/最大值、
`p50_ms`/`p90_ms`/`p99_ms` 分位数，单位都是毫秒。

均值会掩盖尾部：少数几次推理比中位数慢得多，而 P99 就是用户每一百个请求里会碰上一次的等待时间。

**练习 1.** 用 numpy 计算 H200 样本的 P99 延迟，写进 `p99`。
"""),
    X("""
p99 = np.percentile(samples_ms, 99)   # your answer ‖ 你的答案
"""),
    K("""
cw.answered(p99)
cw.check(cw.close(p99, capture["latency"]["p99_ms"], rel=1e-6),
         en="np.percentile(samples_ms, 99)", zh="np.percentile(samples_ms, 99)")
print(cw.tr(f"P99 {p99:.4f} ms is x{p99 / np.median(samples_ms):.2f} the median",
            f"P99 为 {p99:.4f} ms，是中位数的 {p99 / np.median(samples_ms):.2f} 倍"))
"""),
    C("""
through = pd.DataFrame(json.loads((cw.TIMING / "resnet_tiny_fp32.profile.json").read_text())["throughput"])
PRECISION = cw.tr("precision", "精度")
through.insert(0, PRECISION, "fp32")
t16 = pd.DataFrame(capture["throughput"]); t16.insert(0, PRECISION, "fp16")
table = pd.concat([through, t16], ignore_index=True)
table
"""),
    M("""
**Exercise 2.** Throughput is batch size divided by latency. Compute the FP16 items per second at
batch 32 from its P50 (in ms) and put it in `items_per_s_32`.
""", """
**练习 2.** 吞吐量等于 batch 大小除以延迟。根据 FP16 在 batch 32 时的 P50（单位 ms）算出每秒
处理的样本数，写进 `items_per_s_32`。
"""),
    X("""
row = t16[t16.batch == 32].iloc[0]
items_per_s_32 = 32 / (row.p50_ms / 1000)   # your answer ‖ 你的答案
"""),
    K("""
cw.answered(items_per_s_32)
cw.check(cw.close(items_per_s_32, row.items_per_s),
         en="batch / (p50_ms / 1000): the latency is in milliseconds",
         zh="batch / (p50_ms / 1000)：延迟的单位是毫秒")
"""),
    M("""
On the 32x32 model the latency hardly grows from batch 1 to 32: the GPU has capacity to spare,
so batching is nearly free. (The "fp16" rows are the engine built with the FP16 builder flag: on
this toy model TensorRT 8.6 timed FP32 kernels faster and kept them, so the two rows barely differ;
the flag allows FP16, it does not force it.) A large model keeps the GPU busy; the A100 ResNet summary from trtexec shows the throughput at batch 32:
""", """
在 32x32 的小模型上，batch 从 1 增加到 32，延迟几乎不变：GPU 还有富余，所以加大 batch 几乎没有代价。
（“fp16”那几行是用 FP16 构建标志构建的引擎：在这个小模型上 TensorRT 8.6 测得 FP32 内核更快并保留了它们，
所以两组数据相差无几；这个标志只是允许 FP16，并不强制使用。）
大模型则会让 GPU 一直处于忙碌状态；
trtexec 给出的 A100 ResNet 汇总显示了 batch 32 时的吞吐量：
"""),
    C("""
meta = json.loads((cw.A100 / "resnet-fp16.engine.profile.metadata.json").read_text())
summary = meta["performance_summary"]
batch = int(meta["inference_options"]["Input inference shape"].split("=")[1].split("x")[0])
device, qps = meta["device_information"]["Selected Device"], summary["Throughput"]
print(cw.tr(f"{device} | batch {batch} | {qps} inferences/s = {round(qps * batch)} images/s",
            f"{device} | batch {batch} | 每秒 {qps} 次推理 = 每秒 {round(qps * batch)} 张图像"))
"""),
    M("""
**Take-away.** Judge an engine by its latency distribution, not its mean: P99 is what one request
in a hundred waits for, and throughput (batch / latency) grows with the batch only while the GPU
has capacity to spare. Next: serving several variants.
""", """
**小结.** 评价引擎要看延迟分布，而不是平均值：P99 是每一百个请求里最慢那一个要等的时间；
吞吐量（batch / 延迟）只有在 GPU 还有余力时才随 batch 增长。下一课：多个变体的部署。
"""),
]

SERVING = [
    M("""
# Course 6 · Multi-variant engines and serving

A real service rarely runs one engine. It keeps **variants**, for example FP16 and INT8, a small-batch
profile for latency and a large-batch profile for throughput, and picks one per request against a
**latency budget**. The workbench builds and measures such variants in one step
(`workbench matrix`) and exports engines as a Triton model repository (`workbench triton`), both
at the end of this chapter. Picking the variant for a request stays with the client: the
workbench has no request router. That decision is what this chapter practises, on recorded data
and with no numbers that were not measured.
""", """
# 第 6 课 · 多变体引擎与服务

真实的服务很少只跑一个引擎。它会保留多个**变体**（variant），例如 FP16 和 INT8，为低延迟准备的
小 batch 配置文件和为高吞吐准备的大 batch 配置文件，再按每个请求的**延迟预算**（latency budget）
挑选一个。workbench 可以一步构建并测量这些变体（`workbench matrix`），并把引擎导出为 Triton
模型仓库（`workbench triton`），两者都在本章末尾介绍。为每个请求挑选变体仍由客户端负责：
workbench 不提供请求路由。本章练习的正是这个决策，使用已录下的数据，不展示任何未经实测的数字。
"""),
    C("""
import json
ENGINE = cw.tr("engine", "引擎")
variants = []
for precision in ("fp32", "fp16"):
    run = json.loads((cw.TIMING / f"resnet_tiny_{precision}.profile.json").read_text())
    for row in run["throughput"]:
        variants.append({ENGINE: f"resnet_tiny {precision}", **row})
variants = pd.DataFrame(variants)
variants
"""),
    M("""
**Exercise.** With a P99 budget of 0.1 ms, which row gives the most items per second? Put its
index in `best`.
""", """
表中 `batch` 是批大小，`p50_ms`/`p99_ms` 是延迟分位数（毫秒），`items_per_s` 是每秒处理的样本数。

**练习.** 若 P99 延迟预算为 0.1 ms，哪一行每秒处理的样本最多？把该行的索引写进 `best`。
"""),
    X("""
BUDGET_MS = 0.1
best = variants[variants.p99_ms <= BUDGET_MS].items_per_s.idxmax()   # your answer ‖ 你的答案
"""),
    K("""
cw.answered(best)
ok = variants.loc[best, "p99_ms"] <= BUDGET_MS and all(
    r.items_per_s <= variants.loc[best, "items_per_s"] for r in variants.itertuples() if r.p99_ms <= BUDGET_MS)
cw.check(ok, en="keep the rows with p99_ms <= BUDGET_MS, then take the one with the largest items_per_s",
         zh="先保留 p99_ms <= BUDGET_MS 的行，再取 items_per_s 最大的那一行")
pick = variants.loc[best]
print(cw.tr(f"within {BUDGET_MS} ms at P99: {pick[ENGINE]}, batch {int(pick.batch)}, {pick.items_per_s:.0f} items/s (P99 {pick.p99_ms:.4f} ms)",
            f"P99 不超过 {BUDGET_MS} ms 时：{pick[ENGINE]}，batch {int(pick.batch)}，每秒 {pick.items_per_s:.0f} 个样本（P99 {pick.p99_ms:.4f} ms）"))
"""),
    M("""
The same decision for your own model, with the workbench's variant matrix (`pip install
'trt-workbench[matrix]'`: each variant is a Ray task; `workbench matrix --help` lists every option).
From the repository root:

```bash
workbench matrix sample_models/resnet_tiny.onnx --precision fp32,fp16,int8 \\
    --calib sample_models/calib/resnet_tiny.npz --gpus -o matrix/ \\
    --profile input:1x3x32x32:1x3x32x32:8x3x32x32 --profile +input:8x3x32x32:32x3x32x32:64x3x32x32
workbench triton matrix/engines/*.engine -o triton_repo/
tritonserver --model-repository triton_repo/
```

A `--profile` that starts with `+` starts another point on the profile axis: here a small-batch
and a large-batch variant of each precision. Every variant is built through the engine cache, its
accuracy is measured against onnxruntime FP32 on the calibration data, and with `--gpus` it is
timed on the GPU: `matrix/results.csv` has a row per variant (`latency_p50_ms`,
`latency_p99_ms`, `throughput_qps`, `error_rel`, `size_bytes`) and `matrix/pareto.html` shows
error against latency (without `--gpus` nothing is timed, and the engine size takes latency's
place there). From Python: `workbench.matrix.plan_matrix` and
`run_matrix`; in a notebook: `widgets.MatrixPanel`.

`workbench triton` (Python: `workbench.engines.triton.export_triton`) turns the engines in
`matrix/engines/` into one Triton model each, with a `config.pbtxt` written from the engine's card
(dynamic batching where its profiles allow). Each variant is served under its own model name, so
the client sends a request to the variant its budget allows, chosen as in the exercise above.
""", """
用 workbench 的变体矩阵对你自己的模型做同样的决策（需先 `pip install 'trt-workbench[matrix]'`：
每个变体是一个 Ray 任务；`workbench matrix --help` 列出全部选项）。在仓库根目录下运行：

```bash
workbench matrix sample_models/resnet_tiny.onnx --precision fp32,fp16,int8 \\
    --calib sample_models/calib/resnet_tiny.npz --gpus -o matrix/ \\
    --profile input:1x3x32x32:1x3x32x32:8x3x32x32 --profile +input:8x3x32x32:32x3x32x32:64x3x32x32
workbench triton matrix/engines/*.engine -o triton_repo/
tritonserver --model-repository triton_repo/
```

以 `+` 开头的 `--profile` 会在配置文件这一维上新增一个点：这里每种精度各有一个小 batch 变体和一个
大 batch 变体。每个变体都经由引擎缓存构建，用校准数据对照 onnxruntime FP32 测量精度；加上 `--gpus`
时还会在 GPU 上计时：`matrix/results.csv` 每个变体一行（`latency_p50_ms`、`latency_p99_ms`、
`throughput_qps`、`error_rel`、`size_bytes`），`matrix/pareto.html` 画出误差与延迟的关系（不加
`--gpus` 则不计时，图中由引擎大小代替延迟）。在 Python 中使用
`workbench.matrix.plan_matrix` 和 `run_matrix`；在 notebook 中使用 `widgets.MatrixPanel`。

`workbench triton`（Python 中为 `workbench.engines.triton.export_triton`）把 `matrix/engines/` 中的
每个引擎变成一个 Triton 模型，`config.pbtxt` 根据引擎的卡片（card）生成（配置文件允许时启用动态
batch）。每个变体以自己的模型名提供服务，客户端按延迟预算把请求发给合适的变体，挑选方法和上面的
练习一样。
"""),
    M("""
**Take-away.** Serving is a choice among measured variants: build the candidates (precision x
profile), measure P99 and throughput on the target GPU, and let each request take the fastest one
within its latency budget. The workbench builds, measures and exports them; the choice per request
stays with your client.
""", """
**小结.** 部署是在测量过的变体之间做选择：构建候选（精度 x 配置），在目标 GPU 上测出 P99 和吞吐量，
让每个请求选用满足其延迟预算的最快变体。workbench 负责构建、测量和导出；每个请求选哪个变体，仍由你的客户端决定。
"""),
]

CHAPTERS = [
    ("01_builder", BUILDER),
    ("02_precision", PRECISION),
    ("03_tactics", TACTICS),
    ("04_dynamic_shapes", SHAPES),
    ("05_runtime", RUNTIME),
    ("06_serving", SERVING),
]
