"""Engine-side copies of a scene's geometry: place meshes into the flat buffers, check them.

The engine owns the scene-wide buffers its BVHs are built over (DESIGN.md, "Layers"):
one float32 ``vec3`` point buffer and one int32 triangle list, filled from the
frontends' arrays (zero-copy Warp views of any float/int dtype) at ``build()`` and
refreshed at ``sync()``. Each mesh is placed by its float64 host matrix on the device,
rounded to float32 once, after the placement.

Checks run on the device and return one small array to read: the range of the
face indices and the first non-finite vertex.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import warp as wp

from rayd.engine.refit import magnitude_threads
from rayd.engine.runtime import LaunchCache, launch_once, launch_stream, read_back

wp.set_module_options({"enable_backward": False})


@wp.func
def _placed(p: wp.vec3d, m: wp.mat44d, centre: wp.vec3d) -> wp.vec3:
    """``float32(m @ [p, 1] - centre)``: placed in float64, rounded once."""
    return wp.vec3(
        float(m[0, 0] * p[0] + m[0, 1] * p[1] + m[0, 2] * p[2] + m[0, 3] - centre[0]),
        float(m[1, 0] * p[0] + m[1, 1] * p[1] + m[1, 2] * p[2] + m[1, 3] - centre[1]),
        float(m[2, 0] * p[0] + m[2, 1] * p[1] + m[2, 2] * p[2] + m[2, 3] - centre[2]),
    )


@wp.func
def _flag(p: wp.vec3d, i: int, bad: wp.array(dtype=wp.int32), at: int):
    """Fold row ``i`` into ``bad[at]`` (first non-finite row) and ``bad[at + 1]`` (first row beyond float32)."""
    finite = True
    small = True
    for k in range(3):
        if not wp.isfinite(p[k]):
            finite = False
        elif wp.abs(p[k]) > wp.float64(3.4028234663852886e38):  # the engine rounds every vertex to float32
            small = False
    if not finite:
        wp.atomic_min(bad, at, wp.int32(i))
    if not small:
        wp.atomic_min(bad, at + 1, wp.int32(i))


@wp.kernel
def _place_points_kernel(
    vertices: wp.array(dtype=Any),
    m: wp.mat44d,
    centre: wp.vec3d,
    offset: int,
    points: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    v = vertices[i]
    points[offset + i] = _placed(wp.vec3d(wp.float64(v[0]), wp.float64(v[1]), wp.float64(v[2])), m, centre)


@wp.kernel
def _bounds_kernel(vertices: wp.array(dtype=Any), threads: int, low: wp.array(dtype=wp.float64),
                   high: wp.array(dtype=wp.float64)):
    # Each thread reduces rows i, i + threads, ... (coalesced) and adds one atomic per axis:
    # an atomic per row on the same three addresses serialised (~1.3 ms for 1 M rows on an H200).
    i = wp.tid()
    big = wp.float64(1.7976931348623157e308)  # the largest float64: bounds are of finite rows
    lo = wp.vec3d(big, big, big)
    hi = -lo
    r = i
    while r < vertices.shape[0]:
        v = vertices[r]
        for k in range(3):
            x = wp.float64(v[k])
            lo[k] = wp.min(lo[k], x)
            hi[k] = wp.max(hi[k], x)
        r += threads
    for k in range(3):
        wp.atomic_min(low, k, lo[k])
        wp.atomic_max(high, k, hi[k])


@wp.kernel
def _place_faces_kernel(
    faces: wp.array(dtype=Any),
    vertex_offset: int,
    row: int,
    indices: wp.array(dtype=wp.int32),
):
    j = wp.tid()
    indices[3 * row + j] = wp.int32(int(faces[j]) + vertex_offset)


@wp.kernel
def _face_range_kernel(faces: wp.array(dtype=Any), threads: int, low: wp.array(dtype=wp.int64),
                       high: wp.array(dtype=wp.int64)):
    # As _bounds_kernel: a strided reduction per thread, then one atomic pair per thread (an
    # atomic pair per index on one address took 6-10 ms for 6 M indices on an H200).
    j = wp.tid()
    lo = wp.int64(4611686018427387904)  # 2**62
    hi = wp.int64(-4611686018427387904)
    r = j
    while r < faces.shape[0]:
        f = wp.int64(faces[r])
        lo = wp.min(lo, f)
        hi = wp.max(hi, f)
        r += threads
    wp.atomic_min(low, 0, lo)
    wp.atomic_max(high, 0, hi)


@wp.kernel
def _finite_kernel(vertices: wp.array(dtype=Any), bad: wp.array(dtype=wp.int32)):
    i = wp.tid()
    v = vertices[i]
    _flag(wp.vec3d(wp.float64(v[0]), wp.float64(v[1]), wp.float64(v[2])), i, bad, 0)


_NONE = 2**31 - 1
#: What a finite-check flag holds while no bad row was found (:func:`nonfinite_launch`).
NO_ROW = _NONE
#: Threads of the min/max reductions (each reduces a strided share, then adds one atomic).
_REDUCE_THREADS = 32768


def face_range(faces: wp.array, stream: wp.Stream | None = None) -> tuple[int, int] | None:
    """``(min, max)`` of a flat int32/int64/uint32 face view (one host read), ``None`` if empty."""
    if faces.size == 0:
        return None
    low, high = read_back(stream, *face_range_launch(faces, stream))
    return int(low[0]), int(high[0])


def face_range_launch(faces: wp.array, stream: wp.Stream | None = None) -> tuple[wp.array, wp.array]:
    """:func:`face_range`'s launch without its read: int64 (1,) device arrays ``(low, high)`` to read
    (with :func:`~rayd.engine.runtime.read_back`, after the launch). ``faces`` must not be empty."""
    with launch_stream(faces.device, stream):  # the fills on the stream of the launch
        low = wp.full(1, 2**62, dtype=wp.int64, device=faces.device)
        high = wp.full(1, -(2**62), dtype=wp.int64, device=faces.device)
        threads = min(faces.size, _REDUCE_THREADS)
        launch_once(_face_range_kernel, threads, [faces, threads, low, high], faces.device, stream)
    return low, high


def nonfinite_launch(vertices: wp.array, bad: wp.array, stream: wp.Stream | None = None) -> None:
    """:func:`first_nonfinite_vertex`'s launch without its read: flags the first bad row of ``vertices``
    (not empty) into ``bad`` (int32 (2,), filled with :data:`NO_ROW` by the caller); decode the host copy with
    :func:`nonfinite_found`."""
    launch_once(_finite_kernel, vertices.size, [vertices, bad], vertices.device, stream)


def nonfinite_found(flags: np.ndarray) -> tuple[str, int] | None:
    """``("non-finite" | "beyond float32", row)`` from the host copy of :func:`nonfinite_launch`'s flags, or ``None``."""
    if flags[0] != _NONE:
        return "non-finite", int(flags[0])
    if flags[1] != _NONE:
        return "beyond float32", int(flags[1])
    return None


