"""Make the small sample ONNX models and calibration data in this folder (no downloads).

    python sample_models/make_samples.py            # writes next to this script
    python sample_models/make_samples.py -o DIR     # somewhere else

Every model is built with onnx.helper from fixed seeds, so re-running gives byte-identical ONNX files (and the same calibration arrays).
See README.md here for what each model is for and what TensorRT-RTX's parser says about it.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
OPSET = 17
PRODUCER = "trt-workbench make_samples.py"


class GraphBuilder:
    """Tiny helper that names nodes/tensors PyTorch-exporter style (`/scope/Op`, `/scope/Op_output_0`)."""

    def __init__(self, seed: int, external: Optional["ExternalWriter"] = None) -> None:
        self.external = external
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self._names: Dict[str, int] = {}

    def _unique(self, name: str) -> str:
        k = self._names.get(name, 0)
        self._names[name] = k + 1
        return name if k == 0 else f"{name}_{k}"

    def init(self, name: str, array: np.ndarray) -> str:
        if self.external is not None and array.nbytes >= 1024:
            self.inits.append(self.external.write(name, array))
        else:
            self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, scope: str, array: np.ndarray) -> str:
        """A Constant node (as exporters emit for small scalars and shapes)."""
        name = self._unique(f"{scope}/Constant")
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node("Constant", [], [out], name=name,
                                           value=numpy_helper.from_array(np.asarray(array))))
        return out

    def op(self, op: str, scope: str, inputs: Sequence[str], n_out: int = 1,
           domain: str = "", **attrs) -> str | List[str]:
        name = self._unique(f"{scope}/{op}")
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, domain=domain or None,
                                           **attrs))
        return outs[0] if n_out == 1 else outs

    def rename_output(self, tensor: str, new: str) -> str:
        for n in self.nodes:
            for i, o in enumerate(n.output):
                if o == tensor:
                    n.output[i] = new
        return new

    def model(self, name: str, inputs, outputs, doc: str, opsets: Optional[Dict[str, int]] = None
              ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        imports = [helper.make_opsetid(d, v) for d, v in (opsets or {"": OPSET}).items()]
        m = helper.make_model(graph, opset_imports=imports, producer_name=PRODUCER,
                              producer_version="1", doc_string=doc)
        m.ir_version = 8
        if self.external is None:
            onnx.checker.check_model(m)
        return m


class ExternalWriter:
    """Streams initializers into one external-data file as they are made (for big models:
    the weights never sit in memory all at once)."""

    def __init__(self, data_path: Path) -> None:
        self.path = Path(data_path)
        self.f = open(self.path, "wb")
        self.offset = 0

    def write(self, name: str, array: np.ndarray) -> onnx.TensorProto:
        raw = np.ascontiguousarray(array).tobytes()
        pad = (-self.offset) % 64  # aligned like onnx's own writer
        if pad:
            self.f.write(bytes(pad))
            self.offset += pad
        tensor = onnx.TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(
            array.dtype), dims=list(array.shape), data_location=onnx.TensorProto.EXTERNAL)
        for k, v in (("location", self.path.name), ("offset", str(self.offset)),
                     ("length", str(len(raw)))):
            e = tensor.external_data.add()
            e.key, e.value = k, v
        self.f.write(raw)
        self.offset += len(raw)
        return tensor

    def close(self) -> None:
        self.f.close()


# --------------------------------------------------------------------------------------------
# resnet_tiny: Conv+BN+ReLU blocks with residual adds, GAP, Gemm; input [batch,3,32,32]
# --------------------------------------------------------------------------------------------

def _conv_bn(b: GraphBuilder, x: str, scope: str, cin: int, cout: int, k: int, stride: int,
             relu: bool) -> str:
    w = b.rng.normal(0, math.sqrt(2.0 / (cin * k * k)), (cout, cin, k, k)).astype(np.float32)
    b.init(f"{scope}.conv.weight", w)
    y = b.op("Conv", f"{scope}/conv", [x, f"{scope}.conv.weight"], kernel_shape=[k, k],
             strides=[stride, stride], pads=[k // 2] * 4)
    b.init(f"{scope}.bn.weight", b.rng.uniform(0.5, 1.5, cout).astype(np.float32))
    b.init(f"{scope}.bn.bias", b.rng.normal(0, 0.1, cout).astype(np.float32))
    b.init(f"{scope}.bn.running_mean", b.rng.normal(0, 0.2, cout).astype(np.float32))
    b.init(f"{scope}.bn.running_var", b.rng.uniform(0.5, 2.0, cout).astype(np.float32))
    y = b.op("BatchNormalization", f"{scope}/bn",
             [y] + [f"{scope}.bn.{p}" for p in ("weight", "bias", "running_mean", "running_var")],
             epsilon=1e-5, momentum=0.9)
    if relu:
        y = b.op("Relu", f"{scope}/relu", [y])
    return y


def _basic_block(b: GraphBuilder, x: str, scope: str, cin: int, cout: int, stride: int) -> str:
    y = _conv_bn(b, x, f"{scope}/conv1", cin, cout, 3, stride, relu=True)
    y = _conv_bn(b, y, f"{scope}/conv2", cout, cout, 3, 1, relu=False)
    short = x
    if stride != 1 or cin != cout:
        short = _conv_bn(b, x, f"{scope}/downsample", cin, cout, 1, stride, relu=False)
    y = b.op("Add", scope, [y, short])
    return b.op("Relu", f"{scope}/relu", [y])


def make_resnet_tiny() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = _conv_bn(b, "input", "/stem", 3, 16, 3, 1, relu=True)
    x = _basic_block(b, x, "/layer1/0", 16, 16, 1)
    x = _basic_block(b, x, "/layer2/0", 16, 32, 2)
    x = _basic_block(b, x, "/layer3/0", 32, 32, 1)
    x = b.op("GlobalAveragePool", "/pool", [x])
    x = b.op("Flatten", "/flatten", [x], axis=1)
    b.init("fc.weight", b.rng.normal(0, 0.1, (10, 32)).astype(np.float32))
    b.init("fc.bias", np.zeros(10, np.float32))
    y = b.op("Gemm", "/fc", [x, "fc.weight", "fc.bias"], transB=1)
    b.rename_output(y, "logits")
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 32, 32])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])
    return b.model("resnet_tiny", [inp], [out],
                   "ResNet-style CNN: Conv+BN+ReLU basic blocks with residual adds, dynamic batch.")


# --------------------------------------------------------------------------------------------
# bert_tiny: 2-layer BERT-style encoder, int64 input_ids/attention_mask [batch, seq]
# --------------------------------------------------------------------------------------------

BERT = dict(vocab=1000, hidden=64, heads=2, inter=128, layers=2, max_pos=64)
PAD_ID, CLS_ID, SEP_ID = 0, 1, 2


def _linear(b: GraphBuilder, x: str, scope: str, cin: int, cout: int, wname: str) -> str:
    b.init(f"{wname}.weight", b.rng.normal(0, 0.05, (cin, cout)).astype(np.float32))
    b.init(f"{wname}.bias", b.rng.normal(0, 0.02, cout).astype(np.float32))
    y = b.op("MatMul", scope, [x, f"{wname}.weight"])
    return b.op("Add", scope, [f"{wname}.bias", y])


def _layernorm(b: GraphBuilder, x: str, scope: str, wname: str, h: int) -> str:
    b.init(f"{wname}.weight", (1 + b.rng.normal(0, 0.05, h)).astype(np.float32))
    b.init(f"{wname}.bias", b.rng.normal(0, 0.02, h).astype(np.float32))
    return b.op("LayerNormalization", scope, [x, f"{wname}.weight", f"{wname}.bias"],
                axis=-1, epsilon=1e-12)


def _gelu_erf(b: GraphBuilder, x: str, scope: str) -> str:
    d = b.op("Div", scope, [x, b.const(scope, np.array(math.sqrt(2.0), np.float32))])
    e = b.op("Erf", scope, [d])
    a = b.op("Add", scope, [e, b.const(scope, np.array(1.0, np.float32))])
    m = b.op("Mul", scope, [x, a])
    return b.op("Mul", scope, [m, b.const(scope, np.array(0.5, np.float32))])


def make_bert_tiny() -> onnx.ModelProto:
    return make_bert(BERT, name="bert_tiny")


def make_bert(c: Dict[str, int], name: str = "bert", seed: int = 2,
              external: Optional[ExternalWriter] = None) -> onnx.ModelProto:
    """A BERT-style encoder of any size (config keys: vocab, hidden, heads, inter, layers,
    max_pos); with `external`, weights stream into an external-data file."""
    H, NH = c["hidden"], c["heads"]
    hd = H // NH
    b = GraphBuilder(seed=seed, external=external)
    # embeddings
    b.init("embeddings.word_embeddings.weight",
           b.rng.normal(0, 0.05, (c["vocab"], H)).astype(np.float32))
    b.init("embeddings.position_embeddings.weight",
           b.rng.normal(0, 0.05, (c["max_pos"], H)).astype(np.float32))
    b.init("embeddings.token_type_embeddings.weight",
           b.rng.normal(0, 0.05, (2, H)).astype(np.float32))
    s = "/embeddings"
    words = b.op("Gather", f"{s}/word_embeddings", ["embeddings.word_embeddings.weight", "input_ids"])
    shape = b.op("Shape", s, ["input_ids"])
    seq = b.op("Gather", s, [shape, b.const(s, np.array(1, np.int64))], axis=0)
    pos_ids = b.op("Range", s, [b.const(s, np.array(0, np.int64)), seq,
                                b.const(s, np.array(1, np.int64))])
    pos = b.op("Gather", f"{s}/position_embeddings",
               ["embeddings.position_embeddings.weight", pos_ids])
    tok = b.op("Gather", f"{s}/token_type_embeddings",
               ["embeddings.token_type_embeddings.weight", b.const(s, np.array(0, np.int64))])
    x = b.op("Add", s, [words, pos])
    x = b.op("Add", s, [x, tok])
    x = _layernorm(b, x, f"{s}/LayerNorm", "embeddings.LayerNorm", H)
    # extended attention mask: (1 - mask) * finfo(float32).min, as current transformers export it
    s = "/encoder"
    m = b.op("Unsqueeze", s, ["attention_mask", b.const(s, np.array([1, 2], np.int64))])
    m = b.op("Cast", s, [m], to=TensorProto.FLOAT)
    m = b.op("Sub", s, [b.const(s, np.array(1.0, np.float32)), m])
    mask_add = b.op("Mul", s, [m, b.const(s, np.array(np.finfo(np.float32).min, np.float32))])
    head_shape = b.const(s, np.array([0, 0, NH, hd], np.int64))
    merge_shape = b.const(s, np.array([0, 0, H], np.int64))
    for i in range(c["layers"]):
        L, W = f"/encoder/layer.{i}", f"encoder.layer.{i}"
        a = f"{L}/attention/self"

        def heads(name: str, perm: List[int]) -> str:
            t = _linear(b, x, f"{a}/{name}", H, H, f"{W}.attention.self.{name}")
            t = b.op("Reshape", a, [t, head_shape])
            return b.op("Transpose", a, [t], perm=perm)

        q = heads("query", [0, 2, 1, 3])
        k = heads("key", [0, 2, 3, 1])
        v = heads("value", [0, 2, 1, 3])
        scores = b.op("MatMul", a, [q, k])
        scores = b.op("Div", a, [scores, b.const(a, np.array(math.sqrt(hd), np.float32))])
        scores = b.op("Add", a, [scores, mask_add])
        probs = b.op("Softmax", a, [scores], axis=-1)
        ctx = b.op("MatMul", a, [probs, v])
        ctx = b.op("Transpose", a, [ctx], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", a, [ctx, merge_shape])
        o = f"{L}/attention/output"
        y = _linear(b, ctx, f"{o}/dense", H, H, f"{W}.attention.output.dense")
        y = b.op("Add", o, [y, x])
        x = _layernorm(b, y, f"{o}/LayerNorm", f"{W}.attention.output.LayerNorm", H)
        inter = _linear(b, x, f"{L}/intermediate/dense", H, c["inter"], f"{W}.intermediate.dense")
        inter = _gelu_erf(b, inter, f"{L}/intermediate/intermediate_act_fn")
        o = f"{L}/output"
        y = _linear(b, inter, f"{o}/dense", c["inter"], H, f"{W}.output.dense")
        y = b.op("Add", o, [y, x])
        x = _layernorm(b, y, f"{o}/LayerNorm", f"{W}.output.LayerNorm", H)
    b.rename_output(x, "last_hidden_state")
    # pooler: first token -> dense -> tanh
    s = "/pooler"
    first = b.op("Gather", s, ["last_hidden_state", b.const(s, np.array(0, np.int64))], axis=1)
    p = _linear(b, first, f"{s}/dense", H, H, "pooler.dense")
    p = b.op("Tanh", f"{s}/activation", [p])
    b.rename_output(p, "pooler_output")
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])]
    outs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                          ["batch", "seq", H]),
            helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", H])]
    return b.model(name, ins, outs,
                   f"BERT-style encoder ({c['layers']} layers, hidden {H}, {NH} heads), dynamic "
                   "batch and sequence.")


# --------------------------------------------------------------------------------------------
# needs_fixing: nodes TensorRT-RTX 1.7's parser rejects, each fixable by a graphsurgeon recipe
# --------------------------------------------------------------------------------------------

def make_needs_fixing() -> onnx.ModelProto:
    b = GraphBuilder(seed=3)
    b.init("conv.weight", b.rng.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32))
    b.init("conv.bias", b.rng.normal(0, 0.05, 8).astype(np.float32))
    x = b.op("Conv", "/conv", ["input", "conv.weight", "conv.bias"], kernel_shape=[3, 3],
             pads=[1, 1, 1, 1])
    # 1) CenterCropPad (opset 18): the parser rejects it; it is an ONNX function (Slice/Pad)
    x = b.op("CenterCropPad", "/crop", [x, b.const("/crop", np.array([8, 8], np.int64))],
             axes=[2, 3])
    # 2) a constant-foldable index computation feeding the Reshape shape: Compress on constants
    #    picks the static dims to flatten; the parser rejects Compress, constant folding removes it
    s = "/flatten"
    keep = b.op("Compress", s, [b.const(s, np.arange(4, dtype=np.int64)),
                                b.const(s, np.array([False, True, True, True]))], axis=0)
    dims = b.op("Gather", s, [b.op("Shape", s, [x]), keep], axis=0)
    feat = b.op("ReduceProd", s, [dims], keepdims=1)
    shape = b.op("Concat", s, [b.const(s, np.array([-1], np.int64)), feat], axis=0)
    x = b.op("Reshape", s, [x, shape])
    # 3) a custom-domain op: com.microsoft FastGelu (onnxruntime contrib op, tanh GELU + bias)
    b.init("act.bias", b.rng.normal(0, 0.05, 512).astype(np.float32))
    x = b.op("FastGelu", "/act", [x, "act.bias"], domain="com.microsoft")
    b.init("fc.weight", b.rng.normal(0, 0.05, (10, 512)).astype(np.float32))
    b.init("fc.bias", np.zeros(10, np.float32))
    y = b.op("Gemm", "/fc", [x, "fc.weight", "fc.bias"], transB=1)
    b.rename_output(y, "logits")
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4, 12, 12])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])
    return b.model("needs_fixing", [inp], [out],
                   "Three things TensorRT-RTX's ONNX parser rejects and recipes can fix: "
                   "CenterCropPad (inline its function body), a constant Compress feeding a "
                   "Reshape shape (fold constants), com.microsoft FastGelu (decompose).",
                   opsets={"": 18, "com.microsoft": 1})


# --------------------------------------------------------------------------------------------
# fp16_overflow: a projection producing ~1e5 activations followed by LayerNorm
# --------------------------------------------------------------------------------------------

def make_fp16_overflow() -> onnx.ModelProto:
    b = GraphBuilder(seed=4)
    d = 64
    b.init("proj.weight", b.rng.normal(0, 30.0, (d, d)).astype(np.float32))
    b.init("proj.bias", np.zeros(d, np.float32))
    x = b.op("MatMul", "/proj", ["input", "proj.weight"])
    x = b.op("Add", "/proj", [x, "proj.bias"])
    # a large gain: |h| reaches ~1e5-1e6 (> 65504, FP16's max) for inputs of size ~1
    x = b.op("Mul", "/scale", [x, b.const("/scale", np.array(500.0, np.float32))])
    # decomposed L2 normalisation: the sum of squares (~1e12) overflows FP16 even sooner
    s = "/norm"
    sq = b.op("Mul", s, [x, x])
    ss = b.op("ReduceSum", s, [sq, b.const(s, np.array([-1], np.int64))], keepdims=1)
    nrm = b.op("Sqrt", s, [ss])
    nrm = b.op("Add", s, [nrm, b.const(s, np.array(1e-6, np.float32))])
    x = b.op("Div", s, [x, nrm])
    b.init("head.weight", b.rng.normal(0, 1.0, (d, 8)).astype(np.float32))
    y = b.op("MatMul", "/head", [x, "head.weight"])
    b.rename_output(y, "output")
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", d])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 8])
    return b.model("fp16_overflow", [inp], [out],
                   "Activations after /scale reach ~1e5 and the sum of squares in /norm ~1e12 "
                   "(FP16 max is 65504); the L2 normalisation brings them back to O(1): fine in "
                   "FP32, inf/NaN in FP16.")


# --------------------------------------------------------------------------------------------
# calibration data: structured, representative inputs (never random noise)
# --------------------------------------------------------------------------------------------

def synthetic_images(n: int, seed: int = 10) -> np.ndarray:
    """Images with shapes, gradients, stripes and soft lighting, normalised like ImageNet."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32) / 31.0
    out = np.empty((n, 3, 32, 32), np.float32)
    for i in range(n):
        bg = rng.uniform(0.1, 0.9, 3)[:, None, None]
        ang = rng.uniform(0, 2 * np.pi)
        grad = (np.cos(ang) * xx + np.sin(ang) * yy)[None]
        img = np.clip(bg + 0.3 * (grad - 0.5), 0, 1) * np.ones((3, 1, 1), np.float32)
        kind = i % 4
        color = rng.uniform(0, 1, 3)[:, None, None]
        cx, cy = rng.uniform(0.25, 0.75, 2)
        r = rng.uniform(0.12, 0.3)
        if kind == 0:  # disc
            mask = ((xx - cx) ** 2 + (yy - cy) ** 2) < r * r
        elif kind == 1:  # rectangle
            mask = (np.abs(xx - cx) < r) & (np.abs(yy - cy) < r * rng.uniform(0.5, 1.5))
        elif kind == 2:  # stripes
            f = rng.integers(2, 6)
            mask = np.sin(2 * np.pi * f * (np.cos(ang) * xx + np.sin(ang) * yy)) > 0
        else:  # triangle
            mask = (yy > cy - r) & (np.abs(xx - cx) < (yy - (cy - r)) * 0.8)
        img = np.where(mask[None], 0.7 * color + 0.3 * img, img)
        img = img * (0.8 + 0.2 * (1 - ((xx - 0.5) ** 2 + (yy - 0.5) ** 2)))[None]  # vignette
        img += rng.normal(0, 0.01, img.shape)  # sensor noise, small
        out[i] = img
    mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
    std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
    return ((np.clip(out, 0, 1) - mean) / std).astype(np.float32)


