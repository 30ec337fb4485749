"""rayd.drjit twin of ``tests/torch/test_review24a_topology_copy.py``: ``edge_topology()`` returns a copy.

A Dr.Jit array's item assignment (``top.shape_id[0] = 5``) rebinds the array object in place, so
the record returned before session 24 (the scene's own) carried such a write into the scene.
"""

from __future__ import annotations

import pytest

pytest.importorskip("drjit")

import rayd.drjit as rd  # noqa: E402
from drjit_testutil import rows, vec  # noqa: E402


def test_writes_into_the_returned_topology_do_not_reach_the_scene(m):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, [[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]]),
                           vec(m.Array3i, [[0, 1, 2], [0, 2, 3]])))
    scene.build()
    top = scene.edge_topology()
    top.shape_id[0] = 5
    top.v.x[3] = 77
    top.is_boundary[0] = False
    again = scene.edge_topology()
    assert rows(again.shape_id).tolist() == [0] * 5
    assert rows(again.v).tolist() == [[0, 1], [0, 2], [0, 3], [1, 2], [2, 3]]
    assert rows(again.is_boundary).tolist() == [True, False, True, True, True]
    hit = scene.nearest_edge(vec(m.Array3f, [[0.5, -0.25, 0.0]]))
    assert rows(hit.shape_id).tolist() == [0] and rows(hit.edge_id).tolist() == [0]
