"""Specular paths in a street canyon: paths to a grid of receivers, a delay profile, and one
gradient step that moves the transmitter to shorten a path (rayd.torch).

The scene: the ground and two rows of box buildings along a street (x in [-6, 6]).
A transmitter stands in the street; receivers lie on a grid at 1.5 m height.
``rt.find_specular_paths`` finds every specular path up to ``--bounces`` reflections
(shoot-and-bounce candidates refined by the image method); lengths are differentiable,
so ``d(length)/d(tx)`` moves the transmitter.

Run::

    python3 examples/reflections/street_canyon.py            # pictures in examples/reflections/
    python3 examples/reflections/street_canyon.py --quick    # small grid, order 2, seconds; pictures only with --out

(with rayd installed; in a checkout without installing, prefix ``PYTHONPATH=src``).

Pictures: ``paths_top.png`` (paths over the scene, top view), ``delay_profile.png`` (delays
``length / c`` of one receiver against relative power ``1 / length^2``), ``gradient_step.png``
(the chosen path before and after one step).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

import rayd.torch as rt

C = 299_792_458.0  # m/s
BOX_FACES = [[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4], [2, 3, 7], [2, 7, 6], [1, 2, 6],
             [1, 6, 5], [0, 4, 7], [0, 7, 3]]
#: Buildings (x0, y0, x1, y1, height): two rows along the street, with gaps between them.
BUILDINGS = [(-16, -40, -6, -22, 18), (-14, -18, -6, -2, 12), (-18, 2, -6, 20, 24), (-15, 24, -6, 40, 15),
             (6, -40, 15, -28, 14), (6, -24, 17, -6, 20), (6, -2, 14, 14, 10), (6, 18, 16, 40, 22)]


def canyon(dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Vertices (V, 3) and faces (F, 3): the ground (z = 0) and the boxes of ``BUILDINGS``."""
    v = [[-60, -60, 0], [60, -60, 0], [60, 60, 0], [-60, 60, 0]]
    f = [[0, 1, 2], [0, 2, 3]]
    for x0, y0, x1, y1, h in BUILDINGS:
        base = len(v)
        # Lifted 1 mm off the ground so box bottoms do not coincide with the ground plane.
        v += [[x0, y0, 1e-3], [x1, y0, 1e-3], [x1, y1, 1e-3], [x0, y1, 1e-3],
              [x0, y0, h], [x1, y0, h], [x1, y1, h], [x0, y1, h]]
        f += [[a + base, b + base, c + base] for a, b, c in BOX_FACES]
    return torch.tensor(v, dtype=dtype), torch.tensor(f)


def receivers(quick: bool) -> torch.Tensor:
    """(T, 3) receiver grid in the street, 1.5 m above the ground."""
    xs = np.linspace(-4.5, 4.5, 3 if quick else 7)
    ys = np.linspace(-34.0, 34.0, 5 if quick else 18)
    grid = np.array([[x, y, 1.5] for y in ys for x in xs])
    return torch.tensor(grid, dtype=torch.float64)


