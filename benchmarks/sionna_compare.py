"""rayd.torch find_specular_paths vs Sionna RT's PathSolver on the street canyon (specular only).

Run in an environment with both (Sionna RT pins mitsuba==3.9.1 and drjit==1.5.0, the
versions rayd's bench extra uses, so one venv with system site packages works)::

    python3 -m venv --system-site-packages /tmp/sionna-venv
    /tmp/sionna-venv/bin/pip install --no-deps sionna-rt==2.2.0
    /tmp/sionna-venv/bin/pip install importlib_resources ipywidgets pythreejs   # imported by sionna.rt
    PYTHONPATH=src /tmp/sionna-venv/bin/python benchmarks/sionna_compare.py --quick --json benchmarks/results/sionna_cpu.jsonl

Same scene (``examples/reflections/street_canyon.py``, one mesh, so Sionna's primitive
ids are rayd's ``global_prim_id`` s), same transmitter and receivers, line of sight plus
specular reflections up to ``--max-depth``, no diffraction, refraction or diffuse
scattering. Compares the sets of (receiver, face sequence) and the delays of the common
paths (Sionna's ``tau`` against rayd's ``length / c``), and the times; draws
``examples/reflections/sionna_comparison.png``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
C = 299_792_458.0


def _example():
    spec = importlib.util.spec_from_file_location("street_canyon", ROOT / "examples/reflections/street_canyon.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sionna_paths(vertices, faces, tx, rx, max_depth, samples, variant):
    import mitsuba as mi

    mi.set_variant(variant)
    import sionna.rt as srt

    folder = Path(tempfile.mkdtemp())
    mesh = mi.Mesh("canyon", vertices.shape[0], faces.shape[0])
    params = mi.traverse(mesh)
    params["vertex_positions"] = mi.Float(vertices.astype(np.float32).reshape(-1))
    params["faces"] = mi.UInt32(faces.astype(np.uint32).reshape(-1))
    params.update()
    mesh.write_ply(str(folder / "canyon.ply"))
    xml = f"""<scene version="2.1.0">
      <bsdf type="itu-radio-material" id="mat-concrete">
        <string name="type" value="concrete"/><float name="thickness" value="0.2"/>
      </bsdf>
      <shape type="ply" id="canyon">
        <string name="filename" value="{folder / 'canyon.ply'}"/><ref id="mat-concrete" name="bsdf"/>
      </shape>
    </scene>"""
    scene = srt.load_scene_from_string(xml, merge_shapes=False)
    array = srt.PlanarArray(num_rows=1, num_cols=1, pattern="iso", polarization="V")
    scene.tx_array, scene.rx_array = array, array
    scene.add(srt.Transmitter(name="tx", position=mi.Point3f(*[float(x) for x in tx])))
    for i, p in enumerate(rx):
        scene.add(srt.Receiver(name=f"rx{i}", position=mi.Point3f(*[float(x) for x in p])))
    solver = srt.PathSolver()

    def solve():
        return solver(scene, max_depth=max_depth, los=True, specular_reflection=True, diffuse_reflection=False,
                      refraction=False, diffraction=False, synthetic_array=True, samples_per_src=samples)

    solve()  # compile
    start = time.perf_counter()
    paths = solve()
    tau = np.array(paths.tau)  # (num_rx, num_tx, P) with a synthetic array
    elapsed = (time.perf_counter() - start) * 1e3
    valid = np.array(paths.valid).astype(bool)
    prims = np.array(paths.primitives)  # (max_depth, num_rx, num_tx, P)
    inter = np.array(paths.interactions)
    found = {}
    for r, t, p in zip(*np.nonzero(valid)):
        seq = tuple(int(prims[d, r, t, p]) for d in range(max_depth) if int(inter[d, r, t, p]) != 0)
        found[(int(r), seq)] = float(tau[r, t, p])
    return found, elapsed


def rayd_paths(vertices, faces, tx, rx, max_depth, num_rays):
    import rayd.torch as rt

    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(vertices), torch.tensor(faces)))
    scene.build()
    src, dst = torch.tensor(tx)[None], torch.tensor(rx)

    def solve():
        return rt.find_specular_paths(scene, src, dst, max_depth, num_rays=num_rays)

    solve()
    start = time.perf_counter()
    out = solve()
    elapsed = (time.perf_counter() - start) * 1e3
    found = {}
    for t, p in out.valid[0].nonzero().tolist():
        seq = tuple(x for x in out.prim_sequence[0, t, p].tolist() if x >= 0)
        found[(t, seq)] = float(out.length[0, t, p]) / C
    return found, elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="15 receivers")
    parser.add_argument("--max-depth", type=int, default=2)
    parser.add_argument("--samples", type=int, default=1_000_000, help="Sionna samples_per_src")
    parser.add_argument("--num-rays", type=int, default=100_000, help="rayd num_rays")
    parser.add_argument("--variant", default="llvm_ad_mono_polarized")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--figure", type=Path, default=ROOT / "examples/reflections/sionna_comparison.png")
    args = parser.parse_args()
    ex = _example()
    v, f = ex.canyon()
    vertices, faces = v.numpy(), f.numpy()
    tx = np.array([-2.0, -30.0, 6.0])
    rx = ex.receivers(args.quick).numpy()
    ours, ours_ms = rayd_paths(vertices, faces, tx, rx, args.max_depth, args.num_rays)
    theirs, theirs_ms = sionna_paths(vertices, faces, tx, rx, args.max_depth, args.samples, args.variant)
    common = sorted(set(ours) & set(theirs))
    rel = np.array([abs(ours[k] - theirs[k]) / ours[k] for k in common]) if common else np.array([np.nan])
    row = {"bench": "sionna_compare", "receivers": len(rx), "max_depth": args.max_depth,
           "rayd_paths": len(ours), "sionna_paths": len(theirs), "common": len(common),
           "only_rayd": len(set(ours) - set(theirs)), "only_sionna": len(set(theirs) - set(ours)),
           "delay_rel_diff_max": float(rel.max()), "delay_rel_diff_median": float(np.median(rel)),
           "rayd_ms": ours_ms, "sionna_ms": theirs_ms, "rayd_num_rays": args.num_rays,
           "sionna_samples_per_src": args.samples, "sionna_variant": args.variant,
           "only_rayd_examples": [list(map(str, k)) for k in sorted(set(ours) - set(theirs))[:5]],
           "only_sionna_examples": [list(map(str, k)) for k in sorted(set(theirs) - set(ours))[:5]]}
    print(json.dumps(row))
    if args.json is not None:
        with open(args.json, "a") as fh:
            fh.write(json.dumps(row) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    a = np.array([ours[k] for k in common]) * 1e9
    b = np.array([theirs[k] for k in common]) * 1e9
    axes[0].scatter(a, b, s=8)
    axes[0].plot([a.min(), a.max()], [a.min(), a.max()], color="0.5", lw=0.8)
    axes[0].set_xlabel("rayd delay (ns)")
    axes[0].set_ylabel("Sionna RT delay (ns)")
    axes[0].set_title(f"{len(common)} common paths (max rel. diff {row['delay_rel_diff_max']:.1e})")
    axes[1].bar(["rayd only", "common", "Sionna only"], [row["only_rayd"], len(common), row["only_sionna"]])
    axes[1].set_title(f"paths, order <= {args.max_depth}, {len(rx)} receivers\n"
                      f"time: rayd {ours_ms:.0f} ms, Sionna RT {theirs_ms:.0f} ms (CPU)")
    fig.tight_layout()
    fig.savefig(args.figure, dpi=110)


if __name__ == "__main__":
    main()
