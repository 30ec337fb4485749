"""Instance walks side by side in one process (issue 18): closest hit ``Minimal`` and any hit per
``RAYD_INSTANCE_WALK`` variant and register cap, round-robin per repeat, on the workload of
``benchmarks/instances.py``, next to Mitsuba 3's instances of the same scene.

Usage:
    python benchmarks/instance_walks_ab.py --device cuda --mitsuba --json OUT.jsonl \\
        [--variants nested,pairtop,unified,wide_both,unified@64] [--instances 1000] [--tris 100000] [--rays N]

A variant is ``walk`` or ``walk@N`` (``rayd.engine.instances.set_instance_walk`` and
``set_instance_max_registers(N)``: CUDA ``__maxnreg__`` of the instance search kernel). Each
variant gets its own scene (same placements and rays); every repeat times each variant once in
turn (closest ``Minimal``, closest ``All``, then any hit), after warm-up, and the medians are
reported, with the ratio of the slowest to the fastest sample (``spread``) and the GPU's clock,
temperature and throttle reasons before and after (``instances.gpu_state``). Each variant's
winners (``global_prim_id``, ``t``, ``shadow_test``) are compared with the first variant's. On
CUDA the search kernel's registers and local memory per thread are read from the driver
(``cuFuncGetAttribute``; ``None`` where that fails). On the CPU the clock is process time
(the host is shared), on CUDA wall time around a synchronised call. One JSON line per variant,
then one for Mitsuba.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
try:
    import rayd  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import rayd.torch as rt  # noqa: E402
from benchmarks.instances import gpu_state, median_ms, workload  # noqa: E402
from rayd.engine import instances as inst_level  # noqa: E402
from rayd.engine import intersect  # noqa: E402


def kernel_attributes(walk: str, device: str) -> dict:
    """Registers and local bytes per thread of the search kernel of ``walk`` (CUDA, after its first launch)."""
    out = {"registers": None, "local_bytes": None}
    if device != "cuda":
        return out
    try:
        import warp as wp

        kernel = intersect.search_kernel(walk)
        hooks = kernel.module.get_kernel_hooks(kernel, wp.get_device("cuda:0"))
        handle = hooks.forward.value if hasattr(hooks.forward, "value") else int(hooks.forward)
        lib = ctypes.CDLL("libcuda.so.1")
        for key, attribute in (("registers", 4), ("local_bytes", 3)):  # CU_FUNC_ATTRIBUTE_NUM_REGS / LOCAL_SIZE_BYTES
            value = ctypes.c_int(0)
            if lib.cuFuncGetAttribute(ctypes.byref(value), attribute, ctypes.c_void_p(handle)) == 0:
                out[key] = value.value
    except Exception:  # noqa: BLE001 - a diagnostic only
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--variants", default="nested,pairtop,unified")
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--tris", type=int, default=100_000)
    parser.add_argument("--rays", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--mitsuba", action="store_true")
    parser.add_argument("--json", default=None, help="append the JSON lines here")
    args = parser.parse_args(argv)
    device = args.device
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    clock = time.perf_counter if cuda else time.process_time
    rays = args.rays or (1 << 22 if cuda else 1 << 14)
    v, f, first, second, o, d = workload(args.instances, args.tris, rays)
    ray = rt.Ray(o.to(device), d.to(device))
    variants = []
    for spec in args.variants.split(","):
        walk, _, cap = spec.partition("@")
        inst_level.set_instance_walk(walk)
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v.to(device), f.to(device)))
        scene.set_shape_enabled(0, False)
        for k in range(args.instances):
            scene.add_instance(0, first[k].to(device))
        sync()
        start = time.perf_counter()
        scene.build()
        sync()
        variants.append({"spec": spec, "walk": walk, "cap": int(cap or 0), "scene": scene,
                         "build_ms": (time.perf_counter() - start) * 1e3, "closest": [], "all": [], "any": []})
        print(f"[instance_walks_ab] built {spec}", file=sys.stderr, flush=True)
    inst_level.set_instance_walk("nested")

    def closest(var):
        return var["scene"].intersect(ray, flags=rt.RayFlags.Minimal)

    def closest_all(var):
        return var["scene"].intersect(ray)

    def any_hit(var):
        return var["scene"].shadow_test(ray)

    for var in variants:  # compile and warm up; answers
        inst_level.set_instance_max_registers(var["cap"])
        for _ in range(3):
            closest(var), closest_all(var), any_hit(var)
        sync()
        hit = closest(var)
        var["answer"] = (hit.global_prim_id.cpu(), hit.t.cpu(), any_hit(var).cpu())
        var["attributes"] = kernel_attributes(var["scene"]._core.accel.search_walk, device)
    gpu_before = gpu_state() if cuda else {}
    for _ in range(args.repeats):
        for var in variants:
            inst_level.set_instance_max_registers(var["cap"])
            for key, fn in (("closest", closest), ("all", closest_all), ("any", any_hit)):
                sync()
                start = clock()
                fn(var)
                sync()
                var[key].append((clock() - start) * 1e3)
    inst_level.set_instance_max_registers(0)
    gpu_after = gpu_state() if cuda else {}
    base = variants[0]["answer"]
    records = []
    for var in variants:
        a = var["answer"]
        record = {
            "benchmark": "instance_walks_ab", "device": torch.cuda.get_device_name() if cuda else "cpu",
            "clock": "wall" if cuda else "process", "variant": var["spec"],
            "search_walk": var["scene"]._core.accel.search_walk, "max_registers": var["cap"],
            "instances": args.instances, "mesh_triangles": int(f.shape[0]), "rays": rays,
            "build_ms": var["build_ms"],
            "closest_minimal_ms": statistics.median(var["closest"]), "closest_minimal_min_ms": min(var["closest"]),
            "closest_all_ms": statistics.median(var["all"]),
            "any_hit_ms": statistics.median(var["any"]), "any_hit_min_ms": min(var["any"]),
            "spread": max(max(var[k]) / min(var[k]) for k in ("closest", "all", "any")),
            "gpu_before": gpu_before, "gpu_after": gpu_after,
            "same_prim_as_first": float((a[0] == base[0]).double().mean()),
            "same_t_as_first": bool(torch.equal(a[1], base[1])),
            "same_shadow_as_first": bool(torch.equal(a[2], base[2])),
            **var["attributes"],
        }
        records.append(record)
        line = json.dumps(record)
        print(line)
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(line + "\n")
    mitsuba = {}
    if args.mitsuba:
        from benchmarks.engines.mitsuba3_instances import measure

        figures, _ = measure(v.numpy(), f.numpy(), first.numpy(), second.numpy(), o.numpy(), d.numpy(), device,
                             median_ms)
        mitsuba = figures
        line = json.dumps({"benchmark": "instance_walks_ab", "engine": "mitsuba", "rays": rays, **figures})
        print(line)
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(line + "\n")
    print(table(records, mitsuba))
    if cuda:
        print(f"GPU before: {gpu_before}\nGPU after: {gpu_after}")
    return 0


def table(records: list[dict], mitsuba: dict) -> str:
    """The variants as a Markdown table, with ratios to the first variant and to Mitsuba."""
    first = records[0]
    head = ("| variant | kernel | registers | local B | closest `Minimal` ms | closest `All` ms | any hit ms | "
            "closest / first | any / first | closest / Mitsuba | any / Mitsuba | spread | same winners |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records:
        mc, ma = mitsuba.get("mitsuba_closest_minimal_ms"), mitsuba.get("mitsuba_any_hit_ms")
        rows.append(
            f"| {r['variant']} | {r['search_walk']} | {r['registers']} | {r['local_bytes']} | "
            f"{r['closest_minimal_ms']:.2f} | {r['closest_all_ms']:.2f} | {r['any_hit_ms']:.2f} | "
            f"{r['closest_minimal_ms'] / first['closest_minimal_ms']:.3f} | {r['any_hit_ms'] / first['any_hit_ms']:.3f} | "
            f"{r['closest_minimal_ms'] / mc if mc else float('nan'):.2f} | {r['any_hit_ms'] / ma if ma else float('nan'):.2f} | "
            f"{r['spread']:.2f} | "
            f"{r['same_prim_as_first']:.6f} / {r['same_t_as_first']} / {r['same_shadow_as_first']} |")
    if mitsuba:
        rows.append(f"Mitsuba {mitsuba.get('mitsuba_version')} ({mitsuba.get('mitsuba_variant')}): closest "
                    f"{mitsuba['mitsuba_closest_minimal_ms']:.2f} ms, any hit {mitsuba['mitsuba_any_hit_ms']:.2f} ms")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
