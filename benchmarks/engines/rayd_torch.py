"""rayd through its public PyTorch frontend (`rayd.torch`), on CPU or CUDA."""

from __future__ import annotations

import numpy as np

from .base import Engine


class RaydTorch(Engine):
    name = "rayd.torch"
    update_kind = "update_mesh_vertices+sync (refit)"

    @classmethod
    def missing(cls, device):
        try:
            import torch

            import rayd.torch  # noqa: F401
        except ImportError as exc:
            return f"cannot import rayd.torch ({exc})"
        if device == "cuda" and not torch.cuda.is_available():
            return "torch has no CUDA device"
        return None

    @classmethod
    def versions(cls):
        import torch
        import warp as wp

        import rayd

        return {"rayd": rayd.__version__, "torch": torch.__version__, "warp": wp.config.version}

    #: On the CPU, ``rayd`` times the Warp path (``RAYD_CPU_ACCEL=warp``), ``rayd-embree`` the Embree one.
    _cpu_accel = False

    def load(self, workload):
        import torch

        import rayd.torch as rt
        from rayd.engine import cpu_embree

        self._was = cpu_embree._enabled
        cpu_embree.set_enabled(self._cpu_accel)

        self.torch, self.rt = torch, rt
        dev = torch.device(self.device)
        self.vertex_sets = [
            torch.from_numpy(workload.vertices).to(dev),
            torch.from_numpy(workload.moved_vertices()).to(dev),
        ]
        self.faces = torch.from_numpy(workload.faces).to(dev)
        self.ray = rt.Ray(torch.from_numpy(workload.o).to(dev), torch.from_numpy(workload.d).to(dev))
        self.scene = self._new_scene(self.vertex_sets[0])
        self.grad_vertices = None

    def _new_scene(self, vertices):
        scene = self.rt.Scene()
        scene.add_mesh(self.rt.Mesh(vertices, self.faces), dynamic=True)
        scene.build()
        return scene

    def closest(self, minimal=False):
        flags = self.rt.RayFlags.Minimal if minimal else self.rt.RayFlags.All
        return self.scene.intersect(self.ray, flags=flags)

    def hits(self, handle):
        prim = handle.prim_id.cpu().numpy().astype(np.int64)
        t = handle.t.detach().cpu().numpy().astype(np.float64)
        return prim, t

    def forward_backward(self):
        torch = self.torch
        if self.grad_vertices is None:
            self.grad_vertices = self.vertex_sets[0].clone().requires_grad_(True)
            self.grad_scene = self._new_scene(self.grad_vertices)
        self.grad_vertices.grad = None
        hit = self.grad_scene.intersect(self.ray, flags=self.rt.RayFlags.Minimal)
        loss = torch.where(hit.is_valid(), hit.t, torch.zeros((), dtype=hit.t.dtype, device=hit.t.device)).sum()
        loss.backward()

    def last_gradient(self):
        return None if self.grad_vertices is None else self.grad_vertices.grad.cpu().numpy()

    def update(self, which):
        self.scene.update_mesh_vertices(0, self.vertex_sets[which])
        self.scene.sync()

    def build(self):
        self.built = self._new_scene(self.vertex_sets[0])

    def synchronize(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def peak_memory(self, fn):
        torch = self.torch
        if self.device != "cuda":
            return None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del out
        return int(peak)

    def close(self):
        from rayd.engine import cpu_embree

        cpu_embree.set_enabled(self._was)
        self.scene = self.grad_scene = self.built = None
        self.vertex_sets = self.faces = self.ray = self.grad_vertices = None
        if self.device == "cuda":
            self.torch.cuda.empty_cache()



class RaydTorchEmbree(RaydTorch):
    """rayd.torch with the Embree CPU accelerator on (``rayd.engine.cpu_embree``; the CPU
    default where embreex imports). Its Embree scene is built at the second query on a
    geometry (``cpu_embree.WARM_QUERIES``): build_ms includes two one-ray queries to count it."""

    _cpu_accel = True

    def build(self):
        super().build()
        for _ in range(2):
            self.built.intersect(self.rt.Ray(self.ray.o[:1], self.ray.d[:1]))

    name = "rayd.torch (embree)"

    @classmethod
    def missing(cls, device):
        if device != "cpu":
            return "CPU only"
        try:
            from rayd.engine import cpu_embree
        except ImportError as exc:
            return f"cannot import rayd.engine.cpu_embree ({exc})"
        if not cpu_embree.available():
            return "embreex not installed; pip install embreex"
        return super().missing(device)

