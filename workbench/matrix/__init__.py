"""The variant matrix: one ONNX into many engines (precision x target x profile x optimization
level), each a Ray task, with accuracy, latency, a results table and Pareto data. One module
per job: plan (variants), run (Ray tasks, resume), store (results folder), accuracy, table.

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used (Ray is imported only when a matrix runs)."""
from __future__ import annotations

from typing import Dict

from workbench.lazy import lazy_exports

_EXPORTS: Dict[str, str] = {
    'Variant': 'workbench.matrix.plan',
    'plan_matrix': 'workbench.matrix.plan',
    'data_for': 'workbench.matrix.plan',
    'ResultsStore': 'workbench.matrix.store',
    'COLUMNS': 'workbench.matrix.table',
    'MatrixResult': 'workbench.matrix.run',
    'run_matrix': 'workbench.matrix.run',
    'run_variant': 'workbench.matrix.run',
    'start_ray': 'workbench.matrix.run',
    'write_pareto': 'workbench.matrix.run',
    'engine_runner': 'workbench.matrix.accuracy',
    'results_frame': 'workbench.matrix.table',
    'pareto_axes': 'workbench.matrix.table',
    'pareto_front': 'workbench.matrix.table',
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
