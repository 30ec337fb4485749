"""Content checks whose verdict a rayd.drjit query reads at its one fence (CUDA).

A query's lifecycle check compares the registered arrays with their copies
(:mod:`rayd.core.contents`, :mod:`rayd.drjit._contents`); on CUDA reading that comparison's
flags would be a host synchronisation of its own. Inside a public query the flags are read
after the query's fence instead (:func:`rayd.drjit._convert.fence` calls :func:`read`), and at the
end of the outermost query (:func:`rayd.drjit._convert.one_fence` calls :func:`finish`) the check
runs again at once and raises its precise ``RuntimeError`` if any array changed: the query's
answers are never returned.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from rayd.drjit import _convert
from rayd.drjit._convert import _query


def deferring() -> bool:
    """Whether a content check (:mod:`rayd.drjit._contents`) may leave its verdict to the query's fence.

    Inside a public query (:func:`rayd.drjit._convert.one_fence`) with one fence per query
    (:data:`rayd.drjit._convert.QUERY_FENCES` 3), unless :func:`checking_now`: the comparison is
    enqueued, its flags read after the fence the query makes anyway (no host synchronisation of
    its own), and the query raises there.
    """
    return _convert.QUERY_FENCES == 3 and getattr(_query, "depth", 0) > 0 and not getattr(_query, "now", False)


def defer(verdict: Callable[[], bool]) -> None:
    """Leave ``verdict()`` (True: a registered array changed) to the end of the current query."""
    pending = getattr(_query, "verdicts", None)
    if pending is None:
        pending = _query.verdicts = []
    pending.append(verdict)


def deferred_count() -> int:
    """How many verdicts the current query has left to its end (to know that a check just deferred)."""
    return len(getattr(_query, "verdicts", None) or ())


def on_changed(recheck: Callable[[], None]) -> None:
    """What the current query runs at its end if a deferred verdict says changed (it raises the precise error).

    The first check of the outermost query sets it: a query another one runs inside it (the float64
    ``intersect`` and ``shadow_test`` run ``intersect_all`` for their walk-on) must not replace it, so
    the error names the call the user made (found by helper breakit20c: on CUDA the opt-in check named
    ``intersect_all()`` for a float64 ``intersect()``).
    """
    if getattr(_query, "recheck", None) is None:
        _query.recheck = recheck


@contextlib.contextmanager
def checking_now():
    """Content checks inside this block read their verdicts at once (the recheck of :func:`on_changed`)."""
    before = getattr(_query, "now", False)
    _query.now = True
    try:
        yield
    finally:
        _query.now = before


def read() -> None:
    """Read the deferred verdicts (after a fence: the flags are ready); remember whether any said changed."""
    pending, _query.verdicts = getattr(_query, "verdicts", None), None
    if pending and any(v() for v in pending):
        _query.changed = True


def finish() -> None:
    """At the end of the outermost query: run the recheck (raises) if a deferred verdict said changed."""
    read()  # (those no fence read: a query without a launch, or on the CPU)
    changed, _query.changed = getattr(_query, "changed", False), False
    recheck, _query.recheck = getattr(_query, "recheck", None), None
    if changed:
        with checking_now():
            if recheck is not None:
                recheck()
        raise RuntimeError("rayd.drjit.Scene: a registered array changed in place during the query; call sync() "
                           "(or build()) first")


_convert.after_fence, _convert.after_query = read, finish
