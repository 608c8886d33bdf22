"""The variant matrix: one ONNX into many engines (precision x target x profile x optimization
level), each a Ray task, with accuracy, latency, a results table and Pareto data. One module
per job: plan (variants), run (Ray tasks, resume), store (results folder), accuracy,
latency (predicted from recorded profiles), table.
Names resolve on first use (`workbench.core.lazy`): Ray is imported only when a matrix runs."""
from __future__ import annotations

from workbench.core import lazy

__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    '.plan': ('Variant', 'plan_matrix', 'data_for'),
    '.store': ('ResultsStore',),
    '.table': ('COLUMNS', 'results_frame', 'pareto_axes', 'pareto_front'),
    '.run': ('MatrixResult', 'run_matrix', 'run_variant', 'start_ray', 'write_pareto'),
    '.latency': ('add_predicted_latency', 'predicted_latency'),
    '.accuracy': ('engine_runner',),
})
