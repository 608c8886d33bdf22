"""The one graph index (workbench.core.graphindex): built once per model, agrees with brute force on
real models, one lookup semantics everywhere, and no other module keeps its own maps."""
from __future__ import annotations

import re
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper

from conftest import H200, POLY, REPO, SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.core.graphindex import GraphIndex, leaf_name, parent_scope, scope_of, scope_path_of
from workbench.core.model import model_from_proto, open_model

ONNX_LIGHT = sorted((Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob(
    "*.onnx"))
STRUCTURES = sorted(H200.glob("*.structure.onnx"))
REAL = ONNX_LIGHT + STRUCTURES + [SAMPLES / "bert_tiny.onnx", POLY / "loop.onnx"]


def test_real_model_sets_are_there():
    assert len(ONNX_LIGHT) >= 5 and len(STRUCTURES) == 2


# ----------------------------------------------------------------------------- brute force
def _brute(graph):
    producer, consumers = {}, {}
    for i, n in enumerate(graph.node):
        for t in n.output:
            if t and t not in producer:
                producer[t] = i
    for t in {t for n in graph.node for t in n.input if t}:
        consumers[t] = [i for i, n in enumerate(graph.node) for x in n.input if x == t]
    scopes = [tuple(re.findall(r"[^/]+", n.name)[:-1]) for n in graph.node]
    return producer, consumers, scopes


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_producers_consumers_scopes_agree_with_brute_force(path):
    m = open_model(path)
    gi = m.index
    producer, consumers, scopes = _brute(m.graph)
    assert gi.producer == producer
    assert gi.consumers == consumers
    assert gi.scopes == scopes
    # scope strings: parts joined, leading '/' kept from the name
    for name, s in zip(gi.names, gi.scope_paths):
        parts = re.findall(r"[^/]+", name)[:-1]
        want = ("/" if name.startswith("/") else "") + "/".join(parts) if parts else ""
        assert s == want
    # declared types: every graph input/output/value_info with a tensor type, initializers' dims
    for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        if vi.type.HasField("tensor_type") and vi.name not in gi.initializers:
            assert gi.values[vi.name].dtype == vi.type.tensor_type.elem_type
    for t in m.graph.initializer:
        assert gi.values[t.name] == (t.data_type, tuple(t.dims))
    assert gi.opset("") == next(o.version for o in m.proto.opset_import
                                if o.domain in ("", "ai.onnx"))
    # one id per node, the same ids the graph view and support report use
    assert len(set(gi.ids)) == len(gi.ids) == len(m.graph.node)


def test_structure_model_scopes_are_torch_scopes():
    gi = open_model(H200 / "bert_small.structure.onnx").index
    i = next(k for k, nm in enumerate(gi.names) if nm.count("/") >= 4)
    name = gi.names[i]
    assert gi.scope(i) == name[:name.rfind("/")]
    assert gi.scope(i).startswith("/")


def test_loop_outer_refs_agree_with_graphsurgeon():
    proto = onnx.load(str(POLY / "loop.onnx"))
    gi = GraphIndex.of(proto)
    graph = gs.import_onnx(proto)
    for i, node in enumerate(graph.nodes):
        if not gi.has_subgraphs(i):
            continue
        for (name, sub), g_sub in zip(gi.subgraphs(i), node.subgraphs()):
            assert set(sub.outer_refs) == set(g_sub._foreign_tensors())
            assert sub.parent is gi and sub.path == f"{gi.ids[i]}/{name}/"
        assert set(gi.implicit_inputs(i)) == {t for _, s in gi.subgraphs(i) for t in s.outer_refs}


def _nested_if_model():
    """main: x -> If(cond){ then: Loop whose body reads `a` (then-branch) and `x` (main) }."""
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "x"], ["s"], name="body_add"),
         helper.make_node("Identity", ["c_in"], ["c_out"], name="body_cond")],
        "body", [helper.make_tensor_value_info("it", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [1])])
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="then_relu"),
         helper.make_node("Loop", ["trip", "cond"], ["ys"], name="then_loop", body=body)],
        "then", [], [helper.make_tensor_value_info("ys", TensorProto.FLOAT, [None, 1])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="else_id")],
                              "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT,
                                                                         [1])])
    g = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], name="/blk/if", then_branch=then,
                          else_branch=other)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
              helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
              helper.make_tensor_value_info("trip", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_subgraph_outer_scope_references_resolve_through_parents():
    m = model_from_proto(_nested_if_model())
    gi = m.index
    bodies = dict(gi.subgraphs(0))
    assert set(bodies) == {"then_branch", "else_branch"}
    then = bodies["then_branch"]
    loop = then.subgraphs(then.node_index("then_loop"))[0][1]
    # the loop body reads `a` from the then branch and `x` from the main graph
    assert set(loop.outer_refs) == {"a", "x"}
    # the then branch passes on only what it does not define itself
    assert set(then.outer_refs) == {"x", "trip", "cond"}
    assert set(gi.implicit_inputs(0)) == {"x", "trip", "cond"}
    assert gi.outer_readers["x"] == [0]
    assert loop.value("x").dtype == TensorProto.FLOAT  # declared two graphs up
    assert loop.path == "/blk/if/then_branch/then_loop/body/"
    # the graph view draws the implicit reads as edges and flags nothing as dangling
    from workbench.graphs.layout import GraphStructure

    st = GraphStructure(m)
    assert not [f for f in st.findings if f.code == "dangling-input"]
    sources = {st.ids[int(s)] for s, d in zip(st.src, st.dst) if int(d) == 0}
    assert sources == {"input:x", "input:cond", "input:trip"}


def test_scope_rule_examples():
    assert scope_of("/layer1/layer1.0/conv1/Conv") == ("layer1", "layer1.0", "conv1")
    assert scope_of("gpu_0/conv1") == ("gpu_0",)
    assert scope_of("Conv_0") == scope_of("/Conv") == scope_of("") == ()
    assert scope_of("a//b/C") == ("a", "b")
    assert scope_path_of("/a/b/C") == "/a/b" and scope_path_of("gpu_0/relu") == "gpu_0"
    assert scope_path_of("Relu_3") == ""
    assert parent_scope("/a/b") == "/a" and parent_scope("/a") == "" and parent_scope("a") == ""
    assert leaf_name("/a/b/Conv") == "Conv" and leaf_name("Conv_0") == "Conv_0"


# ----------------------------------------------------------------------------- built once
def test_index_is_built_once_per_model_across_capabilities(monkeypatch):
    from workbench.core import graphindex
    from workbench.core.trtlog import NameIndex
    from workbench.graphs.layout import GraphStructure
    from workbench.graphs.inspect import node_detail, node_details, scope_tree, summarize
    from workbench.support.checker import check
    from workbench.timing import LayerTable
    from workbench.timing import summarize as timing_summary

    built = []
    real_init = graphindex.GraphIndex.__init__

    def counting(self, graph, **kw):
        built.append(graph)
        real_init(self, graph, **kw)

    monkeypatch.setattr(graphindex.GraphIndex, "__init__", counting)
    m = open_model(H200 / "resnet50.structure.onnx")
    s = summarize(m)
    node_details(m, s.shapes)
    scope_tree(m)
    node_detail(m, m.node_ids[3], s.shapes)
    GraphStructure(m).view()
    rep = check(m, backend="static")
    table = LayerTable.build(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json",
                             onnx=m)
    NameIndex.from_graph(m)
    main = [g for g in built if g is m.graph]
    assert len(main) == 1, f"main graph indexed {len(main)} times"
    assert timing_summary(table)["onnx_mapping"]["mapped_pct"] > 50
    assert rep.backend == "static"
    assert m.index is m.index


# ----------------------------------------------------------------------------- lookups
def _dup_model():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="dup"),
             helper.make_node("Relu", ["a"], ["b"], name="dup"),
             helper.make_node("Relu", ["b"], ["c"], name="/s/uniq"),
             helper.make_node("Relu", ["c"], ["y"], name="")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


