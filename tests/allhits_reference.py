"""A float64 brute-force reference for all hits along rays (every ray against every triangle).

Hits are merged by rayd's rule (``rayd.engine.all_hits``): two hits are one crossing when
their faces share a vertex index and their ``t`` agree to ``MERGE_TOLERANCE (|t| + M/|d|)``;
the crossing keeps the smaller face id. Deliberately simple and slow.
"""

from __future__ import annotations

import numpy as np

MERGE_TOLERANCE = 1e-5


def all_hits(o, d, vertices, faces, tmin=0.0, tmax=np.inf, margin=1e-7):
    """Per ray: the sorted crossings ``[(t, face), ...]`` and whether the ray is unambiguous.

    Args:
        o, d: (N, 3) rays; vertices (V, 3); faces (F, 3) (face ids are row numbers).
        tmin, tmax: scalars or (N,); a hit counts for ``tmin < t < tmax``.
        margin: a hit whose smallest barycentric weight lies in ``[-margin, margin]``
            (the ray passes within rounding of an edge), or whose ``t`` lies within
            ``margin`` (relative) of ``tmin``/``tmax``, makes the ray *ambiguous*: a
            float32 search may decide it either way.

    Returns:
        (hits, clear): ``hits`` a list of N lists of ``(t, face)`` in increasing ``(t, face)``;
        ``clear`` (N,) bool, False for ambiguous rays.
    """
    o = np.asarray(o, np.float64).reshape(-1, 3)
    d = np.asarray(d, np.float64).reshape(-1, 3)
    o, d = np.broadcast_arrays(o, d)
    n = o.shape[0]
    tmin = np.broadcast_to(np.asarray(tmin, np.float64), (n,))
    tmax = np.broadcast_to(np.asarray(tmax, np.float64), (n,))
    vertices = np.asarray(vertices, np.float64)
    faces = np.asarray(faces, np.int64)
    v0, v1, v2 = (vertices[faces[:, k]] for k in range(3))
    e1, e2 = v1 - v0, v2 - v0
    magnitude = np.abs(vertices).max() if len(vertices) else 0.0
    hits, clear = [], np.ones(n, bool)
    with np.errstate(all="ignore"):
        for i in range(n):
            pvec = np.cross(d[i], e2)
            det = (e1 * pvec).sum(-1)
            s = o[i] - v0
            u = (s * pvec).sum(-1) / det
            qvec = np.cross(s, e1)
            v = (d[i] * qvec).sum(-1) / det
            t = (e2 * qvec).sum(-1) / det
            w = np.minimum(np.minimum(u, v), 1 - u - v)
            inside = (det != 0) & (w >= 0)
            scale = np.abs(t) + 1.0
            near_edge = (det != 0) & (np.abs(w) <= margin) & (t > tmin[i] - margin * scale) & (t < tmax[i] + margin * scale)
            near_bound = inside & ((np.abs(t - tmin[i]) <= margin * scale) | (np.abs(t - tmax[i]) <= margin * scale))
            if near_edge.any() or near_bound.any():
                clear[i] = False
            ok = inside & (t > tmin[i]) & (t < tmax[i])
            found = sorted((float(t[f]), int(f)) for f in np.nonzero(ok)[0])
            hits.append(merge(found, faces, magnitude / np.linalg.norm(d[i])))
    return hits, clear


def merge(found, faces, scale):
    """``found`` (sorted ``(t, face)``) with the hits of shared edges/vertices merged (rayd's rule)."""
    out = []
    for t, f in found:
        for j, (tj, fj) in enumerate(out):
            if abs(tj - t) <= MERGE_TOLERANCE * (max(abs(t), abs(tj)) + scale) and set(faces[f]) & set(faces[fj]):
                out[j] = min((tj, fj), (t, f), key=lambda x: x[1])
                break
        else:
            out.append((t, f))
    return sorted(out)
