"""Graph-view layout speed and payload size on transformer-like graphs of 1k to 20k nodes.

Generates BERT-like encoders with onnx.helper (PyTorch-style scoped names, dynamic reshapes,
attention, GELU, residuals; tiny initializers), then times `workbench.graphs.layout.layout` from an opened
Model (no weights) with every node shown, and the default collapsed view. Payload: the JSON form
(`GraphData.to_dict`) and what the widget sends (binary arrays + joined strings). Baselines, run side by
side on the same graphs: networkx `topological_generations` + `multipartite_layout` (a layered
layout without crossing reduction), when networkx is installed, and the issue's targets
(10k < 1.5 s, 20k < 4 s, payload < 5 MB at 20k). A click on the collapsed view's largest
group: `expand_in_place` timed against laying out the view with that scope open again.

Layout quality (`--quality on|off|only`): on real graphs (the H200 fixtures' ResNet-50 and
BERT-small, onnx's backend-test light_* models, tests/data/zoo/*.onnx if present) the same visible
graph is laid out by Graphviz `dot` (boxes as wide as ours); crossings are counted the same way
for both (edges sampled at every rank; a trunk shared by several edges is one drawn line) and
total edge length in inches. Two times per graph, each the best of `--repeat` runs:
- `layout_s`: our layout of the visible graph (ranks, order, x, bends: `GraphData.layout_s`),
  from the input dot is given (elements with their widths, edges), against dot's whole run
  (`dot -Tplain`, process start included): `time_ratio`, the goal;
- `ours_s`: the whole view from an opened model (the graph index, the view's structure, the
  view: labels, weight lines, widths and the layout; parts in `ours_index_s`,
  `ours_structure_s`, `ours_view_s`), against the same dot run: `view_ratio`, reported.
Goals: crossings <= 1.0x dot, layout time <= 0.05x dot, on every graph dot finishes (those
where it fails or times out are listed, not counted); the summary adds the median and
aggregate (sum ours / sum dot) ratios of both times and `layout_backend` ("c": the compiled
layout; "python": the reference, where the extension was not built). Last line: one JSON
object.

    python benchmarks/graph_layout.py [--sizes 1000,5000,10000,20000] [--quality only]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_S = {10000: 1.5, 20000: 4.0}
TARGET_PAYLOAD_MB = 5.0


def _layer_nodes(i: int, x: str, mask: str, hid: int, P: str):
    """One encoder layer (~62 nodes) reading `x`; returns (nodes, inits, output name)."""
    from onnx import helper, numpy_helper

    nodes, inits = [], []
    s = f"/encoder/layer.{i}"

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.float32), f"{s}/{name}"))
        return f"{s}/{name}"

    def nd(op, scope, name, ins, n_out=1, **attrs):
        outs = [f"{s}{scope}/{name}_output_{k}" for k in range(n_out)]
        nodes.append(helper.make_node(op, ins, outs, name=f"{s}{scope}/{name}", **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(scope, inp, w, bias):
        mm = nd("MatMul", scope, "MatMul", [inp, init(scope.strip("/") + ".weight", w)])
        return nd("Add", scope, "Add", [mm, init(scope.strip("/") + ".bias", bias)])

    def heads(scope, t):  # dynamic reshape to [b, s, h, d] then transpose
        shp = nd("Shape", scope, "Shape", [t])
        g0 = nd("Gather", scope, "Gather", [shp, f"{P}/zero"], axis=0)
        u0 = nd("Unsqueeze", scope, "Unsqueeze", [g0, f"{P}/axes0"])
        cat = nd("Concat", scope, "Concat", [u0, f"{P}/minus1", f"{P}/heads", f"{P}/hdim"], axis=0)
        r = nd("Reshape", scope, "Reshape", [t, cat])
        return nd("Transpose", scope, "Transpose", [r], perm=[0, 2, 1, 3])

    def layernorm(scope, t):
        m = nd("ReduceMean", scope, "ReduceMean", [t, f"{P}/axes_last"])
        d = nd("Sub", scope, "Sub", [t, m])
        p = nd("Pow", scope, "Pow", [d, f"{P}/two"])
        v = nd("ReduceMean", scope, "ReduceMean_1", [p, f"{P}/axes_last"])
        e = nd("Add", scope, "Add", [v, f"{P}/eps"])
        sq = nd("Sqrt", scope, "Sqrt", [e])
        q = nd("Div", scope, "Div", [d, sq])
        mu = nd("Mul", scope, "Mul", [q, init(scope.strip("/") + ".gamma", np.ones(hid))])
        return nd("Add", scope, "Add_1", [mu, init(scope.strip("/") + ".beta", np.zeros(hid))])

    W = np.zeros((hid, hid), dtype=np.float32)
    b = np.zeros(hid, dtype=np.float32)
    q = heads("/attention/self/query", linear("/attention/self/query", x, W, b))
    k = heads("/attention/self/key", linear("/attention/self/key", x, W, b))
    v = heads("/attention/self/value", linear("/attention/self/value", x, W, b))
    kt = nd("Transpose", "/attention/self", "Transpose", [k], perm=[0, 1, 3, 2])
    sc = nd("MatMul", "/attention/self", "MatMul", [q, kt])
    sc = nd("Div", "/attention/self", "Div", [sc, f"{P}/sqrt_d"])
    sc = nd("Add", "/attention/self", "Add", [sc, mask])
    pr = nd("Softmax", "/attention/self", "Softmax", [sc], axis=-1)
    ctx = nd("MatMul", "/attention/self", "MatMul_1", [pr, v])
    ctx = nd("Transpose", "/attention/self", "Transpose_1", [ctx], perm=[0, 2, 1, 3])
    ctx = nd("Reshape", "/attention/self", "Reshape", [ctx, f"{P}/merge_shape"])
    ao = linear("/attention/output/dense", ctx, W, b)
    ao = nd("Add", "/attention/output", "Add", [ao, x])
    ao = layernorm("/attention/output/LayerNorm", ao)
    it = linear("/intermediate/dense", ao, W, b)
    g = nd("Div", "/intermediate/intermediate_act_fn", "Div", [it, f"{P}/sqrt2"])
    g = nd("Erf", "/intermediate/intermediate_act_fn", "Erf", [g])
    g = nd("Add", "/intermediate/intermediate_act_fn", "Add", [g, f"{P}/one"])
    g = nd("Mul", "/intermediate/intermediate_act_fn", "Mul", [it, g])
    g = nd("Mul", "/intermediate/intermediate_act_fn", "Mul_1", [g, f"{P}/half"])
    o = linear("/output/dense", g, W, b)
    o = nd("Add", "/output", "Add", [o, ao])
    o = layernorm("/output/LayerNorm", o)
    return nodes, inits, o


def transformer_like(n_nodes: int, hidden: int = 4):
    """A BERT-like ONNX ModelProto with about `n_nodes` nodes (scoped names, tiny weights)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    P = "/const"
    consts = {"zero": np.array(0, np.int64), "axes0": np.array([0], np.int64),
              "minus1": np.array([-1], np.int64), "heads": np.array([2], np.int64),
              "hdim": np.array([hidden // 2], np.int64), "axes_last": np.array([-1], np.int64),
              "merge_shape": np.array([0, 0, hidden], np.int64)}
    fconsts = {"two": 2.0, "eps": 1e-12, "sqrt_d": float(np.sqrt(hidden // 2)),
               "sqrt2": float(np.sqrt(2.0)), "one": 1.0, "half": 0.5, "mask_scale": -10000.0}
    inits = [numpy_helper.from_array(v, f"{P}/{k}") for k, v in consts.items()]
    inits += [numpy_helper.from_array(np.array(v, np.float32), f"{P}/{k}") for k, v in fconsts.items()]
    emb = np.zeros((32, hidden), np.float32)
    inits.append(numpy_helper.from_array(emb, "embeddings.word_embeddings.weight"))
    nodes = [
        helper.make_node("Gather", ["embeddings.word_embeddings.weight", "input_ids"],
                         ["/embeddings/word_embeddings/Gather_output_0"],
                         name="/embeddings/word_embeddings/Gather"),
        helper.make_node("Unsqueeze", ["attention_mask", f"{P}/axes0"], ["/Unsqueeze_output_0"],
                         name="/Unsqueeze"),
        helper.make_node("Cast", ["/Unsqueeze_output_0"], ["/Cast_output_0"], name="/Cast",
                         to=TensorProto.FLOAT),
        helper.make_node("Sub", [f"{P}/one", "/Cast_output_0"], ["/Sub_output_0"], name="/Sub"),
        helper.make_node("Mul", ["/Sub_output_0", f"{P}/mask_scale"], ["/Mul_output_0"], name="/Mul"),
    ]
    x, mask = "/embeddings/word_embeddings/Gather_output_0", "/Mul_output_0"
    per_layer = 62
    for i in range(max(1, (n_nodes - 8) // per_layer)):
        ln, li, x = _layer_nodes(i, x, mask, hidden, P)
        nodes += ln
        inits += li
    nodes.append(helper.make_node("Gather", [x, f"{P}/zero"], ["/pooler/Gather_output_0"],
                                  name="/pooler/Gather", axis=1))
    nodes.append(helper.make_node("Tanh", ["/pooler/Gather_output_0"], ["pooler_output"],
                                  name="/pooler/activation/Tanh"))
    graph = helper.make_graph(
        nodes, "transformer_like",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, None)],
        initializer=inits)
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/Identity"))
    graph.node.append(nodes[-1])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _networkx_baseline(model) -> float:
    """Seconds for networkx's layered layout of the same graph (edges node -> consumer)."""
    import networkx as nx

    t0 = time.perf_counter()
    g = nx.DiGraph()
    prod = {}
    for i, n in enumerate(model.graph.node):
        g.add_node(i)
        for t in n.output:
            prod[t] = i
    for i, n in enumerate(model.graph.node):
        for t in n.input:
            if t in prod:
                g.add_edge(prod[t], i)
    for layer, nodes in enumerate(nx.topological_generations(g)):
        for v in nodes:
            g.nodes[v]["layer"] = layer
    nx.multipartite_layout(g, subset_key="layer", align="horizontal")
    return time.perf_counter() - t0


DOT_RANK_PITCH = 0.8  # inches between ranks in both drawings: box height 0.3 + ranksep 0.5
BOX_HALF_HEIGHT = 0.15


def quality_models() -> List[Path]:
    """Real graphs dot can lay out: the H200 fixtures' ResNet-50 and BERT-small structures,
    onnx's backend-test `light_*` models, and tests/data/zoo/*.onnx when present."""
    import onnx

    root = Path(__file__).resolve().parents[1] / "tests" / "data"
    out = [root / "fixtures" / "trt86-h200" / "resnet50.structure.onnx",
           root / "fixtures" / "trt86-h200" / "bert_small.structure.onnx"]
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    out += sorted(light.glob("light_*.onnx"))
    out += sorted((root / "zoo").glob("*.onnx"))
    return [p for p in out if p.exists()]


def _polyline_x_at(pts: List[tuple], y: float) -> float:
    """x where a polyline (list of (x, y)) first reaches height y (linear between points)."""
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if (y0 - y) * (y1 - y) <= 0 and y0 != y1:
            t = (y - y0) / (y1 - y0)
            return x0 + t * (x1 - x0)
    return min(pts, key=lambda p: abs(p[1] - y))[0]


def _length(pts) -> float:
    a = np.asarray(pts, dtype=np.float64)
    return float(np.sqrt((np.diff(a, axis=0) ** 2).sum(axis=1)).sum()) if len(a) > 1 else 0.0


def ours_quality(data) -> dict:
    """Crossings and total edge length (inches: x unit 1 in, rank pitch DOT_RANK_PITCH) of a
    workbench layout, every edge a polyline through its bends."""
    from workbench.graphs.layout import layer_crossings

    total = 0.0
    e = data.edges
    for k in range(e.shape[0]):
        s, t = int(e[k, 0]), int(e[k, 1])
        if data.rank[s] > data.rank[t]:
            s, t = t, s
        bx = data.bend_x[data.bend_ptr[k]:data.bend_ptr[k + 1]].tolist()
        xs = [float(data.x[s])] + bx + [float(data.x[t])]
        ys = [(float(data.rank[s]) + j) * DOT_RANK_PITCH for j in range(len(xs))]
        ys[0] += BOX_HALF_HEIGHT  # from the box's bottom to the next box's top, as dot's splines
        ys[-1] -= BOX_HALF_HEIGHT
        total += _length(list(zip(xs, ys)))
    return {"crossings": layer_crossings(data.x, data.rank, data.edges, data.bend_ptr, data.bend_x),
            "crossings_per_edge_pair": layer_crossings(data.x, data.rank, data.edges, data.bend_ptr,
                                                       data.bend_x, drawn=False),
            "edge_length_in": round(total, 1)}


def dot_quality(data, timeout: float = 300.0, repeat: int = 3) -> dict:
    """The same visible graph laid out by Graphviz dot (boxes as wide as ours, nodesep = our
    gap): seconds (best of `repeat` runs, as ours, unless one takes over 5 s), crossings (edges
    sampled at every dot rank, counted like ours) and total edge length of dot's splines
    (through their control points, from box to box as ours: the arrowhead's gap included,
    inches)."""
    import subprocess

    from workbench.graphs.layout import GAP, layer_crossings

    lines = ["digraph g {", f"nodesep={GAP}; ranksep=0.5;",
             "node [shape=box, fixedsize=true, height=0.3, label=\"\"];"]
    for i in range(len(data)):
        lines.append(f"n{i} [width={float(data.width[i]):.3f}];")
    for s, t in data.edges.tolist():
        lines.append(f"n{s} -> n{t};")
    lines.append("}")
    secs = float("inf")
    for _ in range(repeat):  # best of N, as ours; a run over 5 s is not repeated
        t0 = time.perf_counter()
        out = subprocess.run(["dot", "-Tplain"], input="\n".join(lines), capture_output=True,
                             text=True, timeout=timeout, check=True).stdout
        secs = min(secs, time.perf_counter() - t0)
        if secs > 5.0:
            break
    pos, edges = {}, []
    for ln in out.splitlines():
        f = ln.split()
        if f and f[0] == "node":
            pos[int(f[1][1:])] = (float(f[2]), -float(f[3]))
        elif f and f[0] == "edge":
            n = int(f[3])
            pts = [(float(f[4 + 2 * j]), -float(f[5 + 2 * j])) for j in range(n)]
            edges.append((int(f[1][1:]), int(f[2][1:]), pts))
    ys = sorted({round(p[1], 3) for p in pos.values()})
    rank_of = {y: r for r, y in enumerate(ys)}
    m = len(data)
    x = np.array([pos[i][0] for i in range(m)])
    rank = np.array([rank_of[round(pos[i][1], 3)] for i in range(m)])
    e2, ptr, bx, total = [], [0], [], 0.0
    for s, t, pts in edges:
        if rank[s] > rank[t]:
            s, t = t, s
        pts = sorted(pts, key=lambda p: p[1]) if pts[0][1] > pts[-1][1] else pts
        full = [pos[s]] + pts + [pos[t]]
        # dot's spline stops short of the head box by its arrowhead (about 0.1 in): the
        # length is taken from box to box, as ours
        top, bottom = pos[s][1] + BOX_HALF_HEIGHT, pos[t][1] - BOX_HALF_HEIGHT
        drawn = ([(pts[0][0], top)] if pts[0][1] > top + 1e-3 else []) + pts + \
            ([(pts[-1][0], bottom)] if pts[-1][1] < bottom - 1e-3 else [])
        total += _length(drawn)
        for r in range(int(rank[s]) + 1, int(rank[t])):
            bx.append(_polyline_x_at(full, ys[r]))
        ptr.append(len(bx))
        e2.append((s, t))
    crossings = layer_crossings(x, rank, np.array(e2).reshape(-1, 2), np.array(ptr), np.array(bx))
    # dot's rank pitch may differ from DOT_RANK_PITCH (tall ranks): report length as drawn
    return {"seconds": round(secs, 3), "exact_s": secs, "crossings": crossings,
            "edge_length_in": round(total, 1)}


def quality(paths: List[Path], repeat: int = 3) -> List[dict]:
    """Ours vs dot on each graph (every node shown), times the best of `repeat` runs."""
    from workbench.graphs.layout import GraphStructure
    from workbench.core.model import open_model

    rows = []
    print(f"{'graph':<28} {'elems':>6} {'layout ms':>9} {'view ms':>8} {'dot s':>7} "
          f"{'lay/dot':>7} {'view/dot':>7} {'ours X':>7} {'dot X':>7} {'X ratio':>7} "
          f"{'ours len':>9} {'dot len':>9}")
    for p in paths:
        model = open_model(p)
        times, parts, lay_s = [], [], []
        for _ in range(repeat):
            model._index = None  # the graph index is part of the work
            t0 = time.perf_counter()
            model.index
            t1 = time.perf_counter()
            gs = GraphStructure(model)
            t2 = time.perf_counter()
            data = gs.view(gs.scopes)
            t3 = time.perf_counter()
            times.append(t3 - t0)
            parts.append((t1 - t0, t2 - t1, t3 - t2))
            lay_s.append(data.layout_s)
        ours_s = min(times)
        layout_s = min(lay_s)
        # where our time goes (best of the runs, each part on its own): the model's graph
        # index, the view's structure (edges, scopes) and the view itself (layout included)
        part_s = [round(min(x[j] for x in parts), 4) for j in range(3)]
        ours = ours_quality(data)
        try:
            dot = dot_quality(data, repeat=repeat)
        except Exception as e:  # dot missing or too slow: say so in the row
            dot = {"seconds": None, "exact_s": None, "crossings": None, "edge_length_in": None,
                   "error": str(e)[:80]}
        xr = None if dot["crossings"] is None else round(ours["crossings"] / max(dot["crossings"], 1), 3)
        # dot's seconds are rounded to 1 ms: ratios from the unrounded figure
        tr = None if dot["seconds"] is None else round(layout_s / dot["exact_s"], 4)
        vr = None if dot["seconds"] is None else round(ours_s / dot["exact_s"], 4)
        row = {"graph": p.name, "elements": len(data), "layout_s": round(layout_s, 5),
               "ours_s": round(ours_s, 4), "dot_s": dot["seconds"], "time_ratio": tr,
               "view_ratio": vr, "ours_crossings": ours["crossings"],
               "dot_crossings": dot["crossings"], "crossing_ratio": xr,
               "ours_index_s": part_s[0], "ours_structure_s": part_s[1], "ours_view_s": part_s[2],
               "ours_crossings_per_edge_pair": ours["crossings_per_edge_pair"],
               "ours_edge_length_in": ours["edge_length_in"],
               "dot_edge_length_in": dot["edge_length_in"]}
        rows.append(row)
        print(f"{p.name[:28]:<28} {len(data):>6} {layout_s * 1e3:>9.3f} {ours_s * 1e3:>8.2f} "
              f"{str(dot['seconds']):>7} {str(tr):>7} {str(vr):>7} {ours['crossings']:>7} "
              f"{str(dot['crossings']):>7} {str(xr):>7} {ours['edge_length_in']:>9} "
              f"{str(dot['edge_length_in']):>9}", flush=True)
    return rows


def _expand_timing(gs, coll, repeat: int):
    """A click on the collapsed view's largest group: `expand_in_place` against laying the
    view with that scope open out again (`view`, the baseline), seconds, best of `repeat`."""
    from workbench.graphs.layout import GROUP_PREFIX

    groups = [k for k, i in enumerate(coll.ids) if i.startswith(GROUP_PREFIX)]
    if not groups:
        return None, None, None
    g = max(groups, key=lambda k: int(coll.size[k]))
    scope = coll.ids[g][len(GROUP_PREFIX):]
    opened = list(coll.expanded) + [scope]
    t_in, t_full = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        gs.expand_in_place(coll, scope, opened)
        t_in.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        gs.view(opened)
        t_full.append(time.perf_counter() - t0)
    return round(min(t_in), 4), round(min(t_full), 4), scope


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,10000,20000")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs")
    ap.add_argument("--quality", choices=["on", "off", "only"], default="on",
                    help="layout quality against Graphviz dot on real graphs")
    args = ap.parse_args(argv)
    qrows: List[dict] = []
    if args.quality != "off":
        import shutil

        if shutil.which("dot"):
            qrows = quality(quality_models(), repeat=args.repeat)
        else:
            print("Graphviz dot not found (apt-get install graphviz): quality skipped")
    if args.quality == "only":
        args.sizes = ""
    from workbench.graphs.layout import GraphStructure
    from workbench.core.model import model_from_proto

    try:
        import networkx  # noqa: F401
        have_nx = True
    except ImportError:
        have_nx = False
    results = []
    try:
        from widgets.graphview import wire_payload
    except ImportError:  # the notebook extras are not installed: JSON figures only
        wire_payload = None
    print(f"{'nodes':>7} {'full layout s':>13} {'collapsed s':>11} {'visible':>7} "
          f"{'JSON MB':>8} {'wire MB':>8} {'collapsed KB':>12} {'networkx s':>10} "
          f"{'vs networkx':>11} {'target s':>8} {'expand s':>8} {'re-layout s':>11}")
    for size in [int(s) for s in args.sizes.split(",") if s]:
        proto = transformer_like(size)
        model = model_from_proto(proto)
        n = len(proto.graph.node)
        full_t, coll_t = [], []
        for _ in range(args.repeat):
            model._index = None  # count building the graph index as part of the layout
            t0 = time.perf_counter()
            gs = GraphStructure(model)
            full = gs.view(gs.scopes)
            full_t.append(time.perf_counter() - t0)
            model._index = None
            t0 = time.perf_counter()
            gs = GraphStructure(model)
            coll = gs.view()
            coll_t.append(time.perf_counter() - t0)
        exp_s, exp_full_s, opened = _expand_timing(gs, coll, args.repeat)
        payload = len(json.dumps(full.to_dict(), separators=(",", ":")).encode())
        cpayload = len(json.dumps(coll.to_dict(), separators=(",", ":")).encode())
        wire = None
        if wire_payload is not None:
            w = wire_payload(full)
            wire = sum(len(v) if isinstance(v, (bytes, str)) else len(json.dumps(v)) for v in w.values())
        nx_s = _networkx_baseline(proto) if have_nx else None
        target = TARGET_S.get(size)
        row = {"nodes": n, "full_layout_s": round(min(full_t), 3),
               "collapsed_layout_s": round(min(coll_t), 3), "collapsed_visible": len(coll),
               "payload_mb": round(payload / 1e6, 3),
               "wire_payload_mb": None if wire is None else round(wire / 1e6, 3),
               "collapsed_payload_kb": round(cpayload / 1e3, 1),
               "networkx_s": None if nx_s is None else round(nx_s, 3),
               "speedup_vs_networkx": None if nx_s is None else round(nx_s / min(full_t), 2),
               "target_s": target, "expand_scope": opened, "expand_in_place_s": exp_s,
               "expand_full_view_s": exp_full_s,
               "expand_vs_full_view": None if not exp_s else round(exp_full_s / exp_s, 1)}
        results.append(row)
        nx_txt = "n/a" if nx_s is None else f"{nx_s:.3f}"
        sp_txt = "n/a" if nx_s is None else f"{row['speedup_vs_networkx']:.2f}x"
        wire_txt = "n/a" if wire is None else f"{wire / 1e6:.3f}"
        print(f"{n:>7} {row['full_layout_s']:>13.3f} {row['collapsed_layout_s']:>11.3f} "
              f"{len(coll):>7} {row['payload_mb']:>8.3f} {wire_txt:>8} "
              f"{row['collapsed_payload_kb']:>12.1f} {nx_txt:>10} {sp_txt:>11} "
              f"{target if target else '-':>8} {str(exp_s):>8} {str(exp_full_s):>11}")
    ok = all(r["full_layout_s"] < TARGET_S[s] for r, s in
             zip(results, [int(s) for s in args.sizes.split(",") if s]) if s in TARGET_S)
    big = [r for r in results if r["nodes"] >= 19000]
    ok = ok and all(r["payload_mb"] < TARGET_PAYLOAD_MB for r in big)
    from workbench.graphs.layout import LAYOUT_BACKEND

    print(json.dumps({"benchmark": "graph_layout", "baseline": "networkx multipartite_layout"
                      if have_nx else "targets only (networkx not installed)",
                      "quality_baseline": "Graphviz dot -Tplain on the same visible graph",
                      "layout_backend": LAYOUT_BACKEND,
                      "results": results, "meets_targets": ok, "quality_vs_dot": qrows,
                      "quality_goals": {"crossing_ratio_max": CROSSING_RATIO_MAX,
                                        "time_ratio_max": TIME_RATIO_MAX},
                      **quality_summary(qrows)}))
    return 0


CROSSING_RATIO_MAX, TIME_RATIO_MAX = 1.0, 0.05


def quality_summary(rows: List[dict]) -> dict:
    """Totals over the graphs dot finished: how many meet each goal (time: the layout), the
    median and the aggregate (sum of ours / sum of dot's) ratios of the layout and of the whole
    view, the graphs left out (dot failed or timed out) and `quality_met` (every graph dot
    finished meets both goals)."""
    done = [r for r in rows if r["dot_s"] is not None and r["dot_crossings"] is not None]
    ratios = sorted(r["time_ratio"] for r in done)
    vratios = sorted(r["view_ratio"] for r in done)
    dot_sum = sum(r["dot_s"] for r in done)
    x_ok = [r for r in done if r["ours_crossings"] <= CROSSING_RATIO_MAX * r["dot_crossings"]]
    t_ok = [r for r in done if r["time_ratio"] <= TIME_RATIO_MAX]
    return {
        "graphs_with_dot": len(done),
        "graphs_without_dot": [r["graph"] for r in rows if r not in done],
        "crossings_goal_met": len(x_ok),
        "time_goal_met": len(t_ok),
        "time_goal_missed": [r["graph"] for r in done if r not in t_ok],
        "crossings_goal_missed": [r["graph"] for r in done if r not in x_ok],
        "time_ratio_median": round(float(np.median(ratios)), 4) if ratios else None,
        "time_ratio_worst": max(ratios) if ratios else None,
        "time_ratio_aggregate": round(sum(r["layout_s"] for r in done) / dot_sum, 5)
        if done else None,
        "view_goal_met": sum(r["view_ratio"] <= TIME_RATIO_MAX for r in done),
        "view_ratio_median": round(float(np.median(vratios)), 4) if vratios else None,
        "view_ratio_aggregate": round(sum(r["ours_s"] for r in done) / dot_sum, 5)
        if done else None,
        "ours_crossings_total": sum(r["ours_crossings"] for r in done),
        "dot_crossings_total": sum(r["dot_crossings"] for r in done),
        "ours_edge_length_total_in": round(sum(r["ours_edge_length_in"] for r in done), 1),
        "dot_edge_length_total_in": round(sum(r["dot_edge_length_in"] for r in done), 1),
        "quality_met": bool(done) and len(x_ok) == len(t_ok) == len(done),
    }


if __name__ == "__main__":
    sys.exit(main())
