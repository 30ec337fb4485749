"""Registers, stack frame and spills of rayd's search kernels for a CUDA architecture, without a GPU.

Usage:
    python benchmarks/kernel_registers.py [--walks instances_pair,instances_unified] [--caps 0,96] [--arch 90]

Each kernel (``rayd.engine.intersect.search_kernel(walk)`` under register cap ``cap``,
``rayd.engine.instances.set_instance_max_registers``) is compiled ahead of time to PTX by
Warp's NVRTC (``wp.compile_aot_module``) and assembled by the ``ptxas`` on the PATH
(``ptxas -v``). Warp's PTX may carry a newer ``.version`` than that ``ptxas`` accepts; it is
lowered to the ``ptxas``'s own (the search kernels use nothing newer). On a GPU machine Warp
compiles to a cubin with its own NVRTC, so its counts may differ a little; the differences
between kernels are what this is for.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
try:
    import rayd  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import warp as wp  # noqa: E402

from rayd.engine import instances, intersect  # noqa: E402


def ptxas_version() -> str:
    """The PTX ISA version the ``ptxas`` on the PATH accepts (``"9.0"`` for CUDA 13.0)."""
    text = subprocess.run(["ptxas", "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = re.search(r"release (\d+)\.(\d+)", text).groups()
    return f"{int(major) - 4}.{minor}"  # CUDA 12.x <-> PTX 8.x, 13.x <-> 9.x


def usage(walk: str, cap: int, arch: int, workdir: Path, isa: str) -> dict:
    """ptxas's figures for the forward search kernel of ``walk`` under register cap ``cap``."""
    instances.set_instance_max_registers(cap)
    kernel = intersect.search_kernel(walk)
    paths = wp.compile_aot_module(kernel.module, arch=arch, module_dir=str(workdir), use_ptx=True)
    ptx = Path(paths[0])
    text = ptx.read_bytes().rstrip(b"\0")
    text = re.sub(rb"^\.version \d+\.\d+", f".version {isa}".encode(), text, count=1, flags=re.M)
    ptx.write_bytes(text)
    out = subprocess.run(["ptxas", "-v", f"-arch=sm_{arch}", "-o", "/dev/null", str(ptx)], capture_output=True,
                         text=True).stderr
    block = out[out.find("forward"):]
    pick = {"registers": r"Used (\d+) registers", "stack_frame_bytes": r"(\d+) bytes stack frame",
            "spill_store_bytes": r"(\d+) bytes spill stores", "spill_load_bytes": r"(\d+) bytes spill loads"}
    found = {k: re.search(p, block) for k, p in pick.items()}
    return {"walk": walk, "cap": cap, **{k: int(m.group(1)) if m else None for k, m in found.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walks", default="instances_pair,instances_pairtop,instances_unified,instances_unified_cull")
    parser.add_argument("--caps", default="0")
    parser.add_argument("--arch", type=int, default=90)
    args = parser.parse_args(argv)
    wp.init()
    isa = ptxas_version()
    print("| kernel | cap | registers | stack frame B | spill stores B | spill loads B |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for walk in args.walks.split(","):
            for cap in (int(c) for c in args.caps.split(",")):
                r = usage(walk, cap, args.arch, Path(tmp), isa)
                print(f"| {walk} | {cap} | {r['registers']} | {r['stack_frame_bytes']} | {r['spill_store_bytes']} | "
                      f"{r['spill_load_bytes']} |", flush=True)
    instances.set_instance_max_registers(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