AMBIGUOUS = r"node name 'dup' is used by 2 nodes.*dup#0, dup#1"


def test_one_lookup_semantics_in_the_index():
    gi = GraphIndex.of(_dup_model())
    assert gi.node_index("dup#1") == 1 and gi.node_index("/s/uniq") == 2
    assert gi.node_index("Relu#0") == 3
    assert gi.find("dup") == [0, 1] and gi.find("nope") == []
    with pytest.raises(WorkbenchError, match=AMBIGUOUS):
        gi.node_index("dup")
    with pytest.raises(WorkbenchError, match=r"no node named 'uniq'.*did you mean: /s/uniq"):
        gi.node_index("uniq")


def test_ambiguous_names_raise_with_candidates_everywhere():
    from workbench.graphs.layout import GraphStructure
    from workbench.graphs.inspect import node_detail
    from workbench.precision.transform import resolve_exclusions
    from workbench.core.findings import Finding
    from workbench.surgery.recipes.base import ProposeContext
    from workbench.surgery.recipes import get_recipe
    from workbench.surgery.recipes.base import find_node_index

    proto = _dup_model()
    m = model_from_proto(proto)
    with pytest.raises(WorkbenchError, match=AMBIGUOUS):
        m.node_index("dup")
    with pytest.raises(WorkbenchError, match=AMBIGUOUS):
        node_detail(m, "dup", {})
    with pytest.raises(WorkbenchError, match=AMBIGUOUS):
        find_node_index(proto, "dup")  # was: silently the first
    with pytest.raises(WorkbenchError, match=AMBIGUOUS):
        get_recipe("remove_node").precondition(proto, node="dup")
    with pytest.raises(WorkbenchError, match="cannot exclude 'dup': " + AMBIGUOUS):
        resolve_exclusions(proto, ["dup"], [], "m.onnx")
    assert resolve_exclusions(proto, ["dup#1", "/s/uniq"], [], "m.onnx")[0] == ["dup", "/s/uniq"]
    with pytest.raises(WorkbenchError, match=AMBIGUOUS):
        GraphStructure(m).element_index("dup")
    st = GraphStructure(m)
    assert st.element_indices("dup") == [0, 1] and st.element_index("dup#0") == 0
    # a report naming a shared name proposes nothing rather than guessing
    ctx = ProposeContext(proto)
    def at(node, op):
        return ctx.node_index(Finding("error", "unsupported-op", "x", nodes=[node] if node else [], op=op))
    assert at("dup", "Relu") is None and at("dup#1", "") == 1


