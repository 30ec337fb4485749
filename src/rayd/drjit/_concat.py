"""Lane-wise concatenation of many Dr.Jit arrays without a kernel that grows with their number.

``dr.concat`` of K arrays traces one kernel whose size grows with K; its LLVM compilation
grows faster than K (measured in session 20, helper breakit20c, 2-core VM: 0.2 s for 100
flat arrays, 1.6 s for 300), so a scene of 300 meshes took 23 s for its first ``intersect``
(rayd.torch: 0.1 s). Here each part is copied by a scatter whose offset is opaque, so one
compiled kernel serves every part (one launch per part), and the concatenation is
differentiable through :class:`_Concat` (forward: the tangents concatenated the same way;
reverse: each part's slice of the output gradient).
"""

from __future__ import annotations

import drjit as dr

#: Up to this many parts, ``dr.concat`` (one fused kernel, small at this size).
FEW = 8


def _index_type(kind: type) -> type:
    """The flat, non-differentiable ``UInt32`` array type of ``kind``'s backend."""
    flat = dr.value_t(kind) if dr.depth_v(kind) > 1 else kind
    return dr.detached_t(dr.uint32_array_t(flat))


def _rows(width: int, offset: int, UInt: type) -> dr.ArrayBase:
    """``offset, offset + 1, ..., offset + width - 1`` (the offset opaque: no kernel per offset)."""
    return dr.arange(UInt, width) + dr.opaque(UInt, offset)


def copy_parts(parts: list, widths: list[int], kind: type) -> dr.ArrayBase:
    """``parts`` (detached, of ``kind`` or broadcastable to ``widths``) one after the other, evaluated."""
    plain = dr.detached_t(kind)
    UInt = _index_type(kind)
    out = dr.zeros(plain, sum(widths))
    offset = 0
    for part, width in zip(parts, widths):
        if width:
            dr.scatter(out, plain(dr.detach(part)), _rows(width, offset, UInt))
            dr.eval(out)
        offset += width
    return out


class _Concat(dr.CustomOp):
    """``parts`` concatenated lane-wise, differentiably (see the module docstring)."""

    def eval(self, parts, kind):
        self._kind = kind
        self._kinds = [type(p) for p in parts]
        self._widths = [dr.width(p) for p in parts]
        return kind(copy_parts(parts, self._widths, kind))  # (the differentiable type: dr.custom attaches it)

    def forward(self):
        tangents = self.grad_in("parts")
        self.set_grad_out(copy_parts(tangents, self._widths, self._kind))

    def backward(self):
        grad = dr.detach(self.grad_out())
        UInt = _index_type(self._kind)
        grads, offset = [], 0
        for kind, width in zip(self._kinds, self._widths):
            grads.append(dr.gather(kind, grad, _rows(width, offset, UInt)))
            offset += width
        self.set_grad_in("parts", grads)


def concat(parts: list[dr.ArrayBase]) -> dr.ArrayBase:
    """Concatenate arrays of one type lane-wise (componentwise for vectors), differentiably.

    Args:
        parts: arrays of one Dr.Jit type (flat or 2- or 3-vector), any widths (0 too).

    Returns:
        An array of that type whose width is the sum of theirs; gradients flow back into
        every part (reverse and forward mode).
    """
    if len(parts) == 1:
        return parts[0]
    kind = type(parts[0])
    if len(parts) <= FEW:
        if dr.depth_v(kind) == 1:
            return dr.concat(parts)
        return kind(*(dr.concat([p[i] for p in parts]) for i in range(dr.size_v(kind))))
    if dr.is_diff_v(kind) and any(dr.grad_enabled(p) for p in parts):
        return dr.custom(_Concat, parts, kind)
    return kind(copy_parts(parts, [dr.width(p) for p in parts], kind))
