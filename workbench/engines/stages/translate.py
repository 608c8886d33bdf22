"""Stage 5, translate: what the worker answered, in the model's terms. A result becomes the
build's findings (the log's, with the default profile named as the workbench's guess; excluded
nodes no layer matched); an error becomes the exception the user reads: bad input (CLI exit
2) as a WorkbenchError naming the field, a parser refusal as BuildFailed naming every refused
node with the static rules' reason and next step, a builder failure with the layer it blames,
a profile TensorRT refuses with the axis the export fixed, a crash with the node it died on.
A timeout or cancel is BuildTimeout / BuildCancelled. Every failure is recorded in the
model's history (`publish.record_failure`).
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, Optional, Tuple

from workbench.engines.failures import BuildCancelled, BuildFailed, BuildTimeout
from workbench.engines.spec import BuildConfig
from workbench.engines.stages.profiles import profile_shape_findings
from workbench.engines.stages.publish import record_failure
from workbench.engines.stages.resolve import BuildJob
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import Model
from workbench.core.findings import step
from workbench.worker.protocol import BAD_INPUT_CODES

_VIOLATION = re.compile(r"(kMIN|kOPT|kMAX) values for profile (\d+) violate shape "
                        r"constraints: (?:\w+ )?(\S+?):? ")
_VOLUME = re.compile(r"reshape would change volume (\d+) to (\d+)")


# -- a result ----------------------------------------------------------------------------------
def result_findings(job: BuildJob, out: Dict[str, Any], names: Any) -> List[Finding]:
    """The findings of a finished build: its log's (`names`: the graph's NameIndex), and an
    excluded node no TensorRT layer matched."""
    from workbench.core.trtlog import findings_from_log

    findings = profile_shape_findings(
        findings_from_log(out.get("log", []), names), job.ref,
        any(f.code == "default-profile" for f in job.defaulted))
    for n in out.get("unmatched_layers", out.get("unmatched_fp32_layers", [])):
        findings.append(Finding("warning", "exclusion-not-found",
                                f"no TensorRT layer matches excluded node '{n}'", nodes=[n],
                                source="build", hint="check the node name"))
    return findings


# -- stopped -----------------------------------------------------------------------------------
def timed_out(job: BuildJob, e: Any, timeout: Optional[float]) -> BuildTimeout:
    """The worker passed the time limit and was stopped (recorded in the history)."""
    record_failure(job.ws, job.key, job.config, "timeout")
    return BuildTimeout(f"the build exceeded its time limit of {timeout:g} s and was "
                        "stopped; nothing was cached", code="timeout", hint=e.hint,
                        log=[{"level": "info", "message": e.log_tail}])


def cancelled(job: BuildJob) -> BuildCancelled:
    """The user cancelled the build (recorded in the history)."""
    record_failure(job.ws, job.key, job.config, "cancelled")
    return BuildCancelled("the build was cancelled; nothing was cached", code="cancelled")


# -- an error ----------------------------------------------------------------------------------
def worker_failure(job: BuildJob, e: Any) -> WorkbenchError:
    """The exception for the worker's error `e` (a WorkerError): a WorkbenchError for the
    user's input, else BuildFailed with the node, the findings and the next steps."""
    from workbench.support.checker import named_crash
    from workbench.core.trtlog import NameIndex, findings_from_log

    ref = job.ref
    if e.code == "worker-crashed" and ref.path is not None:
        named_crash(e, ref)  # (the node and next step in the model's terms)
    if e.code in BAD_INPUT_CODES:  # the user's input is wrong (CLI exit 2)
        field_name = (e.details or {}).get("field")
        return WorkbenchError(e.message, file=job.file, field=field_name, node=e.node,
                              hint=e.hint)
    if e.code == "parse-failed" and not e.node:
        _ = ref.proto  # opening it: a file that is not ONNX at all: WorkbenchError naming it (exit 2)
    errs = (e.details or {}).get("errors") or []
    node, message, errs = _failed_node(job, e, errs)
    log = (e.details or {}).get("log") or []
    found = findings_from_log(log, NameIndex.from_graph(ref.graph))
    message = _refusal_findings(job, errs, message, found)
    hint = e.hint
    first_steps: List[Any] = []
    if e.code == "parse-failed":  # the worker's hint names a command: as a record here
        hint = None
        first_steps = [step("check", "{model}", why="names every unsupported node and "
                            "the recipes that fix it")]
    said = profile_violation(message, job.config, shlex.quote(str(ref.path)) if ref.path
                             else "MODEL")
    if said is not None:  # an axis the export fixed, declared dynamic
        message, hint = f"{said[0]} (TensorRT: {message})", said[1]
    record_failure(job.ws, job.key, job.config, e.code, node=node, message=message)
    return BuildFailed(message, node=node, op=e.op or (errs[0].get("op") if errs and
                                                       node else None),
                       hint=hint, code=e.code, log=log, findings=found,
                       next_steps=first_steps, file=job.file)


def _failed_node(job: BuildJob, e: Any, errs: List[Dict[str, Any]]
                 ) -> Tuple[Optional[str], str, List[Dict[str, Any]]]:
    """(the node the failure names, the message, the parser errors): a parser error that
    names no node gets the one the static rules flag, or the node at its index."""
    node, message = e.node, e.message
    if errs and not node and not errs[0].get("node"):  # named by the static rules
        errs = _attributed_errors(job.ref, errs, job.backend)
        if errs[0].get("attributed"):
            node, first = errs[0]["node"], errs[0]
            message = (f"TensorRT could not parse the model at node '{node}' "
                       f"({first.get('op')}): {first.get('message')}")
    if not node and errs and errs[0].get("node_index") is not None:
        node = _node_for_index(job.ref, errs[0]["node_index"])
    return node, message, errs


