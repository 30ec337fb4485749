"""rayd: differentiable ray-geometry queries for PyTorch and Dr.Jit.

Import a frontend to use it::

    import rayd.torch as rt     # PyTorch tensors and autograd
    import rayd.drjit as rd     # Dr.Jit arrays and AD

``import rayd`` itself imports no backend; it only exposes the version and the
backend-neutral :class:`RayFlags`.
"""

from rayd.flags import RayFlags

__version__ = "0.1.0"

__all__ = ["RayFlags", "__version__"]
