"""Distributed differentiable ray casting: sharded `intersect`, one all-reduced gradient.

Launch it with `torchrun`, one process per GPU -- or, without GPUs, a few CPU
processes -- from the repository root:

```bash
torchrun --nproc_per_node=2 examples/torch/distributed/ddp_intersect_train.py
```

The recipe. Every rank builds its *own* `rayd.torch.Scene` on its own device (a
scene owns device-resident acceleration structures and is never shared), samples
the same global batch of rays from one seed, and keeps the slice `[begin, end)`
that is its shard. Each step it intersects its shard with a grid mesh whose
vertex heights are the trainable parameter, back-propagates a squared error in
the hit distance `t` to the vertices, and joins one `all_reduce(SUM)` of the
`[V, 3]` vertex gradient -- a tensor whose size is set by the mesh, not by the
number of rays. Every rank then applies the same Adam update to the same
replicated parameter, so the replicas stay bitwise identical without any
parameter traffic; the program checks that every `--check-every` steps (the
`drift=0` lines) and prints a SHA-256 of the final parameter so a harness can
compare ranks.

Backends. `--backend auto` (the default) picks NCCL with one CUDA device per
rank (`LOCAL_RANK` -> `cuda:LOCAL_RANK`) when this node has a GPU for every
local rank, and gloo on the CPU otherwise, so one command runs on a cluster
node, a workstation and a laptop. `--backend nccl` insists on GPUs and says so
clearly when there are fewer GPUs than ranks; `--backend gloo` always uses the
CPU.

Targets. `--target bump` (default) fits an analytic Gaussian bump.
`--target PATH.npz` (arrays `vertices [V,3]`, `faces [F,3]`) fits the top-down
height field of a real mesh: the mesh is scaled into the grid's footprint,
set on a ground plane, and the target distances are the hit distances of the
same straight-down rays on it, computed with rayd itself.

Output. Rank 0 prints the global loss of every step (with the time the step
took, measured in the program); every rank prints `rank=R step=S loss=L
drift=0` at the checked steps and `rank=R final_param_sha256=...` at the end.
`--plot out.png` writes the loss curve and the fitted height field beside the
target; `--save out.npz` writes the fitted mesh and the loss history.

See README.md in this directory for several nodes, Warp's kernel cache and
what happens when a rank fails.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import math
import os
import socket
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

#: Side of the square grid mesh, centred on the origin, in world units.
SPAN = 2.0
#: Height of the ray origins above the ground plane ``z = 0``.
RAY_HEIGHT = 2.0
#: Rays are sampled in ``[-EXTENT, EXTENT]^2``, strictly inside the grid.
EXTENT = 0.45 * SPAN
#: A mesh target is scaled to fit ``[-FOOTPRINT, FOOTPRINT]^2 x [0, TARGET_TOP]``.
FOOTPRINT = 0.8
TARGET_TOP = 1.0

LAUNCH_HINT = "  torchrun --nproc_per_node=2 examples/torch/distributed/ddp_intersect_train.py"


def say(line: str, stream=None) -> None:
    """Print a line in one write, so the lines of ranks sharing a terminal do not mix mid-line."""
    stream = sys.stdout if stream is None else stream
    stream.write(line + "\n")
    stream.flush()


class LaunchError(Exception):
    """A launch that cannot work (wrong launcher, backend or device count); exit code 2."""


# --------------------------------------------------------------------------- arguments
def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0.0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags: the seed program's, plus backend, target, plot and save."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=f"Launch with torchrun, e.g.\n{LAUNCH_HINT}"
    )
    parser.add_argument("--steps", type=_positive_int, default=24, help="optimizer steps (default 24)")
    parser.add_argument(
        "--rays", type=_positive_int, default=1 << 18, help="global ray batch, split across ranks (default 2^18)"
    )
    parser.add_argument("--cells", type=_positive_int, default=24, help="grid mesh resolution per side (default 24)")
    parser.add_argument("--lr", type=_positive_float, default=0.02, help="Adam learning rate (default 0.02)")
    parser.add_argument("--seed", type=int, default=1234, help="ray sampling seed (default 1234)")
    parser.add_argument(
        "--check-every",
        type=_positive_int,
        default=4,
        help="check that all ranks hold bitwise-equal parameters every N steps (default 4)",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=600.0,
        help="collective timeout in seconds: a stuck peer fails the run instead of hanging it (default 600)",
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "nccl", "gloo"),
        default="auto",
        help="auto: NCCL + one GPU per rank if this node has enough GPUs, else gloo + CPU (default auto)",
    )
    parser.add_argument(
        "--target",
        default="bump",
        help="'bump' (analytic surface, default) or PATH.npz with vertices [V,3] and faces [F,3]",
    )
    parser.add_argument(
        "--up",
        choices=("x", "y", "z"),
        default="y",
        help="up axis of a --target PATH.npz mesh (default y, as in the Stanford scans)",
    )
    parser.add_argument("--plot", metavar="PNG", help="rank 0 writes the loss curve and height fields here")
    parser.add_argument("--save", metavar="NPZ", help="rank 0 writes the fitted vertices, faces and losses here")
    parser.add_argument(
        "--kernel-cache-dir",
        metavar="DIR",
        help="give each rank a private Warp kernel cache DIR/rank-R (default: Warp's shared cache; see README)",
    )
    args = parser.parse_args(argv)
    if args.target != "bump" and not os.path.isfile(args.target):
        parser.error(f"--target must be 'bump' or an existing .npz file, got {args.target!r}")
    return args


# --------------------------------------------------------------------------- launch
def launch_environment() -> tuple[int, int, int, int]:
    """``(rank, world_size, local_rank, local_world_size)`` as torchrun sets them.

    Raises:
        LaunchError: the program was not started by torchrun (or an equivalent
            launcher that sets ``RANK`` and ``WORLD_SIZE``).
    """
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise LaunchError(
            f"this example must be launched with torchrun ({', '.join(missing)} not set), e.g.\n{LAUNCH_HINT}\n"
            "Use --nproc_per_node=1 for a single process."
        )
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    return rank, world_size, local_rank, local_world_size


def pick_backend(requested: str, local_rank: int, local_world_size: int) -> tuple[str, torch.device, str | None]:
    """Choose the process-group backend and this rank's device.

    Args:
        requested: ``"auto"``, ``"nccl"`` or ``"gloo"``.
        local_rank: this rank's index on its node (``LOCAL_RANK``).
        local_world_size: ranks on this node (``LOCAL_WORLD_SIZE``).

    Returns:
        ``(backend, device, note)``: NCCL with ``cuda:local_rank``, or gloo with the
        CPU; ``note`` explains an ``auto`` choice of gloo on a machine with GPUs.

    Raises:
        LaunchError: ``nccl`` was requested without NCCL or with fewer GPUs than
            ranks on this node.
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = dist.is_nccl_available()
    if requested == "gloo":
        return "gloo", torch.device("cpu"), None
    if requested == "auto":
        if gpus >= local_world_size and nccl:
            return "nccl", torch.device("cuda", local_rank), None
        note = None
        if gpus and not nccl:
            note = "--backend auto: this PyTorch build has no NCCL; using gloo on the CPU"
        elif gpus:
            note = (
                f"--backend auto: {local_world_size} ranks on this node but {gpus} visible GPU(s); using gloo on "
                f"the CPU (launch --nproc_per_node={gpus} to use the GPUs)"
            )
        return "gloo", torch.device("cpu"), note
    if not nccl:
        raise LaunchError("--backend nccl: this PyTorch build has no NCCL (a CPU-only build?); use --backend gloo")
    if local_world_size > gpus:
        # Every rank of the node fails here at once, not only those without a GPU,
        # so none of them is left waiting in init_process_group for the others.
        raise LaunchError(
            f"--backend nccl needs one GPU per rank, but this node has {gpus} visible CUDA device(s) for "
            f"{local_world_size} ranks; launch with --nproc_per_node={gpus} or use --backend gloo"
            if gpus
            else "--backend nccl needs one GPU per rank, but this node has no visible CUDA device; "
            "run on a GPU machine or use --backend gloo"
        )
    return "nccl", torch.device("cuda", local_rank), None