def _refusal_findings(job: BuildJob, errs: List[Dict[str, Any]], message: str,
                      found: List[Finding]) -> str:
    """Append a finding for every node the parser refused, not only the first, worded in the
    model's terms where the static rules know why (a plugin that needs a GPU, an op the
    backend lacks); returns `message` with the first refusal worded the same way."""
    from workbench.support.checker import in_users_terms

    ref, backend = job.ref, job.backend
    causes = _parse_causes(ref, backend) if errs else {}
    for k, err in enumerate(errs):
        n = err.get("node") or _node_for_index(ref, err.get("node_index"))
        plugin = "plugin" in str(err.get("message", "")).lower()
        hint = ("pass the plugin library with --plugins, or replace the node" if plugin
                else None)
        steps = [step("check", "{model}", why="names every unsupported node and the "
                      "recipes that fix it")]
        raw = str(err.get("message"))
        said = raw
        cause = causes.get(n) if n and not plugin else None
        gpu = _plugin_needs_gpu(err, backend)
        code = "missing-plugin" if plugin else "parse-error"
        if gpu is not None:  # the plugin is there; this machine cannot create it
            who = shlex.quote(str(ref.path)) if ref.path else "MODEL"
            said, hint, code = gpu[0], gpu[1].replace("{model}", who), "plugin-needs-gpu"
        elif cause is not None:  # the model's terms first, TensorRT's words after
            said = in_users_terms(cause["reason"], raw)
        elif not plugin:  # the words check gives the same record ('false': no importer)
            said = _parser_words(err, backend) or raw
        if said != raw and k == 0 and raw and raw in message:  # (the worker's line)
            message = message.replace(raw, said, 1)
        found.append(Finding(
            "error", code, f"TensorRT's parser refused {err.get('op') or 'the node'}: {said}",
            nodes=[n] if n else [], op=err.get("op") or None, source="parser", hint=hint,
            next_steps=steps))
    return message


def profile_violation(message: str, config: BuildConfig, model: str = "MODEL"
                      ) -> Optional[Tuple[str, str]]:
    """(what happened, what to do) for TensorRT's "kOPT values for profile 0 violate shape
    constraints": the graph fixes a size that a dynamic input's profile varies (a tracing
    export froze an axis, e.g. the sequence length, into a Reshape); else None."""
    m = _VIOLATION.search(message or "")
    if m is None:
        return None
    which = {"kMIN": "min", "kOPT": "opt", "kMAX": "max"}[m.group(1)]
    k = int(m.group(2))
    prof = config.profiles[k] if k < len(config.profiles) else None
    shapes = (", ".join(f"{n}:{'x'.join(str(d) for d in v[('min', 'opt', 'max').index(which)])}"
                        for n, v in prof.items()) if prof else "")
    at = f"at the profile's {which} shapes ({shapes})" if shapes else \
        f"at the {which} shapes of the profile it was given (the default one, if none was)"
    v = _VOLUME.search(message)
    vol = (f": it would reshape {v.group(1)} values into {v.group(2)}, a size fixed in the "
           "graph" if v else "")
    return (f"the model does not run {at}: layer {m.group(3)} cannot take them{vol}. An "
            "input axis declared dynamic is fixed inside the graph (a traced export often "
            "freezes the sequence length or batch into a Reshape)",
            f"build at the sizes the graph was exported with (`workbench profiles {model} --calib "
            "DATA` proposes a profile from your data; or --profile with min = opt = max at "
            "the export size), or re-export with the axis really dynamic (torch.onnx.export "
            "with dynamic_axes / dynamo=True and no size read as a Python int)")


def _parse_causes(ref: Any, backend: str) -> Dict[str, Dict[str, Any]]:
    """By node, the static rules that say in the model's terms why the parser refuses it
    (`workbench.support.checker.parse_causes`)."""
    from workbench.support.checker import parse_causes

    try:
        return parse_causes(ref, backend)
    except WorkbenchError:  # no rule table for this backend: TensorRT's words stand alone
        return {}


def _parser_words(err: Dict[str, Any], backend: str) -> Optional[str]:
    """The parser error's reason as `check` words it (`checker.parser_words`), or None."""
    from workbench.support.checker import parser_words

    try:
        return parser_words(err, backend)[0] or None
    except Exception:  # (a record of unexpected shape: TensorRT's own words stand)
        return None


def _plugin_needs_gpu(err: Dict[str, Any], backend: str) -> Optional[Tuple[str, str]]:
    """(reason, hint) where the importer has its plugin but the worker has no GPU to create
    it on (`workbench.support.checker.plugin_gpu_reason`), else None."""
    from workbench.support.checker import plugin_gpu_reason
    from workbench.support.rules import backend_table

    if not err.get("plugin_needs_gpu"):
        return None
    try:
        short = backend_table(backend)["short"]
    except WorkbenchError:
        short = backend
    return plugin_gpu_reason(err, short)


def _attributed_errors(ref: Any, errors: List[Dict[str, Any]], backend: str
                       ) -> List[Dict[str, Any]]:
    """Parser errors that name no node, given the node(s) the static rules flag for them
    (`workbench.support.checker.attribute_errors`)."""
    from workbench.support.checker import attribute_errors

    try:
        return attribute_errors(ref, errors, backend)
    except WorkbenchError:  # no rule table for this backend: the error stays graph-level
        return errors


def _node_for_index(ref: Model, idx: Any) -> Optional[str]:
    try:
        i = int(idx)
        if i < 0:  # the parser's "no node" (a graph-level error)
            return None
        node = ref.graph.node[i]
        return node.name or ref.node_ids[i]
    except (TypeError, ValueError, IndexError):
        return None
