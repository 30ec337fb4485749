"""rayd.core.topology: which meshes get an engine pass, and how the scene's edge rows are gathered."""

from __future__ import annotations

import types

import numpy as np
import pytest

from rayd.core.topology import assemble, mesh_passes


def _shape(base, faces, vertex_offset):
    return types.SimpleNamespace(base=base, mesh=types.SimpleNamespace(num_faces=faces), vertex_offset=vertex_offset)


def test_instances_repeat_their_mesh_and_empty_meshes_are_skipped():
    # shape 0: mesh A (3 records), 1: empty mesh, 2: mesh B (2 records), 3: instance of B, 4: instance of A
    shapes = [_shape(0, 1, 0), _shape(1, 0, 3), _shape(2, 2, 3), _shape(2, 2, 3), _shape(0, 1, 0)]
    assert mesh_passes("rayd.x.Scene", shapes) == [0, 2]
    world = [0, 3, 3, 7, 11]  # first row of each shape in the world-space vertex copy
    plan = assemble("rayd.x.Scene", shapes, world, {0: 3, 2: 2})
    assert plan.num_edges == 3 + 2 + 2 + 3
    np.testing.assert_array_equal(plan.source, [0, 1, 2, 3, 4, 3, 4, 0, 1, 2])
    np.testing.assert_array_equal(plan.shape_id, [0, 0, 0, 2, 2, 3, 3, 4, 4, 4])
    np.testing.assert_array_equal(plan.edge_id, [0, 1, 2, 0, 1, 0, 1, 0, 1, 2])
    np.testing.assert_array_equal(plan.world_shift, [0, 0, 0, 3, 3, 7, 7, 11, 11, 11])
    np.testing.assert_array_equal(plan.vertex_shift, [0, 0, 0, 3, 3, 3, 3, 0, 0, 0])
    assert plan.shape_id.dtype == np.int32 and plan.source.dtype == np.int64


def test_too_many_records_is_refused(monkeypatch):
    from rayd.engine import edge_topology

    monkeypatch.setattr(edge_topology, "MAX_RECORDS", 4)
    shapes = [_shape(0, 1, 0), _shape(0, 1, 0)]
    with pytest.raises(ValueError, match=r"^rayd.x.Scene edge queries: the scene has 6 edge records"):
        assemble("rayd.x.Scene", shapes, [0, 3], {0: 3})