def use_private_kernel_cache(root: str, rank: int) -> str:
    """Point Warp's kernel cache at ``root/rank-<rank>``; call before rayd is imported.

    Importing rayd initialises Warp, which reads ``wp.config.kernel_cache_dir``
    once; this program imports rayd only after this call. Warp's shared cache is
    already safe for concurrent ranks on a local disk (README.md, "Warp's kernel
    cache"); a private one is for caches on network file systems shared by nodes.
    """
    import warp as wp

    path = os.path.join(os.path.abspath(root), f"rank-{rank}")
    os.makedirs(path, exist_ok=True)
    wp.config.kernel_cache_dir = path
    return path


# --------------------------------------------------------------------------- geometry
def grid_mesh(cells: int, span: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat ``z = 0`` triangle grid over ``[-span/2, span/2]^2``, on the CPU.

    Args:
        cells: quads per side; the grid has ``(cells + 1)^2`` vertices and
            ``2 cells^2`` triangles.
        span: side length in world units.

    Returns:
        ``(vertices (V, 3) float32, faces (F, 3) int32)``, vertex ``i + (cells + 1) j``
        at column ``i``, row ``j``. Built from the same float operations on the host
        in every process, so every rank starts from bit-identical geometry.
    """
    axis = torch.linspace(-0.5 * span, 0.5 * span, cells + 1, dtype=torch.float32)
    y, x = torch.meshgrid(axis, axis, indexing="ij")
    vertices = torch.stack((x.reshape(-1), y.reshape(-1), torch.zeros(x.numel())), dim=1)
    index = torch.arange((cells + 1) ** 2, dtype=torch.int32).reshape(cells + 1, cells + 1)
    lower_left, lower_right = index[:-1, :-1].reshape(-1), index[:-1, 1:].reshape(-1)
    upper_left, upper_right = index[1:, :-1].reshape(-1), index[1:, 1:].reshape(-1)
    faces = torch.cat(
        (
            torch.stack((lower_left, lower_right, upper_left), dim=1),
            torch.stack((lower_right, upper_right, upper_left), dim=1),
        )
    )
    return vertices.contiguous(), faces.contiguous()


def global_rays(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch of straight-down rays, identical in every process.

    Args:
        count: number of rays N.
        seed: seed of the CPU generator the origins are drawn from.

    Returns:
        ``(o (N, 3), d (N, 3))`` float32 on the CPU: ``o`` uniform in
        ``[-EXTENT, EXTENT]^2`` at height ``RAY_HEIGHT``, ``d = (0, 0, -1)``. Drawing on
        the CPU from one seeded generator is what makes the shards a partition of one
        batch rather than ``world_size`` unrelated batches.
    """
    generator = torch.Generator().manual_seed(seed)
    xy = (torch.rand((count, 2), generator=generator, dtype=torch.float32) * 2.0 - 1.0) * EXTENT
    o = torch.cat((xy, torch.full((count, 1), RAY_HEIGHT)), dim=1)
    d = torch.tensor([0.0, 0.0, -1.0]).expand(count, 3)
    return o.contiguous(), d.contiguous()


def shard_bounds(count: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[begin, end)`` of rank ``rank``'s shard; the shards partition ``[0, count)``.

    Shard sizes differ by at most one; with fewer rays than ranks the last ranks get
    an empty shard (and still take part in every collective).
    """
    base, extra = divmod(count, world_size)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def parameter_hash(vertices: torch.Tensor) -> str:
    """SHA-256 of the parameter's exact bytes: equal hashes mean bitwise-equal replicas."""
    return hashlib.sha256(vertices.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


# --------------------------------------------------------------------------- targets
def load_height_mesh(path: str, up: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A mesh from ``path`` (.npz) turned ``up``-axis up and fitted over the grid.

    Args:
        path: .npz with ``vertices`` (V, 3) float and ``faces`` (F, 3) integer arrays.
        up: ``"x"``, ``"y"`` or ``"z"``: the mesh's up axis, which becomes ``+z``.

    Returns:
        ``(vertices (V, 3) float32, faces (F, 3) int32)`` on the CPU. Concretely, the
        mesh is scaled uniformly (its proportions kept) and translated so that it lies
        in ``[-FOOTPRINT, FOOTPRINT]^2 x [0, TARGET_TOP]``, centred, standing on
        ``z = 0``.

    Raises:
        ValueError: the file lacks the arrays, or they have the wrong shapes.
    """
    with np.load(path) as data:
        missing = {"vertices", "faces"} - set(data.files)
        if missing:
            raise ValueError(f"--target {path}: missing array(s) {sorted(missing)}; found {data.files}")
        vertices = np.asarray(data["vertices"], dtype=np.float64)
        faces = np.asarray(data["faces"])
    if vertices.ndim != 2 or vertices.shape[1] != 3 or faces.ndim != 2 or faces.shape[1] != 3 or len(faces) == 0:
        raise ValueError(
            f"--target {path}: need vertices (V, 3) and faces (F >= 1, 3), got {vertices.shape} and {faces.shape}"
        )
    order = {"x": (1, 2, 0), "y": (2, 0, 1), "z": (0, 1, 2)}[up]  # a rotation: right-handed kept
    vertices = vertices[:, order]
    low, high = vertices.min(axis=0), vertices.max(axis=0)
    size = np.maximum(high - low, 1e-12)
    scale = min(2.0 * FOOTPRINT / size[0], 2.0 * FOOTPRINT / size[1], TARGET_TOP / size[2])
    centre = 0.5 * (low + high)
    placed = (vertices - np.array([centre[0], centre[1], low[2]])) * scale
    return torch.from_numpy(placed.astype(np.float32)), torch.from_numpy(faces.astype(np.int32))


class Target:
    """The surface being fitted: the hit distance of each straight-down ray on it.

    ``Target("bump", ...)`` is the analytic surface ``z = 0.3 exp(-2 (x^2 + y^2))``.
    ``Target(path, ...)`` is a mesh loaded by :func:`load_height_mesh` plus a ground
    quad at ``z = 0`` larger than the grid, intersected with rayd itself, so rays that
    miss the mesh fall to the ground.

    Args:
        spec: ``"bump"`` or a path to an .npz mesh.
        up: the mesh's up axis (ignored for the bump).
        device: where the target scene lives and distances are computed.
    """

    def __init__(self, spec: str, up: str, device: torch.device) -> None:
        self.spec = spec
        self.scene = None
        if spec == "bump":
            return
        if not os.path.isfile(spec):
            raise ValueError(f"--target must be 'bump' or an existing .npz file, got {spec!r}")
        import rayd.torch as rt

        vertices, faces = load_height_mesh(spec, up)
        half = SPAN
        ground = torch.tensor([[-half, -half, 0.0], [half, -half, 0.0], [half, half, 0.0], [-half, half, 0.0]])
        self.scene = rt.Scene()
        self.scene.add_mesh(rt.Mesh(vertices.to(device), faces.to(device)))
        self.scene.add_mesh(rt.Mesh(ground.to(device), torch.tensor([[0, 1, 2], [0, 2, 3]], device=device)))
        self.scene.build()

    def distance(self, o: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """Target ``t`` (N,) for rays ``o``, ``d`` (N, 3) falling straight down."""
        if self.scene is None:
            radius_sq = o[:, 0] ** 2 + o[:, 1] ** 2
            return o[:, 2] - 0.3 * torch.exp(-2.0 * radius_sq)
        import rayd.torch as rt

        t = self.scene.intersect(rt.Ray(o, d), flags=rt.RayFlags.Minimal).t
        # The ground quad covers every sampled ray; a miss can only be a ray that
        # slipped between the mesh and the ground, and lands on the ground.
        return torch.where(torch.isfinite(t), t, o[:, 2])


# --------------------------------------------------------------------------- training
def train(args: argparse.Namespace, rank: int, world_size: int, device: torch.device) -> dict:
    """Fit the grid to the target with sharded rays; returns the run's record.

    Returns:
        dict with ``vertices`` (V, 3), ``faces`` (F, 3) (final, CPU), ``losses`` (one
        global loss per step, before that step's update), ``step_seconds`` and
        ``hash`` (SHA-256 of the final parameter).

    Raises:
        RuntimeError: a shard ray missed the grid, or the replicas drifted apart.
    """
    import rayd.torch as rt

    vertices, faces = grid_mesh(args.cells, SPAN)
    vertices = vertices.to(device).requires_grad_(True)
    faces = faces.to(device)
    scene = rt.Scene()
    # Dynamic: the optimizer moves these vertices and the scene is told each step.
    scene.add_mesh(rt.Mesh(vertices, faces), dynamic=True)
    scene.build()

    begin, end = shard_bounds(args.rays, rank, world_size)
    o, d = global_rays(args.rays, args.seed)
    o, d = o[begin:end].to(device), d[begin:end].to(device)
    ray = rt.Ray(o, d)
    target = Target(args.target, args.up, device).distance(o, d)

    # Adam: its step does not depend on how many rays land on a vertex, so the fit
    # converges for any --rays / --cells pair. Each rank runs the same optimizer on
    # the same reduced gradient, so the optimizer state is replicated, not sent.
    optimizer = torch.optim.Adam([vertices], lr=args.lr)
    say(
        f"rank={rank} world_size={world_size} device={device} backend={dist.get_backend()} "
        f"vertices={vertices.shape[0]} rays={args.rays} shard=[{begin},{end}) target={args.target}"
    )

    losses, step_seconds = [], []
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        hit = scene.intersect(ray, flags=rt.RayFlags.Minimal)
        # Every ray falls inside the grid's footprint, and only heights move, so all
        # of them hit. A miss would put t = inf into the loss: fail loudly instead.
        if not bool(hit.is_valid().all()):
            raise RuntimeError(f"rank={rank} step={step}: a ray missed the grid mesh")
        # Dividing by the *global* ray count makes the summed gradient the gradient
        # of the global mean loss.
        shard_loss = ((hit.t - target) ** 2).sum() / args.rays
        shard_loss.backward()
        # An empty shard (fewer rays than ranks) has no gradient, but it must still
        # join the all-reduce, or the other ranks would wait for it until --timeout.
        if vertices.grad is None:
            vertices.grad = torch.zeros_like(vertices)
        # A height fit: x and y stay put (Adam leaves a parameter with zero gradient
        # exactly where it is), so the footprint always covers the rays.
        vertices.grad[:, :2] = 0.0

        # The only cross-rank traffic of a step: one [V, 3] gradient and one scalar.
        dist.all_reduce(vertices.grad, op=dist.ReduceOp.SUM)
        loss = shard_loss.detach().reshape(1).clone()
        dist.all_reduce(loss, op=dist.ReduceOp.SUM)

        optimizer.step()
        # The parameter is the mesh: refit the BVH before the next query.
        scene.update_mesh_vertices(0, vertices)
        scene.sync()
        loss_value = float(loss)  # waits for the device, so the time below is real
        step_seconds.append(time.perf_counter() - start)
        losses.append(loss_value)

        checked = step % args.check_every == 0 or step == args.steps
        if checked:
            # all_reduce hands every rank the same bits and Adam is elementwise, so
            # the replicas must be bitwise equal. Check it against rank 0's copy.
            reference = vertices.detach().clone()
            dist.broadcast(reference, src=0)
            if not torch.equal(vertices.detach(), reference):
                drift = float((vertices.detach() - reference).abs().max())
                raise RuntimeError(f"rank={rank} step={step}: parameter drift {drift!r} from rank 0")
        if rank == 0 or checked:
            line = f"rank={rank} step={step} loss={loss_value:.8e}"
            if rank == 0:
                line += f" step_ms={1e3 * step_seconds[-1]:.1f}"
            say(line + (" drift=0" if checked else ""))

    digest = parameter_hash(vertices)
    say(f"rank={rank} final_param_sha256={digest}")
    return {
        "vertices": vertices.detach().cpu(),
        "faces": faces.cpu(),
        "losses": losses,
        "step_seconds": step_seconds,
        "hash": digest,
    }


def report_timing(record: dict, rays: int, world_size: int) -> None:
    """Rank 0: first-step time (includes Warp's kernel compile or cache load) and steady rate."""
    seconds = record["step_seconds"]
    line = f"timing: step1_ms={1e3 * seconds[0]:.1f} (includes kernel compile/load)"
    if len(seconds) > 1:
        steady = statistics.median(seconds[1:])
        line += (
            f" median_step_ms={1e3 * steady:.2f} rays_per_s={rays / steady:.3e}"
            f" ({world_size} rank(s), {rays} rays per step)"
        )
    say(f"rank=0 {line}")


# --------------------------------------------------------------------------- outputs
def height_field(scene_vertices: torch.Tensor, faces: torch.Tensor, target: Target, samples: int):
    """Fitted and target heights on a ``samples x samples`` grid over the ray region.

    Both come from straight-down rays, the fit through rayd on the final mesh, so the
    two images are sampled the same way. Returns two NumPy (samples, samples) arrays.
    """
    import rayd.torch as rt

    device = scene_vertices.device
    axis = torch.linspace(-EXTENT, EXTENT, samples)
    y, x = torch.meshgrid(axis, axis, indexing="ij")
    o = torch.stack((x.reshape(-1), y.reshape(-1), torch.full((x.numel(),), RAY_HEIGHT)), dim=1).to(device)
    d = torch.tensor([0.0, 0.0, -1.0], device=device).expand_as(o).contiguous()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(scene_vertices.detach(), faces))
    scene.build()
    fitted = RAY_HEIGHT - scene.intersect(rt.Ray(o, d), flags=rt.RayFlags.Minimal).t
    wanted = RAY_HEIGHT - target.distance(o, d)
    shape = (samples, samples)
    return fitted.reshape(shape).cpu().numpy(), wanted.reshape(shape).cpu().numpy()


def write_plot(path: str, record: dict, args: argparse.Namespace, device: torch.device, world_size: int) -> None:
    """Loss curve, fitted height field and target height field side by side (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = Target(args.target, args.up, device)
    fitted, wanted = height_field(record["vertices"].to(device), record["faces"].to(device), target, 160)
    low, high = float(min(fitted.min(), wanted.min())), float(max(fitted.max(), wanted.max()))
    figure, axes = plt.subplots(1, 3, figsize=(13.5, 4.2), constrained_layout=True)
    axes[0].semilogy(range(1, len(record["losses"]) + 1), record["losses"], marker="o", markersize=3)
    axes[0].set(xlabel="step", ylabel="mean squared error in t", title=f"loss ({world_size} rank(s))")
    axes[0].grid(True, which="both", alpha=0.3)
    bounds = (-EXTENT, EXTENT, -EXTENT, EXTENT)
    for axis, image, title in (
        (axes[1], fitted, f"fitted height field ({args.cells}x{args.cells} grid)"),
        (axes[2], wanted, f"target: {os.path.basename(args.target)}"),
    ):
        shown = axis.imshow(image, origin="lower", extent=bounds, vmin=low, vmax=high, cmap="viridis")
        axis.set(title=title, xlabel="x", ylabel="y")
    figure.colorbar(shown, ax=axes[1:], label="height z", shrink=0.9)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    say(f"rank=0 wrote {path}")


def write_record(path: str, record: dict) -> None:
    """The fitted mesh and loss history as .npz (``vertices``, ``faces``, ``losses``)."""
    np.savez(
        path,
        vertices=record["vertices"].numpy(),
        faces=record["faces"].numpy(),
        losses=np.asarray(record["losses"], dtype=np.float64),
        step_seconds=np.asarray(record["step_seconds"], dtype=np.float64),
    )
    say(f"rank=0 wrote {path}")


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    """Run one rank. Exit codes: 0 success, 1 a rank failed, 2 a bad launch."""
    args = parse_args(argv)
    try:
        rank, world_size, local_rank, local_world_size = launch_environment()
        backend, device, note = pick_backend(args.backend, local_rank, local_world_size)
    except LaunchError as error:
        say(f"ddp_intersect_train.py: error: {error}", sys.stderr)
        return 2
    if note and rank == 0:
        say(f"rank=0 note: {note}")

    if args.kernel_cache_dir:
        path = use_private_kernel_cache(args.kernel_cache_dir, rank)
        say(f"rank={rank} warp_kernel_cache={path}")

    timeout = datetime.timedelta(seconds=args.timeout)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        dist.init_process_group(backend=backend, timeout=timeout, device_id=device)
    else:
        dist.init_process_group(backend=backend, timeout=timeout)

    status = 0
    try:
        record = train(args, rank, world_size, device)
        if rank == 0:
            report_timing(record, args.rays, world_size)
            if args.plot:
                write_plot(args.plot, record, args, device, world_size)
            if args.save:
                write_record(args.save, record)
        # Finish together, so a rank that failed early is never mistaken for one
        # that finished (its peers fail here, or in a collective, instead).
        dist.barrier()
    except Exception as error:  # noqa: BLE001 - the example's top-level handler
        say(f"rank={rank} host={socket.gethostname()} FAILED: {error!r}", sys.stderr)
        status = 1
    finally:
        dist.destroy_process_group()
    return status


def exit_without_teardown(status: int) -> None:
    """End the process with ``status`` without the interpreter's teardown.

    After the last collective, a gloo worker thread may still hold the work that
    carried a tensor (a barrier keeps the broadcast before it), and releasing that
    tensor takes the GIL. A thread that asks for the GIL while the interpreter is
    tearing down exits inside a C++ destructor, and the process aborts with
    "terminate called without an active exception" (SIGABRT) after it has finished
    its work: about 1 run in 15 on a busy 2-core machine (torch 2.13; the crash is
    described in pytorch/pytorch PR 179291). Everything this program writes is
    flushed and closed by now, so skipping the teardown loses nothing.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_without_teardown(main())
