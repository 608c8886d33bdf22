"""A first-try build with a refused tail: when TensorRT's parser refuses nodes that all lie in
a tail the split recipe can cut (`workbench.surgery.split`: the refused nodes and everything
downstream of them, every op of it one onnxruntime runs), the largest supported prefix is built
as the engine and the tail stays ONNX for onnxruntime. Beside `ENGINE` (e.g. `det.engine`):

    det.prefix.onnx   the ONNX the engine was built from (FP32; the precision applies to the engine)
    det.tail.onnx     the rest, run by onnxruntime in the original precision
    det.split.json    the chain manifest (written last: present means complete)

    chain = ChainedRunner.from_folder("det.split.json", prefix=TensorRTRunner("det.engine"))
    chain.infer(feed)   # the original model's outputs

Refusals that are not such a tail stay the build's error, naming node, op and next step:
a refused node `workbench fix --auto` rewrites exactly (fix it, do not split it), nothing left
for the engine, a tail op onnxruntime lacks, a graph-level parser error, a chain that is not
equal to the original on onnxruntime. `split_tail=False` (`--no-split`) makes every
refusal an error (CI).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from workbench.errors import Finding, WorkbenchError

__all__ = ["split_paths", "build_split", "clear_stale_split", "split_notice"]


def split_paths(engine: Any) -> Dict[str, Path]:
    """The prefix, tail and manifest paths beside `engine`."""
    e = Path(engine)
    stem = e.stem if e.suffix else e.name
    return {"prefix": e.with_name(f"{stem}.prefix.onnx"), "tail": e.with_name(f"{stem}.tail.onnx"),
            "manifest": e.with_name(f"{stem}.split.json")}


def clear_stale_split(engine: Any) -> None:
    """An engine written without a split has no chain: remove the one an earlier split build
    of the same engine left (only when its manifest names this engine)."""
    import json

    paths = split_paths(engine)
    try:
        man = json.loads(paths["manifest"].read_text())
    except (OSError, ValueError):
        return
    if man.get("engine") != Path(engine).name:
        return
    for key in ("manifest", "tail", "prefix"):
        try:
            paths[key].unlink()
        except OSError:
            pass


def _model_word(model: Any) -> str:
    """The model as the commands a message prints name it: its path, or MODEL (in memory)."""
    import shlex

    return shlex.quote(str(model)) if isinstance(model, (str, Path)) else "MODEL"


def _refusal(failure: Any, why: str, model: Any = None) -> Any:
    """The build's own failure, with why no split could take the refused nodes."""
    why = why.replace("MODEL", _model_word(model))
    failure.hint = f"{failure.hint + '; ' if failure.hint else ''}no split build: {why}"
    failure.findings.append(Finding("info", "no-split", f"the refused nodes are not a tail "
                                    f"the split recipe can cut: {why}", nodes=[failure.node]
                                    if failure.node else [], source="build",
                                    hint=f"`workbench fix {_model_word(model)}` proposes recipes"))
    return failure


def split_notice(info: Dict[str, Any]) -> str:
    """The one notice a split build prints."""
    refused = info["refused"]
    ops: Dict[str, int] = {}
    for r in refused:
        ops[r["op"]] = ops.get(r["op"], 0) + 1
    named = ", ".join(f"{r['op']} at {r['node']}" for r in refused[:3])
    more = f" (+{len(refused) - 3} more: " + ", ".join(f"{n} {op}" for op, n in ops.items()) \
        + ")" if len(refused) > 3 else ""
    stage = info.get("refused_by", "parser")
    what = "builder has no kernel for" if stage == "builder" else "parser refused"
    n_engine, n_tail = int(info["engine_nodes"]), int(info["onnxruntime_nodes"])
    most = (f" MOST OF THE MODEL IS NOT IN THE ENGINE ({n_tail} of {n_engine + n_tail} nodes "
            f"run on onnxruntime): fix the refused node (`workbench check {info.get('model') or 'MODEL'}` says how) "
            "rather than ship this split." if n_tail > n_engine else "")
    return (f"split build: {info['backend']}'s {what} {len(refused)} node(s): "
            f"{named}{more}. The engine runs {info['engine_nodes']} node(s), onnxruntime the "
            f"tail's {info['onnxruntime_nodes']} (from those nodes on); written beside the "
            f"engine: {Path(info['tail']).name}, {Path(info['manifest']).name} (prefix ONNX "
            f"{Path(info['prefix']).name}); chain vs original on onnxruntime: "
            f"{info['verification']}. Run the pair: {info['run']}. "
            "Use --no-split (split_tail=False) to make this an error instead." + most)


def _exact_rewrites(model: Any, backend: str, client: Any, target: str) -> List[Any]:
    """Automatic exact recipes for nodes the parser refuses: those are fixed, not split off."""
    import tempfile

    from workbench.inputs import proto_of
    from workbench.model import save_model
    from workbench.support.checker import check
    from workbench.surgery.propose import propose

    proto = proto_of(model)
    with tempfile.TemporaryDirectory(prefix="workbench-tail-") as tmp:
        path = model if isinstance(model, (str, Path)) else save_model(proto, Path(tmp) / "m.onnx")
        report = check(str(path), backend=backend, client=client, target=target)
    refused = {u.get("node") for u in report.unsupported}
    return [p for p in propose(report, proto) if p.auto and p.recipe != "split"
            and p.node in refused]


