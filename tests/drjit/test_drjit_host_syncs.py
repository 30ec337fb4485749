"""At most one host synchronisation per rayd.drjit query (issue 13), none from the float64 walk-on.

With ``RAYD_DRJIT_QUERY_FENCES=3`` a query's engine launches are fenced once, after its last
launch (``_convert.one_fence``: the default); with 1, once after each launch (two for the
queries that launch twice); the float64 walk-on past ``tmin`` and ``shadow_test``'s
float64 confirmation run as masked fixed-size work instead of reading ``dr.any(...)``
back. Counted here: each fence (a ``dr.sync_thread`` + ``wp.synchronize_device`` on CUDA,
counted on LLVM too, where it is a no-op), and every other host read (``.item()``,
``.numpy()``, ``bool()``, ``np.array()``, ``.torch()``, a scalar read by indexing,
``dr.sync_thread``, Warp's ``numpy()`` / ``synchronize*``).
"""

from __future__ import annotations

import collections
import contextlib
import traceback

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")
wp = pytest.importorskip("warp")

from drjit_testutil import vec  # noqa: E402

from rayd.drjit import _convert  # noqa: E402

BOX = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], float) - 0.5
FACES = np.array([[0, 2, 1], [1, 2, 3], [4, 5, 6], [5, 7, 6], [0, 1, 4], [1, 5, 4], [2, 6, 3], [3, 6, 7],
                  [0, 4, 2], [2, 4, 6], [1, 3, 5], [3, 7, 5]])


@contextlib.contextmanager
def _count_syncs(monkeypatch):
    """Yields a Counter of (what, where) host synchronisations made inside the block."""
    found: collections.Counter = collections.Counter()
    inside_fence = [False]

    def note(what):
        if inside_fence[0]:
            return
        frames = [f for f in traceback.extract_stack()[:-2] if "src/rayd" in f.filename]
        found[(what, f"{frames[-1].filename.rsplit('src/', 1)[-1]}:{frames[-1].lineno}" if frames else "?")] += 1

    def patch(owner, name, what, when=None):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            out = original(*args, **kwargs)
            if when is None or when(out):
                note(what)
            return out

        monkeypatch.setattr(owner, name, wrapper)

    for name in ("item", "numpy", "__bool__", "__array__", "torch"):
        patch(dr.ArrayBase, name, f"drjit {name}")
    patch(dr.ArrayBase, "__getitem__", "drjit scalar read", lambda out: not isinstance(out, dr.ArrayBase))
    patch(dr, "sync_thread", "dr.sync_thread")
    patch(wp.array, "numpy", "warp numpy")
    for name in ("synchronize", "synchronize_device", "synchronize_stream"):
        patch(wp, name, f"wp.{name}")
    fence = _convert.fence

    def counted_fence(device):
        note("fence")
        inside_fence[0] = True
        try:
            fence(device)
        finally:
            inside_fence[0] = False

    monkeypatch.setattr(_convert, "fence", counted_fence)
    yield found


