"""Session 21, helper breakit21a: rayd.drjit ``visible`` and ``specular_paths`` on float64 segments decide like ``shadow_test``
(see tests/torch/test_breakit21a_visible.py for the case)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows, vec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "torch"))
pytest.importorskip("torch")
from test_breakit21a_visible import _float64_blocked, _grazing_segments  # noqa: E402


def test_float64_segments_ending_on_a_grazed_face_are_visible_both_ways(m):
    v, f, a, e = _grazing_segments()
    assert not _float64_blocked(v, f, e, a).any()
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f64, v), m.Array3i(f.T.astype(np.int32))))
    scene.build()
    a_d, e_d = vec(m.Array3f64, a), vec(m.Array3f64, e)
    assert rows(scene.visible(a_d, e_d)).all() and rows(scene.visible(e_d, a_d)).all()
    normal = np.cross(v[1] - v[0], v[2] - v[0])
    normal /= np.linalg.norm(normal)
    through = scene.visible(vec(m.Array3f64, a + 0.5 * normal), vec(m.Array3f64, a - 0.7 * normal))
    assert not rows(through).any()


def test_float64_line_of_sight_paths_ending_on_a_grazed_face_are_valid(m):
    v, f, a, e = _grazing_segments()
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f64, v), m.Array3i(f.T.astype(np.int32))))
    scene.build()
    paths = scene.specular_paths(vec(m.Array3f64, e), vec(m.Array3f64, a), m.TensorXi(np.full((len(a), 1), -1, np.int32)))
    assert rows(paths.valid).all()
    np.testing.assert_allclose(rows(paths.length), np.linalg.norm(e - a, axis=1), rtol=1e-12)
