"""rayd.drjit, one rank per GPU (or per CPU process): sharded intersect, all-reduced gradients.

Run it with ``torchrun`` (torch.distributed carries the gradient; Dr.Jit does the rest):

```bash
# GPUs: one visible GPU per rank, the NCCL backend
torchrun --nnodes=1 --nproc_per_node=2 ddp_intersect_train.py
# CPU only: Dr.Jit's LLVM backend and gloo
torchrun --nnodes=1 --nproc_per_node=2 ddp_intersect_train.py --backend llvm
```

The same recipe as ``examples/torch/distributed/ddp_intersect_train.py``: every rank
builds its own single-device ``rayd.drjit.Scene`` from the same grid mesh, owns one
slice of a global ray batch, and fits the mesh's heights to a bump. The only traffic
is one ``all_reduce(SUM)`` of the ``[V, 3]`` vertex gradient per step, done by
torch.distributed on a zero-copy DLPack view of Dr.Jit's gradient buffer. Every rank
applies the same Adam update to the same bits, so the replicas stay bitwise identical;
the script checks that every ``--check-every`` steps and prints a SHA-256 of the final
vertices. On the CPU (``--threads 1``, the default) that hash is also the same from run
to run; on CUDA it is not (Dr.Jit's gradient scatter-add is atomic): README.md says why.

GPU pinning: Dr.Jit uses the first visible CUDA device, so each rank sees exactly one,
``CUDA_VISIBLE_DEVICES=$LOCAL_RANK``, set here before Dr.Jit or torch touch CUDA.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["auto", "llvm", "cuda"], default="auto",
                        help="Dr.Jit backend: cuda (NCCL) or llvm (CPU, gloo); auto picks cuda if present")
    parser.add_argument("--steps", type=int, default=24, help="optimizer steps")
    parser.add_argument("--rays", type=int, default=1 << 16, help="global ray batch size")
    parser.add_argument("--cells", type=int, default=24, help="grid mesh resolution")
    parser.add_argument("--lr", type=float, default=0.02, help="Adam learning rate")
    parser.add_argument("--seed", type=int, default=1234, help="ray sampling seed")
    parser.add_argument("--check-every", type=int, default=4, help="assert zero cross-rank drift every N steps")
    parser.add_argument("--timeout", type=float, default=600.0, help="collective timeout in seconds")
    parser.add_argument("--threads", type=int, default=1,
                        help="Dr.Jit CPU threads per rank (llvm); 1 keeps runs bitwise reproducible (see README)")
    return parser.parse_args(argv)


def grid_mesh(m, cells: int, span: float):
    """Flat ``z = 0`` grid over ``[-span/2, span/2]^2`` from exact host values (identical on every rank)."""
    import numpy as np

    axis = np.linspace(-0.5 * span, 0.5 * span, cells + 1, dtype=np.float32)
    y, x = np.meshgrid(axis, axis, indexing="ij")
    vertices = np.stack([x.ravel(), y.ravel(), np.zeros(x.size, np.float32)])  # (3, V)
    index = np.arange((cells + 1) ** 2, dtype=np.uint32).reshape(cells + 1, cells + 1)
    a, b, c, d = index[:-1, :-1].ravel(), index[:-1, 1:].ravel(), index[1:, :-1].ravel(), index[1:, 1:].ravel()
    faces = np.concatenate([np.stack([a, b, c]), np.stack([b, d, c])], axis=1)  # (3, F)
    return m.Array3f(vertices), m.Array3u(faces)


def shard_rays(m, count: int, seed: int, extent: float, height: float, rank: int, world_size: int):
    """This rank's slice of one global batch, sampled identically on every rank (on the host)."""
    import numpy as np

    xy = (np.random.default_rng(seed).random((2, count), dtype=np.float32) - 0.5) * (2.0 * extent)
    base, remainder = divmod(count, world_size)
    begin = rank * base + min(rank, remainder)
    end = begin + base + (1 if rank < remainder else 0)
    xy = np.ascontiguousarray(xy[:, begin:end])
    o = m.Array3f(m.Float(xy[0]), m.Float(xy[1]), m.Float(np.full(end - begin, height, np.float32)))
    return o, m.Array3f(0.0, 0.0, -1.0), (begin, end)


