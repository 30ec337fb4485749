"""The engine searches of rayd.torch as ``torch.library`` custom ops (``torch.compile``, ``torch.func.vmap``).

Every differentiable query is *search, then evaluate* (DESIGN.md): a non-differentiable
engine search picks the winners (int32 ids), and plain torch ops re-evaluate the
continuous outputs for them. The searches are registered here as custom ops in the
``rayd`` namespace, so that

- ``torch.compile`` (``fullgraph=True``) sees each search as one opaque node with a
  fake (meta) implementation giving its output shape, and traces the evaluation
  around it as ordinary torch ops: no graph break;
- ``torch.func.vmap`` over rays or points batches a search by folding the vmapped
  dimension into the rays (``register_vmap``), and the evaluation batches as torch
  ops do.

The scene reaches an op as an integer key into a process-global registry of weak
references (:func:`register`, :func:`scene_of`), plus tensors. The ops take the rows
exactly as the engine reads them (float32 search-frame origins/points, float32 bounds,
uint8 active flags, int32 ignore ids), each either one row (same for every query,
read with stride 0) or ``n`` rows.

Lifecycle checks: each op's implementation checks the scene (built, nothing pending,
no in-place change since the last ``sync()``) when it runs. Under ``torch.compile``
the Python-side checks that read version counters are skipped at trace time
(``Scene._require_ready``), and these runtime checks raise the same ``RuntimeError``
from inside the compiled graph. Outside ``torch.compile`` and ``vmap``, the queries
call the implementations directly (no dispatcher round trip; the eager path is
unchanged).
"""

from __future__ import annotations

import itertools
import weakref

import torch

import numpy as np

from rayd import engine
from rayd.engine import all_hits as _all_hits_engine
from rayd.engine import closest_point as _closest_engine
from rayd.engine import nearest_edge as _edge_engine
from rayd.engine import winding as _winding_engine
from rayd.torch import _check, _convert

_SCENES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_KEYS = itertools.count(1)


def register(scene) -> int:
    """The registry key of ``scene`` (made at its first ``build()``; kept across rebuilds)."""
    key = scene.__dict__.get("_op_key")
    if key is None or _SCENES.get(key) is not scene:
        key = next(_KEYS)
        _SCENES[key] = scene
        scene._op_key = key
    return key


def scene_of(key: int, call: str):
    """The scene registered under ``key``; ``RuntimeError`` if it no longer exists."""
    scene = _SCENES.get(key)
    if scene is None:
        raise RuntimeError(f"{call}: the scene this query was compiled against no longer exists")
    return scene


def routed(*tensors: object) -> bool:
    """True if a search must go through the custom op: under ``torch.compile``, or a ``vmap``-batched input."""
    if torch.compiler.is_compiling():
        return True
    if not _convert.transforms_active():
        return False
    return any(isinstance(t, torch.Tensor) and _convert.is_batched(t) for t in tensors)


