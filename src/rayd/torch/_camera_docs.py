"""The docstrings of :class:`rayd.torch.Camera`'s ``sample_edges``, ``generate_rays`` and ``project``
(core's code: :class:`rayd.core.camera_frontend.CameraBase`), bound by
:class:`rayd.core.docs.FrontendDocs` when the Camera class is made."""

import torch

from rayd.torch._edge_sampling import EdgeSamples
from rayd.torch.ray import Ray

DOCS = {
    "sample_edges": """Sample the images of the scene's silhouette and boundary edges, uniformly in image length.

        Args:
            scene: a built, synced :class:`Scene` on the camera's device.
            num_samples: N >= 0, the number of samples.
            generator: optional ``torch.Generator`` for the N uniform numbers (drawn on
                its device, then copied to the host).

        Returns:
            :class:`EdgeSamples` with fields of shape (N,) / (N, 2) (see there).
            Concretely: the edges are ``scene.silhouette_edges(c)`` for the camera centre
            ``c`` (boundary edges and edges between a face facing ``c`` and one facing
            away; a record whose two faces run through the edge in the same direction, one
            wound against the other, reads its second face as re-oriented, so the outline
            does not depend on face windings), without masked edges or edges of disabled
            shapes; each is clipped to
            the near plane (depth above ``1e-6`` times its far end's depth) and its image
            to ``[0, width] x [0, height]``; the pieces are laid end to end and sample
            ``i`` sits at length ``(i + ξ_i) L / N`` (stratified, so uniform in
            image-space length overall: ``pdf = 1 / L``, ``weight = L / N``, ``L`` the
            total clipped image length). ``normal`` points away from the edge's first
            face (``EdgeTopology.faces[:, 0]``; for a silhouette edge both faces lie on
            that side). ``visible`` is ``scene.visible(c, edge point)`` skipping that
            face. With no edge on screen (or N = 0), empty fields.

        Gradients:
            Only ``motion`` (and ``ray_inside``, ``ray_outside`` through the camera
            parameters) carry gradients: ``motion``'s is ``d(xy(θ) · normal)/dθ`` with
            ``xy(θ)`` the projection of ``(1 − edge_t) a(θ) + edge_t b(θ)`` from the live
            vertex tensors, transforms and camera parameters.

        Raises:
            TypeError: ``scene`` not a :class:`Scene`, ``num_samples`` not an int,
                ``generator`` not a ``torch.Generator``.
            ValueError: negative ``num_samples``, camera tensors on another device.
            RuntimeError: the scene is not built, or has pending changes.

        Host synchronisation: the discrete choices are made in float64 NumPy
        (:mod:`rayd.core.camera`), one copy of the camera-space vertices per call.

        References:
            Li et al. 2018, "Differentiable Monte Carlo Ray Tracing through Edge
            Sampling"; Zhang et al. 2020, "Path-Space Differentiable Rendering"
            (:mod:`rayd.torch._edge_sampling` derives the estimator).
        """,
    "generate_rays": """Camera rays through pixel positions.

        Args:
            samples: (..., 2) float32/float64 pixel coordinates ``(x, y)``; default: every
                pixel centre, shape ``(height, width, 2)`` with ``samples[j, i] = (i + 0.5,
                j + 0.5)``, in the camera's dtype and on its device (the CPU if it has no
                tensors).

        Returns:
            :class:`Ray` with ``o`` (..., 3) the camera centre (``to_world``'s
            translation, expanded) and ``d`` (..., 3) unit directions, ``tmin = 0``,
            ``tmax = inf``: ``t`` is a distance in world units. Concretely,
            ``d = normalize(A @ ((x - cx) / fx, (y - cy) / fy, 1))`` with ``A`` the
            linear part of ``to_world``.

        Gradients:
            ``o`` and ``d`` are differentiable with respect to ``samples``, the
            intrinsics and ``to_world`` (promoted dtype of them all).

        Units:
            ``samples`` in pixels; ``o`` in world units, ``d`` unit length (so ``t`` is a distance).

        Raises:
            TypeError: ``samples`` not a float tensor.
            ValueError: its last dimension is not 2, or it is on another device than
                the camera's tensors.

        References:
            Hartley, Zisserman 2004, "Multiple View Geometry in Computer Vision", 2nd ed.,
            sec. 6.1 (the pinhole camera); the axes and pixel centres of OpenCV's camera model.
        """,
    "project": """Pixel coordinates and depth of world points (the inverse of :meth:`generate_rays`).

        Args:
            points: (..., 3) float32/float64 world positions.

        Returns:
            ``(xy, depth)``: (..., 2) pixel coordinates and (...) camera-space ``z``.
            Concretely, ``P = A^-1 (p - t)`` (``to_world = [A t]``) and
            ``xy = (fx P_x / P_z + cx, fy P_y / P_z + cy)``, ``depth = P_z``. Points behind
            the camera (``depth < 0``) get the mirrored projection; points on the
            camera's plane (``depth = 0``, the camera centre among them) have none and
            get ``xy = 0`` with zero gradient (never NaN or inf, as for misses). Test
            ``depth > 0`` where it matters.

        Gradients:
            Differentiable with respect to ``points``, the intrinsics and ``to_world``.

        Units:
            ``xy`` in pixels, ``depth`` in world units along the camera's z axis.

        Raises:
            TypeError: ``points`` not a float tensor.
            ValueError: its last dimension is not 3, or it is on another device.

        References:
            Hartley, Zisserman 2004, "Multiple View Geometry in Computer Vision", 2nd ed.,
            sec. 6.1 (the pinhole camera); the axes and pixel centres of OpenCV's camera model.
        """,
}

ANNOTATIONS = {"generate_rays": {"samples": torch.Tensor | None, "return": Ray},
    "sample_edges": {"num_samples": int, "generator": torch.Generator | None, "return": EdgeSamples},
    "project": {"points": torch.Tensor, "return": tuple[torch.Tensor, torch.Tensor]}}
