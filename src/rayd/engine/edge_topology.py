"""Edge topology of one triangle mesh, computed on the device with Warp kernels.

This is the one implementation of the topology rule: rayd.drjit and rayd.torch both
call :func:`mesh_edges`.

The rule (DESIGN.md, "Edges"): the unique undirected edges keyed by their sorted
vertex-index pair (no welding by position), in ascending key order. Within a key the
``k`` incident face-edges are ordered by face id, ``f_0 < f_1 < ... < f_{k-1}``, and
yield these records:

* ``k = 1``: one boundary record ``(f_0, -1)`` (second opposite vertex ``-1``);
* ``2 <= k <= MAX_ALL_PAIRS`` (8): one record per unordered pair ``(f_a, f_b)``,
  ``a < b``, in lexicographic order: ``k (k - 1) / 2`` records (one for a manifold
  edge, at most 28);
* ``k > MAX_ALL_PAIRS``: the ``k`` consecutive pairs of the cyclic order,
  ``(f_0, f_1), (f_1, f_2), ..., (f_{k-2}, f_{k-1}), (f_{k-1}, f_0)``.

So an edge with ``k`` faces gives at most ``3.5 k`` records and a mesh of ``F`` faces
at most ``10.5 F`` (never quadratic: 50,000 copies of one triangle give 150,000
records). Why the cycle: every face keeps two partners on the edge (the records
still connect all its faces), and silhouette detection (a record whose two faces
face opposite ways) stays exact per edge: if any face on the edge faces the viewer
and any other does not, a cyclic sequence of front/back flags that is not constant
changes value at least twice, so at least two records of the edge are silhouette
records; if all faces agree, none is, exactly as with all pairs. Up to 8 faces (the
non-manifold cases real meshes have) all pairs are kept, as DESIGN asks.

Degenerate faces are taken as given: a face with a repeated vertex contributes an
edge ``(i, i)`` and counts twice on its other edge (two face-edges of one face).

Steps, all vectorised (no loop over faces on the host):

1. one kernel writes each face-edge ``3 f + j`` (from ``faces[f][j]`` to
   ``faces[f][(j + 1) % 3]``) as the 64-bit key ``lo * V + hi`` and its index;
2. a stable radix sort of the keys (``wp.utils.radix_sort_pairs``; faces stay in
   ascending order within a key);
3. runs of equal keys are found (first-of-run flags, an inclusive scan for the run
   index, the run starts scattered by their index);
4. each face-edge gets its record count (``1`` alone or in a cycle, else
   ``k - 1 - rank``), an exclusive scan gives the output offsets, and one kernel
   writes the records.

Reading the record count back to allocate the outputs is the one host
synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import warp as wp

from rayd.engine.runtime import launch_stream

# Topology kernels have no derivatives: skip generating adjoint code.
wp.set_module_options({"enable_backward": False})

MAX_ALL_PAIRS = 8
"""Edges with up to this many faces yield all face pairs; more faces yield the cyclic pairs."""

MAX_RECORDS = 2**31 - 1
"""Edge ids are int32: a mesh whose face count could exceed this many records is refused."""

_MAX_ALL_PAIRS = wp.constant(MAX_ALL_PAIRS)


@wp.kernel
def _edge_topology_keys_kernel(
    faces: wp.array(dtype=wp.int32),
    num_vertices: wp.int64,
    keys: wp.array(dtype=wp.int64),
    order: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    f = i // 3
    j = i - 3 * f
    a = wp.int64(faces[3 * f + j])
    b = wp.int64(faces[3 * f + (j + 1) % 3])
    keys[i] = wp.min(a, b) * num_vertices + wp.max(a, b)
    order[i] = wp.int32(i)


@wp.kernel
def _edge_topology_first_kernel(
    keys: wp.array(dtype=wp.int64),
    first: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    flag = int(1)
    if i > 0:
        if keys[i] == keys[i - 1]:
            flag = 0
    first[i] = wp.int32(flag)


@wp.kernel
def _edge_topology_starts_kernel(
    first: wp.array(dtype=wp.int32),
    run: wp.array(dtype=wp.int32),
    run_start: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    if first[i] != 0:
        run_start[run[i] - 1] = wp.int32(i)


@wp.func
def _run_bounds(i: int, run: wp.array(dtype=wp.int32), run_start: wp.array(dtype=wp.int32)):
    """``(start, count)`` of the run of face-edge ``i`` (sorted position)."""
    r = int(run[i]) - 1
    start = int(run_start[r])
    end = int(run_start[r + 1])
    return start, end - start


@wp.kernel
def _edge_topology_count_kernel(
    run: wp.array(dtype=wp.int32),
    run_start: wp.array(dtype=wp.int32),
    per_member: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    start, count = _run_bounds(i, run, run_start)
    n = int(1)  # a boundary record, or one record of the cycle
    if count > 1 and count <= _MAX_ALL_PAIRS:
        n = count - 1 - (i - start)
    per_member[i] = wp.int32(n)


@wp.kernel
def _edge_topology_records_kernel(
    faces: wp.array(dtype=wp.int32),
    order: wp.array(dtype=wp.int32),
    run: wp.array(dtype=wp.int32),
    run_start: wp.array(dtype=wp.int32),
    per_member: wp.array(dtype=wp.int32),
    record_start: wp.array(dtype=wp.int32),
    v: wp.array(dtype=wp.vec2i),
    face_pair: wp.array(dtype=wp.vec2i),
    opposite: wp.array(dtype=wp.vec2i),
):
    i = wp.tid()
    start, count = _run_bounds(i, run, run_start)
    fe = int(order[i])
    f = fe // 3
    j = fe - 3 * f
    a = int(faces[3 * f + j])
    b = int(faces[3 * f + (j + 1) % 3])
    third = int(faces[3 * f + (j + 2) % 3])
    ends = wp.vec2i(wp.min(a, b), wp.max(a, b))
    out = int(record_start[i])
    if count == 1:
        v[out] = ends
        face_pair[out] = wp.vec2i(f, -1)
        opposite[out] = wp.vec2i(third, -1)
    elif count > _MAX_ALL_PAIRS:
        # The cycle: the next face on the edge, the last one wrapping to the first.
        nxt = i + 1
        if nxt == start + count:
            nxt = start
        pe = int(order[nxt])
        pf = pe // 3
        pj = pe - 3 * pf
        v[out] = ends
        face_pair[out] = wp.vec2i(f, pf)
        opposite[out] = wp.vec2i(third, int(faces[3 * pf + (pj + 2) % 3]))
    else:
        for step in range(int(per_member[i])):
            pe = int(order[i + 1 + step])
            pf = pe // 3
            pj = pe - 3 * pf
            v[out + step] = ends
            face_pair[out + step] = wp.vec2i(f, pf)
            opposite[out + step] = wp.vec2i(third, int(faces[3 * pf + (pj + 2) % 3]))


def check_size(call: str, num_faces: int) -> None:
    """Refuse a mesh whose records could overflow int32 edge ids, before anything is allocated.

    At most 3.5 records per face-edge (``k (k - 1) / 2 <= 3.5 k`` for ``k <= 8``, else
    one), so ``ceil(10.5 F) <= MAX_RECORDS`` is required (``F`` up to about 204 million).

    Raises:
        ValueError: with a message starting with ``call``.
    """
    if (21 * num_faces + 1) // 2 > MAX_RECORDS:
        raise ValueError(
            f"{call}: a mesh of {num_faces} faces is too large for the edge topology: its records (up to 3.5 "
            f"per face-edge) could exceed {MAX_RECORDS} int32 edge ids; split it into several meshes"
        )


@dataclass(frozen=True)
class MeshEdges:
    """The edge records of one mesh (E records), as ``wp.array(dtype=wp.vec2i)`` of shape (E,).

    Attributes:
        v: sorted vertex-id pair of each edge, ``v[e][0] <= v[e][1]``.
        faces: the incident face pair; ``faces[e][1] = -1`` for a boundary edge.
        opposite: the third vertex of each face; ``-1`` where there is no face.
    """

    v: wp.array
    faces: wp.array
    opposite: wp.array

    @property
    def num_edges(self) -> int:
        """E."""
        return self.v.shape[0]


def mesh_edges(
    faces: wp.array, num_vertices: int, stream: wp.Stream | None = None
) -> MeshEdges:
    """Edge records of one mesh by the topology rule (module docstring).

    Args:
        faces: ``wp.array(dtype=wp.int32)`` of shape (3 F,), the faces' vertex ids
            row by row (``faces[3 f + j]`` is vertex ``j`` of face ``f``), each in
            ``[0, V)``; CPU or CUDA.
        num_vertices: V (vertex ids are below it; any V up to ``2**31``).
        stream: the CUDA stream to launch on (``None`` on the CPU, or Warp's current
            stream of the device).

    Returns:
        :class:`MeshEdges` on ``faces``' device. Concretely, for the face-edges
        ``(faces[f][j], faces[f][(j+1) % 3])`` sorted stably by ``(min, max)``, each run
        of ``k`` equal keys gives one boundary record (``k = 1``), the
        ``k (k - 1) / 2`` pairs of its faces (``2 <= k <= MAX_ALL_PAIRS``) or the ``k``
        consecutive pairs of their cyclic order (``k > MAX_ALL_PAIRS``; module
        docstring); ``opposite`` holds each face's vertex ``faces[f][(j + 2) % 3]``.
        Triangle ``(0, 1, 2)`` gives ``v = (0, 1), (0, 2), (1, 2)``.

    Raises:
        TypeError: ``faces`` is not an int32 array.
        ValueError: its length is not a multiple of 3, ``num_vertices`` is negative, or
            the mesh has so many faces that its records could overflow int32 edge ids
            (more than ``MAX_RECORDS / 10.5``, about 204 million faces); raised before
            any allocation.

    Synchronises with the device once (to read the record count).
    """
    if faces.dtype != wp.int32 or faces.ndim != 1:
        raise TypeError(f"rayd.engine.mesh_edges(): 'faces' must be a 1-D int32 array, got {faces.dtype} {faces.shape}")
    m = faces.shape[0]
    if m % 3:
        raise ValueError(f"rayd.engine.mesh_edges(): 'faces' must hold 3 ids per face, got length {m}")
    if num_vertices < 0:
        raise ValueError(f"rayd.engine.mesh_edges(): 'num_vertices' must be >= 0, got {num_vertices}")
    check_size("rayd.engine.mesh_edges()", m // 3)
    dev = faces.device
    i32 = wp.int32
    with launch_stream(dev, stream):
        if m == 0:
            empty = [wp.empty(0, dtype=wp.vec2i, device=dev) for _ in range(3)]
            return MeshEdges(*empty)
        v = max(num_vertices, 1)
        keys = wp.empty(2 * m, dtype=wp.int64, device=dev)
        order = wp.empty(2 * m, dtype=i32, device=dev)
        wp.launch(_edge_topology_keys_kernel, dim=m, inputs=[faces, v], outputs=[keys, order], device=dev)
        wp.utils.radix_sort_pairs(keys, order, m, end_bit=max((v * v - 1).bit_length(), 1))
        first = wp.empty(m, dtype=i32, device=dev)
        wp.launch(_edge_topology_first_kernel, dim=m, inputs=[keys], outputs=[first], device=dev)
        run = wp.empty(m, dtype=i32, device=dev)
        wp.utils.array_scan(first, run, inclusive=True)
        run_start = wp.full(m + 1, m, dtype=i32, device=dev)  # entries past the last run stay m
        wp.launch(_edge_topology_starts_kernel, dim=m, inputs=[first, run], outputs=[run_start], device=dev)
        per_member = wp.empty(m, dtype=i32, device=dev)
        wp.launch(_edge_topology_count_kernel, dim=m, inputs=[run, run_start], outputs=[per_member], device=dev)
        record_start = wp.empty(m, dtype=i32, device=dev)
        wp.utils.array_scan(per_member, record_start, inclusive=False)
        tail = wp.empty(2, dtype=i32, device=dev)
        wp.copy(tail, record_start, dest_offset=0, src_offset=m - 1, count=1)
        wp.copy(tail, per_member, dest_offset=1, src_offset=m - 1, count=1)
        if stream is not None:
            wp.synchronize_stream(stream)
        last = tail.numpy()
        num_edges = int(last[0]) + int(last[1])
        out = [wp.empty(num_edges, dtype=wp.vec2i, device=dev) for _ in range(3)]
        wp.launch(
            _edge_topology_records_kernel,
            dim=m,
            inputs=[faces, order, run, run_start, per_member, record_start],
            outputs=out,
            device=dev,
        )
        # Free the scratch arrays here, stream-ordered on `stream` after the launches
        # that read them (outside this scope Warp would free them on its own stream).
        del keys, order, first, run, run_start, per_member, record_start, tail
    return MeshEdges(*out)
