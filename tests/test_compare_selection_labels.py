"""A selected integer output (the class of each kept row) is judged, never absorbed: a row
whose score and box match but whose class differs was 'swapped' with itself (its own score
is always a near-tied partner) and the selection-aware verdict said PASS beside
'classes 27 of 400 differ FAIL'. Now such a row is a label flip that fails the group, and
the verdict line names the integer field either way."""
from __future__ import annotations

import numpy as np

from workbench.compare.selection import SelectionCheck, judge_rows


def _rows(classes):
    scores = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
    boxes = np.arange(16, dtype=np.float32).reshape(4, 4)
    return {"scores": scores, "boxes": boxes, "classes": np.array(classes, np.int64)}


def test_a_class_flip_fails_the_group_and_is_named():
    ref, cand = _rows([1, 2, 3, 4]), _rows([1, 2, 5, 4])
    g = judge_rows(ref, cand, ["scores", "boxes", "classes"], "scores", 0.01)
    assert g.label_flips == {"classes": 1} and not g.consistent
    assert g.matched == 3 and not g.unmatched_ref and not g.unmatched_cand
    check = SelectionCheck(0.01, 0.0, True, False, selection_nodes=1, groups=[g])
    line = check.summary()
    assert "rows of scores, boxes, classes" in line
    assert "classes: 1 row(s) differ in it alone (FAIL)" in line


def test_equal_classes_are_said_to_be_judged():
    ref = _rows([1, 2, 3, 4])
    g = judge_rows(ref, _rows([1, 2, 3, 4]), ["scores", "boxes", "classes"], "scores", 0.01)
    assert g.consistent and g.matched == 4 and g.label_flips == {}
    line = SelectionCheck(0.01, 0.0, True, True, selection_nodes=1, groups=[g]).summary()
    assert "classes: equal in every matched row" in line
