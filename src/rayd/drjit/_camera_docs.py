"""The docstrings of :class:`rayd.drjit.Camera`'s ``sample_edges``, ``generate_rays`` and ``project``
(core's code: :class:`rayd.core.camera_frontend.CameraBase`), bound by
:class:`rayd.core.docs.FrontendDocs` when the Camera class is made."""

import drjit as dr
import numpy as np

from rayd.drjit._edge_sampling import EdgeSamples
from rayd.drjit.ray import Ray

DOCS = {
    "sample_edges": """Samples on the images of the scene's silhouette and boundary edges (as rayd.torch).

        The same edges, clipping, stratified positions and normals as
        :meth:`rayd.torch.Camera.sample_edges` (:mod:`rayd.core.camera`).

        Args:
            scene: a built, synced :class:`rayd.drjit.Scene`.
            num_samples: N >= 0, an int.
            generator: a ``numpy.random.Generator`` for the N jitter numbers (default: a
                fresh unseeded one).

        Returns:
            :class:`EdgeSamples` with fields of width N (width 0 when N = 0 or no edge is
            on screen): ``xy``, ``normal`` (``Array2``), ``weight`` (``L / N``), ``edge_t``,
            ``motion`` (``Float``), ``global_edge_id`` (``Int``), ``visible`` (``Bool``),
            ``ray_inside``, ``ray_outside`` (:class:`Ray`).

        Gradients:
            ``motion`` (value 0): ``d(xy(θ) · normal)/dθ`` at fixed ``edge_t`` with respect
            to vertices, transforms and camera parameters (Dr.Jit AD, both modes).

        Raises:
            TypeError: ``scene`` not a :class:`rayd.drjit.Scene`, ``num_samples`` not an
                int, ``generator`` not a ``numpy.random.Generator``.
            ValueError: negative ``num_samples``; intrinsics no longer valid.
            RuntimeError: the scene is not built or has pending changes.
        """,
    "generate_rays": """Camera rays through pixel positions.

        Args:
            samples: ``Array2f``/``Array2f64`` of width N (N may be 0), pixel coordinates
                ``(x, y)`` on the camera's backend; default: every pixel centre, lane
                ``j * width + i`` for pixel ``(i, j)``.

        Returns:
            :class:`Ray` with ``o`` the camera centre (width 1) and unit ``d`` (width N),
            ``d = normalize(A ((x - cx) / fx, (y - cy) / fy, 1))`` (``A`` the linear part of
            ``to_world``); float64 if the samples or any camera parameter are.

        Gradients:
            ``o``, ``d`` with respect to ``samples``, the intrinsics and ``to_world`` (Dr.Jit AD).

        Units:
            ``samples`` in pixels; ``o`` in world units, ``d`` unit length (so ``t`` is a distance).

        Raises:
            TypeError: ``samples`` not a float Dr.Jit array.
            ValueError: ``samples`` not a 2-vector array.

        References:
            Hartley, Zisserman 2004, "Multiple View Geometry in Computer Vision", 2nd ed.,
            sec. 6.1 (the pinhole camera); the axes and pixel centres of OpenCV's camera model.
        """,
    "project": """Pixel coordinates and depth of world points (the inverse of :meth:`generate_rays`).

        Args:
            points: ``Array3f``/``Array3f64`` of width N (N may be 0), world positions.

        Returns:
            ``(xy, depth)``: ``Array2`` and ``Float`` of width N, ``P = A^-1 (p - t)``,
            ``xy = (fx P_x / P_z + cx, fy P_y / P_z + cy)``, ``depth = P_z`` (test
            ``depth > 0``: points behind the camera get the mirrored projection; points
            on the camera's plane, ``depth = 0``, the camera centre among them, have
            none and get ``xy = 0`` with zero gradient, never NaN or inf).

        Gradients:
            With respect to ``points``, the intrinsics and ``to_world`` (Dr.Jit AD).

        Units:
            ``xy`` in pixels, ``depth`` in world units along the camera's z axis.

        Raises:
            TypeError: ``points`` not a float Dr.Jit array.
            ValueError: ``points`` not a 3-vector array.

        References:
            Hartley, Zisserman 2004, "Multiple View Geometry in Computer Vision", 2nd ed.,
            sec. 6.1 (the pinhole camera); the axes and pixel centres of OpenCV's camera model.
        """,
}

ANNOTATIONS = {"generate_rays": {"samples": dr.ArrayBase | None, "return": Ray},
    "project": {"points": dr.ArrayBase, "return": tuple[dr.ArrayBase, dr.ArrayBase]},
    "sample_edges": {"num_samples": int, "generator": np.random.Generator | None, "return": EdgeSamples}}