def first_nonfinite_vertex(vertices: wp.array, stream: wp.Stream | None = None,
                           launches: LaunchCache | None = None) -> tuple[str, int] | None:
    """``("non-finite" | "beyond float32", row)`` of the first bad vertex, else ``None`` (one host read).

    ``launches``: the caller's recorded launches and scratch (see :class:`rayd.engine.runtime.LaunchCache`).
    """
    if vertices.size == 0:
        return None
    with launch_stream(vertices.device, stream):  # the fill on the stream of the launch
        if launches is None:
            bad = wp.full(2, _NONE, dtype=wp.int32, device=vertices.device)
            wp.launch(_finite_kernel, vertices.size, [vertices, bad], device=vertices.device, stream=stream)
        else:
            bad = launches.buffer("first_nonfinite_vertex", 2, wp.int32, vertices.device)
            bad.fill_(_NONE)
            launches.launch(_finite_kernel, vertices.size, [vertices, bad], vertices.device, stream)
    (found,) = read_back(stream, bad)
    return nonfinite_found(found)


_EYE = wp.mat44d(*np.eye(4).reshape(-1).tolist())
_ZERO = wp.vec3d(0.0, 0.0, 0.0)
_VALUES: dict = {}  # (kind, bytes) -> the Warp matrix or vector of those float64 values (_warp_value)


