"""Edge topology of one triangle mesh, computed on the device with Warp kernels.

The rule (DESIGN.md, "Edges"): the unique undirected edges keyed by their sorted
vertex-index pair (no welding by position), in ascending key order. An edge with one
incident face is a boundary edge (second face and opposite vertex ``-1``); an edge
with ``c >= 2`` faces yields one record per unordered pair of its faces,
``c (c - 1) / 2`` records, in lexicographic order of the faces' positions (faces in
ascending order). Degenerate faces are taken as given: a face with a repeated vertex
contributes an edge ``(i, i)`` and counts twice on its other edge. The records are
identical to those of rayd.torch's ``mesh_edges``.

Steps, all vectorised (no loop over faces on the host):

1. one kernel writes each face-edge ``3 f + j`` (from ``faces[f][j]`` to
   ``faces[f][(j + 1) % 3]``) as the 64-bit key ``lo * V + hi`` and its index;
2. a stable radix sort of the keys (``wp.utils.radix_sort_pairs``; faces stay in
   ascending order within a key);
3. runs of equal keys are found (first-of-run flags, an inclusive scan for the run
   index, the run starts scattered by their index);
4. each face-edge gets its record count (``1`` alone, else ``c - 1 - rank``), an
   exclusive scan gives the output offsets, and one kernel writes the records.

Reading the record count back to allocate the outputs is the one host
synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import warp as wp

from rayd.engine.runtime import launch_stream

# Topology kernels have no derivatives: skip generating adjoint code.
wp.set_module_options({"enable_backward": False})


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
    n = int(1)
    if count > 1:
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
    _start, count = _run_bounds(i, run, run_start)
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
    else:
        for step in range(int(per_member[i])):
            pe = int(order[i + 1 + step])
            pf = pe // 3
            pj = pe - 3 * pf
            v[out + step] = ends
            face_pair[out + step] = wp.vec2i(f, pf)
            opposite[out + step] = wp.vec2i(third, int(faces[3 * pf + (pj + 2) % 3]))


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
        of ``c`` equal keys gives one boundary record (``c = 1``) or the
        ``c (c - 1) / 2`` pairs of its faces; ``opposite`` holds each face's vertex
        ``faces[f][(j + 2) % 3]``. Triangle ``(0, 1, 2)`` gives ``v = (0, 1), (0, 2),
        (1, 2)``.

    Raises:
        TypeError: ``faces`` is not an int32 array.
        ValueError: its length is not a multiple of 3, or ``num_vertices`` is negative.

    Synchronises with the device once (to read the record count).
    """
    if faces.dtype != wp.int32 or faces.ndim != 1:
        raise TypeError(f"rayd.engine.mesh_edges(): 'faces' must be a 1-D int32 array, got {faces.dtype} {faces.shape}")
    m = faces.shape[0]
    if m % 3:
        raise ValueError(f"rayd.engine.mesh_edges(): 'faces' must hold 3 ids per face, got length {m}")
    if num_vertices < 0:
        raise ValueError(f"rayd.engine.mesh_edges(): 'num_vertices' must be >= 0, got {num_vertices}")
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
    return MeshEdges(*out)
