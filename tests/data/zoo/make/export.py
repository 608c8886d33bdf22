"""Export one zoo model: python3 export.py NAME MODE OUTDIR   (MODE: default | legacy).

Random init only (no downloads). Writes OUTDIR/NAME.structure.onnx, NAME.stats.json, NAME.result.json.
"""
import json
import os
import sys
import time
import traceback

T0 = time.time()
NAME, MODE, OUTDIR = sys.argv[1], sys.argv[2], sys.argv[3]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
RESULT = {"name": NAME, "mode": MODE, "status": "fail"}


def save_result():
    RESULT["seconds"] = round(time.time() - T0, 1)
    with open(os.path.join(OUTDIR, NAME + "." + MODE + ".result.json"), "w") as f:
        json.dump(RESULT, f, indent=1)


IMG = ("images", "image")


def build(name):
    """-> (model, args tuple, input_names, dynamic_axes, output_names, category, source)."""
    import torch

    torch.manual_seed(0)
    img = lambda s=224: (torch.rand(2, 3, s, s),)
    bdyn = lambda names: {n: {0: "batch"} for n in names}

    timm_models = {
        "resnet50": "resnet50", "mobilenetv3_large_100": "mobilenetv3_large_100",
        "efficientnet_b0": "efficientnet_b0", "convnext_tiny": "convnext_tiny",
        "regnety_008": "regnety_008", "vit_small_patch16_224": "vit_small_patch16_224",
        "swin_tiny_patch4_window7_224": "swin_tiny_patch4_window7_224",
        "deit_tiny_patch16_224": "deit_tiny_patch16_224",
    }
    if name in timm_models:
        import timm
        m = timm.create_model(timm_models[name], pretrained=False)
        return m, img(), ["input"], bdyn(["input"]), ["logits"], "classification", "timm"

    import torchvision
    tvm = torchvision.models
    if name in ("squeezenet1_1", "shufflenet_v2_x1_0", "mobilenet_v3_small"):
        m = getattr(tvm, name)(weights=None)
        return m, img(), ["input"], bdyn(["input"]), ["logits"], "classification", "torchvision"

    det = {
        "ssdlite320_mobilenet_v3_large": 320, "retinanet_resnet50_fpn": 320,
        "fcos_resnet50_fpn": 320, "fasterrcnn_mobilenet_v3_large_320_fpn": 320,
    }
    if name in det:
        fn = getattr(tvm.detection, name)
        m = fn(weights=None, weights_backbone=None)
        s = det[name]
        nb = int(os.environ.get("ZOO_DET_BATCH", "2"))
        return m, (torch.rand(nb, 3, s, s),), ["images"], bdyn(["images"]), None, "detection", "torchvision"

    seg = ("deeplabv3_mobilenet_v3_large", "fcn_resnet50", "lraspp_mobilenet_v3_large")
    if name in seg:
        inner = getattr(tvm.segmentation, name)(weights=None, weights_backbone=None)

        class Seg(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input):
                return self.m(input)["out"]

        return Seg(inner), img(), ["input"], bdyn(["input"]), ["out"], "segmentation", "torchvision"

    if name in ("r3d_18", "mc3_18", "r2plus1d_18", "s3d"):
        m = getattr(tvm.video, name)(weights=None)
        x = torch.rand(2, 3, 16, 224, 224) if name == "s3d" else torch.rand(2, 3, 8, 112, 112)
        return m, (x,), ["input"], bdyn(["input"]), ["logits"], "video", "torchvision"

    import transformers as tf

    class HF(torch.nn.Module):
        def __init__(self, m, names, field):
            super().__init__()
            self.m = m
            self.names = names
            self.field = field

    if name in ("wav2vec2", "hubert"):
        m = (tf.Wav2Vec2Model(tf.Wav2Vec2Config()) if name == "wav2vec2"
             else tf.HubertModel(tf.HubertConfig()))

        class A(HF):
            def forward(self, input_values):
                return self.m(input_values=input_values).last_hidden_state

        return (A(m, None, None), (torch.randn(2, 16000),), ["input_values"],
                {"input_values": {0: "batch", 1: "samples"}}, ["last_hidden_state"], "audio", "transformers")

    if name == "whisper_tiny_encoder":
        cfg = tf.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                               decoder_layers=4, decoder_attention_heads=6,
                               encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80)
        enc = tf.WhisperModel(cfg).get_encoder()

        class W(HF):
            def forward(self, input_features):
                return self.m(input_features=input_features).last_hidden_state

        return (W(enc, None, None), (torch.randn(2, 80, 3000),), ["input_features"],
                bdyn(["input_features"]), ["last_hidden_state"], "audio", "transformers")

    if name == "clip_vision":
        m = tf.CLIPVisionModel(tf.CLIPVisionConfig())

        class C(HF):
            def forward(self, pixel_values):
                o = self.m(pixel_values=pixel_values)
                return o.last_hidden_state, o.pooler_output

        return (C(m, None, None), img(), ["pixel_values"], bdyn(["pixel_values"]),
                ["last_hidden_state", "pooler_output"], "encoder", "transformers")

    text = {
        "bert_base": (lambda: tf.BertModel(tf.BertConfig()), "encoder", "last_hidden_state"),
        "distilbert": (lambda: tf.DistilBertModel(tf.DistilBertConfig()), "encoder", "last_hidden_state"),
        "gpt2": (lambda: tf.GPT2LMHeadModel(tf.GPT2Config()), "decoder", "logits"),
        "llama_tiny": (lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
            hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=8000, max_position_embeddings=512)), "decoder", "logits"),
        "qwen2_tiny": (lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(
            hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=8000, max_position_embeddings=512)), "decoder", "logits"),
    }
    if name in text:
        make, cat, field = text[name]
        m = make()
        dec = cat == "decoder"

        class T(HF):
            def forward(self, input_ids, attention_mask):
                kw = {"input_ids": input_ids, "attention_mask": attention_mask}
                if dec:
                    kw["use_cache"] = False
                return getattr(self.m(**kw), self.field)

        ids = torch.randint(0, 1000, (2, 16), dtype=torch.int64)
        mask = torch.ones(2, 16, dtype=torch.int64)
        dyn = {n: {0: "batch", 1: "sequence"} for n in ("input_ids", "attention_mask")}
        return T(m, None, field), (ids, mask), ["input_ids", "attention_mask"], dyn, [field], cat, "transformers"

    raise KeyError(name)


