"""A fix session on a model with external data stores its original version by streaming each
external tensor into its content-addressed blob: the weights are never loaded whole, and the
version is the one an in-memory store makes (same id, same bytes)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from workbench.core.model import Model, open_model
from workbench.surgery.history import History, store_version
from workbench.core.workspace import ModelWorkspace

REPO = Path(__file__).resolve().parents[1]


def _decoder(folder: Path) -> Path:
    spec = importlib.util.spec_from_file_location("large_model", REPO / "benchmarks" /
                                                  "large_model.py")
    lm = importlib.util.module_from_spec(spec)
    sys.modules["large_model"] = lm
    spec.loader.exec_module(lm)
    return lm.build_decoder(folder, lm.tiny_decoder_config())


def test_original_is_stored_without_loading_the_weights(tmp_path, monkeypatch):
    path = _decoder(tmp_path / "dec")
    m = open_model(path)
    expected = store_version(ModelWorkspace(tmp_path / "ref"), m.load_weights())

    def refuse(self):  # the original's weights must not be loaded whole
        raise AssertionError("load_weights called")

    monkeypatch.setattr(Model, "load_weights", refuse)
    h = History(str(path), home=tmp_path / "home")
    assert h._original == expected
    monkeypatch.undo()
    stored = onnx.load(str(h.ws.version_path(h._original)))
    want = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    got = {t.name: numpy_helper.to_array(t) for t in stored.graph.initializer}
    assert want.keys() == got.keys()
    assert all(np.array_equal(want[k], got[k]) for k in want)
    blobs = list((h.ws.versions_dir / "blobs").glob("*.bin"))
    assert blobs and not list((h.ws.versions_dir / "blobs").glob(".blob-*"))
