"""``Scene.build()``'s host-side shortcuts (issue 18, "build"; session 23) leave every built array bit-equal.

The build's one-off kernels go through recorded launches kept for the process
(``runtime.BUILD_LAUNCHES``), the PLOC scratch and the wide collapse's start values come from fewer
allocations, and the checks of all meshes are read once: none of it may change a kernel, the order of
the launches on the stream, or the tree. Two checks:

- the digests of every array a CPU build makes (flat BVH nodes, PLOC/pair/wide/refit arrays, points,
  indices, per-face ids, the instance level's arrays), for a few scenes under the CUDA defaults (``ploc`` +
  ``wide4``) and the CPU defaults, equal the digests main's tree (2af1da9, before these changes) gave
  (``build_digests_main_2af1da9.json``, written by :func:`scene_digests` with main's ``src``; Warp 1.19);
- the same digests with every launch of ``BUILD_LAUNCHES`` made by ``wp.launch`` instead, every PLOC pass
  command recorded anew, and every carved array poisoned before the build writes it.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import warp as wp

torch = pytest.importorskip("torch")

import rayd.torch as rt  # noqa: E402
from rayd.engine import runtime, triangles  # noqa: E402


def _mesh(rows: int, cols: int, seed: int, shift: float = 0.0):
    rng = np.random.default_rng(seed)
    x, y = np.meshgrid(np.arange(cols + 1.0), np.arange(rows + 1.0), indexing="xy")
    z = rng.normal(scale=0.3, size=x.shape)
    v = np.stack([x + shift, y, z], -1).reshape(-1, 3).astype(np.float32)
    q = (np.arange(rows)[:, None] * (cols + 1) + np.arange(cols)[None, :]).reshape(-1)
    f = np.concatenate([np.stack([q, q + cols + 1, q + 1], 1), np.stack([q + 1, q + cols + 1, q + cols + 2], 1)])
    return torch.from_numpy(v), torch.from_numpy(f.astype(np.int32))


SCENES = {
    "one": [(7, 9, 1)],
    "tiny": [(1, 1, 2)],
    "three": [(5, 6, 3), (2, 3, 4), (12, 10, 5)],
    "instances": [(6, 6, 6), "instances"],
}


def _build(parts):
    scene = rt.Scene()
    for k, part in enumerate(parts):
        if part == "instances":
            for j in range(3):
                m = torch.eye(4)
                m[0, 3] = 20.0 * (j + 1)
                m[1, 1] = 1.0 + 0.5 * j
                scene.add_instance(0, m)
        else:
            scene.add_mesh(rt.Mesh(*_mesh(*part, shift=15.0 * k)))
    scene.build()
    return scene


def _arrays(obj, prefix: str, out: dict, depth: int = 0) -> None:
    """Every ``wp.array`` reachable through the attributes of ``obj`` (a few levels), by attribute path."""
    if depth > 3 or obj is None:
        return
    items = vars(obj).items() if hasattr(obj, "__dict__") else ()
    for name, value in sorted(items, key=lambda kv: kv[0]):
        if name.startswith("__") or name in ("device", "stream", "cpu_mirror"):  # (cpu_mirror: made by queries)
            continue
        path = f"{prefix}.{name}"
        if isinstance(value, wp.array):
            out[path] = value
        elif isinstance(value, (list, tuple)):
            for i, x in enumerate(value):
                if isinstance(x, wp.array):
                    out[f"{path}[{i}]"] = x
                elif hasattr(x, "__dict__") and type(x).__module__.startswith("rayd.engine"):
                    _arrays(x, f"{path}[{i}]", out, depth + 1)
        elif hasattr(value, "__dict__") and type(value).__module__.startswith("rayd.engine"):
            _arrays(value, path, out, depth + 1)


def digests(scene) -> dict[str, str]:
    core = scene._core
    found: dict = {}
    for name in ("points", "indices", "flat_global", "flat_shape", "shape_enabled", "blas_points", "blas_indices",
                 "instance_to_world", "inst_shape", "inst_global"):
        if isinstance(getattr(core, name, None), wp.array):
            found[name] = getattr(core, name)
    _arrays(core.flat, "flat", found)
    if core.level is not None:
        _arrays(core.level, "level", found)
    out = {}
    for path, a in found.items():
        if path.startswith("flat._launches") or "_partial" in path or a.size == 0:
            continue  # (scratch: contents undefined)
        data = a.numpy()
        out[path] = hashlib.sha256(np.ascontiguousarray(data).tobytes() + str(data.shape).encode()).hexdigest()[:16]
    return out


def scene_digests() -> dict:
    """``{setting: {scene: {array path: digest}}}`` under the CUDA defaults forced (``cuda``) and the CPU ones."""
    out = {}
    old = triangles.bvh_constructor(), triangles.bvh_layout()
    try:
        for setting, (ctor, layout) in {"cuda": ("ploc", "wide4"), "cpu": ("auto", "auto")}.items():
            triangles.set_bvh_constructor(ctor)
            triangles.set_bvh_layout(layout)
            out[setting] = {name: digests(_build(parts)) for name, parts in SCENES.items()}
    finally:
        triangles.set_bvh_constructor(old[0])
        triangles.set_bvh_layout(old[1])
    return out


_MAIN = Path(__file__).with_name("build_digests_main_2af1da9.json")


def _compare(got: dict, want: dict) -> list[str]:
    """The ``setting/scene/array`` paths whose digests differ (or exist on one side only)."""
    bad = []
    for setting, scenes in want.items():
        for name, arrays in scenes.items():
            mine = got[setting][name]
            bad += [f"{setting}/{name}/{k}" for k in sorted(set(arrays) | set(mine)) if arrays.get(k) != mine.get(k)]
    return bad


def test_build_arrays_equal_mains():
    """Every array of the CPU builds hashes as main's did (before the session-23 host shortcuts)."""
    want = json.loads(_MAIN.read_text())
    assert _compare(scene_digests(), want) == []


