"""The distributed example under torchrun on the CPU (gloo): the CI checks of issue 7.

Each test launches ``examples/torch/distributed/ddp_intersect_train.py`` through
``python -m torch.distributed.run`` with ``src`` on ``PYTHONPATH`` and flags small
enough to finish in seconds on two cores; every launch has a timeout, so a hang
fails the test instead of stalling CI.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "torch" / "distributed" / "ddp_intersect_train.py"
#: Small enough for seconds per run on a 2-core CPU, large enough to fit the bump.
SMALL = ["--rays", "16384", "--cells", "12", "--steps", "24", "--check-every", "4", "--timeout", "60"]
STEPS, CHECK_EVERY = 24, 4
#: Wall-clock limit of one launch (start-up and Warp's first compile included).
LAUNCH_TIMEOUT = 120

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed unavailable")


def _env() -> dict[str, str]:
    """This environment with ``src`` on the path, one thread per rank, no inherited rank variables."""
    env = {k: v for k, v in os.environ.items() if k not in _RANK_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src")] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


_RANK_VARIABLES = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
}


def _torchrun(launcher: list[str], args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *launcher, str(EXAMPLE), *args]


def _run(command: list[str], timeout: float = LAUNCH_TIMEOUT) -> subprocess.CompletedProcess:
    return _finish(_start(command), others=[], timeout=timeout)


def _start(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(
    process: subprocess.Popen, others: list[subprocess.Popen], timeout: float = LAUNCH_TIMEOUT
) -> subprocess.CompletedProcess:
    """Wait for a launch started by :func:`_start`; on a hang kill it and ``others``, and fail."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop([process, *others])
        pytest.fail(f"launch hung for more than {timeout} s: {' '.join(process.args)}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _stop(launches: list[subprocess.Popen]) -> None:
    """Stop hung launchers. SIGTERM first: torchrun then stops its workers (which run in
    their own sessions, out of reach of a kill of the launcher); SIGKILL if it lingers."""
    for launch in launches:
        if launch.poll() is None:
            launch.terminate()
    for launch in launches:
        try:
            launch.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            launch.kill()
            launch.communicate()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _check_run(output: str, world_size: int, steps: int = STEPS, check_every: int = CHECK_EVERY) -> list[float]:
    """The issue's checks on one run's combined stdout; returns rank 0's loss per step."""
    checked = sorted({s for s in range(1, steps + 1) if s % check_every == 0} | {steps})
    drift = {(int(r), int(s)) for r, s in re.findall(r"^rank=(\d+) step=(\d+) loss=\S+.* drift=0$", output, re.M)}
    expected = {(r, s) for r in range(world_size) for s in checked}
    assert drift == expected, f"drift=0 lines: missing {sorted(expected - drift)}, extra {sorted(drift - expected)}"
    hashes = dict(re.findall(r"^rank=(\d+) final_param_sha256=([0-9a-f]{64})$", output, re.M))
    assert sorted(hashes) == [str(r) for r in range(world_size)], f"final hashes: {hashes}"
    assert len(set(hashes.values())) == 1, f"ranks disagree on the final parameter: {hashes}"
    losses = {int(s): float(v) for s, v in re.findall(r"^rank=0 step=(\d+) loss=(\S+)", output, re.M)}
    assert sorted(losses) == list(range(1, steps + 1)), "rank 0 must print the loss of every step"
    return [losses[s] for s in range(1, steps + 1)]


def _assert_ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    return result.stdout


def _load_example():
    spec = importlib.util.spec_from_file_location("ddp_intersect_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- CI checks of issue 7
def test_two_processes_gloo_converge_with_equal_replicas():
    """torchrun --nproc_per_node=2: exit 0, every drift=0 line, equal hashes, loss < 10 % of the first."""
    out = _assert_ok(_run(_torchrun(["--standalone", "--nproc_per_node=2"], SMALL + ["--backend", "gloo"])))
    losses = _check_run(out, world_size=2)
    assert losses[-1] < 0.1 * losses[0], f"final loss {losses[-1]} not below 10% of the first {losses[0]}"
    assert "backend=gloo" in out and "device=cpu" in out


def test_one_and_two_processes_agree(tmp_path):
    """1 and 2 processes reach final parameters equal to 1e-4 (only summation order differs)."""
    runs = {}
    for nproc in (1, 2):  # both launches at once: start-up dominates, and it overlaps
        save = tmp_path / f"fit_{nproc}.npz"
        command = _torchrun(["--standalone", f"--nproc_per_node={nproc}"], SMALL + ["--save", str(save)])
        runs[nproc] = (save, _start(command))
    finals = {}
    for nproc, (save, process) in runs.items():
        _check_run(_assert_ok(_finish(process, others=[p for _, p in runs.values()])), world_size=nproc)
        with np.load(save) as data:
            finals[nproc] = data["vertices"]
    difference = np.abs(finals[1] - finals[2]).max()
    assert difference <= 1e-4, f"1 vs 2 processes differ by {difference}"
    assert np.abs(finals[1][:, 2]).max() > 0.1, "the fit did not move the heights"


def test_two_nodes_simulated_with_c10d_rendezvous():
    """Two torchrun launchers as two nodes (c10d rendezvous on 127.0.0.1), gloo, same checks."""
    port = _free_port()
    run_id = f"rayd-test-{uuid.uuid4().hex[:8]}"
    launchers = []
    for node_rank in (0, 1):
        launcher = [
            "--nnodes=2",
            f"--node_rank={node_rank}",
            "--nproc_per_node=1",
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{port}",
            f"--rdzv_id={run_id}",
        ]
        launchers.append(_start(_torchrun(launcher, SMALL + ["--backend", "gloo"])))
    results = [_finish(process, others=launchers) for process in launchers]
    outputs = [_assert_ok(result) for result in results]
    # Rank 0 can be on either node (the rendezvous assigns ranks); check the union.
    losses = _check_run(outputs[0] + outputs[1], world_size=2)
    assert losses[-1] < 0.1 * losses[0]
    assert all("world_size=2" in out for out in outputs)


# --------------------------------------------------------------------------- real input and plot
def _pyramid_npz(path: Path) -> None:
    """A closed square pyramid, y up (like the Stanford scans), as vertices/faces arrays."""
    vertices = np.array(
        [[-1, 0, -1], [1, 0, -1], [1, 0, 1], [-1, 0, 1], [0, 1.5, 0]],
        dtype=np.float32,
    )
    faces = np.array([[0, 2, 1], [0, 3, 2], [0, 1, 4], [1, 2, 4], [2, 3, 4], [3, 0, 4]], dtype=np.int32)
    np.savez(path, vertices=vertices, faces=faces)


def test_npz_target_and_plot(tmp_path):
    """--target PATH.npz fits a mesh's height field; --plot writes a PNG."""
    mesh = tmp_path / "pyramid.npz"
    _pyramid_npz(mesh)
    args = SMALL + ["--target", str(mesh), "--lr", "0.03", "--save", str(tmp_path / "fit.npz")]
    plot = tmp_path / "fit.png"
    have_matplotlib = importlib.util.find_spec("matplotlib") is not None
    if have_matplotlib:
        args += ["--plot", str(plot)]
    out = _assert_ok(_run(_torchrun(["--standalone", "--nproc_per_node=2"], args)))
    losses = _check_run(out, world_size=2)
    assert losses[-1] < 0.5 * losses[0], f"no progress on the mesh target: {losses[0]} -> {losses[-1]}"
    with np.load(tmp_path / "fit.npz") as data:
        heights = data["vertices"][:, 2].reshape(13, 13)
    # The pyramid's apex is over the centre of the grid: the fit rises there.
    assert heights[6, 6] > heights[0, 0] + 0.2
    if have_matplotlib:
        assert plot.stat().st_size > 10_000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- bad launches
def test_without_torchrun_explains_how_to_launch():
    result = _run([sys.executable, str(EXAMPLE)], timeout=60)
    assert result.returncode == 2
    assert "must be launched with torchrun" in result.stderr and "--nproc_per_node" in result.stderr


def test_fewer_rays_than_ranks_and_private_kernel_caches(tmp_path):
    """--rays 1 on 2 ranks: rank 1's shard is empty and it still joins every collective.

    The same tiny launch gives each rank a private Warp kernel cache
    (--kernel-cache-dir), which must end up holding rayd's compiled modules.
    """
    cache = tmp_path / "warp-cache"
    args = ["--rays", "1", "--cells", "4", "--steps", "4", "--check-every", "2", "--timeout", "60"]
    args += ["--kernel-cache-dir", str(cache)]
    out = _assert_ok(_run(_torchrun(["--standalone", "--nproc_per_node=2"], args)))
    _check_run(out, world_size=2, steps=4, check_every=2)
    assert "shard=[1,1)" in out
    for rank in (0, 1):
        assert f"rank={rank} warp_kernel_cache={cache / f'rank-{rank}'}" in out
        assert list((cache / f"rank-{rank}").glob("*/wp_rayd.engine.*")), f"rank {rank} compiled nothing there"


def test_nccl_without_enough_gpus_fails_clearly():
    """--backend nccl with more ranks than GPUs (or without NCCL) exits 2 with a message, no hang."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    args = ["--backend", "nccl", "--steps", "1", "--timeout", "30"]
    result = _run(_torchrun(["--standalone", f"--nproc_per_node={gpus + 1}"], args), timeout=90)
    assert result.returncode != 0
    assert "--backend nccl" in result.stderr and "--backend gloo" in result.stderr


@pytest.mark.parametrize(
    ("requested", "gpus", "nccl", "local_rank", "local_world", "expected"),
    [
        ("auto", 0, False, 0, 2, ("gloo", "cpu")),
        ("auto", 2, True, 1, 2, ("nccl", "cuda:1")),
        ("auto", 1, True, 0, 2, ("gloo", "cpu")),  # too few GPUs: CPU, with a note
        ("gloo", 8, True, 3, 8, ("gloo", "cpu")),
        ("nccl", 2, True, 1, 2, ("nccl", "cuda:1")),
        ("nccl", 2, True, 2, 3, "this node has 2 visible CUDA device(s) for 3 ranks; launch with --nproc_per_node=2"),
        ("nccl", 2, True, 0, 3, "this node has 2 visible CUDA device(s) for 3 ranks"),  # every rank fails at once
        ("nccl", 0, True, 0, 1, "this node has no visible CUDA device"),
        ("nccl", 4, False, 0, 1, "no NCCL"),
    ],
)
def test_pick_backend(monkeypatch, requested, gpus, nccl, local_rank, local_world, expected):
    """Backend/device choice, and the messages of impossible nccl launches."""
    example = _load_example()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: nccl)
    if isinstance(expected, str):
        with pytest.raises(example.LaunchError, match=re.escape(expected)):
            example.pick_backend(requested, local_rank, local_world)
        return
    backend, device, note = example.pick_backend(requested, local_rank, local_world)
    assert (backend, str(device)) == expected
    assert (note is not None) == (requested == "auto" and backend == "gloo" and gpus > 0)


def test_shards_partition_the_batch():
    example = _load_example()
    for count in (0, 1, 5, 16, 1001):
        for world in (1, 2, 3, 7):
            bounds = [example.shard_bounds(count, r, world) for r in range(world)]
            assert bounds[0][0] == 0 and bounds[-1][1] == count
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            assert max(e - b for b, e in bounds) - min(e - b for b, e in bounds) <= 1
