"""Whose fault is it? The one translator from onnxruntime's, TensorRT's parser's and the
workers' messages to a category, decided before anything is worded, so that check, build,
compare and the panels blame the same thing for the same message.

Categories (`CATEGORIES`):
- structure: the model's graph (an op no runtime has a kernel for, repeated names, an invalid
  graph, a type no kernel takes): fix or re-export the model;
- weights: the model's weights (none stored, a tensor's data not matching its shape, external
  data missing, sparse initializers a runtime does not read): re-export with the weights;
- inputs: the data fed to the model (a shape, dtype or value it does not take);
- machine: this machine (no usable GPU, driver, memory);
- tool: a runtime or this workbench failed on a model it should have handled (a crash).

Core layer (stdlib and workbench.core.findings): callers pass message text, get a category, words
and next steps as records.
"""
from __future__ import annotations

import re
from typing import List, Optional, Tuple

from workbench.core.findings import NextStep, step

STRUCTURE, WEIGHTS, INPUTS, MACHINE, TOOL = "structure", "weights", "inputs", "machine", "tool"
CATEGORIES = (STRUCTURE, WEIGHTS, INPUTS, MACHINE, TOOL)

# -- onnxruntime -------------------------------------------------------------------------------
# what onnxruntime says while it loads a model (session creation): never about the feed
_ORT_WEIGHTS = re.compile(
    r"ValidateEmbeddedTensorProtoDataSizeAndShape|data field count|Deserialize tensor|"
    r"does not match the data size|external data|sparse_initializer|SparseTensor|"
    r"UnpackTensor|corrupted protobuf", re.IGNORECASE)
_ORT_STRUCTURE = re.compile(
    r"is not a registered function/op|Could not find an implementation|invalid model|"
    r"same node name|Duplicate definition|is not a graph input, initializer, or output|"
    r"ShapeInferenceError|TypeInferenceError|Type Error|Type \(.*?\) of output arg|"
    r"bound to different types|Unsupported model IR version|opset|Load model from|"
    r"is not a valid|Node \(.*?\) has input size|not in topological order|graph_resolve|"
    r"Failed to load model|Protobuf parsing failed|No Op registered", re.IGNORECASE)
# what it says about the feed of a model that loaded
_ORT_INPUTS = re.compile(
    r"Got invalid dimensions for input|Unexpected input data type|Invalid rank for input|"
    r"Invalid Feed Input Name|Missing Input|input name cannot be empty|"
    r"Invalid input name", re.IGNORECASE)
_ORT_MACHINE = re.compile(r"bad_alloc|Failed to allocate memory|out of memory|"
                          r"std::bad_alloc|Cannot allocate|Locale::Locale", re.IGNORECASE)
_ORT_NODE_RUN = re.compile(r"Non-zero status code returned while running")


def ort_stage(text: str) -> str:
    """'load' when onnxruntime's message refuses the model itself (it would refuse any feed),
    'run' when it refused a run of a model that loaded."""
    text = str(text)
    if _ORT_NODE_RUN.search(text) or _ORT_INPUTS.search(text):
        return "run"
    if _ORT_WEIGHTS.search(text) or _ORT_STRUCTURE.search(text):
        return "load"
    return "run"


def ort_category(text: str, stage: Optional[str] = None) -> str:
    """The category of one onnxruntime refusal (`stage`: 'load' or 'run' when the caller
    knows which call failed; else read from the message)."""
    text = str(text)
    if _ORT_MACHINE.search(text):
        return MACHINE
    stage = stage or ort_stage(text)
    if _ORT_INPUTS.search(text):
        return INPUTS
    if _ORT_WEIGHTS.search(text):
        return WEIGHTS
    if stage == "load" or _ORT_STRUCTURE.search(text):
        return STRUCTURE
    return INPUTS  # a node refused the values it was given at run time


