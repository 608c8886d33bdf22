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

import shlex
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import ModelLike, as_model

__all__ = ["split_paths", "split_manifest", "build_split", "clear_stale_split", "split_notice"]


def split_paths(engine: Any) -> Dict[str, Path]:
    """The prefix, tail and manifest paths beside `engine`."""
    e = Path(engine)
    stem = e.stem if e.suffix else e.name
    return {"prefix": e.with_name(f"{stem}.prefix.onnx"), "tail": e.with_name(f"{stem}.tail.onnx"),
            "manifest": e.with_name(f"{stem}.split.json")}


def split_manifest(engine: Any, *, unnamed: bool = True) -> Optional[Dict[str, Any]]:
    """The chain manifest beside `engine` when it is this engine's (it names it; `unnamed`:
    one naming no engine counts too), else None (no split, or another engine's)."""
    import json

    try:
        man = json.loads(split_paths(engine)["manifest"].read_text())
    except (OSError, ValueError):
        return None
    name = man.get("engine")
    return man if name == Path(engine).name or (unnamed and name is None) else None


def clear_stale_split(engine: Any) -> None:
    """An engine written without a split has no chain: remove the one an earlier split build
    of the same engine left (only when its manifest names this engine)."""
    if split_manifest(engine, unnamed=False) is None:
        return
    paths = split_paths(engine)
    for key in ("manifest", "tail", "prefix"):
        try:
            paths[key].unlink()
        except OSError:
            pass


def _model_word(model: Any) -> str:
    """The model as the commands a message prints name it: its path, or MODEL (in memory)."""
    import shlex

    return shlex.quote(str(model)) if isinstance(model, (str, Path)) else "MODEL"


def _refusal(failure: Any, why: str, model: Any = None, fix: Any = None) -> Any:
    """The build's own failure, with why no split could take the refused nodes (`fix`: the
    NextStep that rewrites the refused node, when one does)."""
    from workbench.core.findings import step

    path = str(model) if isinstance(model, (str, Path)) else None
    failure.hint = f"{failure.hint + '; ' if failure.hint else ''}no split build: {why}"
    steps = [fix] if fix is not None else [
        step("fix", "{model}", o="{fixed}", auto=True,
             why="applies the recipes that fix the refused nodes, verified on onnxruntime")]
    steps = [s.bound(model=path) for s in steps]
    failure.next_steps = steps + [s for s in failure.next_steps if s not in steps]
    failure.findings.append(Finding("info", "no-split", f"the build did not split the model "
                                    f"at the refused nodes: {why}", nodes=[failure.node]
                                    if failure.node else [], source="build",
                                    next_steps=steps))
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
    one = len(refused) == 1
    gpu = (f" ({'its' if one else 'their'} plugin cannot be created here: no usable GPU; on a "
           f"machine with an NVIDIA GPU the parser may take {'it' if one else 'them'}, and no "
           "split is needed)" if info.get("plugin_needs_gpu") else "")
    return (f"split build: {info['backend']}'s {what} {len(refused)} node(s): "
            f"{named}{more}{gpu}. The engine runs {info['engine_nodes']} node(s), onnxruntime the "
            f"tail's {info['onnxruntime_nodes']} (from those nodes on); written beside the "
            f"engine: {Path(info['tail']).name}, {Path(info['manifest']).name} (prefix ONNX "
            f"{Path(info['prefix']).name}); chain vs original on onnxruntime: "
            f"{info['verification']}{_tail_profile_note(info)}. Run the pair: {info['run']}. "
            "Use --no-split (split_tail=False) to make this an error instead." + most)


def _tail_profile_note(info: Dict[str, Any]) -> str:
    """Where the profile entries of the tail's inputs went: onnxruntime and the chain check."""
    names = info.get("tail_profile_inputs") or []
    if not names:
        return ""
    quoted = ", ".join(f"'{n}'" for n in names)
    return (f" (at the profile's opt shapes; {quoted} feed{'s' if len(names) == 1 else ''} "
            "the tail, so the engine's profile leaves them out)")


def _exact_rewrites(model: Any, backend: str, client: Any, target: str) -> List[Any]:
    """Automatic exact recipes for nodes the parser refuses: those are fixed, not split off."""
    import tempfile

    from workbench.core.model import save_model
    from workbench.support.checker import check
    from workbench.surgery.propose import propose

    handle = as_model(model)
    proto = handle.proto
    with tempfile.TemporaryDirectory(prefix="workbench-tail-") as tmp:
        path = handle.path if handle.path is not None else \
            save_model(proto, Path(tmp) / "m.onnx")
        report = check(str(path), backend=backend, client=client, target=target)
    refused = {u.get("node") for u in report.unsupported}
    return [p for p in propose(report, proto) if p.auto and p.recipe != "split"
            and p.node in refused]