def _prepare(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return _convert.primal(x).to(dtype).contiguous()


# ---------------------------------------------------------------------- ray search (intersect, any hit)
def ray_batch(o, d, tmin, tmax, flag, skip) -> engine.RayBatch:
    """The engine's view of ray rows (float32 search-frame ``o``, ``d``, bounds; uint8 flags; int32 ids)."""
    return engine.RayBatch(
        _convert.vec3_view(_prepare(o, torch.float32)), _convert.vec3_view(_prepare(d, torch.float32)),
        _convert.scalar_view(_prepare(tmin, torch.float32)), _convert.scalar_view(_prepare(tmax, torch.float32)),
        _convert.scalar_view(_prepare(flag, torch.uint8)), _convert.scalar_view(_prepare(skip, torch.int32)),
    )


def ray_search_impl(scene, o, d, tmin, tmax, flag, skip, n: int, any_hit: bool) -> torch.Tensor:
    """(n,) int32 winners of the engine ray search (closest or any hit); rows as in the module docstring."""
    out = torch.empty(n, dtype=torch.int32, device=scene._device)
    if n == 0:
        return out
    rays = ray_batch(o, d, tmin, tmax, flag, skip)
    engine.search(scene._core.accel, rays, _convert.scalar_view(out), any_hit, _convert.current_stream(scene._device))
    return out


@torch.library.custom_op("rayd::ray_search", mutates_args=())
def _ray_search_op(key: int, call: str, o: torch.Tensor, d: torch.Tensor, tmin: torch.Tensor, tmax: torch.Tensor,
                   flag: torch.Tensor, skip: torch.Tensor, n: int, any_hit: bool) -> torch.Tensor:
    scene = scene_of(key, call)
    scene._require_ready(call)
    return ray_search_impl(scene, o, d, tmin, tmax, flag, skip, n, any_hit)


@_ray_search_op.register_fake
def _(key, call, o, d, tmin, tmax, flag, skip, n, any_hit):
    return o.new_empty((n,), dtype=torch.int32)


def ray_search(scene, call: str, o, d, tmin, tmax, flag, skip, n: int, any_hit: bool) -> torch.Tensor:
    """Engine ray search: the custom op when :func:`routed`, else the implementation directly."""
    if routed(o, d, tmin, tmax, flag, skip):
        return _ray_search_op(scene._op_key, call, o.detach(), d.detach(), tmin.detach(), tmax.detach(),
                              flag.detach(), skip.detach(), n, any_hit)
    return ray_search_impl(scene, o, d, tmin, tmax, flag, skip, n, any_hit)


# ---------------------------------------------------------------------- nearest edge(s)
def ready_edges(call: str, scene):
    """The scene's edges with their lazily built state (topology, BVH) made now.

    That state is made outside ``torch.func`` transforms: a first query inside one
    would otherwise keep wrapped tensors that break every later transform. While
    ``torch.compile`` traces, the topology must exist already (it is read by the traced
    evaluation); the BVH is built or refitted by the op when the graph runs.
    """
    edges = scene._synced_edges(call)
    if torch.compiler.is_compiling():
        if edges._topology is None:
            raise _check.lifecycle(call, "under torch.compile the scene's edge topology must exist before tracing; "
                                   "call scene.edge_topology() (or any edge query) once outside the compiled region")
        return edges
    with _convert.outside_transforms():
        edges.topology  # noqa: B018 - computes the topology, the edge rows and masks
        edges.bvh(_convert.current_stream(scene._device))
    return edges


def edge_point_impl(scene, call, points, flag, max_distance: float, n: int, k: int) -> torch.Tensor:
    """(n,) (``k = 0``) or (n, k) int32 nearest ``global_edge_id`` per search-frame point row."""
    edges = ready_edges(call, scene)
    out = torch.empty((n,) if k == 0 else (n, k), dtype=torch.int32, device=scene._device)
    if n == 0:
        return out
    stream = _convert.current_stream(scene._device)
    search = _edge_engine.nearest_edge_point if k == 0 else _edge_engine.nearest_edges_point
    search(edges.bvh(stream), _convert.vec3_view(_prepare(points, torch.float32)),
           _convert.scalar_view(_prepare(flag, torch.uint8)), max_distance, _convert.scalar_view(out), stream)
    return out


def edge_ray_impl(scene, call, o, d, tmin, tmax, flag, max_distance: float, n: int) -> torch.Tensor:
    """(n,) int32 ``global_edge_id`` nearest to each ray segment."""
    edges = ready_edges(call, scene)
    out = torch.empty(n, dtype=torch.int32, device=scene._device)
    if n == 0:
        return out
    stream = _convert.current_stream(scene._device)
    _edge_engine.nearest_edge_ray(
        edges.bvh(stream), _convert.vec3_view(_prepare(o, torch.float32)),
        _convert.vec3_view(_prepare(d, torch.float32)),
        _convert.scalar_view(_prepare(tmin, torch.float32)), _convert.scalar_view(_prepare(tmax, torch.float32)),
        _convert.scalar_view(_prepare(flag, torch.uint8)), max_distance, _convert.scalar_view(out), stream,
    )
    return out


@torch.library.custom_op("rayd::edge_search_point", mutates_args=())
def _edge_point_op(key: int, call: str, points: torch.Tensor, flag: torch.Tensor, max_distance: float, n: int,
                   k: int) -> torch.Tensor:
    scene = scene_of(key, call)
    scene._require_ready(call)
    return edge_point_impl(scene, call, points, flag, max_distance, n, k)


@_edge_point_op.register_fake
def _(key, call, points, flag, max_distance, n, k):
    return points.new_empty((n,) if k == 0 else (n, k), dtype=torch.int32)


@torch.library.custom_op("rayd::edge_search_ray", mutates_args=())
def _edge_ray_op(key: int, call: str, o: torch.Tensor, d: torch.Tensor, tmin: torch.Tensor, tmax: torch.Tensor,
                 flag: torch.Tensor, max_distance: float, n: int) -> torch.Tensor:
    scene = scene_of(key, call)
    scene._require_ready(call)
    return edge_ray_impl(scene, call, o, d, tmin, tmax, flag, max_distance, n)


@_edge_ray_op.register_fake
def _(key, call, o, d, tmin, tmax, flag, max_distance, n):
    return o.new_empty((n,), dtype=torch.int32)


def edge_point_search(scene, call, points, flag, max_distance: float, n: int, k: int = 0) -> torch.Tensor:
    """Nearest edge (``k = 0``) or top-``k`` edges of point rows; see :func:`edge_point_impl`."""
    if routed(points, flag):
        return _edge_point_op(scene._op_key, call, points.detach(), flag.detach(), max_distance, n, k)
    return edge_point_impl(scene, call, points, flag, max_distance, n, k)


def edge_ray_search(scene, call, o, d, tmin, tmax, flag, max_distance: float, n: int) -> torch.Tensor:
    """Nearest edge of ray segments; see :func:`edge_ray_impl`."""
    if routed(o, d, tmin, tmax, flag):
        return _edge_ray_op(scene._op_key, call, o.detach(), d.detach(), tmin.detach(), tmax.detach(),
                            flag.detach(), max_distance, n)
    return edge_ray_impl(scene, call, o, d, tmin, tmax, flag, max_distance, n)


# ---------------------------------------------------------------------- closest point, winding number
def closest_point_impl(scene, points, flag, max_distance: float, n: int) -> torch.Tensor:
    """(n,) int32 ``global_prim_id`` of the closest enabled triangle per search-frame point row."""
    out = torch.empty(n, dtype=torch.int32, device=scene._device)
    if n:
        _closest_engine.closest_point_search(
            scene._core.accel, _convert.vec3_view(_prepare(points, torch.float32)),
            _convert.scalar_view(_prepare(flag, torch.uint8)), max_distance, _convert.scalar_view(out),
            _convert.current_stream(scene._device),
        )
    return out


def winding_impl(scene, points, flag, n: int, exact: bool, refine: float) -> torch.Tensor:
    """(n,) float64 winding number per search-frame point row (engine kernel: the hierarchy, or exact)."""
    out = torch.empty(n, dtype=torch.float64, device=scene._device)
    if n:
        _winding_engine.winding_number(
            scene._core.accel, scene._core.table.num_flat_faces, _convert.vec3_view(_prepare(points, torch.float32)),
            _convert.scalar_view(_prepare(flag, torch.uint8)), _convert.scalar_view(out),
            _convert.current_stream(scene._device), exact=exact, refine=refine,
        )
    return out


@torch.library.custom_op("rayd::closest_point_search", mutates_args=())
def _closest_op(key: int, call: str, points: torch.Tensor, flag: torch.Tensor, max_distance: float,
                n: int) -> torch.Tensor:
    scene = scene_of(key, call)
    scene._require_ready(call)
    return closest_point_impl(scene, points, flag, max_distance, n)


@_closest_op.register_fake
def _(key, call, points, flag, max_distance, n):
    return points.new_empty((n,), dtype=torch.int32)


@torch.library.custom_op("rayd::winding_number", mutates_args=())
def _winding_op(key: int, call: str, points: torch.Tensor, flag: torch.Tensor, n: int, exact: bool,
                refine: float) -> torch.Tensor:
    scene = scene_of(key, call)
    scene._require_ready(call)
    return winding_impl(scene, points, flag, n, exact, refine)


@_winding_op.register_fake
def _(key, call, points, flag, n, exact, refine):
    return points.new_empty((n,), dtype=torch.float64)


def closest_point_search(scene, call, points, flag, max_distance: float, n: int) -> torch.Tensor:
    """Closest triangle of point rows; see :func:`closest_point_impl`."""
    if routed(points, flag):
        return _closest_op(scene._op_key, call, points.detach(), flag.detach(), max_distance, n)
    return closest_point_impl(scene, points, flag, max_distance, n)


def winding_number(scene, call, points, flag, n: int, exact: bool = False, refine: float = 0.0) -> torch.Tensor:
    """Engine winding number of point rows; see :func:`winding_impl`. Not differentiable."""
    if routed(points, flag):
        return _winding_op(scene._op_key, call, points.detach(), flag.detach(), n, exact, refine)
    return winding_impl(scene, points, flag, n, exact, refine)


# ---------------------------------------------------------------------- reflection chains, all hits, hit counts
def chain_impl(scene, o, d, tmin, tmax, flag, skip, n: int, bounces: int) -> torch.Tensor:
    """(n, B, 3) int32 per slot ``global_prim_id, shape_id, prim_id`` of the specular chains (``engine.trace_chain``)."""
    device = scene._device
    ids = torch.empty((n, bounces, 3), dtype=torch.int32, device=device)
    if n:
        t = torch.empty((n, bounces), dtype=torch.float32, device=device)
        engine.trace_chain(scene._core.accel, scene._core.shape_lookup, ray_batch(o, d, tmin, tmax, flag, skip),
                           _convert.scalar_view(ids), _convert.scalar_view(t), _convert.current_stream(device))
    return ids


def all_hits_impl(scene, o, d, tmin, tmax, flag, skip, n: int, k: int,
                  crossings: torch.Tensor | None = None) -> torch.Tensor:
    """(n, K) int32 ``global_prim_id`` of each ray's first ``K`` hits in increasing ``t`` (-1 unused);
    ``crossings``, an optional (n, K) int32 tensor, receives the crossings each hit counts (0: a touch)."""
    device = scene._device
    gid = torch.full((n, k), -1, dtype=torch.int32, device=device)
    if n:
        t = torch.empty(n * k, dtype=torch.float32, device=device)
        extra = None if crossings is None else _convert.scalar_view(crossings.view(-1))
        _all_hits_engine.all_hits(scene._core.accel, ray_batch(o, d, tmin, tmax, flag, skip), k,
                                  _convert.scalar_view(t), _convert.scalar_view(gid.view(-1)),
                                  _convert.current_stream(device), extra)
    return gid


def count_hits_impl(scene, o, d, tmin, tmax, flag, skip, n: int) -> torch.Tensor:
    """(n,) int32 number of crossings of each ray."""
    out = torch.zeros(n, dtype=torch.int32, device=scene._device)
    if n:
        _all_hits_engine.count_hits(scene._core.accel, ray_batch(o, d, tmin, tmax, flag, skip),
                                    _convert.scalar_view(out), _convert.current_stream(scene._device))
    return out


@torch.library.custom_op("rayd::trace_chain", mutates_args=())
def _chain_op(key: int, call: str, o: torch.Tensor, d: torch.Tensor, tmin: torch.Tensor, tmax: torch.Tensor,
              flag: torch.Tensor, skip: torch.Tensor, n: int, bounces: int) -> torch.Tensor:
    scene = scene_of(key, call)
    scene._require_ready(call)
    return chain_impl(scene, o, d, tmin, tmax, flag, skip, n, bounces)


@_chain_op.register_fake
def _(key, call, o, d, tmin, tmax, flag, skip, n, bounces):
    return o.new_empty((n, bounces, 3), dtype=torch.int32)


@torch.library.custom_op("rayd::all_hits", mutates_args=())
def _all_hits_op(key: int, call: str, o: torch.Tensor, d: torch.Tensor, tmin: torch.Tensor, tmax: torch.Tensor,
                 flag: torch.Tensor, skip: torch.Tensor, n: int, k: int) -> torch.Tensor:
    scene = scene_of(key, call)
    scene._require_ready(call)
    return all_hits_impl(scene, o, d, tmin, tmax, flag, skip, n, k)


@_all_hits_op.register_fake
def _(key, call, o, d, tmin, tmax, flag, skip, n, k):
    return o.new_empty((n, k), dtype=torch.int32)


@torch.library.custom_op("rayd::count_hits", mutates_args=())
def _count_op(key: int, call: str, o: torch.Tensor, d: torch.Tensor, tmin: torch.Tensor, tmax: torch.Tensor,
              flag: torch.Tensor, skip: torch.Tensor, n: int) -> torch.Tensor:
    scene = scene_of(key, call)
    scene._require_ready(call)
    return count_hits_impl(scene, o, d, tmin, tmax, flag, skip, n)


@_count_op.register_fake
def _(key, call, o, d, tmin, tmax, flag, skip, n):
    return o.new_empty((n,), dtype=torch.int32)


def _rays_op(op, impl, scene, call, rows, n, *extra):
    if routed(*rows):
        return op(scene._op_key, call, *(x.detach() for x in rows), n, *extra)
    return impl(scene, *rows, n, *extra)


def trace_chain(scene, call, rows, n: int, bounces: int) -> torch.Tensor:
    """Specular chains of ray rows (``rows`` = ``(o, d, tmin, tmax, flag, skip)``, as :func:`rayd.torch._trace.prepare` makes them)."""
    return _rays_op(_chain_op, chain_impl, scene, call, rows, n, bounces)


def all_hits(scene, call, rows, n: int, k: int) -> torch.Tensor:
    """First ``K`` crossings of ray rows; see :func:`all_hits_impl`."""
    return _rays_op(_all_hits_op, all_hits_impl, scene, call, rows, n, k)


def count_hits(scene, call, rows, n: int) -> torch.Tensor:
    """Crossing counts of ray rows; see :func:`count_hits_impl`."""
    return _rays_op(_count_op, count_hits_impl, scene, call, rows, n)


# ---------------------------------------------------------------------- specular path validity (host rules)
def path_validity_impl(scene, src, dst, seq, prior, n: int, dtype: torch.dtype):
    """``(ok (n,) bool, used (n, B) bool, ids (n, B) int32)`` of specular paths by :mod:`rayd.core.paths`' rules.

    ``src, dst`` (n, 3) float64, ``seq`` (n, B) int64, ``prior`` (n,) bool, each also one row; read back
    once to the host (the rules and their segment searches run there).
    """
    bounces = seq.shape[-1]
    device = scene._device
    if n == 0:
        return (torch.zeros(0, dtype=torch.bool, device=device), torch.zeros((0, bounces), dtype=torch.bool,
                device=device), torch.zeros((0, bounces), dtype=torch.int32, device=device))
    with _convert.outside_transforms(), torch.no_grad():
        host = [_convert.primal(x).cpu().numpy() for x in (src, dst, seq, prior)]
    host = [np.ascontiguousarray(np.broadcast_to(x, (n,) + x.shape[1:])) for x in host]  # one row: every path
    ok, used, ids, _ = scene._host_validity(*host, dtype)
    return tuple(torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in (ok, used, ids.astype(np.int32)))


@torch.library.custom_op("rayd::path_validity", mutates_args=())
def _paths_op(key: int, call: str, src: torch.Tensor, dst: torch.Tensor, seq: torch.Tensor, prior: torch.Tensor,
              n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    scene = scene_of(key, call)
    scene._require_ready(call)
    return path_validity_impl(scene, src, dst, seq, prior, n, dtype)


@_paths_op.register_fake
def _(key, call, src, dst, seq, prior, n, dtype):
    b = seq.shape[-1]
    return (src.new_empty((n,), dtype=torch.bool), src.new_empty((n, b), dtype=torch.bool),
            src.new_empty((n, b), dtype=torch.int32))


def path_validity(scene, call, src, dst, seq, prior, n: int, dtype: torch.dtype):
    """Validity of specular paths; see :func:`path_validity_impl`. Not differentiable."""
    if routed(src, dst, seq, prior):
        return _paths_op(scene._op_key, call, src.detach(), dst.detach(), seq.detach(), prior.detach(), n, dtype)
    return path_validity_impl(scene, src, dst, seq, prior, n, dtype)


# ---------------------------------------------------------------------- autograd: none through a search
def _no_gradient(ctx, *grads):
    """Searches return ids (piecewise constant in their inputs); the winding-number op is used only where no
    gradient is wanted (``contains``, or inputs without gradients). Gradients come from the evaluation."""
    return (None,) * ctx.num_inputs


def _count_inputs(ctx, inputs, output):
    ctx.num_inputs = len(inputs)


# ---------------------------------------------------------------------- vmap rules
def _fold(x: torch.Tensor, bdim: int | None, size: int, n: int) -> torch.Tensor:
    """Rows of ``x`` for ``size * n`` queries: the vmapped dim folded into the rows (sample-major)."""
    if bdim is None:
        if x.shape[0] == 1:
            return x  # one row for every query: stays a stride-0 row
        return x.repeat((size,) + (1,) * (x.dim() - 1))
    x = x.movedim(bdim, 0)
    x = x.expand((size, n) + tuple(x.shape[2:]))
    return x.reshape((size * n,) + tuple(x.shape[2:]))


def _vmap_rule(op, tensor_slots: tuple[int, ...], n_slot: int):
    """A ``register_vmap`` rule for ``op`` whose tensor arguments sit at ``tensor_slots``."""

    def rule(info, in_dims, *args):
        size, n = info.batch_size, args[n_slot]
        args = list(args)
        for slot in tensor_slots:
            args[slot] = _fold(args[slot], in_dims[slot], size, n)
        args[n_slot] = size * n
        out = op(*args)
        if isinstance(out, tuple):
            return tuple(x.reshape((size, n) + tuple(x.shape[1:])) for x in out), (0,) * len(out)
        return out.reshape((size, n) + tuple(out.shape[1:])), 0

    return rule


torch.library.register_vmap("rayd::ray_search", _vmap_rule(_ray_search_op, (2, 3, 4, 5, 6, 7), 8))
torch.library.register_vmap("rayd::edge_search_point", _vmap_rule(_edge_point_op, (2, 3), 5))
torch.library.register_vmap("rayd::edge_search_ray", _vmap_rule(_edge_ray_op, (2, 3, 4, 5, 6), 8))
torch.library.register_vmap("rayd::closest_point_search", _vmap_rule(_closest_op, (2, 3), 5))
torch.library.register_vmap("rayd::winding_number", _vmap_rule(_winding_op, (2, 3), 4))
for _name, _op in (("trace_chain", _chain_op), ("all_hits", _all_hits_op), ("count_hits", _count_op)):
    torch.library.register_vmap(f"rayd::{_name}", _vmap_rule(_op, (2, 3, 4, 5, 6, 7), 8))
torch.library.register_vmap("rayd::path_validity", _vmap_rule(_paths_op, (2, 3, 4, 5), 6))

for _op in (_ray_search_op, _edge_point_op, _edge_ray_op, _closest_op, _winding_op, _chain_op, _all_hits_op,
            _count_op, _paths_op):
    _op.register_autograd(_no_gradient, setup_context=_count_inputs)

#: The custom ops, by name (for ``torch.library.opcheck`` and the docs).
OPS = {
    "ray_search": _ray_search_op,
    "edge_search_point": _edge_point_op,
    "edge_search_ray": _edge_ray_op,
    "closest_point_search": _closest_op,
    "winding_number": _winding_op,
    "trace_chain": _chain_op,
    "all_hits": _all_hits_op,
    "count_hits": _count_op,
    "path_validity": _paths_op,
}
