"""The check each frontend makes first: its array library is installed (``rayd-geom[torch]``,
``rayd-geom[drjit]``), else an ``ImportError`` that names the package and the pip extra."""

from __future__ import annotations

import importlib


def require(module: str, message: str) -> None:
    """Import ``module`` (e.g. ``"torch"``) or raise ``ImportError(message)``.

    Args:
        module: the import name of the frontend's array library.
        message: what to tell the user (the package and the pip extra to install).

    Raises:
        ImportError: ``module`` cannot be imported; the original error is its cause.
    """
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise ImportError(message) from error