def _warp_value(kind, values) -> object:
    """``kind(*values)`` (``wp.mat44d`` or ``wp.vec3d`` of float64 ``values``), one object per value: a scene
    places with the same matrix and centre at every sync (building one takes microseconds of host time,
    looking one up a fraction). Launches copy the values; the objects are never changed."""
    key = (kind, np.asarray(values, dtype=np.float64).tobytes())
    made = _VALUES.get(key)
    if made is None:
        if len(_VALUES) >= 256:
            _VALUES.clear()
        made = _VALUES[key] = kind(*np.frombuffer(key[1], dtype=np.float64).tolist())
    return made


def place_points(vertices: wp.array, m: np.ndarray | None, offset: int, points: wp.array,
                 stream: wp.Stream | None = None, centre: np.ndarray | None = None,
                 launches: LaunchCache | None = None, checks: tuple[wp.array, int] | None = None,
                 magnitude: tuple[wp.array, wp.array, bool] | None = None) -> None:
    """``points[offset + i] = float32(m @ [vertices[i], 1] - centre)``, placed in float64, rounded once.

    ``m``: (4, 4) float64 (identity if ``None``); ``centre``: (3,) float64, the search
    centre (:mod:`rayd.engine.frame`; zero if ``None``); ``launches``: the caller's
    recorded launches (see :class:`rayd.engine.runtime.LaunchCache`); ``checks``:
    ``(flags, k)`` of a :class:`DeferredChecks` (``flags`` from its ``begin``, ``k`` the
    mesh's position there): the same kernel also flags the first non-finite or
    beyond-float32 vertex. ``magnitude`` (with ``checks`` and ``launches``): ``(partial, out, clear)``
    of ``TriangleScene.magnitude_partials`` and whether this is the first placement of the refit: the
    same kernel clears ``out`` (if ``clear``) and folds each placed point's largest absolute
    coordinate into ``partial`` (threads each place a strided run of rows).

    Raises:
        ValueError: ``magnitude`` without ``checks`` and ``launches``.
    """
    if magnitude is not None and (checks is None or launches is None):
        raise ValueError("rayd.engine.place_points(): 'magnitude' needs 'checks' and 'launches'")
    if vertices.size == 0:
        return
    mat = _EYE if m is None else _warp_value(wp.mat44d, m)
    c = _ZERO if centre is None else _warp_value(wp.vec3d, centre)
    args = [vertices, mat, c, offset, points]
    if magnitude is not None:
        threads = max(1, min(magnitude_threads(), vertices.size))  # (as refit.magnitude_zeroed's first pass)
        args += [checks[0], 2 * checks[1], threads, magnitude[0], magnitude[1], int(magnitude[2])]
        launches.launch(_place_checked_magnitude_kernel, threads, args, points.device, stream)
        return
    if checks is not None:
        args += [checks[0], 2 * checks[1]]
        if launches is None:
            wp.launch(_place_checked_kernel, vertices.size, args, device=points.device, stream=stream)
        else:
            launches.launch(_place_checked_kernel, vertices.size, args, points.device, stream)
        return
    if launches is None:
        wp.launch(_place_points_kernel, vertices.size, args, device=points.device, stream=stream)
    else:
        launches.launch(_place_points_kernel, vertices.size, args, points.device, stream)


