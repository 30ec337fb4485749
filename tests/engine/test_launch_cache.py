"""rayd.engine.runtime.LaunchCache: a replayed launch sees every changed argument (a new array,
a new view of other memory, a scalar, a matrix value, a new thread count) and equals wp.launch."""

from __future__ import annotations

import numpy as np
import warp as wp

from rayd.engine.assemble import place_points
from rayd.engine.runtime import LaunchCache


@wp.kernel
def _axpy(a: float, x: wp.array(dtype=float), offset: int, y: wp.array(dtype=float)):
    i = wp.tid()
    y[offset + i] = a * x[i] + y[offset + i]


def test_replay_repacks_changed_arguments(device):
    cache = LaunchCache()
    x1 = wp.array(np.arange(8, dtype=np.float32), device=device)
    x2 = wp.array(np.arange(8, dtype=np.float32) * 10, device=device)
    y = wp.zeros(16, dtype=float, device=device)
    cache.launch(_axpy, 8, [2.0, x1, 0, y], device)
    cache.launch(_axpy, 8, [2.0, x1, 0, y], device)  # same arguments: replay
    cache.launch(_axpy, 8, [3.0, x2, 8, y], device)  # scalar, array and offset changed
    cache.launch(_axpy, 4, [1.0, x2[4:], 8, y], device)  # a view of other memory, fewer threads
    want = np.zeros(16, np.float32)
    want[:8] = 4 * np.arange(8)
    want[8:] = 30 * np.arange(8)
    want[8:12] += 10 * np.arange(4, 8)
    np.testing.assert_array_equal(y.numpy(), want)


def test_place_points_through_cache_equals_plain_launch(device):
    rng = np.random.default_rng(0)
    cache = LaunchCache()
    out_a = wp.zeros(20, dtype=wp.vec3, device=device)
    out_b = wp.zeros(20, dtype=wp.vec3, device=device)
    for k in range(3):
        v = wp.array(rng.standard_normal((10, 3)), dtype=wp.vec3d, device=device)
        m = np.eye(4)
        m[:3, 3] = rng.standard_normal(3)
        m[:3, :3] *= k + 1
        centre = rng.standard_normal(3)
        place_points(v, m, 10 * (k % 2), out_a, centre=centre, launches=cache)
        place_points(v, m, 10 * (k % 2), out_b, centre=centre)
        np.testing.assert_array_equal(out_a.numpy(), out_b.numpy())


def test_cpu_replay_through_kept_struct_equals_warp_replay():
    """On the CPU a replay calls the kernel with a kept argument struct (``runtime.CPU_DIRECT``); the same
    sequence of changing arguments through Warp's ``Launch.launch`` gives the same bytes."""
    from rayd.engine import runtime

    rng = np.random.default_rng(1)
    xs = [wp.array(rng.standard_normal(8).astype(np.float32), device="cpu") for _ in range(3)]
    calls = [(8, [2.0, xs[0], 0]), (8, [2.0, xs[0], 0]), (8, [-1.5, xs[1], 8]), (4, [0.5, xs[2][4:], 3]),
             (8, [2.0, xs[0], 0]), (6, [1.25, xs[1][:6], 10])]
    results = []
    for direct in (True, False):
        was = runtime.CPU_DIRECT
        runtime.CPU_DIRECT = direct
        try:
            cache = LaunchCache()
            y = wp.zeros(16, dtype=float, device="cpu")
            for dim, args in calls:
                cache.launch(_axpy, dim, [*args, y], "cpu")
            kept = [entry[3] for entry in cache._cmds.values()]
            assert all((k is not None) == direct for k in kept)
            results.append(y.numpy().copy())
        finally:
            runtime.CPU_DIRECT = was
    np.testing.assert_array_equal(results[0], results[1])
    want = np.zeros(16, np.float32)
    for dim, (a, x, offset) in calls:
        want[offset:offset + dim] += a * x.numpy()[:dim]
    np.testing.assert_allclose(results[0], want, rtol=1e-6)


def test_cpu_replay_while_another_thread_runs_the_command():
    """A recorded CPU command replayed while its kernel runs on another thread: the second launch does not
    touch the kept struct the running kernel reads (it goes through Warp's replay); both results are right."""
    import threading

    from rayd.engine import runtime

    if not runtime.CPU_DIRECT or runtime._apic_capture is None:
        return
    cache = LaunchCache()
    n = 1 << 16
    x1 = wp.array(np.ones(n, np.float32), device="cpu")
    x2 = wp.array(np.full(n, 2.0, np.float32), device="cpu")
    y1 = wp.zeros(n, dtype=float, device="cpu")
    y2 = wp.zeros(n, dtype=float, device="cpu")
    cache.launch(_axpy, n, [1.0, x1, 0, y1], "cpu")
    entry = next(iter(cache._cmds.values()))
    packed = entry[3]
    assert packed is not None
    real = packed.forward
    started, release = threading.Event(), threading.Event()

    def slow_forward(bounds, args):  # the first replay's kernel "runs" until the second launch is done
        started.set()
        release.wait(10)
        real(bounds, args)

    packed.forward = slow_forward
    first = threading.Thread(target=cache.launch, args=(_axpy, n, [3.0, x1, 0, y1], "cpu"))
    first.start()
    assert started.wait(10)
    cache.launch(_axpy, n, [5.0, x2, 0, y2], "cpu")  # while the first is "running"
    assert entry[3] is None  # the kept struct was left to the running kernel
    release.set()
    first.join(10)
    np.testing.assert_array_equal(y1.numpy(), np.full(n, 4.0, np.float32))  # 1 + 3 * 1 (its own arguments)
    np.testing.assert_array_equal(y2.numpy(), np.full(n, 10.0, np.float32))
