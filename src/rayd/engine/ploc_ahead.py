"""PLOC passes launched ahead of the device, with no host wait per pass (issue 18, "build").

``ploc.PlocBvh`` runs passes until one cluster is left. Its first loop (``AHEAD = 0``) reads the
cluster count on the host every ``SYNC_EVERY`` passes, to size the next launches and to stop:
each read waits for the device to drain its queue, so the host then launches the next passes to
an idle device (11 reads for the 2 M-triangle terrain, 20 for the 1 M sphere).

Here (``AHEAD = k > 0``, the default) the host never waits for the newest pass. After each pass
the count the merge wrote is copied, asynchronously, into pinned host memory (one slot per pass);
the host launches pass ``i`` over the newest count it can already read there. Counts never grow
and every kernel of a pass reads the true count on the device (threads past it return), so a
stale count is a valid launch size: it only launches more threads than needed. The host stops
once it reads a count of 1 (the passes it launched after that one change nothing), and waits
(on an event of pass ``i - k``) only when it is ``k`` passes ahead of what it can read, so the
device is never short of queued passes. The passes, and so the tree, are the same bit for bit.

On the CPU the launches run when they are made, so every count is read as soon as it is written
(no copy); ``lag`` (tests only) makes the loop read the count of ``lag`` passes before the newest,
as a CUDA host that runs ahead does.
"""

from __future__ import annotations

import os

import warp as wp

#: Passes the host may run ahead of the newest count it has read (0: ``ploc.SYNC_EVERY``'s blocking reads
#: instead). ``RAYD_PLOC_AHEAD``; 4 (default) 
#: (session 20, one H200, ``benchmarks/results/h200-session20/``: with the other build switches, ``build()``
#: terrain 2 M 12.39 -> 10.37 ms, sphere 1 M 13.37 -> 11.33 ms, medians of 10, the same tree).
AHEAD = int(os.environ.get("RAYD_PLOC_AHEAD", "4"))

#: 1: the scans of the passes call Warp's native scan directly (no per-call argument checks and
#: views: about 10 us of host time per pass); 0: ``wp.utils.array_scan``. ``RAYD_PLOC_RAW_SCAN``.
RAW_SCAN = int(os.environ.get("RAYD_PLOC_RAW_SCAN", "1"))

_RING = 4096  # pinned count slots per device, used in windows of a build's pass limit (no stale copy lands)
_state: dict = {}  # device name -> [pinned history, numpy view, next window start, events]


def _native():
    return getattr(getattr(getattr(wp, "_src", None), "context", None), "runtime", None)


def scan_int(keep: wp.array, position: wp.array, count: int) -> None:
    """Exclusive scan of ``keep[:count]`` into ``position[:count]`` (int32, contiguous, one device),
    on Warp's current stream of the device, as ``wp.utils.array_scan(..., inclusive=False)``."""
    runtime = _native()
    core = getattr(runtime, "core", None)
    name = "wp_array_scan_int_host" if keep.device.is_cpu else "wp_array_scan_int_device"
    native = getattr(core, name, None) if RAW_SCAN else None
    if native is None or count <= 0:
        if count > 0:
            wp.utils.array_scan(keep[:count], position[:count], inclusive=False)
        return
    ok = native(keep.ptr, position.ptr, count, 4, 4, 1, False)
    if not keep.device.is_cpu and not ok:
        raise RuntimeError(runtime.get_error_string())


def _device_state(dev, ahead: int, limit: int):
    key = str(dev)
    st = _state.get(key)
    if st is None or len(st[3]) < ahead + 1:
        host = wp.empty(_RING, dtype=wp.int32, device="cpu", pinned=True)
        events = [wp.Event(dev) for _ in range(ahead + 1)]
        st = _state[key] = [host, host.numpy(), 0, events]
    start = st[2]
    if start + limit + 1 > _RING:
        start = 0
    st[2] = start + limit + 1
    view = st[1][start:start + limit + 1]
    view.fill(-1)
    return st[0], start, view, st[3]


def run_ahead(passes, counts: list, keep: wp.array, position: wp.array, n: int, limit: int, tail: int,
              launch_tail, stream, dev, ahead: int, lag: int = 0) -> tuple[int, int, int]:
    """Run PLOC passes from ``n`` clusters until one is left (see the module docstring).

    Args:
        passes: per parity ``a`` of the double buffers, ``(before, merge)``: the recorded launches
            (``wp.Launch``, each sized ``n``) of a pass reading buffer ``a``; ``merge`` writes the next count
            to ``counts[1 - a]``.
        counts: the two int32 (1,) device counts; keep, position: int32 (n,) scratch of the scan.
        n: clusters at the start; limit: most passes (else ``RuntimeError``).
        tail: once the count read is at most this, ``launch_tail(src)`` finishes in one launch (0: never).
        stream: the stream (``None``: the device's current one); dev: the device.
        ahead: passes the host may run ahead (>= 1); lag: tests only (CPU), see the module docstring.

    Returns:
        ``(passes launched, launches made, parity of the buffers holding the result)``.
    """
    cpu = dev.is_cpu
    if not cpu and stream is None:
        stream = wp.get_stream(dev)
    history: list[int] = []  # CPU: the count after each pass
    if not cpu:
        host, start, seen_view, events = _device_state(dev, ahead, limit)
        runtime = _native()
        memcpy = getattr(getattr(runtime, "core", None), "wp_memcpy_d2h", None)
    src, launched, done, seen, launches = 0, 0, 0, n, 0
    # the size each recorded launch was last given (n, as recorded: no set_dim for the first passes)
    dims: dict = {id(cmd): n for before, merge in passes for cmd in (*before, merge)}
    while True:
        if cpu:
            done = max(0, len(history) - lag)
            seen = history[done - 1] if done > 0 else n
        else:
            while done < launched and seen_view[done] >= 0:  # the copies land in pass order
                seen = int(seen_view[done])
                done += 1
            if seen > 1 and launched - done >= ahead:  # far enough ahead: wait for the oldest pass in flight
                wp.synchronize_event(events[done % len(events)])
                continue
        if seen <= 1:
            break
        if seen <= tail:
            launch_tail(src)
            launches += 1
            break
        if launched >= limit:  # cannot happen with ploc's pair order; guards the loop
            raise RuntimeError(f"rayd.engine.PlocBvh(): no convergence after {launched} iterations")
        before, merge = passes[src]
        for cmd in before:
            if dims.get(id(cmd)) != seen:  # (a host running ahead often launches over the same count again)
                cmd.set_dim(seen)
                dims[id(cmd)] = seen
            cmd.launch(stream)
        scan_int(keep, position, seen)
        if dims.get(id(merge)) != seen:
            merge.set_dim(seen)
            dims[id(merge)] = seen
        merge.launch(stream)
        launches += 2 + len(before)
        src = 1 - src
        if cpu:
            history.append(int(counts[src].numpy()[0]))
        else:
            dst = host.ptr + 4 * (start + launched)
            if memcpy is None or not memcpy(dev.context, dst, counts[src].ptr, 4, stream.cuda_stream):
                wp.copy(host, counts[src], start + launched, 0, 1, stream=stream)
            stream.record_event(events[launched % len(events)])
            launches += 1
        launched += 1
    return launched, launches, src