class _PlainLaunches:
    """``runtime.BUILD_LAUNCHES`` replaced: every launch through ``wp.launch`` (Warp's packing)."""

    @staticmethod
    def launch(kernel, dim, args, device, stream=None):
        wp.launch(kernel, dim, args, device=device, stream=stream)


class _NeverKept(dict):
    """``runtime._KEPT`` replaced: every ``kept_launch`` records its command anew."""

    def get(self, key, default=None):
        return default

    def __setitem__(self, key, value):
        pass


def _poisoned(real):
    """``runtime.carve`` whose arrays hold a pattern (0xA5 bytes) unless zeroed: a kernel reading an
    element nothing wrote would then change the digests."""

    def carve(device, parts, zero=False):
        views = real(device, parts, zero)
        if not zero:
            views[0]._ref.fill_(-1515870811)  # 0xA5A5A5A5
        return views

    return carve


def test_build_arrays_equal_with_plain_launches_and_poisoned_scratch(monkeypatch):
    """The same digests with every build launch through ``wp.launch``, every pass command recorded anew, and
    the carved arrays poisoned (no element is read before a kernel or a fill wrote it)."""
    monkeypatch.setattr(runtime, "BUILD_LAUNCHES", _PlainLaunches())
    monkeypatch.setattr(runtime, "_KEPT", _NeverKept())
    poisoned = _poisoned(runtime.carve)
    for name, mod in list(sys.modules.items()):
        if name.startswith("rayd.") and getattr(mod, "carve", None) is runtime.carve:
            monkeypatch.setattr(mod, "carve", poisoned)
    want = json.loads(_MAIN.read_text())
    assert _compare(scene_digests(), want) == []


def test_build_arrays_equal_with_warps_own_calls(monkeypatch):
    """The CUDA default until a GPU run validates the kept launches (``runtime.BUILD_KEPT_CUDA`` off): every
    build launch by ``wp.launch``, pass commands recorded anew, an allocation per carved array and views by
    ``wp.array(ptr=...)``; forced here on the CPU, the digests are main's."""
    monkeypatch.setattr(runtime, "_kept_on", lambda device: False)
    calls = []
    real = wp.launch

    def counting(*args, **kwargs):
        calls.append(kwargs.get("record_cmd", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(wp, "launch", counting)
    want = json.loads(_MAIN.read_text())
    assert _compare(scene_digests(), want) == []
    assert calls and any(calls) and not all(calls)  # one-off launches and recorded pass commands both through Warp
