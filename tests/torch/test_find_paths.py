"""rayd.torch.find_specular_paths against brute-force enumeration of every face sequence up to order 2."""

from __future__ import annotations

import torch

import rayd.torch as rt

F64 = torch.float64


def _box(lo, hi, offset):
    x0, y0, z0 = lo
    x1, y1, z1 = hi
    v = [[x0, y0, z0], [x1, y0, z0], [x1, y1, z0], [x0, y1, z0], [x0, y0, z1], [x1, y0, z1], [x1, y1, z1], [x0, y1, z1]]
    f = [[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4], [2, 3, 7], [2, 7, 6], [1, 2, 6], [1, 6, 5],
         [0, 4, 7], [0, 7, 3]]
    return v, [[a + offset, b + offset, c + offset] for a, b, c in f]


def _room(device):
    """A room (10 x 8 x 4) with a box inside it: 24 faces."""
    v1, f1 = _box([0, 0, 0], [10, 8, 4], 0)
    v2, f2 = _box([3, 3, 0], [5, 4.5, 2.5], 8)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v1 + v2, dtype=F64, device=device), torch.tensor(f1 + f2, device=device)))
    scene.build()
    return scene, len(f1 + f2)


def _brute_force(scene, faces, src, tgt):
    seqs = [[-1, -1]] + [[a, -1] for a in range(faces)] + [[a, b] for a in range(faces) for b in range(faces) if a != b]
    seqs = torch.tensor(seqs, device=src.device)
    paths = scene.specular_paths(src[:, None, None], tgt[None, :, None], seqs[None, None])
    found = {}
    for s, t, k in paths.valid.nonzero().tolist():
        found[(s, t, tuple(seqs[k].tolist()))] = paths.length[s, t, k].item()
    return found


def test_find_specular_paths_matches_brute_force(device):
    scene, faces = _room(device)
    src = torch.tensor([[1.0, 1.0, 1.5], [8.0, 6.5, 3.0]], dtype=F64, device=device, requires_grad=True)
    tgt = torch.tensor([[9.0, 1.0, 1.0], [2.0, 7.0, 2.0], [4.0, 6.0, 0.5], [6.0, 2.0, 3.5]], dtype=F64, device=device)
    truth = _brute_force(scene, faces, src.detach(), tgt)
    assert len(truth) > 100
    result = rt.find_specular_paths(scene, src, tgt, 2)
    assert result.prim_sequence.shape[:2] == (2, 4) and result.points.shape[-2:] == (2, 3)
    got = {}
    for s, t, p in result.valid.nonzero().tolist():
        got[(s, t, tuple(result.prim_sequence[s, t, p].tolist()))] = result.length[s, t, p].item()
    assert set(got) <= set(truth)  # every path returned is a valid one
    assert len(set(got) & set(truth)) >= 0.99 * len(truth)
    for key, length in got.items():
        assert abs(length - truth[key]) <= 1e-12 * length
    # Sorted by length, empty slots +inf; line of sight is order 0 and its gradient is the unit vector.
    assert (result.length[..., 1:] >= result.length[..., :-1]).all()
    assert torch.isinf(result.length[~result.valid]).all()
    los = result.valid & (result.num_bounces == 0)
    assert los.any()
    s, t, p = los.nonzero()[0].tolist()
    result.length[s, t, p].backward()
    want = (src[s] - tgt[t]).detach()
    torch.testing.assert_close(src.grad[s], want / want.norm())


def test_find_specular_paths_recall_grows_with_rays(device):
    scene, faces = _room(device)
    src = torch.tensor([[1.0, 1.0, 1.5]], dtype=F64, device=device)
    tgt = torch.tensor([[9.0, 1.0, 1.0], [2.0, 7.0, 2.0]], dtype=F64, device=device)
    truth = set(_brute_force(scene, faces, src, tgt))
    few = rt.find_specular_paths(scene, src, tgt, 2, num_rays=50)
    many = rt.find_specular_paths(scene, src, tgt, 2, num_rays=20000)
    count = [int(r.valid.sum()) for r in (few, many)]
    assert count[0] < count[1] == len(truth)
