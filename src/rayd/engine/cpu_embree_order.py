"""How the CPU Embree path (:mod:`rayd.engine.cpu_embree`) orders a batch of rays: whether its
packets look incoherent (then it is traced in a Morton order, the rays gathered into contiguous
copies, both kept for a later query on the same rays: :func:`reuse_order`), and whether it is laid
out as the rows of an image (then it is traced in 4 x 4 tiles)."""

from __future__ import annotations

import ctypes

import numpy as np
import warp as wp

from rayd.engine import embree_api, runtime
from rayd.engine.cpu_embree_kernels import GATHER_ROWS, _gather_rows_kernel
from rayd.engine.runtime import PerRow, run_parallel


def _rows(array, n: int) -> np.ndarray:
    """A NumPy view of a ray array of length ``n`` or 1 (broadcast)."""
    a = array.numpy()
    if a.shape[0] == 1 and n != 1:
        return np.broadcast_to(a, (n, *a.shape[1:]))
    return a


def _incoherent(d: wp.array, n: int, samples: int = 128) -> bool:
    """Whether most packets of 16 consecutive rays look incoherent (as ``COHERENT_COS`` judges a
    packet), from ``samples`` packets spread over the batch (NumPy, about 0.1 ms)."""
    if d.shape[0] == 1:
        return False
    starts = np.linspace(0, n - 16, samples).astype(np.int64)
    rows = d.numpy()[(starts[:, None] + np.arange(16)).ravel()].reshape(samples, 16, 3).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = rows / np.linalg.norm(rows, axis=2, keepdims=True)
    cos = np.einsum("pjk,pk->pj", u, u[:, 0])
    # NaN (zero or non-finite directions: misses) never makes a packet incoherent; a packet of
    # only such rows counts as coherent (np.nanmin would warn "All-NaN slice" to the caller)
    least = np.where(np.isnan(cos), np.inf, cos).min(axis=1)
    return int(np.sum(least < embree_api.COHERENT_COS)) * 2 > samples