def ort_check(path, examples):
    """Run the full exported model in onnxruntime at batch 1 and 3 (dynamic batch check)."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    out = {}
    rng = np.random.default_rng(0)
    for b in (1, 3):
        feeds = {}
        for j, i in enumerate(sess.get_inputs()):
            ex = examples[j] if j < len(examples) else []
            shape = [b if k == 0 else (d if isinstance(d, int) else (ex[k] if k < len(ex) else 16))
                     for k, d in enumerate(i.shape)]
            if "int64" in i.type:
                feeds[i.name] = (np.ones(shape, np.int64) if "mask" in i.name
                                 else rng.integers(0, 1000, shape).astype(np.int64))
            else:
                feeds[i.name] = rng.random(shape).astype(np.float32)
        try:
            res = sess.run(None, feeds)
            out["batch%d" % b] = [[list(r.shape), bool(np.all(np.isfinite(r))) if r.dtype.kind == "f" else None]
                                  for r in res]
        except Exception as e:  # noqa: BLE001
            out["batch%d" % b] = "error: %s" % str(e).splitlines()[0][:300]
    return out


def main():
    import torch

    torch.set_num_threads(1)
    model, args, in_names, dyn, out_names, cat, source = build(NAME)
    model.eval()
    RESULT.update(category=cat, source=source, torch=torch.__version__,
                  params=int(sum(p.numel() for p in model.parameters())))
    work = os.path.join(OUTDIR, "full", NAME + "." + MODE)
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, NAME + ".onnx")
    kw = dict(input_names=in_names, dynamic_axes=dyn)
    if out_names:
        kw["output_names"] = out_names
    if MODE == "legacy":
        kw["dynamo"] = False
    t = time.time()
    with torch.no_grad():
        torch.onnx.export(model, args, path, **kw)
    RESULT["export_seconds"] = round(time.time() - t, 1)
    RESULT["exporter"] = "torch.onnx.export(dynamo=False)" if MODE == "legacy" else "torch.onnx.export(default)"
    import onnx
    m = onnx.load(path, load_external_data=False)
    RESULT["opset"] = [[o.domain, o.version] for o in m.opset_import]
    RESULT["inputs"] = [[i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]]
                        for i in m.graph.input]
    RESULT["nodes"] = len(m.graph.node)
    ops = sorted({n.op_type for n in m.graph.node})
    RESULT["ops"] = ops
    import strip
    n, nbytes = strip.strip(path, os.path.join(OUTDIR, NAME + ".structure.onnx"),
                            os.path.join(OUTDIR, NAME + ".stats.json"))
    RESULT["stripped_tensors"], RESULT["stripped_bytes"] = n, nbytes
    RESULT["status"] = "ok"
    save_result()
    t = time.time()
    try:
        RESULT["ort"] = ort_check(path, [list(a.shape) for a in args])
    except Exception as e:  # noqa: BLE001
        RESULT["ort"] = "error: %s" % str(e).splitlines()[0][:300]
    RESULT["ort_seconds"] = round(time.time() - t, 1)
    save_result()


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # noqa: BLE001
        RESULT["error"] = ("%s: %s" % (type(e).__name__, str(e)))[:2000]
        RESULT["traceback"] = traceback.format_exc()[-3000:]
        save_result()
        sys.exit(1)