def train(args: argparse.Namespace, backend: str, rank: int, world_size: int) -> None:
    import importlib

    import drjit as dr
    import torch
    import torch.distributed as dist

    import rayd.drjit as rd

    m = importlib.import_module(f"drjit.{backend}.ad")
    if backend == "llvm":
        # The vertex gradient is a scatter-add (the reverse of rayd's vertex gathers).
        # On the LLVM backend each worker thread adds into its own copy, and which rays
        # a thread gets varies run to run, so with several threads the float sums (and
        # after Adam, the final bits) differ between runs. One thread per rank (one
        # rank per core) adds in ray order: bitwise reproducible runs.
        dr.set_thread_count(args.threads)
    span, height = 2.0, 2.0
    vertices, faces = grid_mesh(m, args.cells, span)
    num_vertices = dr.width(vertices)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vertices, faces), dynamic=True)  # dynamic: the optimizer moves it
    scene.build()

    o, d, (begin, end) = shard_rays(m, args.rays, args.seed, 0.45 * span, height, rank, world_size)
    ray = rd.Ray(o, d)
    radius_sq = o.x * o.x + o.y * o.y
    target = height - 0.3 * dr.exp(-2.0 * radius_sq)  # hit distance of the surface being fitted
    print(f"rank={rank} backend={backend} device={scene.device} vertices={num_vertices} "
          f"rays={args.rays} shard=[{begin},{end})", flush=True)

    # Adam state, elementwise and identical on every rank (plain, non-AD arrays).
    first, second = dr.zeros(m.Array3f, num_vertices), dr.zeros(m.Array3f, num_vertices)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    param = dr.detach(vertices)

    for step in range(args.steps):
        vertices = m.Array3f(param)
        dr.enable_grad(vertices)
        scene.update_mesh_vertices(0, vertices)
        scene.sync()
        hit = scene.intersect(ray)
        if dr.width(hit.t) and not dr.all(hit.is_valid())[0]:
            raise RuntimeError("a shard ray missed the mesh")
        # Normalised by the global ray count: the summed gradient is the global mean's.
        shard_loss = dr.sum(dr.square(hit.t - target)) / args.rays if dr.width(hit.t) else m.Float(0.0)
        dr.backward(shard_loss)
        grad = dr.grad(vertices)
        grad = m.Array3f(0.0, 0.0, grad.z) if dr.width(hit.t) else dr.zeros(m.Array3f, num_vertices)

        # The only cross-rank traffic: the [V, 3] gradient, all-reduced in place through
        # a zero-copy DLPack view of an interleaved Dr.Jit buffer.
        flat = m.TensorXf(dr.ravel(dr.detach(grad), order="F"), shape=(num_vertices, 3))
        view = torch.from_dlpack(flat)  # waits for Dr.Jit's work on torch's stream
        dist.all_reduce(view, op=dist.ReduceOp.SUM)
        loss = torch.tensor([float(dr.detach(shard_loss)[0])], dtype=torch.float64, device=view.device)
        dist.all_reduce(loss, op=dist.ReduceOp.SUM)
        if view.is_cuda:
            torch.cuda.current_stream().synchronize()  # Dr.Jit reads the buffer on its own stream
        grad = dr.unravel(m.Array3f, flat.array, order="F")

        first = beta1 * first + (1 - beta1) * grad
        second = beta2 * second + (1 - beta2) * dr.square(grad)
        corrected = args.lr * (dr.sqrt(1 - beta2 ** (step + 1)) / (1 - beta1 ** (step + 1)))
        param = dr.detach(param - corrected * first / (dr.sqrt(second) + eps))
        dr.eval(param, first, second)

        if (step + 1) % args.check_every == 0 or step + 1 == args.steps:
            mine = torch.from_dlpack(m.TensorXf(dr.ravel(param, order="F"), shape=(num_vertices, 3))).clone()
            reference = mine.clone()
            dist.broadcast(reference, src=0)
            drift = float((mine - reference).abs().max())
            if drift != 0.0:
                raise RuntimeError(f"rank={rank} step={step + 1} parameter drift {drift!r}")
            print(f"rank={rank} step={step + 1} loss={float(loss[0]):.8e} drift=0", flush=True)

    digest = hashlib.sha256(dr.ravel(param, order="F").numpy().tobytes()).hexdigest()
    print(f"rank={rank} final_param_sha256={digest}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "RANK" not in os.environ:
        print("Launch with torchrun, e.g.\n  torchrun --nnodes=1 --nproc_per_node=2 ddp_intersect_train.py",
              file=sys.stderr)
        return 2
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))

    backend = args.backend
    if backend != "llvm":
        # One visible GPU per rank, before Dr.Jit or torch initialise CUDA.
        os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)
    import drjit as dr
    import torch
    import torch.distributed as dist

    if backend == "auto":
        backend = "cuda" if dr.has_backend(dr.JitBackend.CUDA) and torch.cuda.is_available() else "llvm"
    timeout = datetime.timedelta(seconds=args.timeout)
    if backend == "cuda":
        torch.cuda.set_device(0)
        dist.init_process_group(backend="nccl", timeout=timeout, device_id=torch.device("cuda", 0))
    else:
        dist.init_process_group(backend="gloo", timeout=timeout)
    try:
        train(args, backend, rank, world_size)
        dist.barrier()
    except Exception as error:  # noqa: BLE001 - an example's top-level handler
        print(f"rank={rank} FAILED: {error!r}", file=sys.stderr, flush=True)
        return 1
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    status = main()
    # Skip the interpreter's teardown (as the torch example does, see its
    # `exit_without_teardown`): a gloo worker thread still releasing the last
    # broadcast's tensor would need the GIL then, and the process would abort.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