def bounds(vertices: wp.array, stream: wp.Stream | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The float64 bounding box ``(lower (3,), upper (3,))`` of a ``vec3``/``vec3d`` view (one host read)."""
    if vertices.size == 0:
        return None
    return read_back(stream, *bounds_launch(vertices, stream))


def bounds_launch(vertices: wp.array, stream: wp.Stream | None = None) -> tuple[wp.array, wp.array]:
    """:func:`bounds`' launch without its read: float64 (3,) device arrays ``(lower, upper)`` to read (with
    :func:`~rayd.engine.runtime.read_back`, after the launch). ``vertices`` must not be empty."""
    with launch_stream(vertices.device, stream):  # the fills on the stream of the launch
        low = wp.full(3, np.inf, dtype=wp.float64, device=vertices.device)
        high = wp.full(3, -np.inf, dtype=wp.float64, device=vertices.device)
        threads = min(vertices.size, _REDUCE_THREADS)
        launch_once(_bounds_kernel, threads, [vertices, threads, low, high], vertices.device, stream)
    return low, high


@wp.kernel
def _face_ids_kernel(row: int, first_global: int, shape_id: int, flat_global: wp.array(dtype=wp.int32),
                     flat_shape: wp.array(dtype=wp.int32)):
    j = wp.tid()
    flat_global[row + j] = wp.int32(first_global + j)
    flat_shape[row + j] = wp.int32(shape_id)


def place_face_ids(num_faces: int, row: int, first_global: int, shape_id: int, flat_global: wp.array,
                   flat_shape: wp.array, stream: wp.Stream | None = None) -> None:
    """Write ``flat_global[row + j] = first_global + j`` and ``flat_shape[row + j] = shape_id`` for
    ``j < num_faces`` on the arrays' device (int32 arrays; no host copy of the per-face ids)."""
    if num_faces == 0:
        return
    launch_once(_face_ids_kernel, num_faces, [row, first_global, shape_id, flat_global, flat_shape],
                flat_global.device, stream)


def place_faces(faces: wp.array, vertex_offset: int, row: int, indices: wp.array,
                stream: wp.Stream | None = None) -> None:
    """Write the flat face entries ``faces + vertex_offset`` into ``indices`` from triangle ``row`` on."""
    if faces.size == 0:
        return
    launch_once(_place_faces_kernel, faces.size, [faces, vertex_offset, row, indices], indices.device, stream)


@wp.kernel
def _place_checked_kernel(
    vertices: wp.array(dtype=Any),
    m: wp.mat44d,
    centre: wp.vec3d,
    offset: int,
    points: wp.array(dtype=wp.vec3),
    bad: wp.array(dtype=wp.int32),
    at: int,
):
    # _finite_kernel's flags (into bad[at], bad[at + 1]) and _place_points_kernel's placement in one pass
    i = wp.tid()
    v = vertices[i]
    p = wp.vec3d(wp.float64(v[0]), wp.float64(v[1]), wp.float64(v[2]))
    _flag(p, i, bad, at)
    points[offset + i] = _placed(p, m, centre)


@wp.kernel
def _place_checked_magnitude_kernel(
    vertices: wp.array(dtype=Any),
    m: wp.mat44d,
    centre: wp.vec3d,
    offset: int,
    points: wp.array(dtype=wp.vec3),
    bad: wp.array(dtype=wp.int32),
    at: int,
    threads: int,
    partial: wp.array(dtype=float),
    magnitude: wp.array(dtype=float),
    clear: int,
):
    # _place_checked_kernel over a strided run of rows per thread, which also folds the placed points'
    # largest absolute coordinate into partial[tid % 256] (refit.magnitude_zeroed's first pass)
    i = wp.tid()
    if clear != 0 and i == 0:
        magnitude[0] = 0.0  # (the previous refit and queries, earlier on the stream, have read it)
    big = float(0.0)
    for r in range(i, vertices.shape[0], threads):
        v = vertices[r]
        p = wp.vec3d(wp.float64(v[0]), wp.float64(v[1]), wp.float64(v[2]))
        _flag(p, r, bad, at)
        q = _placed(p, m, centre)
        points[offset + r] = q
        big = wp.max(big, wp.max(wp.max(wp.abs(q[0]), wp.abs(q[1])), wp.abs(q[2])))
    wp.atomic_max(partial, i % partial.shape[0], big)


