"""The scene-wide edge topology, assembled once for both frontends from the engine's per-mesh records.

The rule that turns one mesh's faces into edge records is the engine's
(:func:`rayd.engine.edge_topology.mesh_edges`). A scene's :class:`EdgeTopology` lists
every shape's records in shape order; an instance repeats its mesh's records under its
own shape id. This module decides, on the host and without any array library, which
meshes need an engine pass (:func:`mesh_passes`: one per mesh with faces, shared by
its instances) and how the scene's rows come from the concatenation of those passes
(:func:`assemble`); a frontend runs the passes and gathers its arrays by the returned
index arrays (one gather per field, so the work does not grow with the number of
shapes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rayd.engine import edge_topology


def check_total(owner: str, total: int) -> None:
    """Refuse a scene whose edge records (instances repeat their mesh's) overflow int32 ids."""
    if total > edge_topology.MAX_RECORDS:
        raise ValueError(
            f"{owner} edge queries: the scene has {total} edge records (instances repeat their mesh's), more "
            f"than the {edge_topology.MAX_RECORDS} int32 edge ids allow; use fewer instances or smaller meshes"
        )


@dataclass(frozen=True)
class TopologyPlan:
    """How the scene's E edge rows come from the engine passes (all host NumPy arrays, (E,)).

    source: int64 row of each scene edge in the concatenation of the passes' records
        (in :func:`mesh_passes` order).
    shape_id: int32 the shape each row belongs to (ascending).
    edge_id: int32 the row's index among its shape's records.
    world_shift: int32 the shape's first row in the world-space vertex copy (instances
        included), to make the edge BVH's endpoint rows.
    vertex_shift: int32 the shape's mesh's first row in the concatenated mesh vertices.
    """

    source: np.ndarray
    shape_id: np.ndarray
    edge_id: np.ndarray
    world_shift: np.ndarray
    vertex_shift: np.ndarray

    @property
    def num_edges(self) -> int:
        """E."""
        return int(self.source.shape[0])


def mesh_passes(owner: str, shapes: list) -> list[int]:
    """The shape ids of the meshes whose records the engine computes, once each, in first-use order.

    Args:
        owner: the scene's public name for messages (``"rayd.torch.Scene"``).
        shapes: the scene's shape records (``mesh.num_faces``, ``base``), in shape order.

    Raises:
        ValueError: a mesh too large for int32 edge ids
            (:func:`rayd.engine.edge_topology.check_size`).
    """
    passes: list[int] = []
    for shape in shapes:
        if shape.mesh.num_faces and shape.base not in passes:
            edge_topology.check_size(f"{owner} edge queries", shape.mesh.num_faces)
            passes.append(shape.base)
    return passes


def assemble(owner: str, shapes: list, world_offsets: list[int], counts: dict[int, int]) -> TopologyPlan:
    """The :class:`TopologyPlan` of the scene's rows, given each pass's record count.

    Args:
        owner: as for :func:`mesh_passes`.
        shapes: the scene's shape records (``mesh.num_faces``, ``base``, ``vertex_offset``).
        world_offsets: each shape's first row in the world-space vertex copy.
        counts: for each :func:`mesh_passes` id, the number of records its pass produced
            (in that order: the concatenation's layout).

    Raises:
        ValueError: the scene's records (instances repeat their mesh's) overflow int32
            edge ids (:func:`check_total`).
    """
    first: dict[int, int] = {}
    total = 0
    for base, count in counts.items():
        first[base] = total
        total += count
    present = np.array([i for i, s in enumerate(shapes) if s.mesh.num_faces], dtype=np.int64)
    bases = np.array([shapes[i].base for i in present], dtype=np.int64)
    per_shape = np.array([counts[b] for b in bases], dtype=np.int64)
    check_total(owner, int(per_shape.sum()))  # before the E-sized index arrays are made
    starts = np.cumsum(per_shape) - per_shape
    local = np.arange(int(per_shape.sum()), dtype=np.int64) - np.repeat(starts, per_shape)
    source = np.repeat(np.array([first[b] for b in bases], dtype=np.int64), per_shape) + local
    world = np.asarray(world_offsets, dtype=np.int64)
    world = world[present] if world.size else np.zeros(0, dtype=np.int64)
    vertex = np.array([shapes[b].vertex_offset for b in bases], dtype=np.int64)
    return TopologyPlan(
        source=source,
        shape_id=np.repeat(present, per_shape).astype(np.int32),
        edge_id=local.astype(np.int32),
        world_shift=np.repeat(world, per_shape).astype(np.int32),
        vertex_shift=np.repeat(vertex, per_shape).astype(np.int32),
    )


def same_direction(v: np.ndarray, tri0: np.ndarray, tri1: np.ndarray, has_second: np.ndarray) -> np.ndarray:
    """Which records join two faces that run through their edge in the same direction.

    In a consistently oriented mesh the two faces of an edge traverse it in opposite
    directions (``p -> q`` in one, ``q -> p`` in the other). Where they do not (a face
    flipped against its neighbour, as in scanned or merged meshes), "exactly one of the two
    faces faces the viewpoint" no longer marks where the surface folds away from it.
    ``sample_edges`` therefore reads the second face's facing as if it were re-oriented to
    agree with the first on such records (``rayd.torch.edges``, ``rayd.drjit.edges``).

    Args:
        v: (E, 2) int host array, each record's vertex pair ``(p, q)``.
        tri0, tri1: (E, 3) int host arrays, the vertex indices of the record's two faces, in
            their winding order (the same index space as ``v``).
        has_second: (E,) bool, the record has a second face (not a boundary edge).

    Returns:
        (E,) bool: both faces contain the directed edge ``p -> q`` (and not ``q -> p``), or
        both ``q -> p`` (and not ``p -> q``). Faces with a repeated vertex index that run
        through the edge both ways, or not at all, count as no direction (False).
    """
    v = np.asarray(v, np.int64).reshape(-1, 2)
    p, q = v[:, :1], v[:, 1:]

    def direction(tri: np.ndarray) -> np.ndarray:
        tri = np.asarray(tri, np.int64).reshape(-1, 3)
        after = np.roll(tri, -1, axis=1)
        forward = ((tri == p) & (after == q)).any(1)
        backward = ((tri == q) & (after == p)).any(1)
        return forward.astype(np.int64) - backward.astype(np.int64)

    return (direction(tri0) * direction(tri1) > 0) & np.asarray(has_second, bool).reshape(-1)