def image_width(rays, n: int, probe: int = 4096) -> int:
    """The row width ``W`` when the rays look like the rows of an image (0 otherwise).

    A camera's rays in row-major order step by about one pixel from ray to ray, and by a
    whole row at the end of each row. Per ray, the feature ``(o / s, d / |d|)`` (``s``: the
    spread of the origins, so that pinhole and orthographic cameras both count); ``W`` is the
    first jump of the feature (above 8 times the median step) when the jumps of the first
    ``probe`` rays and of a probe in the middle of the batch fall every ``W`` rays and ray
    ``i + W`` lies within a few steps of ray ``i``. Speed only: a wrong ``W`` changes the order
    in which the rays are traced, never the answers.

    Args:
        rays: the :class:`RayBatch`.
        n: the number of rays.

    Returns:
        int, ``W`` with ``4 <= W <= n / 4``, or 0.
    """
    if rays.o.shape[0] == 1 and rays.d.shape[0] == 1:
        return 0

    def feature(lo: int, hi: int) -> np.ndarray:
        o = _rows(rays.o, n)[lo:hi].astype(np.float64)
        d = _rows(rays.d, n)[lo:hi].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            d = d / np.linalg.norm(d, axis=1, keepdims=True)
        return np.concatenate([o, d], 1)

    m = min(n, probe)
    f = feature(0, m)
    spread = float(np.nanmax(np.abs(f[:, :3] - f[0, :3]))) if m else 0.0
    if spread > 0.0:
        f[:, :3] /= spread
    step = np.linalg.norm(np.diff(f, axis=0), axis=1)
    if step.size < 8 or not np.all(np.isfinite(step)):
        return 0
    med = float(np.median(step))
    if med <= 0.0:
        return 0
    jumps = np.flatnonzero(step > 8.0 * med) + 1
    if jumps.size == 0:
        return 0
    w = int(jumps[0])
    if w < 4 or 4 * w > n or np.any(jumps % w) or jumps.size != (m - 1) // w:
        return 0
    if np.any(np.linalg.norm(f[w:] - f[:-w], axis=1) > 4.0 * med):
        return 0
    mid = (n // 2) // w * w  # a probe from the start of a row in the middle of the batch
    g = feature(mid, min(n, mid + 2 * w + 1))
    if spread > 0.0:
        g[:, :3] /= spread
    gstep = np.linalg.norm(np.diff(g, axis=0), axis=1)
    if not np.all(np.isfinite(gstep)):
        return 0
    if not np.array_equal(np.flatnonzero(gstep > 8.0 * med) + 1, np.arange(w, g.shape[0], w)):
        return 0
    return w


def _permuted(launch_args: list, order: wp.array, buf: dict, n: int, dev) -> list:
    """The ray arrays of ``launch_args`` (``array, stride`` pairs) with row ``i`` taken from row
    ``order[i]``: contiguous copies in ``buf``'s scratch arrays (made once per batch size), 64 rows
    per thread of a C++ gather over all cores (:func:`_gather_rows_kernel`; a Warp kernel of one row
    per thread cost 18 ms CPU for 256 k rays, NumPy's fancy indexing 30 ms on one thread); arrays of
    stride 0 (broadcast) are passed on as they are. Returned as launch arguments."""
    if "sorted_rays" not in buf:
        buf["sorted_rays"] = [wp.empty(n, dtype=dt, device=dev) for dt in (wp.vec3, wp.vec3, float, float, wp.uint8, wp.int32)]
    outs = buf["sorted_rays"]
    inputs = [x.array if isinstance(x, PerRow) else x for x in launch_args[0::2]]
    inputs = [a if a.is_contiguous else wp.clone(a) for a in inputs]  # the gather reads raw rows
    strides = launch_args[1::2]
    mask = sum(1 << k for k, s in enumerate(strides) if s)
    parts = max(1, min(4 * runtime._WORKERS, n // 16384))
    bounds = [n * k // parts // GATHER_ROWS * GATHER_ROWS for k in range(parts)] + [n]

    def run(k: int) -> None:
        lo, hi = bounds[k], bounds[k + 1]
        if hi > lo:
            wp.launch(_gather_rows_kernel, dim=-(-(hi - lo) // GATHER_ROWS),
                      inputs=[order, *inputs, *outs, mask, lo, hi], device=dev)

    run_parallel(run, parts)
    return [x for k, a in enumerate(inputs) for x in ((outs[k], 1) if strides[k] else (a, 0))]


def _ray_arrays(launch_args: list) -> list:
    return [x.array if isinstance(x, PerRow) else x for x in launch_args[0::2]]


#: The fingerprint's rows per batch size (:func:`_fingerprint`).
_ROWS: dict = {}


def _fingerprint(arrays: list, n: int) -> bytes:
    """64 rows of each per-row array (every row of a broadcast one), as bytes."""
    rows = _ROWS.get(n)
    if rows is None:  # (np.linspace: ~30 us a call)
        if len(_ROWS) > 16:
            _ROWS.clear()
        rows = _ROWS[n] = np.linspace(0, n - 1, 64).astype(np.int64)
    return b"".join((a.numpy()[rows] if a.shape[0] == n else a.numpy()).tobytes() for a in arrays)


def _memcmp():
    """libc's ``memcmp`` through ``ctypes`` (``None`` where there is none to load)."""
    try:
        fn = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


#: ``memcmp`` for :func:`_same`: no temporary, and it stops at the first difference (NumPy's byte-wise
#: ``array_equal`` wrote a boolean per byte: 3 MB of 256 k rays' origins, twice the time from memory).
_MEMCMP = _memcmp()


def _same(array: wp.array, copy: np.ndarray) -> bool:
    """Whether ``array`` holds ``copy``'s bytes (NaNs compared as bits)."""
    a = array.numpy()
    if a.shape != copy.shape or a.dtype != copy.dtype or not a.flags.c_contiguous or not copy.flags.c_contiguous:
        return False
    if _MEMCMP is not None:
        return _MEMCMP(a.ctypes.data, copy.ctypes.data, a.nbytes) == 0
    return bool(np.array_equal(a.view(np.uint8), copy.view(np.uint8)))


def reuse_order(m, launch_args: list, n: int):
    """The sorted rays and the order of an earlier query on the same ray arrays, if they still hold
    the same bytes.

    A batch's order (key pass, sort, permutation: about 12 ms CPU of a 256 k-ray sorted batch) depends
    only on its rays. Per mirror ``m``, one entry: the arrays' addresses, layouts and a fingerprint of
    64 rows. The second query on the same arrays with the same fingerprint keeps copies of the rays,
    its order and its sorted rays (:func:`keep_order`); later queries compare every byte of the rays
    with those copies (about 1.5 ms; no version counter needed, so any change of the rays between
    queries, however made, is seen) and reuse the order and the sorted rays where all match. Memory:
    about twice the rays' bytes, per mirror, for the last batch kept.

    The entry also keeps the batch's layout decisions (``entry["layout"]``: whether the incoherence
    sample said incoherent, the image width), reused while the fingerprint matches: they only order
    the rays (the sample and the width probe cost about 1.1 ms of a 256 k-ray query).

    Returns:
        ``(args, order, entry)``: the launch arguments (sorted rays; broadcast arrays as given) and
        the order (``None, None`` when there is nothing to reuse), and the entry to hand to
        :func:`keep_order` after the query.
    """
    entry = m.__dict__.pop("_ray_order", None)  # atomic under the GIL: a concurrent query finds none
    arrays, strides = _ray_arrays(launch_args), launch_args[1::2]
    sig = tuple((a.ptr, a.shape, a.strides, s) for a, s in zip(arrays, strides))
    if entry is not None and entry["sig"] == sig and entry.get("copies") is not None:
        if all(_same(a, c) for a, c in zip(arrays, entry["copies"])):
            args = [x for k, a in enumerate(arrays) for x in ((entry["sorted"][k], 1) if strides[k] else (a, 0))]
            return args, entry["order"], entry
    fp = _fingerprint(arrays, n)
    repeat = entry is not None and entry["sig"] == sig and entry["print"] == fp
    # The layout decisions (incoherence sample, image width) order the rays and never change an answer:
    # kept while the fingerprint holds.
    layout = entry.get("layout") if repeat else None
    return None, None, {"sig": sig, "print": fp, "copies": None, "repeat": repeat, "layout": layout}


def keep_order(m, entry: dict, launch_args: list, n: int, order, args) -> None:
    """Put ``entry`` back on ``m``; on the second query on the same rays (``entry["repeat"]``) with a
    sorted batch (``order`` not ``None``), with copies of the rays, the order and the sorted rays."""
    if entry.get("repeat") and order is not None and entry.get("copies") is None:
        arrays = _ray_arrays(launch_args)
        entry["copies"] = [np.array(a.numpy(), copy=True) for a in arrays]
        entry["order"] = wp.clone(order[:n])
        entry["sorted"] = [wp.clone(args[2 * k]) if args[2 * k + 1] else None for k in range(len(arrays))]
    m._ray_order = entry
