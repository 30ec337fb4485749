"""Backend-neutral compute: acceleration structures and query kernels (Warp only).

This package imports NVIDIA Warp and NumPy, never torch or drjit. Frontends hand it
zero-copy Warp views of their tensors and receive results in arrays they own.
"""

from rayd.engine.accel import SceneAccel
from rayd.engine.evaluate import closest_fields, evaluate_hits, evaluate_hits_adjoint, evaluate_t_adjoint
from rayd.engine.frame import search_centre
from rayd.engine.instances import InstanceLevel
from rayd.engine.intersect import closest_hit, search
from rayd.engine.rays import RayBatch
from rayd.engine.reflect import ShapeLookup, trace_chain
from rayd.engine.reflect_evaluate import evaluate_chain
from rayd.engine.runtime import launch_stream, warp_device
from rayd.engine.triangles import TriangleScene

__all__ = ["InstanceLevel", "RayBatch", "SceneAccel", "ShapeLookup", "TriangleScene", "closest_fields", "closest_hit", "evaluate_chain", "evaluate_hits", "evaluate_hits_adjoint", "evaluate_t_adjoint", "launch_stream", "search", "search_centre", "trace_chain", "warp_device"]
