"""What :class:`rayd.core.frontend.SceneBase` binds of rayd.drjit (its module docstring lists the names).

The pieces are written in their own modules; this one names them. The edge, surface,
all-hits and reflection query modules are bound fenced (:class:`rayd.drjit._convert.Fenced`): their engine
launches are followed by the query fences of ``RAYD_DRJIT_QUERY_FENCES``.
"""

from rayd.drjit import _closest_point, _convert, _nearest_edge, _scene_allhits, _scene_reflect
from rayd.drjit._contents import ContentArrays as Arrays  # noqa: F401
from rayd.drjit._live import LiveState  # noqa: F401
from rayd.drjit._trace import check_active, check_ignore, check_ray  # noqa: F401
from rayd.drjit.edges import SceneEdges  # noqa: F401
from rayd.drjit.mesh import Mesh, check_transforms  # noqa: F401
from rayd.drjit.ray import Ray  # noqa: F401

edge_queries = _convert.Fenced(_nearest_edge, ("nearest_edge_ray", "nearest_edge_points", "nearest_edges",
                                               "silhouette_edges"))
surface = _convert.Fenced(_closest_point, ("closest_point", "winding_number", "contains", "signed_distance"))
all_hits = _convert.Fenced(_scene_allhits, ("intersect_all", "count_intersections"))
reflections = _convert.Fenced(_scene_reflect, ("trace_reflections", "specular_paths"))
