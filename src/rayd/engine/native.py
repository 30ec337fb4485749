"""Small native helpers for the traversal kernels (``wp.func_native``), guarded for the CPU.

Warp's ``vec4`` has 4-byte alignment, so a plain load of one compiles to four 32-bit
loads on CUDA; :func:`load4` / :func:`load4i` issue one 128-bit load through the
read-only data path (PTX ``ld.global.nc.v4``, what CUDA's ``__ldg`` of a ``float4``
emits; Warp's JIT runtime, ``cuda_crt.h``, has neither ``int4`` nor a real ``__ldg``,
so the PTX is written out). The arrays are 16-byte aligned (every Warp allocation is,
and each entry is 16 bytes) and not written while a query runs.
:func:`mul_rn` is a float32 product the CUDA compiler never contracts
into a fused multiply-add (``__fmul_rn``), so the difference of two of them is rounded
exactly as written on every device. On the CPU each is the plain operation.
:func:`float_bits` / :func:`bits_float` reinterpret a float32 as an int32 and back.
"""

from __future__ import annotations

import warp as wp

wp.set_module_options({"enable_backward": False})


@wp.func_native("""
#if defined(__CUDA_ARCH__)
    float x, y, z, w;
    asm("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(x), "=f"(y), "=f"(z), "=f"(w) : "l"(wp::address(arr, i)));
    return wp::vec4(x, y, z, w);
#else
    return wp::load(wp::address(arr, i));
#endif
""")
def load4(arr: wp.array(dtype=wp.vec4), i: int) -> wp.vec4:
    """``arr[i]`` in one 128-bit read-only load on CUDA."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
    int x, y, z, w;
    asm("ld.global.nc.v4.s32 {%0, %1, %2, %3}, [%4];" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "l"(wp::address(arr, i)));
    return wp::vec4i(x, y, z, w);
#else
    return wp::load(wp::address(arr, i));
#endif
""")
def load4i(arr: wp.array(dtype=wp.vec4i), i: int) -> wp.vec4i:
    """``arr[i]`` in one 128-bit read-only load on CUDA."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
""")
def mul_rn(a: float, b: float) -> float:
    """``a * b`` rounded to float32 on its own (never fused into an FMA)."""
    ...


@wp.func_native("""
    union { float f; int i; } u;
    u.f = x;
    return u.i;
""")
def float_bits(x: float) -> int:
    """The bits of float32 ``x`` as an int32 (to keep a distance on an int32 stack)."""
    ...


@wp.func_native("""
    union { float f; int i; } u;
    u.i = i;
    return u.f;
""")
def bits_float(i: int) -> float:
    """The float32 whose bits are ``i`` (inverse of :func:`float_bits`)."""
    ...


def raw_pointers(text: str, types: dict[str, str]) -> str:
    """C++ of a ``wp.func_native`` with every ``wp::index(array, row)`` read as ``array_[row]``.

    For CPU code over contiguous arrays (the caller checks ``is_contiguous``): Warp's
    ``wp::index`` reloads the array's data pointer and byte stride around every store (the
    stores may alias them), about 2.5x the cost of a plain gather. ``types`` maps each
    array argument that ``text`` indexes to its C++ element type (``"wp::vec3"``, ``"int"``,
    ...); a preamble declares ``name_`` as a pointer to its data.
    """
    import re  # noqa: PLC0415

    pattern = re.compile(r"wp::index\((\w+), ([^()]*)\)")
    while True:
        out = pattern.sub(lambda m: f"{m.group(1)}_[{m.group(2)}]", text)
        if out == text:
            break
        text = out
    missing = set(re.findall(r"(\w+)_\[", text)) - set(types)
    if missing or "wp::index" in text:
        raise ValueError(f"raw_pointers(): unmapped arrays {sorted(missing)}")
    decl = "".join(f"    {t}* {name}_ = ({t}*){name}.data;\n" for name, t in types.items())
    lines = text.lstrip("\n").split("\n")
    head = 0
    while head < len(lines) and lines[head].strip().startswith("#pragma"):  # must open the body
        head += 1
    return "\n".join(lines[:head]) + "\n" + decl + "\n".join(lines[head:])