def run(quick: bool = False, out: Path | None = None, bounces: int | None = None, num_rays: int | None = None,
        receiver: int | None = None, step: float = 0.5) -> dict:
    """Find the paths, draw the pictures (if ``out``), take one gradient step; returns a summary dict."""
    bounces = bounces or (2 if quick else 3)
    num_rays = num_rays or (20_000 if quick else 200_000)
    vertices, faces = canyon()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, faces))
    scene.build()
    tx = torch.tensor([[-2.0, -30.0, 6.0]], dtype=torch.float64, requires_grad=True)
    rx = receivers(quick)
    found = rt.find_specular_paths(scene, tx, rx, bounces, num_rays=num_rays)
    valid = found.valid[0]  # (T, P)
    counts = valid.sum(-1)
    if receiver is None:  # the receiver nearest to a point up the street, far from the transmitter
        receiver = torch.argmin((rx[:, :2] - torch.tensor([3.0, 12.0], dtype=rx.dtype)).norm(dim=-1))
    r = int(receiver)
    lengths = found.length[0, r][valid[r]].detach()
    orders = found.num_bounces[0, r][valid[r]]
    los = valid[r] & (found.num_bounces[0, r] == 0)
    los_length = float(found.length[0, r][los][0].detach()) if los.any() else math.nan
    # The chosen path: the strongest (shortest) reflected one of receiver r.
    reflected = torch.nonzero(valid[r] & (found.num_bounces[0, r] > 0)).flatten()
    k = int(reflected[0])
    seq = found.prim_sequence[0, r, k]
    before = found.length[0, r, k]
    (grad,) = torch.autograd.grad(before, tx)
    moved = (tx - step * grad / grad.norm()).detach()
    after = scene.specular_paths(moved[0], rx[r], seq)
    summary = {
        "receivers": int(rx.shape[0]), "bounces": bounces, "num_rays": num_rays,
        "paths_total": int(valid.sum()), "paths_per_receiver_min": int(counts.min()),
        "paths_per_receiver_max": int(counts.max()), "receiver": r, "receiver_paths": int(valid[r].sum()),
        "los_length": los_length, "los_expected": float((tx[0] - rx[r]).norm().detach()),
        "path_sequence": [int(x) for x in seq.tolist()], "path_valid_after": bool(after.valid),
        "length_before": float(before.detach()), "length_after": float(after.length.detach()), "step": step,
        "tx_before": tx[0].tolist(), "tx_after": moved[0].tolist(),
        "delays_ns": [float(x) for x in (lengths / C * 1e9).tolist()],
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        _pictures(out, scene, tx.detach()[0], rx, found, r, lengths, orders, k, moved[0], after)
    return summary


def _pictures(out, scene, tx, rx, found, r, lengths, orders, k, moved, after) -> None:
    try:
        import matplotlib
    except ImportError as error:
        raise SystemExit(f"{__file__}: its pictures need matplotlib: pip install 'rayd-geom[examples]' ({error})") from error

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    def street(ax):
        for x0, y0, x1, y1, h in BUILDINGS:
            ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, color="0.75", zorder=0))
            ax.text((x0 + x1) / 2, (y0 + y1) / 2, f"{h} m", ha="center", va="center", fontsize=7, color="0.3")
        ax.set_xlim(-20, 20)
        ax.set_ylim(-42, 42)
        ax.set_aspect("equal")
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")

    def polyline(s, t, p, src):
        pts = found.points[s, t, p][: int(found.num_bounces[s, t, p])].detach().numpy()
        return np.vstack([src, pts, rx[t].numpy()])

    colors = {0: "tab:green", 1: "tab:blue", 2: "tab:orange", 3: "tab:red"}
    fig, ax = plt.subplots(figsize=(6, 9))
    street(ax)
    counts = found.valid[0].sum(-1).numpy()
    sc = ax.scatter(rx[:, 0], rx[:, 1], c=counts, cmap="viridis", s=30, zorder=3, label="receivers")
    fig.colorbar(sc, ax=ax, shrink=0.6, label="paths found")
    for p in torch.nonzero(found.valid[0, r]).flatten().tolist():
        line = polyline(0, r, p, tx.numpy())
        order = int(found.num_bounces[0, r, p])
        ax.plot(line[:, 0], line[:, 1], color=colors.get(order, "k"), lw=0.8, alpha=0.8, zorder=2)
    for order, color in colors.items():
        ax.plot([], [], color=color, label=f"order {order}")
    ax.scatter([tx[0]], [tx[1]], marker="^", s=90, color="k", zorder=4, label="transmitter")
    ax.scatter([rx[r, 0]], [rx[r, 1]], marker="*", s=160, color="tab:red", zorder=4, label=f"receiver {r}")
    ax.set_title(f"Specular paths to receiver {r} (top view)")
    ax.legend(loc="upper left", fontsize=7, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(out / "paths_top.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    delays = lengths.numpy() / C * 1e9
    power = -20 * np.log10(lengths.numpy() / lengths.numpy().min())
    for order in sorted(set(orders.tolist())):
        sel = (orders == order).numpy()
        markers, stems, _ = ax.stem(delays[sel], power[sel], bottom=power.min() - 5, basefmt=" ")
        plt.setp(markers, color=colors.get(order, "k"), label=f"order {order}")
        plt.setp(stems, color=colors.get(order, "k"))
    ax.set_xlabel("delay (ns)")
    ax.set_ylabel("relative power 1/length² (dB)")
    ax.set_title(f"Delay profile of receiver {r} (specular paths, free-space spreading only)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "delay_profile.png", dpi=110)
    plt.close(fig)

    old = polyline(0, r, k, tx.numpy())
    new = np.vstack([moved.numpy(), after.points[: int(after.num_bounces)].detach().numpy(), rx[r].numpy()])
    fig, axes = plt.subplots(1, 2, figsize=(11, 7), gridspec_kw={"width_ratios": [1, 1.3]})
    for ax, (i, j), title in ((axes[0], (0, 1), "top view"), (axes[1], (1, 2), "side view (y, z)")):
        if i == 0:
            street(ax)
        else:
            ax.axhline(0, color="0.5", lw=2)
            ax.set_xlabel("y (m)")
            ax.set_ylabel("z (m)")
        ax.plot(old[:, i], old[:, j], color="tab:blue", lw=1.5, label=f"before: {float(found.length[0, r, k].detach()):.3f} m")
        ax.plot(new[:, i], new[:, j], color="tab:red", lw=1.5, ls="--", label=f"after: {float(after.length.detach()):.3f} m")
        ax.scatter([tx[i], moved[i]], [tx[j], moved[j]], marker="^", color=["tab:blue", "tab:red"], s=80, zorder=4)
        ax.scatter([rx[r, i]], [rx[r, j]], marker="*", s=160, color="k", zorder=4)
        ax.set_title(title)
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle("One gradient step of 0.5 m on the transmitter, along -d(length)/d(tx),\n"
                 "shortens the strongest reflected path")
    fig.tight_layout()
    fig.savefig(out / "gradient_step.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small grid, order 2, fewer rays (CI)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the PNGs (default: this example's folder; with --quick: none, so that "
                             "the quick run does not overwrite the full run's pictures)")
    parser.add_argument("--bounces", type=int, default=None)
    parser.add_argument("--num-rays", type=int, default=None)
    parser.add_argument("--receiver", type=int, default=None, help="receiver of the delay profile (default: the one nearest (3, 12))")
    parser.add_argument("--no-pictures", action="store_true")
    args = parser.parse_args()
    out = args.out if args.out is not None or args.quick else Path(__file__).resolve().parent
    summary = run(args.quick, None if args.no_pictures else out, args.bounces, args.num_rays, args.receiver)
    print(json.dumps({k: v for k, v in summary.items() if k != "delays_ns"}, indent=1))
    print(f"length before {summary['length_before']:.6f} m, after {summary['length_after']:.6f} m")


if __name__ == "__main__":
    main()