def test_timing_mapping_never_maps_a_shared_name_to_one_node():
    from workbench.timing.mapping import OnnxIndex

    idx = OnnxIndex.from_model(model_from_proto(_dup_model()))
    assert not idx.has("dup") and idx.has("dup#0")
    assert idx.resolve("b") == "dup#1"  # the tensor's producer, by id
    assert idx.between("a", "c") == ["dup#0", "dup#1", "/s/uniq"]  # producers of a .. c


# ----------------------------------------------------------------------------- grep test
# Modules owned by other work streams that still build edit-time maps on graphs they are
# rewriting (the index describes the graph as read; a mutating pass needs maps of its own
# intermediate state). Listed by name so any new module that grows a map fails this test.
EDIT_TIME_MAPS = {
    "workbench/precision/lowering.py",       # name -> cast versions while inserting Casts
    "workbench/surgery/recipes/cleanup.py",  # recipes rewiring nodes mid-edit
    "workbench/surgery/recipes/plugins.py",  # collapsing a node range into one plugin node
    "workbench/compare/layer_compare.py",    # producer of marked outputs on a converted copy
    "workbench/surgery/recipes/quantized.py",  # the emulation's node list while it is rewritten
}
# {tensor: node for node in graph.node for tensor in node.output}
MAP_COMPREHENSION = re.compile(
    r"\{\s*\w+\s*:\s*[\w\.\[\]]+\s+for\s+[\w, ]+\s+in\s+[^}]*for\s+\w+\s+in\s+\w+\.(output|input)\b")