def ort_load_hint(text: str, default: str) -> Tuple[str, str, List[NextStep]]:
    """(category, what to do in words, next steps as records) for a model onnxruntime cannot
    load. `default`: the caller's words when nothing more specific is known. Steps name the
    model as the `{model}` placeholder (bound by the caller or the CLI)."""
    low = str(text).lower()
    cat = ort_category(text, "load")
    look = [step("inspect", "{model}", why="what the model holds: its ops, inputs and domains")]
    if "locale::locale" in low:
        return MACHINE, ("onnxruntime needs a locale this machine does not have installed "
                         "(StringNormalizer's 'locale' attribute): install it (e.g. "
                         "locale-gen en_US.UTF-8) or change the attribute"), []
    if "same node name" in low or "duplicate definition" in low or ("duplicate" in low and
                                                                      "name" in low):
        return STRUCTURE, "make the names unique", [
            step("fix", "{model}", recipe="rename_duplicates", o="{fixed}",
                 why="gives the repeated names unique ones")]
    if "not a registered function/op" in low or "no op registered" in low:
        return STRUCTURE, ("onnxruntime has no kernel for that op: load its custom-op library "
                           "in onnxruntime, or replace the node"), [
            step("check", "{model}", why="names the recipes that replace the node")]
    old = re.search(r"implementation for (\w+)\((\d+)\) node", str(text))
    if old and int(old.group(2)) < 7:  # (onnxruntime implements no op version this old)
        return STRUCTURE, (f"the model uses {old.group(1)} from opset {old.group(2)}, older "
                           "than any onnxruntime kernel: upgrade its opset"), [
            step("fix", "{model}", recipe="opset-upgrade", o="{fixed}",
                 why="raises the opset with onnx's version converter")]
    if "could not find an implementation" in low:
        dtype = "bfloat16" if "bfloat16" in low or "(bf16)" in low else None
        return STRUCTURE, ("onnxruntime's CPU build has no kernel for that op with these "
                           "types" + (f" ({dtype})" if dtype else "") + ": keep the node in "
                           "FP32, or run the model where a kernel exists (a GPU provider)"), look
    if cat == WEIGHTS:
        return WEIGHTS, absent_weights_hint(), absent_weights_steps()
    if "is not a graph input, initializer, or output" in low:
        return STRUCTURE, ("a node reads a tensor nothing defines (a sparse initializer, or an "
                           "edit that dropped its producer): re-export the model"), look
    return cat, default, look


def absent_weights_hint() -> str:
    """What to do, in words, for a model whose weights are not stored in it."""
    return ("re-export the model with its weights (torch.onnx.export(..., export_params=True), "
            "or keep its external-data files next to it)")


def absent_weights_steps() -> List[NextStep]:
    """The next step for a model whose weights are not stored in it."""
    return [step("check", "{model}", backend="static",
                 why="checks the structure without weights")]


# -- TensorRT (parser, builder, worker) --------------------------------------------------------
# CPU-only TensorRT-RTX appends CUDA's words to unrelated errors (cudaError 35: "CUDA driver
# version is insufficient") when it probes the device; they say nothing about the model
_GPU_NOISE = re.compile(
    r"\s*[;,]?\s*(?:\[[^\]]*\]\s*)?(?:catchCudaError[^\n;]*|cudaError\w*\s*\(?\d+\)?[^\n;]*|"
    r"Cuda Error in \w+: 35\b[^\n;]*|[^\n;.]*CUDA driver version is insufficient[^\n;]*)",
    re.IGNORECASE)


def without_gpu_noise(text: str) -> str:
    """`text` without the CUDA/driver words a TensorRT that did not try to run on a GPU
    appends (use only where no GPU run was attempted: there they are the real error)."""
    out = _GPU_NOISE.sub("", str(text))
    return " ".join(out.split()).strip(" ;,")


def parser_category(message: str, code: str = "", op: str = "") -> str:
    """The category of one TensorRT parser (or builder) error: weights when an initializer
    could not be imported, machine when a plugin or the builder needs a GPU this machine lacks,
    structure otherwise (the parser refuses graphs, never feeds)."""
    text = str(message)
    if re.search(r"Failed to import initializer|convertOnnxWeights|WeightsContext", text):
        return WEIGHTS
    if re.search(r"out of memory|bad_alloc|Failed to allocate", text, re.IGNORECASE):
        return MACHINE
    return STRUCTURE


# -- worker crashes ----------------------------------------------------------------------------
def crash_hint(stage: str, node: Optional[str], op: Optional[str]) -> str:
    """What to do, in words, after TensorRT died while working on a model (`node`/`op`: where,
    when known); `crash_steps` gives the command."""
    if node or op:
        what = f"{op or 'a'} node '{node}'" if node else f"an unnamed {op} node"
        return (f"TensorRT crashed on {what} instead of refusing it (a TensorRT bug): "
                "rewrite that node or keep it out of the engine, or try another TensorRT "
                "version")
    return f"TensorRT crashed while it ran '{stage}': try another TensorRT version"


def crash_steps() -> List[NextStep]:
    """The next step after a TensorRT crash: what the static rules know about the model."""
    return [step("check", "{model}", backend="static",
                 why="says what the rules know about the model's nodes, without TensorRT")]


def names(items: List[str], most: int = 3) -> str:
    """'a', 'b', 'c' (+N more) for a message."""
    shown = ", ".join(f"'{x}'" for x in items[:most])
    return shown + (f" (+{len(items) - most} more)" if len(items) > most else "")
