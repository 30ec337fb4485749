"""What :class:`rayd.core.frontend.SceneBase` binds of rayd.torch (its module docstring lists the names).

Only imports: the pieces are written in their own modules; this one names them.
"""

from rayd.torch import _closest_point as surface, _nearest_edge as edge_queries  # noqa: F401
from rayd.torch import _scene_allhits as all_hits, _scene_reflect as reflections  # noqa: F401
from rayd.torch._convert import TorchArrays as Arrays  # noqa: F401
from rayd.torch._live import LiveState  # noqa: F401
from rayd.torch._trace import check_active, check_ignore, check_ray  # noqa: F401
from rayd.torch.edges import SceneEdges  # noqa: F401
from rayd.torch.mesh import Mesh, check_transforms  # noqa: F401
from rayd.torch.ray import Ray  # noqa: F401