def synthetic_token_batches(n: int, seq: int = 32, seed: int = 11) -> Dict[str, np.ndarray]:
    """[CLS] sentence [SEP] (sentence [SEP]) + [PAD]...: Zipf-distributed ids, varied lengths."""
    rng = np.random.default_rng(seed)
    vocab = BERT["vocab"]
    ranks = np.arange(1, vocab - 9, dtype=np.float64)
    p = 1.0 / ranks ** 0.9
    p /= p.sum()
    ids = np.full((n, seq), PAD_ID, np.int64)
    mask = np.zeros((n, seq), np.int64)
    for i in range(n):
        length = int(rng.integers(6, seq + 1))
        toks = 10 + rng.choice(len(ranks), size=length - 2, p=p)  # ids 3..9 reserved
        row = [CLS_ID] + list(toks) + [SEP_ID]
        if length > 12 and rng.random() < 0.4:  # sentence pair
            cut = int(rng.integers(4, length - 4))
            row[cut] = SEP_ID
        ids[i, :length] = row
        mask[i, :length] = 1
    return {"input_ids": ids, "attention_mask": mask}


def make_all(out_dir: Path) -> List[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fn in [("resnet_tiny", make_resnet_tiny), ("bert_tiny", make_bert_tiny),
                     ("needs_fixing", make_needs_fixing), ("fp16_overflow", make_fp16_overflow)]:
        p = out_dir / f"{name}.onnx"
        p.write_bytes(fn().SerializeToString())
        written.append(p)
    calib = out_dir / "calib"
    calib.mkdir(exist_ok=True)
    np.savez_compressed(calib / "resnet_tiny.npz", input=synthetic_images(32))
    np.savez_compressed(calib / "bert_tiny.npz", **synthetic_token_batches(64))
    written += [calib / "resnet_tiny.npz", calib / "bert_tiny.npz"]
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=HERE)
    args = ap.parse_args()
    for p in make_all(args.out):
        print(f"{p}  {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
