"""How the models here were exported (torch 2.13.0, CPU; `torch.onnx.export(..., dynamo=False)`,
opset 17), as a user would; not run by the tests, which read the files. Run with torch
installed: `python tests/data/exports/make.py` (writes here)."""
import os

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
os.chdir(os.path.dirname(os.path.abspath(__file__)))


class Att(nn.Module):
    """Einsum attention with masked_fill(-1e9) for padding and -inf for the causal part."""

    def __init__(s):
        super().__init__()
        s.q, s.k, s.v, s.o = (nn.Linear(32, 32) for _ in range(4))

    def forward(s, x, mask):
        B, T, _ = x.shape
        q, k, v = (f(x).view(B, T, 4, 8) for f in (s.q, s.k, s.v))
        sc = torch.einsum('bqhd,bkhd->bhqk', q, k) / 8 ** 0.5
        sc = sc.masked_fill(mask[:, None, None, :] == 0, -1e9)
        sc = sc.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float('-inf'))
        o = torch.einsum('bhqk,bkhd->bqhd', sc.softmax(-1), v).reshape(B, T, 32)
        return s.o(o)


class Tok(nn.Module):
    """Token classifier: logits -> ArgMax -> Gather of a label embedding -> scores."""

    def __init__(s):
        super().__init__()
        s.emb, s.fc = nn.Embedding(100, 16), nn.Linear(16, 7)
        s.lab, s.out = nn.Embedding(7, 16), nn.Linear(16, 3)

    def forward(s, ids):
        h = s.emb(ids) + (torch.cumsum(torch.ones_like(ids), dim=1) - 1).unsqueeze(-1).float() * 0.01
        cls = s.fc(h).argmax(-1)
        e = torch.where(ids.unsqueeze(-1) > 0, s.lab(cls), torch.zeros_like(s.lab(cls)))
        return s.out(e + h), cls


x, mask = torch.randn(2, 12, 32), torch.ones(2, 12, dtype=torch.int64)
mask[1, 8:] = 0
torch.onnx.export(Att().eval(), (x, mask), "masked_attention.onnx", input_names=["x", "mask"],
                  output_names=["out"], dynamic_axes={"x": {0: "B", 1: "T"},
                                                      "mask": {0: "B", 1: "T"},
                                                      "out": {0: "B", 1: "T"}},
                  opset_version=17, dynamo=False)
mk = np.ones((4, 12), np.int64)
mk[1, 8:] = 0
mk[3, 5:] = 0
np.savez("masked_attention.npz", x=(np.random.randn(4, 12, 32) * 2).astype(np.float32), mask=mk)

torch.onnx.export(Tok().eval(), (torch.randint(0, 100, (2, 9)),), "token_argmax.onnx",
                  input_names=["ids"], output_names=["scores", "cls"],
                  dynamic_axes={"ids": {0: "B", 1: "T"}}, opset_version=17, dynamo=False)
ids = np.random.randint(0, 100, (8, 9)).astype(np.int64)
ids[:, 7:] = 0
np.savez("token_argmax.npz", ids=ids)