class DeferredChecks:
    """The finite checks of the meshes one ``sync()`` places, read once after the sync's launches.

    :meth:`begin` clears one flag pair per mesh (one device fill, skipped when the last
    :meth:`results` found no mark: the kernels write a flag only for a bad row); :func:`place_points`
    with ``checks`` places a mesh and flags its first non-finite (or beyond-float32)
    vertex in the same kernel; :meth:`copy` enqueues the flags' copy into pinned host
    memory and records an event; :meth:`results` waits for that event only (not for
    the refit launched after it) and reads the flags. One host synchronisation per
    ``sync()``, as before, but after the refit is enqueued instead of before.
    """

    def __init__(self) -> None:
        self._dev: wp.array | None = None
        self._host: wp.array | None = None
        self._event = None
        self.count = 0
        self._clean = False  # the device flags are known to hold no mark (the last results() found none)

    def begin(self, count: int, device) -> wp.array:
        """Clear the flags of ``count`` meshes; returns the device flags (2 per mesh)."""
        device = wp.get_device(device)
        if self._dev is None or self._dev.shape[0] < 2 * count or self._dev.device != device:
            self._dev = wp.empty(2 * max(count, 1), dtype=wp.int32, device=device)
            # on the CPU the flags are read where the kernels wrote them (no copy)
            self._host = wp.empty(self._dev.shape[0], dtype=wp.int32, device="cpu", pinned=True) \
                if device.is_cuda else self._dev
            self._marker = wp.Event(device) if device.is_cuda else None  # recorded again at every copy()
            self._clean = False
        if not self._clean:  # (kernels only write a flag for a bad row: a clean read leaves them cleared)
            self._dev.fill_(_NONE)
        self._clean = False  # until results() finds no mark
        self._event = None
        self.count = count
        return self._dev

    def copy(self, stream: wp.Stream | None) -> None:
        """Enqueue the flags' copy to the host (after every placement) and record an event (CUDA; on the CPU
        the kernels have run and the flags are read in place)."""
        if self._dev.device.is_cuda:
            stream = stream if stream is not None else wp.get_stream(self._dev.device)
            # the copy wp.copy ends in, without its checks of the arguments (about 10 us of host time, on
            # the way to the refit's launches): both arrays are this object's, contiguous int32 of one size
            runtime = getattr(getattr(getattr(wp, "_src", None), "context", None), "runtime", None)
            memcpy = getattr(getattr(runtime, "core", None), "wp_memcpy_d2h", None)
            if memcpy is None or not memcpy(self._dev.device.context, self._host.ptr, self._dev.ptr,
                                            4 * self._dev.shape[0], stream.cuda_stream):
                wp.copy(self._host, self._dev, stream=stream)
            self._event = stream.record_event(self._marker)

    def results(self) -> list[tuple[str, int] | None]:
        """Per mesh, in :meth:`begin` order: ``("non-finite" | "beyond float32", row)`` or ``None``."""
        if self._event is not None:
            wp.synchronize_event(self._event)
            self._event = None
        found = self._host.numpy()
        out: list[tuple[str, int] | None] = []
        for k in range(self.count):
            if found[2 * k] != _NONE:
                out.append(("non-finite", int(found[2 * k])))
            elif found[2 * k + 1] != _NONE:
                out.append(("beyond float32", int(found[2 * k + 1])))
            else:
                out.append(None)
        # Every flag this sync's kernels could write read unmarked: the device flags (only ever marked
        # by a bad row, and filled whole) still hold no mark, so the next begin() needs no fill.
        self._clean = all(r is None for r in out)
        return out
