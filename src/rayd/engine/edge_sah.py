"""Warp's SAH tree as rayd's packed edge tree (the ``"sah"`` builder of :class:`EdgeBvh`).

Warp builds its SAH tree on the host (``wp.Bvh(constructor="sah")`` on a CPU array), so the
tree is built there on every device and converted on the host (NumPy) into the arrays of
:mod:`rayd.engine.tree_refit` and the packed links, then copied to the scene's device:
the same tree, slots and links on CPU and CUDA, refit by the same leaf-climb kernel.
(A ``wp.Bvh`` built on CUDA has another node layout, which the previous direct reading
of its nodes rejected: the H200 never searched an SAH edge tree before this.)

Internal nodes keep Warp's order (numbered by a scan over its internal nodes, the root
moved to 0); leaf ``k`` (in slot order) gets node id ``num_inner + k``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import warp as wp

from rayd.engine.bvh_nodes import read_nodes


@dataclass
class HostTree:
    """A binary tree in host arrays (see :mod:`rayd.engine.tree_refit` for their meaning).

    Attributes:
        children: int32 (num_inner, 2), node ids of the children of each internal node.
        parent: int32 (num_inner + num_leaves,), parent of each node id (-1: root).
        leaves: int32 (num_leaves, 4), ``(node id, first slot, count, parent)`` in slot order.
        links: int32 (num_inner, 4), packed links ``(code_a, code_b, count_a, count_b)``.
        order: int32 (num_slots,), the item of each slot.
        depth: levels (root = 1, leaves included).
    """

    children: np.ndarray
    parent: np.ndarray
    leaves: np.ndarray
    links: np.ndarray
    order: np.ndarray
    depth: int


def warp_tree(lower: np.ndarray, upper: np.ndarray, leaf_size: int, constructor: str = "sah",
              device: str = "cpu") -> HostTree:
    """Build ``wp.Bvh`` over the item boxes ``lower``/``upper`` (float32 (n, 3)) and convert it.

    Args:
        lower, upper: float32 (n, 3) item boxes, n >= 1.
        leaf_size: most items per leaf (Warp's ``leaf_size``).
        constructor: Warp's constructor (``"sah"``, ``"median"``, ``"cubql"`` on CUDA).
        device: where Warp builds (``"cpu"`` for its host SAH builder).

    Returns:
        The :class:`HostTree`.
    """
    n = lower.shape[0]
    bvh = wp.Bvh(wp.array(lower, dtype=wp.vec3, device=device), wp.array(upper, dtype=wp.vec3, device=device),
                 constructor=constructor, leaf_size=leaf_size)
    nodes = read_nodes(bvh, n)
    num = int(wp.array(ptr=bvh.id + 40, dtype=wp.int32, shape=(4,), device=bvh.device).numpy()[2])
    low = nodes.lower_index.numpy()[:num, 3].astype(np.int64)
    high = nodes.upper_index.numpy()[:num, 3].astype(np.int64)
    order = nodes.primitives.numpy().astype(np.int32).copy()
    return convert(low, high, int(nodes.root), order)


def convert(low: np.ndarray, high: np.ndarray, root: int, order: np.ndarray) -> HostTree:
    """Warp node words (``lower_index[:, 3]``, ``upper_index[:, 3]``) to a :class:`HostTree`.

    A Warp node ``i`` with ``low[i] < 0`` is a leaf of items ``low & 0x7FFFFFFF`` to
    ``high & 0x7FFFFFFF`` (exclusive), else an internal node with children ``low[i]`` and
    ``high[i] & 0x7FFFFFFF``. Only nodes reachable from ``root`` are kept.
    """
    num = low.shape[0]
    is_leaf = low < 0
    left = np.where(is_leaf, -1, low)
    right = np.where(is_leaf, -1, high & 0x7FFFFFFF)
    reach = np.zeros(num, bool)
    front = np.array([root])
    depth = 0
    while front.size:
        depth += 1
        reach[front] = True
        inner = front[~is_leaf[front]]
        front = np.concatenate([left[inner], right[inner]])
    inner = reach & ~is_leaf
    leaf = reach & is_leaf
    if not inner.any():  # the whole tree is one leaf
        count = int((high[root] & 0x7FFFFFFF) - (low[root] & 0x7FFFFFFF))
        return HostTree(np.zeros((1, 2), np.int32), np.full(2, -1, np.int32),
                        np.array([[1, 0, count, -1]], np.int32), np.array([[0, 0, count, 0]], np.int32), order, 2)
    packed = np.cumsum(inner) - 1
    j_root = packed[root]
    swap = packed == 0
    packed[root] = 0
    packed[swap & inner & (np.arange(num) != root)] = j_root
    m = int(inner.sum())
    leaf_ids = np.flatnonzero(leaf)
    first = low[leaf_ids] & 0x7FFFFFFF
    by_slot = np.argsort(first, kind="stable")
    leaf_ids, first = leaf_ids[by_slot], first[by_slot]
    count = (high[leaf_ids] & 0x7FFFFFFF) - first
    node_id = np.full(num, -1, np.int64)
    node_id[inner] = packed[inner]
    node_id[leaf_ids] = m + np.arange(leaf_ids.size)
    code = np.zeros(num, np.int64)
    code[inner] = packed[inner]
    code[leaf_ids] = first
    cnt = np.zeros(num, np.int64)
    cnt[leaf_ids] = count
    src = np.flatnonzero(inner)
    j = packed[src]
    a, b = left[src], right[src]
    children = np.zeros((m, 2), np.int32)
    children[j, 0], children[j, 1] = node_id[a], node_id[b]
    links = np.zeros((m, 4), np.int32)
    links[j] = np.stack([code[a], code[b], cnt[a], cnt[b]], 1)
    parent = np.full(m + leaf_ids.size, -1, np.int32)
    parent[node_id[a]] = j
    parent[node_id[b]] = j
    leaves = np.stack([m + np.arange(leaf_ids.size), first, count, parent[m + np.arange(leaf_ids.size)]],
                      1).astype(np.int32)
    return HostTree(children, parent, leaves, links, order, depth)
