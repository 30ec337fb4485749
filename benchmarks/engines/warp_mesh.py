"""Raw NVIDIA Warp: ``wp.Mesh`` + ``wp.mesh_query_ray`` in a minimal kernel (SAH or LBVH BVH).

What a user writing the Warp kernel by hand would get: no frontend, no autodiff to
vertices (Warp's ``mesh_query_ray`` adjoint does not reach the mesh's points), so the
forward+backward metric is not offered.
"""

from __future__ import annotations

import numpy as np

from .base import Engine

try:
    import warp as wp
except ImportError:  # pragma: no cover - rayd itself needs warp
    wp = None

if wp is not None:
    # Quiet start-up, the way rayd does it, unless Warp was started already.
    if wp._src.context.runtime is None:
        wp.config.log_level = wp.LOG_WARNING
    wp.init()

    @wp.kernel
    def _closest_all_kernel(
        mesh: wp.uint64,
        o: wp.array(dtype=wp.vec3),
        d: wp.array(dtype=wp.vec3),
        t: wp.array(dtype=float),
        prim_id: wp.array(dtype=wp.int32),
        uv: wp.array(dtype=wp.vec2),
        geo_n: wp.array(dtype=wp.vec3),
    ):
        i = wp.tid()
        q = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e30)
        if q.result:
            t[i] = q.t
            prim_id[i] = q.face
            uv[i] = wp.vec2(q.u, q.v)
            geo_n[i] = q.normal
        else:
            t[i] = wp.inf
            prim_id[i] = -1
            uv[i] = wp.vec2(0.0, 0.0)
            geo_n[i] = wp.vec3(0.0, 0.0, 0.0)

    @wp.kernel
    def _closest_minimal_kernel(
        mesh: wp.uint64,
        o: wp.array(dtype=wp.vec3),
        d: wp.array(dtype=wp.vec3),
        t: wp.array(dtype=float),
        prim_id: wp.array(dtype=wp.int32),
    ):
        i = wp.tid()
        q = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e30)
        if q.result:
            t[i] = q.t
            prim_id[i] = q.face
        else:
            t[i] = wp.inf
            prim_id[i] = -1


class WarpMesh(Engine):
    """``wp.Mesh(bvh_constructor=...)``; outputs allocated per call, as a user would."""

    update_kind = "copy points + wp.Mesh.refit"
    constructor = "sah"

    @classmethod
    def missing(cls, device):
        if wp is None:
            return "warp not installed"
        if device == "cuda" and not wp.is_cuda_available():
            return "Warp sees no CUDA device"
        if device == "cpu" and cls.constructor == "lbvh":
            return "Warp builds LBVH on CUDA only"
        return None

    @classmethod
    def versions(cls):
        return {"warp": wp.config.version}

    def load(self, workload):
        self.wp_device = wp.get_device("cuda:0" if self.device == "cuda" else "cpu")
        dev = self.wp_device
        self.points = wp.array(workload.vertices, dtype=wp.vec3, device=dev)
        self.vertex_sets = [
            wp.array(workload.vertices, dtype=wp.vec3, device=dev),
            wp.array(workload.moved_vertices(), dtype=wp.vec3, device=dev),
        ]
        self.indices = wp.array(workload.faces.ravel(), dtype=wp.int32, device=dev)
        self.o = wp.array(workload.o, dtype=wp.vec3, device=dev)
        self.d = wp.array(workload.d, dtype=wp.vec3, device=dev)
        self.n = workload.num_rays
        self.mesh = self._new_mesh()

    def _new_mesh(self):
        with wp.ScopedDevice(self.wp_device):
            return wp.Mesh(points=self.points, indices=self.indices, bvh_constructor=self.constructor)

    def closest(self, minimal=False):
        dev, n = self.wp_device, self.n
        t = wp.empty(n, dtype=float, device=dev)
        prim = wp.empty(n, dtype=wp.int32, device=dev)
        if minimal:
            wp.launch(_closest_minimal_kernel, dim=n, inputs=[self.mesh.id, self.o, self.d], outputs=[t, prim], device=dev)
            return t, prim
        uv = wp.empty(n, dtype=wp.vec2, device=dev)
        geo_n = wp.empty(n, dtype=wp.vec3, device=dev)
        wp.launch(_closest_all_kernel, dim=n, inputs=[self.mesh.id, self.o, self.d], outputs=[t, prim, uv, geo_n], device=dev)
        return t, prim, uv, geo_n

    def hits(self, handle):
        return handle[1].numpy().astype(np.int64), handle[0].numpy().astype(np.float64)

    def update(self, which):
        wp.copy(self.points, self.vertex_sets[which])
        with wp.ScopedDevice(self.wp_device):
            self.mesh.refit()

    def build(self):
        self.built = self._new_mesh()

    def synchronize(self):
        wp.synchronize_device(self.wp_device)

    def peak_memory(self, fn):
        # The kernels allocate nothing: a call's device memory is its output arrays.
        out = fn()
        return int(sum(a.capacity for a in out))

    def close(self):
        self.mesh = self.built = self.points = self.vertex_sets = self.indices = self.o = self.d = None


class WarpMeshSAH(WarpMesh):
    name = "warp.mesh_query_ray[sah]"
    constructor = "sah"


class WarpMeshLBVH(WarpMesh):
    name = "warp.mesh_query_ray[lbvh]"
    constructor = "lbvh"
