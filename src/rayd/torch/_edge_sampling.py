"""Edge sampling for the visibility-boundary term of image derivatives (``Camera.sample_edges``).

An image ``I_k = ∫ h_k(x) f(x) dx`` (pixel filter ``h_k``, shading ``f`` of whatever is
seen through image point ``x``) changes with scene parameters ``θ`` in two ways: ``f``
changes where it is smooth (the interior term, which the fixed-winner derivatives of
``intersect`` already give), and the curves where ``f`` jumps — the images of
silhouette and boundary edges — move. Reynolds' transport theorem gives the second,
boundary part::

    dI_k/dθ |boundary = ∮ h_k(x) (f_in(x) − f_out(x)) v_n(x) dl(x)

over the visible discontinuity curves, ``v_n`` the velocity of the curve along its
normal ``n`` (pointing from the ``in`` side, the face along the edge, to ``out``).
:func:`sample_edges` estimates the integral by Monte Carlo: the discrete choices
(which edges are silhouettes from the camera centre, where they are clipped, where the
samples go, which way ``n`` points) are made without gradients by
:mod:`rayd.core.camera`, and the sample point is then re-projected from the live vertex
tensors, transforms and camera parameters at its fixed edge parameter, so that
``motion = m − m.detach()`` with ``m = xy(θ) · n`` has value 0 and derivative
``v_n``. :meth:`EdgeSamples.boundary_term` scatters
``h_k(xy) (f_in − f_out) motion weight`` into pixels.

References:
    Li, Aittala, Durand, Lehtinen 2018, "Differentiable Monte Carlo Ray Tracing through
    Edge Sampling", ACM TOG 37(6) (SIGGRAPH Asia), sec. 4 (primary visibility);
    Zhang, Miller, Yan, Gkioulekas, Zhao 2020, "Path-Space Differentiable Rendering",
    ACM TOG 39(4) (psdr), sec. 4 (boundary integrals, the detached-value trick).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

import numpy as np
import torch

from rayd.core import camera as _core
from rayd.core.camera_frontend import EdgeSamplesBase
from rayd.torch import _check, _convert
from rayd.torch._nearest_edge import _dtype, _ready_edges, silhouette_edges
from rayd.torch.edges import placed_vertices
from rayd.torch.intersection import TorchRecord
from rayd.torch.ray import Ray

_FILTERS = ("box", "tent")


class EdgeSamples(TorchRecord, EdgeSamplesBase):
    """Samples on the visible-discontinuity curves of an image, from :meth:`Camera.sample_edges`.

    Attributes (N samples):
        xy: (N, 2) pixel coordinates of each sample (detached; projected in float64 on the host,
            so float32 scenes far from the origin keep the offset rays on their sides).
        normal: (N, 2) unit image-space normal of the edge's image, pointing away from the
            face along the edge (the face that occludes on the ``inside``), detached.
        weight: (N,) ``1 / (N pdf)``, pdf with respect to image-space length; their sum
            is the total clipped image length of the sampled edges (pixels).
        ray_inside, ray_outside: :class:`Ray` batches (N,) from the camera centre
            through ``xy ∓ EDGE_OFFSET · normal`` (``EDGE_OFFSET = 0.005`` pixel), unit
            directions: use them to evaluate ``f_in`` and ``f_out``.
        global_edge_id: (N,) int32 edge record of each sample (:class:`EdgeTopology` row).
        edge_t: (N,) the sample's parameter along its edge, from ``v[:, 0]`` (0) to
            ``v[:, 1]`` (1), held fixed by ``motion`` (detached).
        visible: (N,) bool, True where the 3D edge point is seen from the camera centre.
        motion: (N,) zero in value; its derivative with respect to vertices, transforms
            and camera parameters is the normal velocity ``d(xy · normal)/dθ`` of the
            sample at fixed ``edge_t`` (pixels per unit of θ).
        width, height: the camera's image size.

    Units:
        Pixels for ``xy``, ``weight`` (length) and ``motion``.

    A record like :class:`Intersection`: ``dir()`` lists the fields; ``detach()``,
    ``to(device, dtype)``, ``cpu()`` and ``samples[mask]`` (a bool mask of shape (N,),
    integer indices or a slice) give an ``EdgeSamples`` of the same ``width`` and
    ``height`` with every field (the rays' ``o`` and ``d`` too) mapped.
    """

    _RAY = Ray

    @property
    def shape(self) -> torch.Size:
        """``(N,)``."""
        return self._fields["weight"].shape

    def boundary_term(self, f_inside: torch.Tensor, f_outside: torch.Tensor, *, filter: str = "box") -> torch.Tensor:
        """The visibility-boundary part of an image's derivative, as an image of value zero.

        Args:
            f_inside, f_outside: (N,) or (N, C) float shading seen along ``ray_inside`` and
                ``ray_outside`` (e.g. the colour of the hit, 0 for the background).
            filter: the pixel filter ``h_k``: ``"box"`` (``h_k = 1`` on pixel ``k``'s unit
                square, so ``I_k`` is the pixel's mean of ``f``) or ``"tent"``
                (``h_k(x) = max(0, 1 − |x − c_k|) max(0, 1 − |y − c_k|)`` about the pixel
                centre ``c_k``).

        Returns:
            (height, width) or (height, width, C) tensor, zero in value. Concretely
            ``Σ_samples h_k(xy) (f_inside − f_outside) · motion · weight · visible``:
            add it to the rendered image (``image = render + term``) and the gradient
            of any loss of ``image`` gains the boundary part of ``dI_k/dθ`` (Li et al.
            2018, eq. 11; Zhang et al. 2020). Samples whose edge point is hidden
            (``visible`` False) add nothing.

        Raises:
            TypeError: ``f_inside``/``f_outside`` not float tensors, ``filter`` not a str.
            ValueError: their first dimension is not N or their shapes differ, one is on
                another device than the record, or an unknown ``filter``.
        """
        call = "rayd.torch.EdgeSamples.boundary_term()"
        f_in = _check.float_tensor(call, "f_inside", f_inside)
        f_out = _check.float_tensor(call, "f_outside", f_outside)
        n = len(self)
        for name, f in (("f_inside", f_in), ("f_outside", f_out)):
            _check.same_device(call, name, f, self.xy.device, "the record")  # was torch's index_add error
            if f.dim() not in (1, 2) or f.shape[0] != n:
                raise ValueError(f"{call}: '{name}' must have shape ({n},) or ({n}, C), got {tuple(f.shape)}")
        if f_in.shape != f_out.shape:
            raise ValueError(f"{call}: 'f_inside' {tuple(f_in.shape)} and 'f_outside' {tuple(f_out.shape)} differ")
        self._check_filter(call, filter, _FILTERS, f"one of {_FILTERS}")
        scale = self.motion * self.weight.to(self.motion.dtype) * self.visible.to(self.motion.dtype)
        delta = f_in - f_out
        channels = delta.shape[1:]
        value = delta * (scale if delta.dim() == 1 else scale[:, None])
        w, h = self.width, self.height
        image = torch.zeros((h * w,) + tuple(channels), dtype=value.dtype, device=value.device)
        x, y = self.xy.unbind(-1)
        if filter == "box":
            ix = x.floor().long().clamp(0, w - 1)
            iy = y.floor().long().clamp(0, h - 1)
            return image.index_add(0, iy * w + ix, value).reshape((h, w) + tuple(channels))
        # Tent: the four pixel centres around xy, bilinear weights, none outside the image.
        gx, gy = x - 0.5, y - 0.5
        x0, y0 = gx.floor(), gy.floor()
        for dx in (0, 1):
            for dy in (0, 1):
                px, py = x0 + dx, y0 + dy
                wgt = (1 - (gx - px).abs()) * (1 - (gy - py).abs())
                inside = (px >= 0) & (px < w) & (py >= 0) & (py < h)
                wgt = torch.where(inside, wgt, 0).to(value.dtype)
                row = (py.clamp(0, h - 1) * w + px.clamp(0, w - 1)).long()
                image = image.index_add(0, row, value * (wgt if value.dim() == 1 else wgt[:, None]))
        return image.reshape((h, w) + tuple(channels))


def _candidates(call: str, camera, scene, edges, intrinsics: tuple) -> tuple:
    """The camera on the scene's device, its values valid (tensors may have changed in place since
    ``Camera()``); the silhouette and boundary edges seen by the BVH from the camera centre:
    ``(work, ids, a, b, o, is_boundary)``, ids on the device and host rows, ``work`` the device,
    the output dtype and the camera centre."""
    device = scene._device
    if camera.device is not None:
        _check.same_device(call, "camera", torch.empty(0, device=camera.device), device, "the scene")
    dtype = _dtype(camera.dtype, scene)
    top = edges.topology
    camera._check_values(call)
    with torch.no_grad():
        world = placed_vertices(scene._state, torch.float64, detach=True)
        centre = torch.tensor(camera._host_centre(), dtype=torch.float64, device=device)
        # the silhouette rule with every record's faces read as consistently oriented (a flipped face
        # would hide the fold there and mark a crease instead)
        chosen, boundary = silhouette_edges(scene, call, centre, oriented=True), top.is_boundary
        rule = _core.coincident_faces(_convert.host_array(top.opposite),
                                      lambda: (_convert.host_array(top.v), _convert.host_array(top.shape_id)))
        # faces listed more than once: sampled as one face
        chosen, boundary = _core.merge_coincident_faces(rule, chosen, boundary,
                                                        lambda x: torch.as_tensor(x, device=device))
        chosen = chosen & edges._applied.bool()
        ids = chosen.nonzero().squeeze(1)
        edge_rows = edges.edge_rows[ids].long()
        offset = (edges.edge_rows[ids, 0] - top.v[ids, 0]).long()
        opp = top.opposite[ids, 0].long() + offset
        a, b, o = (_convert.host_array(world[i]) for i in (edge_rows[:, 0], edge_rows[:, 1], opp))
    work = SimpleNamespace(device=device, dtype=dtype, centre=centre)
    return work, ids, a, b, o, _convert.host_array(boundary[ids])


def _jitter(generator: torch.Generator | None) -> Callable[[int], np.ndarray]:
    def jitter(n: int) -> np.ndarray:
        return _convert.host_array(torch.rand(n, generator=generator, dtype=torch.float64,
                                              device=generator.device if generator is not None else "cpu"))
    return jitter


def _evaluate(camera, scene, edges, work: SimpleNamespace, ids: torch.Tensor, plan) -> dict[str, object]:
    """The fields of :class:`EdgeSamples`: the differentiable evaluation at the fixed edge parameter
    (module docstring)."""
    device, dtype, centre = work.device, work.dtype, work.centre
    top = edges.topology
    n = plan.count
    gid = ids[torch.as_tensor(plan.edge, device=device)]
    ends = edges.edge_rows[gid].long()
    t = torch.as_tensor(plan.edge_t, dtype=dtype).to(device)
    normal_t = torch.as_tensor(plan.normal, dtype=dtype).to(device)
    # The motion in float64, rounded once (as the plan's xy): a transformed float32 mesh and camera
    # far from the origin, placed and projected in float32, gave derivatives off by 1e-4 (3e4 away).
    work = torch.float64
    vertices = placed_vertices(scene._state, work)
    edge_t = torch.as_tensor(plan.edge_t, dtype=work).to(device)
    point = vertices[ends[:, 0]] * (1 - edge_t)[:, None] + vertices[ends[:, 1]] * edge_t[:, None]
    xy = camera.camera_to_pixels(camera.world_to_camera(point))
    m = (xy * torch.as_tensor(plan.normal, dtype=work).to(device)).sum(-1)
    motion = (m - m.detach()).to(dtype)
    xy = torch.as_tensor(plan.xy, dtype=dtype).to(device)  # the value: float64 on the host (SamplePlan.xy)
    offset_xy = _core.EDGE_OFFSET * normal_t
    with torch.no_grad():
        shape = top.shape_id[gid].long()
        face = scene._state.table.global_offset[shape] + top.faces[gid, 0].long()
        target = torch.as_tensor(plan.point, dtype=torch.float64).to(device)  # float64: SamplePlan.point
        visible = scene.visible(centre.expand_as(target), target, ignore=face.to(torch.int32))
    return dict(xy=xy, normal=normal_t, weight=torch.full((n,), plan.weight, dtype=dtype, device=device),
                ray_inside=camera.generate_rays(xy - offset_xy), ray_outside=camera.generate_rays(xy + offset_xy),
                global_edge_id=gid.to(torch.int32), edge_t=t, visible=visible, motion=motion)


#: rayd.torch's steps of :meth:`rayd.core.camera_frontend.CameraBase.sample_edges`.
OPS = SimpleNamespace(generator_type=torch.Generator, generator_name="torch.Generator",
                      ready=lambda scene, call: _ready_edges(call, scene), candidates=_candidates,
                      jitter=_jitter, evaluate=_evaluate)