def _opt_feed(model: Any, config: Any) -> Optional[Dict[str, Any]]:
    """Sample inputs at the shapes the engine is built for (the first profile's opt, or the
    default profile's): the chain is verified on what the engine will see."""
    from workbench.equivalence import make_inputs_at
    from workbench.inputs import proto_of
    from workbench.precision.profiles import default_profile

    proto = proto_of(model)
    if any(not i.type.HasField("tensor_type") or not i.type.tensor_type.elem_type
           for i in proto.graph.input):
        return None  # a sequence/optional input: the split recipe's own sample inputs
    try:
        prof = config.profiles[0] if config.profiles else default_profile(proto)[0].to_dict()
    except WorkbenchError:
        return None  # (make_inputs' defaults; the build itself reports the profile problem)
    return make_inputs_at(proto, {n: v[1] for n, v in prof.items()})


def build_split(model: Any, config: Any, failure: Any, *, build: Callable[..., Any],
                backend: str, output: Optional[Any], client: Any = None,
                on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
                by_builder: bool = False, **build_kwargs: Any) -> Any:
    """Cut `model` where the parser refused it (`failure`: the BuildFailed of the whole
    model; `backend`: the worker's TensorRT by name; `by_builder`: the parser took the node
    but the builder refused it, so the cut is found by building), build the prefix with
    `build(prefix, config, ..., split_tail=False)`, and
    write tail + manifest beside the engine. Raises `failure` (with why) when no split fits."""
    from workbench.surgery.recipes.split import tail_runs_in_onnxruntime
    from workbench.surgery.split import split_model

    if on_event is not None:
        on_event({"event": "progress", "phase": "splitting", "fraction": None,
                  "message": (f"the {'builder' if by_builder else 'parser'} refused "
                              f"{failure.op or 'a node'} at '{failure.node}'"
                              if failure.node else "the parser refused the model")
                  + ": trying to cut the model there (--no-split: an error)"})
    fixable = _exact_rewrites(model, backend, client, config.target or "sm89")
    if fixable:
        p = fixable[0]
        raise _refusal(failure, f"`workbench fix MODEL --auto` rewrites {p.op} at '{p.node}' "
                       f"exactly ({p.recipe}): fix the model first, then build", model) from None
    try:
        res = split_model(model, backend=backend, client=client, build=by_builder,
                          target=config.target or "sm89", verify=True,
                          inputs=_opt_feed(model, config))
    except WorkbenchError as e:
        raise _refusal(failure, e.message, model) from None
    except (KeyError, ValueError, TypeError, IndexError) as e:  # a graph the recipe can't cut
        raise _refusal(failure, f"the split recipe cannot cut this graph ({type(e).__name__}: "
                       f"{e})", model) from None
    if res.tail is None or not res.supported:
        raise _refusal(failure, "the backend takes no prefix of it", model) from None
    foreign = [n for n in res.tail.graph.node if not tail_runs_in_onnxruntime(n)]
    if foreign:
        raise _refusal(failure, f"onnxruntime has no kernel for {foreign[0].op_type} at "
                       f"'{foreign[0].name}' in the tail", model) from None
    ver = res.verification
    if ver is not None and ver.status == "different":
        raise _refusal(failure, f"the chained prefix + tail differ from the original on "
                       f"onnxruntime ({ver})", model) from None
    # with -o the engine is built from the prefix file beside it (the exported lines name it)
    source: Any = res.prefix
    if output is not None:
        from workbench.model import save_model

        source = save_model(res.prefix, split_paths(output)["prefix"])
    def relay(ev: Dict[str, Any]) -> None:  # the default profile was announced already
        if not (ev.get("event") == "notice" and
                (ev.get("finding") or {}).get("code") == "default-profile"):
            on_event(ev)  # type: ignore[misc]

    try:
        result = build(source, config, output=output, client=client,
                       on_event=relay if on_event is not None else None,
                       split_tail=False, **build_kwargs)
    except BaseException:
        if output is not None:
            Path(source).unlink(missing_ok=True)
        raise
    engine = result.output_path or result.engine_path
    paths = split_paths(engine)
    man = res.manifest
    man["prefix"]["file"], man["engine"] = paths["prefix"].name, Path(engine).name
    man["tail"]["file"] = paths["tail"].name
    res.save(paths["prefix"].parent, manifest_name=paths["manifest"].name)
    result.split = {
        "refused": man["refused"], "backend": backend, "model": _model_word(model),
        "refused_by": "builder" if by_builder else "parser",
        "engine_nodes": man["prefix"]["nodes"], "onnxruntime_nodes": len(man["tail"]["nodes"]),
        "cut": man["cut"], "prefix": str(paths["prefix"]), "tail": str(paths["tail"]),
        "manifest": str(paths["manifest"]),
        "verification": str(ver) if ver is not None else "not run",
        "run": f"ChainedRunner.from_folder('{paths['manifest']}', "
               f"prefix=TensorRTRunner('{engine}')) (workbench.chain, workbench.trtrunner); "
               "no CLI verb runs the pair yet",
    }
    cut = set(man["cut"])
    for f in result.findings:  # the prefix's outputs include the tensors handed to the tail
        if f.tensors and f.tensors[0] in cut and f.message.startswith("output '"):
            t = f.tensors[0]
            f.message = f.message.replace(f"output '{t}'", f"tensor '{t}' (where the engine's "
                                          "prefix hands over to the ONNX tail)", 1)
    note = split_notice(result.split)
    result.findings.insert(0, Finding("warning", "split-build", note,
                                      nodes=[r["node"] for r in man["refused"]][:20],
                                      source="build", hint="--no-split makes it an error"))
    if on_event is not None:
        on_event({"event": "notice", "message": note, "finding": result.findings[0].to_dict()})
    return result
