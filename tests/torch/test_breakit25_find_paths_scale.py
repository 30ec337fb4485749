"""find_specular_paths on scenes of any size (helper breakit25, session 25).

Paths with equal lengths and reflection points are one physical path (docs/api.md: "to 1e-9
relative"); the tolerance was ``1e-9 * max(length, 1)``, absolute for lengths below 1, so in a
scene 1e-9 in size distinct paths merged (26 -> 24 of one pair) and at 1e-12 nearly all did
(26 -> 3). A path set must not depend on the unit the scene is written in.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

from test_find_paths import _box

F64 = torch.float64
SRC = [[1.0, 1.0, 1.5], [8.0, 6.5, 3.0]]
TGT = [[9.0, 1.0, 1.0], [2.0, 7.0, 2.0], [4.0, 6.0, 0.5]]


def _paths(scale: float):
    # test_find_paths' room: 10 x 8 x 4 with a box inside (24 faces)
    v1, f1 = _box([0, 0, 0], [10, 8, 4], 0)
    v2, f2 = _box([3, 3, 0], [5, 4.5, 2.5], 8)
    placed = rt.Scene()
    placed.add_mesh(rt.Mesh(torch.tensor(v1 + v2, dtype=F64) * scale, torch.tensor(f1 + f2)))
    placed.build()
    src, tgt = torch.tensor(SRC, dtype=F64) * scale, torch.tensor(TGT, dtype=F64) * scale
    return rt.find_specular_paths(placed, src, tgt, 2, num_rays=3000)


@pytest.mark.parametrize("scale", [1e-12, 1e-9, 1e6])
def test_the_path_set_does_not_depend_on_the_scene_unit(scale):
    want, got = _paths(1.0), _paths(scale)
    assert got.valid.sum(-1).tolist() == want.valid.sum(-1).tolist()

    def found(result, unit):  # per pair: {sequence: length / unit} (paths of equal length may swap order)
        return [[{tuple(q.tolist()): float(length) / unit
                  for q, length, ok in zip(result.prim_sequence[s, t], result.length[s, t], result.valid[s, t]) if ok}
                 for t in range(len(TGT))] for s in range(len(SRC))]

    for got_row, want_row in zip(found(got, scale), found(want, 1.0)):
        for g, w in zip(got_row, want_row):
            assert g.keys() == w.keys()
            assert all(g[k] == pytest.approx(w[k], rel=1e-12) for k in w)