def _scene(m, double):
    A3, M4 = (m.Array3f64, m.Matrix4f64) if double else (m.Array3f, m.Matrix4f)
    faces = m.Array3u(*[m.UInt(FACES[:, i].tolist()) for i in range(3)])
    scene = rd.Scene()
    for k in range(2):
        vertices = vec(A3, BOX)
        if k == 0:
            dr.enable_grad(vertices)
        place = M4([[1, 0, 0, 3.0 * k], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
        scene.add_mesh(rd.Mesh(vertices, faces, to_world=place), dynamic=k == 0)
    for j in range(3):
        scene.add_instance(0, M4([[1, 0, 0, 0], [0, 1, 0, 3.0 * (j + 1)], [0, 0, 1, 0], [0, 0, 0, 1]]))
    scene.build()
    return scene, A3


def _queries(scene, m, A3):
    o = vec(A3, [[0.1, 0.2, 5.0], [3.1, 0.1, 5.0], [0.2, 3.1, 5.0], [9, 9, 9]])
    d = A3(0, 0, -1)
    ray = rd.Ray(o, d)
    at_face = rd.Ray(o, d, tmin=4.5)  # tmin at the first face: the float64 walk-on's case
    p = vec(A3, [[0.1, 0.2, 0.1], [3.1, 0.1, 2.0], [0.0, 3.0, 0.0]])
    viewpoint = A3(0.0, 0.0, 5.0)
    end = A3(0.1, 0.2, 0.1)
    return {
        "intersect": lambda: scene.intersect(ray),
        "intersect_tmin": lambda: scene.intersect(at_face),
        "shadow_test": lambda: scene.shadow_test(ray),
        "shadow_test_tmin": lambda: scene.shadow_test(at_face),
        "visible": lambda: scene.visible(o, end),
        "intersect_all": lambda: scene.intersect_all(ray, 4),
        "count_intersections": lambda: scene.count_intersections(ray),
        "trace_reflections": lambda: scene.trace_reflections(ray, 2),
        "nearest_edge": lambda: scene.nearest_edge(p),
        "nearest_edge_ray": lambda: scene.nearest_edge(ray),
        "nearest_edges": lambda: scene.nearest_edges(p, 2),
        "silhouette_edges": lambda: scene.silhouette_edges(viewpoint),
        "closest_point": lambda: scene.closest_point(p),
        "winding_number": lambda: scene.winding_number(p),
        "contains": lambda: scene.contains(p),
        "signed_distance": lambda: scene.signed_distance(p),
    }


@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
@pytest.mark.parametrize("mode", [3, 1], ids=["one-per-query", "per-launch"])
def test_at_most_one_host_sync_per_query(m, double, mode, monkeypatch):
    monkeypatch.setattr(_convert, "QUERY_FENCES", mode)
    scene, A3 = _scene(m, double)
    counts = {}
    for name, query in _queries(scene, m, A3).items():
        dr.eval(query())  # warm-up (kernels compiled, lazily built state made)
        with monkeypatch.context() as patch, _count_syncs(patch) as found:
            result = query()
        dr.eval(result)
        counts[name] = dict(found)
    # (float64 count_intersections: the count and the all-hits launch of its crossings at tmin, two launches;
    # float64 visible: shadow_test's search and its float64 confirmation, two launches)
    twice = {"intersect", "intersect_tmin", "shadow_test", "shadow_test_tmin", "visible", "signed_distance",
             "count_intersections"} if double else {"signed_distance"}
    limit = {name: 1 if mode == 3 or name not in twice else 2 for name in counts}
    over = {name: c for name, c in counts.items() if sum(c.values()) > limit[name] or any(w != "fence" for w, _ in c)}
    assert not over, over  # one fence at most (mode 3, the default; one per launch with 1), and no other host read


def test_one_fence_after_nested_queries_and_errors(monkeypatch):
    """Nested public queries fence once, at the outermost's end; a query that raises still fences."""
    calls = []
    monkeypatch.setattr(_convert, "fence", lambda device: calls.append(device))
    monkeypatch.setattr(_convert, "QUERY_FENCES", 3)

    class Fake:
        @_convert.one_fence
        def inner(self):
            _convert.query_fence("cuda:0", after=False)
            _convert.query_fence("cuda:0", after=True)
            return 1

        @_convert.one_fence
        def outer(self, fail=False):
            total = self.inner() + self.inner()
            if fail:
                raise ValueError("bad")
            return total

    assert Fake().outer() == 2 and calls == ["cuda:0"]
    with pytest.raises(ValueError):
        Fake().outer(fail=True)
    assert calls == ["cuda:0", "cuda:0"]
    _convert.query_fence("cuda:0", after=True)  # outside a query: at once
    assert calls == ["cuda:0"] * 3
    monkeypatch.setattr(_convert, "QUERY_FENCES", 2)  # before and after every launch
    Fake().inner()
    assert calls == ["cuda:0"] * 5
    monkeypatch.setattr(_convert, "QUERY_FENCES", 1)  # after every launch
    Fake().outer()
    assert calls == ["cuda:0"] * 7


def test_one_host_sync_per_query_is_the_default():
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    env = {k: v for k, v in os.environ.items() if k != "RAYD_DRJIT_QUERY_FENCES"}
    out = subprocess.run([sys.executable, "-c", "from rayd.drjit import _convert; print(_convert.QUERY_FENCES)"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.stdout.strip() == "3", out.stderr[-2000:]