# for t in node.output: / for t in n.input:  ... followed (within 3 lines) by a dict write
TENSOR_LOOP = re.compile(r"\bfor\s+[\w, ]+\s+in\s+(enumerate\()?\w+\.(output|input)\)?\s*:")
DICT_WRITE = re.compile(r"(?<![\.\w])\w+\[\w+\]\s*=[^=]|\.setdefault\(\w+,\s*\[")


def _builds_map(lines, k):
    """Line k builds a tensor -> node map: a comprehension, or a loop over a node's tensors
    whose body writes a dict."""
    if MAP_COMPREHENSION.search(lines[k]):
        return True
    if TENSOR_LOOP.search(lines[k]):
        return any(DICT_WRITE.search(x) for x in lines[k + 1:k + 7])
    return False


SCOPE_PATTERNS = [re.compile(r"""\.split\(\s*["']/["']\s*\)"""),
                  re.compile(r"""\.rfind\(\s*["']/["']\s*\)""")]


def _sources():
    for p in sorted((REPO / "workbench").rglob("*.py")):
        rel = p.relative_to(REPO).as_posix()
        if rel == "workbench/core/graphindex.py" or rel.startswith("workbench/worker/"):
            continue  # the index itself; the worker imports nothing from workbench
        yield rel, p.read_text()
    for p in sorted((REPO / "widgets").glob("*.py")):
        yield p.relative_to(REPO).as_posix(), p.read_text()


def test_no_module_outside_graphindex_builds_maps_or_splits_scopes():
    maps, scopes = [], []
    for rel, text in _sources():
        lines = [line.split("#", 1)[0] for line in text.splitlines()]
        for k, code in enumerate(lines):
            if rel not in EDIT_TIME_MAPS and _builds_map(lines, k):
                maps.append(f"{rel}:{k + 1}: {code.strip()}")
            if any(p.search(code) for p in SCOPE_PATTERNS):
                scopes.append(f"{rel}:{k + 1}: {code.strip()}")
    assert not maps, "build maps from workbench.core.graphindex.GraphIndex:\n" + "\n".join(maps)
    assert not scopes, "use graphindex.scope_of/scope_path_of/leaf_name:\n" + "\n".join(scopes)


def test_grep_patterns_catch_the_old_code():
    """The patterns find each of the seven maps as they were written before the index."""
    old = {
        "precision _producers": ["    return {o: node for node in graph.node for o in node.output if o}"],
        "compare producer": ["    producer = {o: n for n in ref_p.graph.node for o in n.output if o}"],
        "precision _consumers": ["    for node in graph.node:", "        for i in node.input:",
                                 "            if i:", "                out.setdefault(i, []).append(node)"],
        "build-log NameIndex": ["        for n in graph.node:", "            for o in n.output:",
                                "                tn.setdefault(o, []).append(n.name)"],
        "graph.py producer": ["        for i, nd in enumerate(nodes):", "            for t in nd.output:",
                              "                if not t:", "                    continue",
                              "                prev = producer.get(t)",
                              "                if prev is not None:",
                              "                    dup_out.setdefault(t, [prev]).append(i)"],
        "timing OnnxIndex": ["            for out in n.output:", "                if out and out not in producer:",
                             "                    producer[out] = key"],
        "casts consumers": ["        for j, name in enumerate(n.input):", "            if name:",
                            "                consumers.setdefault(name, []).append(i)"],
    }
    for what, lines in old.items():
        assert any(_builds_map(lines, k) for k in range(len(lines))), what
    assert not _builds_map(["    for t in gi.producer.items():", "        tn[t] = 1"], 0)
    assert not _builds_map(["    for k, name in enumerate(n.input):", "        if name in m:",
                            "            n.input[k] = m[name]"], 0)  # rewiring is no map
    assert any(p.search('    parts = [p for p in name.split("/") if p]') for p in SCOPE_PATTERNS)
    assert any(p.search('    cut = name.rfind("/")') for p in SCOPE_PATTERNS)