def _opt_feed(model: Any, config: Any) -> Optional[Dict[str, Any]]:
    """Sample inputs at the shapes the engine is built for (the first profile's opt, or the
    default profile's): the chain is verified on what the engine will see."""
    from workbench.runtime.equivalence import make_inputs_at
    from workbench.precision.profiles import default_profile

    proto = as_model(model).proto
    if any(not i.type.HasField("tensor_type") or not i.type.tensor_type.elem_type
           for i in proto.graph.input):
        return None  # a sequence/optional input: the split recipe's own sample inputs
    try:
        prof = config.profiles[0] if config.profiles else default_profile(proto)[0].to_dict()
    except WorkbenchError:
        return None  # (make_inputs' defaults; the build itself reports the profile problem)
    return make_inputs_at(proto, {n: v[1] for n, v in prof.items()})


def _runtime_inputs(proto: Any) -> List[str]:
    """The graph inputs a caller feeds (initializers that double as inputs left out)."""
    inits = {t.name for t in proto.graph.initializer}
    return [i.name for i in proto.graph.input if i.name not in inits]


def prefix_profiles(profiles: List[Dict[str, Any]], names: List[str]) -> List[Dict[str, Any]]:
    """Each profile's entries for the prefix's inputs `names` (profiles that become equal, or
    empty, once the tail's inputs are left out, are kept once)."""
    out: List[Dict[str, Any]] = []
    for prof in profiles:
        mine = {k: v for k, v in prof.items() if k in names}
        if mine and mine not in out:
            out.append(mine)
    return out


def prefix_calibration(model: ModelLike, calibration: str, names: List[str]) -> str:
    """The calibration batches of the full model (loaded and checked against it) with the
    arrays of the prefix's inputs `names` only, written once to the model's workspace
    (`calibration/prefix-HASH/`, the same bytes for the same data); returns that folder."""
    import hashlib
    import os
    import shutil
    import tempfile

    from workbench.engines.cache import hash_calibration
    from workbench.core.model import as_model
    from workbench.precision.calibration import load_calibration, write_batches

    handle = as_model(model, opened=False)
    digest = hashlib.sha256(f"{hash_calibration(calibration)}|{','.join(names)}".encode())
    folder = handle.workspace().dir / "calibration" / f"prefix-{digest.hexdigest()[:16]}"
    if folder.is_dir():
        return str(folder)
    batches = [{k: v for k, v in b.items() if k in names}
               for b in load_calibration(calibration, handle)]
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".prefix-", dir=folder.parent))
    try:
        write_batches(batches, tmp)
        os.replace(tmp, folder)
    except OSError:
        if not folder.is_dir():  # (another build that wrote it first is as good)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)


def prefix_config(model: ModelLike, config: Any, prefix: Any) -> Any:
    """The prefix's build config: the profile entries and calibration arrays of its own inputs.
    The full model's profile was validated against the full model by its own build, and its
    calibration is loaded and checked against it here; the tail's inputs (e.g. a RoiAlign's
    rois and batch_indices) go to onnxruntime, and their entries to the chain check."""
    names = _runtime_inputs(prefix)
    calib = prefix_calibration(model, config.calibration, names) if config.calibration \
        else None
    return config.replace(profiles=prefix_profiles(config.profiles, names), calibration=calib)


def _tail_entries(config: Any, prefix: Any) -> List[str]:
    """The inputs the user's profile names that the engine's prefix does not take."""
    names = set(_runtime_inputs(prefix))
    return list(dict.fromkeys(k for p in config.profiles for k in p if k not in names))


def build_split(model: ModelLike, config: Any, failure: Any, *, build: Callable[..., Any],
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
        from workbench.core.findings import step

        raise _refusal(failure, f"{p.op} at '{p.node}' has an exact rewrite ({p.recipe}): fix "
                       "the model first, then build", model,
                       step("fix", "{model}", o="{fixed}", auto=True,
                            why=f"rewrites {p.op} at '{p.node}' exactly ({p.recipe})")) from None
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
    try:  # the profile entries and calibration arrays of the prefix's own inputs
        prefix_cfg = prefix_config(model, config, res.prefix)
    except WorkbenchError as e:
        raise WorkbenchError(e.message, file=e.file or (str(model) if isinstance(
            model, (str, Path)) else None), field=e.field, node=e.node, hint=e.hint) from None
    # with -o the engine is built from the prefix file beside it (the exported lines name it)
    source: Any = res.prefix
    if output is not None:
        from workbench.core.model import save_model

        source = save_model(res.prefix, split_paths(output)["prefix"])
    def relay(ev: Dict[str, Any]) -> None:  # the default profile was announced already
        if not (ev.get("event") == "notice" and
                (ev.get("finding") or {}).get("code") == "default-profile"):
            on_event(ev)  # type: ignore[misc]

    try:
        result = build(source, prefix_cfg, output=output, client=client,
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
        "tail_profile_inputs": _tail_entries(config, res.prefix),
        "plugin_needs_gpu": any(f.code == "plugin-needs-gpu" for f in failure.findings),
        "run": f"`workbench compare {_model_word(model)} {shlex.quote(str(engine))}` runs "
               "the engine then the tail on onnxruntime against the whole model on "
               "onnxruntime FP32 (it finds the split beside the engine); in Python "
               f"ChainedRunner.from_folder('{paths['manifest']}', "
               f"prefix=TensorRTRunner('{engine}')) (workbench.runtime.chain, workbench.runtime.trtrunner)",
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
