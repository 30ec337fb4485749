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


def _physical_paths(scene, src, tgt, truth):
    """The brute-force paths told apart by their reflection points (rounded to 1e-9)."""
    keys = set()
    for s, t, seq in truth:
        seq_t = torch.tensor([seq], device=src.device)
        path = scene.specular_paths(src[s:s + 1], tgt[t:t + 1], seq_t)
        pts = path.points[0, : int(path.num_bounces[0])].cpu().double().numpy()
        keys.add((s, t, tuple(round(float(x), 9) for x in pts.reshape(-1))))
    return keys


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
    # a path through the shared diagonal of two coplanar faces is valid for both faces but is
    # one physical path (same reflection points): find_specular_paths returns it once
    assert count[0] < count[1] == len(_physical_paths(scene, src, tgt, truth)) < len(truth)


def test_a_reflection_on_a_shared_diagonal_is_one_path(device):
    # a floor of two coplanar triangles; source and target above the diagonal x = y, so the
    # reflection point (0, 0, 0) lies in both closed triangles: one physical path, not two
    v = torch.tensor([[-1.0, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]], dtype=torch.float64, device=device)
    f = torch.tensor([[0, 1, 2], [0, 2, 3]], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    src = torch.tensor([[-0.5, -0.5, 1.0]], dtype=torch.float64, device=device)
    tgt = torch.tensor([[0.5, 0.5, 1.0]], dtype=torch.float64, device=device)
    found = rt.find_specular_paths(scene, src, tgt, 1, num_rays=20000)
    valid = found.valid[0, 0]
    assert int(valid.sum()) == 2  # line of sight + one floor reflection
    lengths = found.length[0, 0][valid].cpu()
    torch.testing.assert_close(lengths, torch.tensor([2 ** 0.5, (2 + 4) ** 0.5], dtype=torch.float64))
    seqs = found.prim_sequence[0, 0][valid].cpu()
    assert seqs[1, 0].item() == 0  # the first face of the tie is kept
    # each face alone still gives the path through specular_paths
    for face in (0, 1):
        one = scene.specular_paths(src, tgt, torch.tensor([[face]], device=device))
        assert bool(one.valid[0])
