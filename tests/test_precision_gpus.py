"""A precision only newer GPUs compute, against the build's targets: FP8 (Ada, sm89, and later)
was built 'portable across Ampere-and-later GPUs (sm86 ...)' with no word that Ampere has no
FP8; --target sm86 built it too."""
from __future__ import annotations

import pytest

from workbench.engines.engine import BuildConfig, gpu_support_findings
from workbench.core.errors import WorkbenchError
from workbench.precision import table


def test_fp8_needs_ada_or_later():
    assert table.get("fp8").min_sm == 89 and table.get("bf16").min_sm == 80
    assert table.get("fp16").min_sm is None and table.get("int8").min_sm is None
    [w] = gpu_support_findings(BuildConfig(precision="fp8"), "tensorrt-rtx")
    assert w.severity == "warning" and w.code == "precision-needs-gpu"
    assert "FP8 needs a GPU of compute capability 8.9 or later" in w.message
    assert "Ampere (sm86) has no FP8" in w.message and "--target sm89" in w.hint
    assert gpu_support_findings(BuildConfig(precision="fp8", target="sm89"), "tensorrt-rtx") == []
    assert gpu_support_findings(BuildConfig(precision="fp8", target="sm89,sm120"),
                                "tensorrt-rtx") == []
    with pytest.raises(WorkbenchError) as e:
        gpu_support_findings(BuildConfig(precision="fp8", target="sm86,sm89"), "tensorrt-rtx")
    assert e.value.field == "target" and "--target sm86 has no FP8" in str(e.value)
    # BF16 runs on every GPU TensorRT-RTX builds for by default; not on Turing
    assert gpu_support_findings(BuildConfig(precision="bf16"), "tensorrt-rtx") == []
    with pytest.raises(WorkbenchError) as e:
        gpu_support_findings(BuildConfig(precision="bf16", target="sm75"), "tensorrt-rtx")
    assert "compute capability 8.0 or later" in str(e.value)
    # a GPU's own TensorRT builds for the GPU it runs on: nothing to say here
    assert gpu_support_findings(BuildConfig(precision="fp8"), "tensorrt") == []
    assert gpu_support_findings(BuildConfig(precision="fp16", target="sm75"), "tensorrt-rtx") == []
