"""Command line: ``python -m rayd info`` and ``python -m rayd bench``.

    python -m rayd info              versions of rayd and its backends, and the devices they see
    python -m rayd bench [ARGS...]   quick benchmark subset with a progress bar (needs a source
                                     checkout's benchmarks/ folder: run it from the
                                     repository root); ARGS go to benchmarks/run.py, e.g. ``--device cpu`` or ``--engines rayd,warp-sah``
"""

from __future__ import annotations

import importlib
import platform
import sys
from pathlib import Path

import rayd


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - not installed (or not as a distribution)
        return None


def info() -> int:
    """Print versions and the devices each backend can use."""
    print(f"rayd {rayd.__version__} ({Path(rayd.__file__).resolve().parent})")
    print(f"python {platform.python_version()} on {platform.platform()}")
    import numpy

    print(f"numpy {numpy.__version__}")

    try:
        import warp as wp

        if wp._src.context.runtime is None:
            wp.config.log_level = wp.LOG_WARNING
        wp.init()
        devices = ", ".join(f"{d.alias} ({d.name})" for d in wp.get_devices())
        print(f"warp {wp.config.version}: devices {devices}")
    except ImportError:
        print("warp: not installed (rayd needs warp-lang)")

    try:
        torch = importlib.import_module("torch")
        cuda = "no CUDA"
        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            cuda = f"CUDA {torch.version.cuda}: " + ", ".join(f"cuda:{i} {n}" for i, n in enumerate(names))
        print(f"torch {torch.__version__}: cpu, {cuda}  -> rayd.torch")
    except ImportError:
        print("torch: not installed (pip install rayd-geom[torch] for rayd.torch)")

    try:
        dr = importlib.import_module("drjit")
        backends = [name for name in ("LLVM", "CUDA") if dr.has_backend(getattr(dr.JitBackend, name))]
        print(f"drjit {dr.__version__}: backends {', '.join(backends) or 'none'}  -> rayd.drjit")
    except ImportError:
        print("drjit: not installed (pip install rayd-geom[drjit] for rayd.drjit)")

    try:
        from rayd.engine import cpu_embree

        print(f"CPU accelerator: {cpu_embree.describe()}")
    except ImportError:
        pass

    extras = {name: _version(name) for name in ("mitsuba", "embreex", "tqdm")}
    print("benchmark extras: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in extras.items()))
    return 0


def bench(argv: list[str]) -> int:
    """Run ``benchmarks/run.py --quick`` from a source checkout.

    The checkout is the one this rayd comes from (an editable install or ``PYTHONPATH=src``),
    else the current directory (a checkout beside a non-editable install).
    """
    beside = Path(rayd.__file__).resolve().parent.parent.parent
    root = next((r for r in (beside, Path.cwd()) if (r / "benchmarks" / "run.py").exists()), None)
    if root is None:
        print(
            "rayd bench: the benchmark suite lives in the source checkout's benchmarks/ folder, "
            f"which is neither beside this rayd ({Path(rayd.__file__).parent}) nor in the current "
            "directory; run it from the repository root of a checkout.",
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(root))
    from benchmarks import run

    args = list(argv)
    if "--quick" not in args and "--tiny" not in args:
        args.insert(0, "--quick")
    run.main(args)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "info":
        return info()
    if command == "bench":
        return bench(rest)
    print(f"python -m rayd: unknown command {command!r}; use 'info' or 'bench'", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
