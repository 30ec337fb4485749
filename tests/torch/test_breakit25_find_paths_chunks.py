"""find_specular_paths checks its candidates in bounded chunks (helper breakit25, session 25).

Every (target, candidate sequence) row was validated in one call, so the host arrays of the
validity rules (corners, images, points: about 1.3 kB a row at 16 bounces) grew with
``num_rays x max_bounces x targets``: 10,000 rays of 16 bounces in a 24-face room took 2.2 GB
(peak RSS), and the default 100,000 rays about ten times that. Rows are now checked
``rayd.core.paths.CHECK_ROWS`` at a time, keeping only the valid rows' values; the paths found
do not depend on the chunk size.
"""

from __future__ import annotations

import torch

import rayd.torch as rt
from rayd.core import paths

from test_find_paths import _room

F64 = torch.float64


def test_chunks_are_bounded_and_do_not_change_the_paths(monkeypatch):
    scene, _ = _room("cpu")
    src = torch.tensor([[1.0, 1.0, 1.5], [8.0, 6.5, 3.0]], dtype=F64)
    tgt = torch.tensor([[9.0, 1.0, 1.0], [2.0, 7.0, 2.0], [4.0, 6.0, 0.5]], dtype=F64)
    want = rt.find_specular_paths(scene, src, tgt, 3, num_rays=2000)
    sizes, searching = [], []
    validate, find_sequences = paths.validate, paths.find_sequences

    def recorded(src_rows, *args, **kwargs):  # the candidates' checks (not the found paths' evaluation)
        if searching:
            sizes.append(len(src_rows))
        return validate(src_rows, *args, **kwargs)

    def finding(*args, **kwargs):
        searching.append(True)
        try:
            return find_sequences(*args, **kwargs)
        finally:
            searching.clear()

    monkeypatch.setattr(paths, "validate", recorded)
    monkeypatch.setattr(paths, "find_sequences", finding)
    monkeypatch.setattr(paths, "CHECK_ROWS", 64, raising=False)
    got = rt.find_specular_paths(scene, src, tgt, 3, num_rays=2000)
    assert len(sizes) > 10 and max(sizes) <= 64
    assert torch.equal(got.prim_sequence, want.prim_sequence) and torch.equal(got.valid, want.valid)
    torch.testing.assert_close(got.length, want.length, rtol=0, atol=0)
    torch.testing.assert_close(got.points, want.points, rtol=0, atol=0)
