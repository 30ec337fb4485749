"""Intel Embree on the CPU through ``embreex`` (``EmbreeScene.run``, one call per batch).

embreex exposes neither refit nor gradients: update is a rebuild of the scene, and
forward+backward is not offered. Both closest-hit metrics request embreex's full
output (``output=1``: t, u, v, Ng, primID), since its reduced output has no ``t``.
"""

from __future__ import annotations

import numpy as np

from .base import Engine


class Embree(Engine):
    name = "embreex"
    update_kind = "rebuild (embreex has no refit)"

    @classmethod
    def missing(cls, device):
        if device != "cpu":
            return "CPU only"
        try:
            import embreex  # noqa: F401
        except ImportError as exc:
            return f"not installed ({exc}); pip install embreex"
        return None

    @classmethod
    def versions(cls):
        from importlib.metadata import version

        return {"embreex": version("embreex")}

    def load(self, workload):
        self.vertex_sets = [workload.vertices, workload.moved_vertices()]
        self.faces = workload.faces
        self.o, self.d = workload.o, workload.d
        self.scene = self._new_scene(self.vertex_sets[0])

    def _new_scene(self, vertices):
        from embreex import mesh_construction, rtcore_scene

        scene = rtcore_scene.EmbreeScene()
        mesh_construction.TriangleMesh(scene, vertices, self.faces)
        # embreex commits (builds the BVH) on the first query: trace one ray.
        scene.run(self.o[:1], self.d[:1])
        return scene

    def closest(self, minimal=False):
        return self.scene.run(self.o, self.d, output=1)

    def hits(self, handle):
        prim = handle["primID"].astype(np.int64)
        t = handle["tfar"].astype(np.float64)
        t[prim < 0] = np.inf
        return prim, t

    def update(self, which):
        self.scene = self._new_scene(self.vertex_sets[which])

    def build(self):
        self.built = self._new_scene(self.vertex_sets[0])

    def close(self):
        self.scene = self.built = None
