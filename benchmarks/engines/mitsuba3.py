"""Mitsuba 3 (3.9.x): ``Scene.ray_intersect_preliminary`` / ``ray_intersect``.

Variant ``cuda_ad_rgb`` on the GPU (OptiX; on an H200, without RT cores, traversal
runs on the SMs) and ``llvm_ad_rgb`` on the CPU (Embree inside Mitsuba). The scene is
built with ``mi.load_dict`` from a mesh whose vertex and face buffers are set from the
workload's arrays.

Metrics map as follows: closest hit (all fields) = ``ray_intersect(ray, RayFlags.All)``
(preliminary intersection + full ``SurfaceInteraction``); reduced =
``ray_intersect_preliminary`` (t, prim_index, shape); forward+backward = the former
with gradients enabled on the vertex buffer and ``dr.backward`` of sum(t over hits);
update = set ``vertex_positions`` + ``params.update()`` (Mitsuba rebuilds its
acceleration structure there); build = ``mi.load_dict`` of a scene with the same mesh.
"""

from __future__ import annotations

import numpy as np

from .base import Engine

_VARIANTS = {"cuda": "cuda_ad_rgb", "cpu": "llvm_ad_rgb"}


class Mitsuba3(Engine):
    name = "mitsuba3"
    update_kind = "params.update() (rebuild)"

    @classmethod
    def missing(cls, device):
        try:
            import mitsuba as mi
        except ImportError as exc:
            return f"not installed ({exc}); pip install mitsuba==3.9.1"
        variant = _VARIANTS[device]
        if variant not in mi.variants():
            return f"variant {variant} not in this mitsuba build"
        current = mi.variant()
        if current is not None and current != variant:
            return f"this process already uses variant {current}"
        try:
            mi.set_variant(variant)
        except Exception as exc:  # noqa: BLE001 - no LLVM / no CUDA: report and skip
            return f"variant {variant} unusable here ({exc})"
        return None

    @classmethod
    def versions(cls):
        import drjit as dr
        import mitsuba as mi

        return {"mitsuba": mi.__version__, "drjit": dr.__version__, "variant": mi.variant()}

    def load(self, workload):
        import drjit as dr
        import mitsuba as mi

        mi.set_variant(_VARIANTS[self.device])
        self.mi, self.dr = mi, dr
        self.coherent = workload.coherent
        self.num_vertices, self.num_faces = workload.vertices.shape[0], workload.faces.shape[0]
        self.vertex_sets = [mi.Float(workload.vertices.ravel()), mi.Float(workload.moved_vertices().ravel())]
        self.faces = mi.UInt32(workload.faces.ravel().astype(np.uint32))
        self.mesh = self._new_mesh()
        self.scene = self._new_scene()
        self.params = mi.traverse(self.scene)
        o, d = workload.o, workload.d
        self.ray = mi.Ray3f(
            o=mi.Point3f(mi.Float(o[:, 0]), mi.Float(o[:, 1]), mi.Float(o[:, 2])),
            d=mi.Vector3f(mi.Float(d[:, 0]), mi.Float(d[:, 1]), mi.Float(d[:, 2])),
        )
        dr.eval(self.ray)
        self.grad_vertices = None
        dr.sync_thread()

    def _new_mesh(self):
        mi = self.mi
        mesh = mi.Mesh("bench", self.num_vertices, self.num_faces, has_vertex_normals=False, has_vertex_texcoords=False)
        params = mi.traverse(mesh)
        params["vertex_positions"] = self.vertex_sets[0]
        params["faces"] = self.faces
        params.update()
        return mesh

    def _new_scene(self):
        return self.mi.load_dict({"type": "scene", "mesh": self.mesh})

    def closest(self, minimal=False):
        mi, dr = self.mi, self.dr
        if minimal:
            pi = self.scene.ray_intersect_preliminary(self.ray, coherent=self.coherent)
            dr.eval(pi.t, pi.prim_index, pi.shape_index)
            return pi
        si = self.scene.ray_intersect(self.ray, ray_flags=mi.RayFlags.All, coherent=self.coherent)
        dr.eval(si)
        return si

    def hits(self, handle):
        t = np.array(handle.t, dtype=np.float64)
        prim = np.array(handle.prim_index, dtype=np.int64)
        miss = ~np.isfinite(t)
        prim[miss] = -1
        t[miss] = np.inf
        return prim, t

    def forward_backward(self):
        mi, dr = self.mi, self.dr
        if self.grad_vertices is None:
            self.grad_vertices = mi.Float(self.vertex_sets[0])
            dr.enable_grad(self.grad_vertices)
            self.params["mesh.vertex_positions"] = self.grad_vertices
            self.params.update()
        dr.clear_grad(self.grad_vertices)
        si = self.scene.ray_intersect(self.ray, ray_flags=mi.RayFlags.All, coherent=self.coherent)
        loss = dr.sum(dr.select(si.is_valid(), si.t, 0.0))
        dr.backward(loss)
        dr.eval(dr.grad(self.grad_vertices))

    def last_gradient(self):
        if self.grad_vertices is None:
            return None
        return np.array(self.dr.grad(self.grad_vertices)).reshape(-1, 3)

    def update(self, which):
        if self.grad_vertices is not None:  # leave the AD mode of forward_backward
            self.grad_vertices = None
        self.params["mesh.vertex_positions"] = self.vertex_sets[which]
        self.params.update()

    def build(self):
        self.built = self._new_scene()

    def synchronize(self):
        self.dr.sync_thread()

    def peak_memory(self, fn):
        dr = self.dr
        dr.sync_thread()
        dr.detail.malloc_clear_statistics()
        base = dr.detail.malloc_watermark(dr.JitBackend.CUDA)
        out = fn()
        dr.sync_thread()
        peak = dr.detail.malloc_watermark(dr.JitBackend.CUDA) - base
        del out
        return int(peak)

    def release_cached_memory(self):
        self.dr.sync_thread()
        self.dr.flush_malloc_cache()

    def close(self):
        self.scene = self.built = self.mesh = self.params = self.ray = None
        self.vertex_sets = self.faces = self.grad_vertices = None
        self.dr.sync_thread()
        self.dr.flush_malloc_cache()
