"""The matrix's results folder: one JSON file per finished variant, written atomically, so a
killed matrix loses at most the variants that were running and a re-run skips the rest.

    DIR/matrix.json            the plan (variants, options), rewritten by every run
    DIR/variants/<id>.json     one variant's result (status, engine, size, times, accuracy,
                               latency), written once the variant is done
    DIR/engines/<id>.engine    the variant's engine (a copy out of the shared engine cache)
    DIR/results.json|.csv      the table (`export`)
    DIR/pareto.html            the Pareto view (workbench.render.matrix_figures)
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from workbench.core.errors import WorkbenchError
from workbench.core.fsutil import Subfolder, atomic_write_json, atomic_write_text
from workbench.matrix.table import results_frame

class ResultsStore:
    """The results folder of one matrix (see the module docstring)."""

    variants_dir = Subfolder("variants")
    engines_dir = Subfolder("engines")

    def __init__(self, root: Any) -> None:
        self.dir = Path(root)
        if self.dir.exists() and not self.dir.is_dir():
            raise WorkbenchError("the matrix output is a file, not a folder", file=str(root),
                                 hint="give a folder path with -o")
        self.variants_dir.mkdir(parents=True, exist_ok=True)
        self.engines_dir.mkdir(parents=True, exist_ok=True)

    def engine_path(self, vid: str) -> Path:
        return self.engines_dir / f"{vid}.engine"

    def result_path(self, vid: str) -> Path:
        return self.variants_dir / f"{vid}.json"

    def write_plan(self, variants: Iterable[Any], options: Dict[str, Any]) -> None:
        atomic_write_json(self.dir / "matrix.json",
                          {"variants": [dict(v.to_dict(), id=v.id) for v in variants],
                           "options": options})

    def save(self, result: Dict[str, Any]) -> Path:
        """One variant's result, atomically (a kill never leaves half a file)."""
        return atomic_write_json(self.result_path(result["id"]), result)

    def load(self, vid: str) -> Optional[Dict[str, Any]]:
        """The saved result of `vid`, or None (missing, unreadable or not ours)."""
        try:
            d = json.loads(self.result_path(vid).read_text())
        except (OSError, ValueError, RecursionError):
            return None
        return d if isinstance(d, dict) and d.get("id") == vid else None

    def finished(self, vid: str) -> Optional[Dict[str, Any]]:
        """The result of a variant that completed with its engine still in place; a failed
        one runs again (its cause may have been fixed since), and so does one whose engine
        was removed."""
        d = self.load(vid)
        if d is None or d.get("status") != "ok":
            return None
        eng = d.get("engine_path")
        if eng and not Path(eng).is_file():
            return None
        return d

    def results(self, ids: Optional[Iterable[str]] = None) -> List[Dict[str, Any]]:
        """Saved results, in the order of `ids` (default: by file name)."""
        if ids is None:
            ids = sorted(p.stem for p in self.variants_dir.glob("*.json"))
        return [d for d in (self.load(i) for i in ids) if d is not None]

    def export(self, results: List[Dict[str, Any]]) -> Dict[str, str]:
        """results.json (every field) and results.csv (the table's columns)."""
        atomic_write_json(self.dir / "results.json", results)
        df = results_frame(results)
        atomic_write_text(self.dir / "results.csv", df.to_csv(index=False))
        return {"json": str(self.dir / "results.json"), "csv": str(self.dir / "results.csv")}
