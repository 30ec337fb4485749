"""Embree 4's C API, called directly: scenes built through ``ctypes``, packets traced from Warp.

``embreex`` (the ``cpu`` extra) bundles Embree 4 (``libembree4``) but binds only
``rtcIntersect1`` in a Cython loop, copies meshes element by element, and has no
per-call flags. This module loads the same bundled library with :mod:`ctypes` and

- builds a scene (robust or not, optionally with argument filters) from NumPy arrays by a
  ``memmove`` per buffer (:class:`Scene`), about 2-3x faster than embreex's construction;
- traces rays 16 at a time with ``rtcIntersect16`` from inside a Warp CPU kernel
  (:func:`intersect16`, a ``wp.func_native`` snippet calling Embree through its
  function pointer; the search kernels call ``rtcIntersect8`` twice where 16-ray packets
  are not native, :func:`native_width`), with ``RTC_RAY_QUERY_FLAG_COHERENT`` for a packet whose
  directions lie within a few degrees of each other (Embree's frustum traversal:
  about 25 % less work on camera-like rays, twice the work on incoherent ones).

Nothing is compiled beyond Warp's own kernel compiler: the library comes from the
embreex wheel on Linux, macOS and Windows. Where it cannot be found, :func:`library`
returns ``None`` and rayd stays on its Warp search.

References:
    Embree 4 API (``rtcore_scene.h``, ``rtcore_ray.h``): ``RTCRayHit16`` is a structure
    of arrays (12 ray fields then the hit fields, 16 lanes each, 64-byte aligned).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

import numpy as np
import warp as wp

wp.set_module_options({"enable_backward": False})

_RTC_SCENE_FLAG_DYNAMIC = 1 << 0
_RTC_SCENE_FLAG_ROBUST = 1 << 2
_RTC_SCENE_FLAG_FILTER_FUNCTION_IN_ARGUMENTS = 1 << 3
_RTC_GEOMETRY_TYPE_TRIANGLE = 0
_RTC_BUFFER_TYPE_INDEX, _RTC_BUFFER_TYPE_VERTEX = 0, 1
_RTC_FORMAT_UINT3, _RTC_FORMAT_FLOAT3 = 0x5003, 0x9003
_RTC_DEVICE_PROPERTY_NATIVE_RAY4_SUPPORTED, _RTC_DEVICE_PROPERTY_NATIVE_RAY8_SUPPORTED = 32, 33
_RTC_DEVICE_PROPERTY_NATIVE_RAY16_SUPPORTED = 34

#: ``RTCBuildQuality`` values.
BUILD_QUALITY_LOW, BUILD_QUALITY_MEDIUM, BUILD_QUALITY_HIGH, BUILD_QUALITY_REFIT = 0, 1, 2, 3

_lib = None
_device = None
_error: str | None = None


def _candidates() -> list[str]:
    """Paths of the Embree 4 library bundled with embreex (wheel layouts of every platform)."""
    found = []
    try:
        from importlib.metadata import files

        for f in files("embreex") or ():
            name = os.path.basename(str(f)).lower()
            if "embree4" in name and (".so" in name or name.endswith((".dylib", ".dll"))):
                found.append(str(f.locate()))
    except Exception:  # noqa: BLE001 - not installed as a distribution
        pass
    name = ctypes.util.find_library("embree4")
    if name:
        found.append(name)
    return found


def library():
    """The loaded ``ctypes`` Embree 4 library (and its device), or ``None`` (see :func:`error`)."""
    global _lib, _device, _error
    if _lib is not None or _error is not None:
        return _lib
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            lib.rtcIntersect16  # noqa: B018 - the entry point the kernels call
        except (OSError, AttributeError) as exc:
            _error = f"{path}: {exc}"
            continue
        vp, ui = ctypes.c_void_p, ctypes.c_uint
        for name, res, args in (
            ("rtcNewDevice", vp, [ctypes.c_char_p]), ("rtcNewScene", vp, [vp]),
            ("rtcNewGeometry", vp, [vp, ctypes.c_int]),
            ("rtcSetNewGeometryBuffer", vp, [vp, ctypes.c_int, ui, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t]),
            ("rtcCommitGeometry", None, [vp]), ("rtcAttachGeometryByID", None, [vp, vp, ui]),
            ("rtcReleaseGeometry", None, [vp]), ("rtcSetSceneFlags", None, [vp, ctypes.c_int]),
            ("rtcCommitScene", None, [vp]), ("rtcReleaseScene", None, [vp]),
            ("rtcGetDeviceError", ctypes.c_int, [vp]), ("rtcSetSceneBuildQuality", None, [vp, ctypes.c_int]),
            ("rtcSetGeometryBuildQuality", None, [vp, ctypes.c_int]),
            ("rtcGetGeometry", vp, [vp, ui]), ("rtcGetGeometryBufferData", vp, [vp, ctypes.c_int, ui]),
            ("rtcUpdateGeometryBuffer", None, [vp, ctypes.c_int, ui]), ("rtcDetachGeometry", None, [vp, ui]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        device = lib.rtcNewDevice(None)
        if not device:
            _error = f"{path}: rtcNewDevice failed"
            continue
        _lib, _device, _error = lib, device, None
        return _lib
    if _error is None:
        _error = "no libembree4 found in the embreex distribution"
    return None


def error() -> str | None:
    """Why :func:`library` returned ``None`` (``None`` once loaded)."""
    return _error


def intersect16_pointer() -> int:
    """The address of ``rtcIntersect16`` (a kernel argument)."""
    return ctypes.cast(library().rtcIntersect16, ctypes.c_void_p).value


def packet_width() -> int:
    """Lanes per Embree call of the search kernels: ``RAYD_EMBREE_PACKET`` (4, 8 or 16), else :func:`native_width`.
    The search still prepares and checks 16 rays at a time; a narrower width splits the Embree call, each
    half (quarter) copied into an ``RTCRayHit8`` (``4``) and back: the 16-lane layout keeps the kernel's
    loops vectorized (two ``RTCRayHit8`` read in place made them scalar: terrain 0.85x the CPU time with copies)."""
    value = os.environ.get("RAYD_EMBREE_PACKET", "").strip()
    if value:
        if value not in ("4", "8", "16"):
            raise ValueError(f"RAYD_EMBREE_PACKET={value!r}: expected 4, 8 or 16")
        return int(value)
    return native_width()


@functools.lru_cache(maxsize=None)
def native_width() -> int:
    """The widest packet Embree traces natively: 16 (AVX-512), 8 (AVX2) or 4 (``RTC_DEVICE_PROPERTY_NATIVE_RAY{16,8,4}
    _SUPPORTED``); 16 where none is reported or the library is missing (the width rayd called before).

    On AVX2, Embree 4.4's ``rtcIntersect16`` traces its rays one at a time (as slow as ``rtcIntersect1``),
    while ``rtcIntersect8`` walks 8-ray packets: terrain 4 x 4 tiles, one thread, 34.5 -> 20.3 ms
    (``rtcOccluded``: 35.5 -> 14.2 ms; benchmarks/README.md, session 25)."""
    lib = library()
    if lib is None:
        return 16
    lib.rtcGetDeviceProperty.restype, lib.rtcGetDeviceProperty.argtypes = ctypes.c_ssize_t, [ctypes.c_void_p, ctypes.c_int]
    for width, prop in ((16, _RTC_DEVICE_PROPERTY_NATIVE_RAY16_SUPPORTED), (8, _RTC_DEVICE_PROPERTY_NATIVE_RAY8_SUPPORTED),
                        (4, _RTC_DEVICE_PROPERTY_NATIVE_RAY4_SUPPORTED)):
        if lib.rtcGetDeviceProperty(_device, prop) == 1:
            return width
    return 16


@functools.lru_cache(maxsize=None)
def intersect_pointer(width: int) -> int:
    """The address of ``rtcIntersect{width}``, a kernel argument: 4, 8 or 16 (one signature, ``(valid, scene,
    RTCRayHitN*, args)``) or 1 (``(scene, RTCRayHit*, args)``)."""
    return ctypes.cast(getattr(library(), f"rtcIntersect{width}"), ctypes.c_void_p).value


class Scene:
    """A committed Embree scene of triangle meshes (geomID = position in ``meshes``), robust mode by default.

    Args:
        meshes: ``(vertices (V, 3) float32, faces (F, 3) int32)`` pairs, copied into
            Embree's own buffers.
        quality: the scene's ``RTCBuildQuality`` (``None``: Embree's default, medium);
            :data:`BUILD_QUALITY_LOW` builds one BVH per geometry under a top level.
        geometry_quality: each geometry's ``RTCBuildQuality`` (used by a low-quality scene).
        robust: ``RTC_SCENE_FLAG_ROBUST`` (else no flag: Embree's faster, non-watertight test).
        argument_filter: ``RTC_SCENE_FLAG_FILTER_FUNCTION_IN_ARGUMENTS`` (a filter function passed with
            a query's arguments is invoked when the query sets ``RTC_RAY_QUERY_FLAG_INVOKE_ARGUMENT_FILTER``).
        dynamic: ``RTC_SCENE_FLAG_DYNAMIC`` with each geometry's quality :data:`BUILD_QUALITY_REFIT`
            (overrides ``geometry_quality``): :meth:`update` then refits the geometries' BVHs in place
            (terrain, 131 k faces, 2 cores: 2.5-3 ms where a new scene takes 26-75 ms).

    Raises:
        RuntimeError: Embree reports an error (e.g. out of memory).
    """

    def __init__(self, meshes, quality: int | None = None, geometry_quality: int | None = None,
                 robust: bool = True, argument_filter: bool = False, dynamic: bool = False) -> None:
        lib = library()
        self._lib = lib
        self.ptr = lib.rtcNewScene(_device)
        self.dynamic = dynamic
        self._quality = BUILD_QUALITY_REFIT if dynamic else geometry_quality
        self.meshes: list = []  # per geometry: (vertex count, faces) as attached
        lib.rtcSetSceneFlags(self.ptr, (_RTC_SCENE_FLAG_ROBUST if robust else 0)
                             | (_RTC_SCENE_FLAG_DYNAMIC if dynamic else 0)
                             | (_RTC_SCENE_FLAG_FILTER_FUNCTION_IN_ARGUMENTS if argument_filter else 0))
        if quality is not None:
            lib.rtcSetSceneBuildQuality(self.ptr, quality)
        for geom_id, (vertices, faces) in enumerate(meshes):
            self._attach(geom_id, vertices, faces)
        self._commit("Scene()")

    def _attach(self, geom_id: int, vertices: np.ndarray, faces: np.ndarray) -> None:
        """A new triangle geometry at ``geom_id``, its buffers copied in."""
        lib = self._lib
        vertices = np.ascontiguousarray(vertices, dtype=np.float32)
        geom = lib.rtcNewGeometry(_device, _RTC_GEOMETRY_TYPE_TRIANGLE)
        if self._quality is not None:
            lib.rtcSetGeometryBuildQuality(geom, self._quality)
        for kind, fmt, data in ((_RTC_BUFFER_TYPE_VERTEX, _RTC_FORMAT_FLOAT3, vertices),
                                (_RTC_BUFFER_TYPE_INDEX, _RTC_FORMAT_UINT3, np.ascontiguousarray(faces, dtype=np.uint32))):
            buf = lib.rtcSetNewGeometryBuffer(geom, kind, 0, fmt, 12, max(len(data), 1))
            if not buf:
                raise RuntimeError(f"rayd.engine.embree_api.Scene(): Embree error {lib.rtcGetDeviceError(_device)}")
            ctypes.memmove(buf, data.ctypes.data, data.nbytes)
        lib.rtcCommitGeometry(geom)
        lib.rtcAttachGeometryByID(self.ptr, geom, geom_id)
        lib.rtcReleaseGeometry(geom)
        self.meshes[geom_id:geom_id + 1] = [(len(vertices), faces)]

    def _commit(self, call: str) -> None:
        self._lib.rtcCommitScene(self.ptr)
        code = self._lib.rtcGetDeviceError(_device)
        if code != 0:
            raise RuntimeError(f"rayd.engine.embree_api.{call}: Embree error {code} at commit")

    def update(self, meshes: list) -> None:
        """New meshes for a ``dynamic`` scene, refitted in place where a geometry keeps its vertex count
        and faces (its new vertices copied in); a geometry whose counts or faces differ is replaced, one
        beyond the new list detached. Embree then refits the kept geometries' BVHs and builds the new ones.

        Args:
            meshes: ``(vertices (V, 3) float32, faces (F, 3) int32)`` per geometry (geomID = position); a
                ``faces`` that *is* the array given before is taken as unchanged without a comparison.

        Raises:
            ValueError: the scene is not dynamic.
            RuntimeError: Embree reports an error.
        """
        if not self.dynamic:
            raise ValueError("rayd.engine.embree_api.Scene.update(): the scene was not made with dynamic=True")
        lib = self._lib
        for geom_id in range(len(meshes), len(self.meshes)):
            lib.rtcDetachGeometry(self.ptr, geom_id)
        del self.meshes[len(meshes):]
        for geom_id, (vertices, faces) in enumerate(meshes):
            if geom_id < len(self.meshes):
                count, kept = self.meshes[geom_id]
                if count == len(vertices) and (faces is kept or np.array_equal(faces, kept)):
                    v = np.ascontiguousarray(vertices, dtype=np.float32)
                    geom = lib.rtcGetGeometry(self.ptr, geom_id)
                    ctypes.memmove(lib.rtcGetGeometryBufferData(geom, _RTC_BUFFER_TYPE_VERTEX, 0), v.ctypes.data, v.nbytes)
                    lib.rtcUpdateGeometryBuffer(geom, _RTC_BUFFER_TYPE_VERTEX, 0)
                    lib.rtcCommitGeometry(geom)
                    continue
                lib.rtcDetachGeometry(self.ptr, geom_id)
            self._attach(geom_id, vertices, faces)
        self._commit("Scene.update()")

    def __del__(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr:
            self._lib.rtcReleaseScene(ptr)


#: Packets whose unit directions all lie within this cosine of the first live lane's are traced
#: with Embree's coherent flag (about 8 degrees).
COHERENT_COS = 0.99

_SNIPPET = r"""
    typedef void (*rtc_intersect16_t)(const int*, void*, void*, void*);
    struct { int flags; unsigned int features; void* context; void* filter; void* intersect; float width; void* pad[2]; }
        args = {0, 0xFFFFFFFFu, nullptr, nullptr, nullptr, 0.0f, {nullptr, nullptr}};
    alignas(64) float R[16 * 32];  // RTCRayHit16: 12 ray fields, then the hit (room for instance ids)
    alignas(64) int valid[16];
    unsigned int* U = (unsigned int*)R;
    const float* org = (const float*)origin.data;
    const float* dir = (const float*)direction.data;
    float* far = (float*)tfar.data;
    int live = 0, first = -1;
    float fx = 0.0f, fy = 0.0f, fz = 0.0f;
    bool coherent = true;
    for (int j = 0; j < 16; ++j) {
        int i = lo + j;
        bool ok = i < hi && far[i] >= 0.0f;
        int s = ok ? i : lo;
        valid[j] = ok ? -1 : 0;
        float dx = dir[3 * s], dy = dir[3 * s + 1], dz = dir[3 * s + 2];
        R[0 * 16 + j] = org[3 * s]; R[1 * 16 + j] = org[3 * s + 1]; R[2 * 16 + j] = org[3 * s + 2];
        R[3 * 16 + j] = 0.0f; R[4 * 16 + j] = dx; R[5 * 16 + j] = dy; R[6 * 16 + j] = dz; R[7 * 16 + j] = 0.0f;
        R[8 * 16 + j] = ok ? far[s] : -1.0f;
        U[9 * 16 + j] = 0xFFFFFFFFu; U[10 * 16 + j] = 0u; U[11 * 16 + j] = 0u;
        U[17 * 16 + j] = 0xFFFFFFFFu; U[18 * 16 + j] = 0xFFFFFFFFu; U[19 * 16 + j] = 0xFFFFFFFFu;
        if (ok) {
            float inv = 1.0f / sqrtf(dx * dx + dy * dy + dz * dz);
            if (first < 0) { first = j; fx = dx * inv; fy = dy * inv; fz = dz * inv; }
            else if ((dx * fx + dy * fy + dz * fz) * inv < coherent_cos) coherent = false;
            ++live;
        }
    }
    if (live == 0) return;
    args.flags = coherent ? (1 << 16) : 0;  // RTC_RAY_QUERY_FLAG_COHERENT : _INCOHERENT
    ((rtc_intersect16_t)fn)(valid, (void*)scene, (void*)R, &args);
    int* pid = (int*)prim.data; int* gid = (int*)geom.data;
    float* bu = (float*)u.data; float* bv = (float*)v.data;
    for (int j = 0; j < 16; ++j) {
        if (!valid[j]) continue;
        int i = lo + j;
        bool hit = U[18 * 16 + j] != 0xFFFFFFFFu;
        far[i] = R[8 * 16 + j];
        pid[i] = hit ? (int)U[17 * 16 + j] : -1;
        gid[i] = hit ? (int)U[18 * 16 + j] : -1;
        bu[i] = R[15 * 16 + j]; bv[i] = R[16 * 16 + j];
    }
"""


@wp.func_native(_SNIPPET)
def intersect16(fn: wp.uint64, scene: wp.uint64, origin: wp.array(dtype=wp.vec3), direction: wp.array(dtype=wp.vec3),
                tfar: wp.array(dtype=float), prim: wp.array(dtype=wp.int32), geom: wp.array(dtype=wp.int32),
                u: wp.array(dtype=float), v: wp.array(dtype=float), lo: int, hi: int, coherent_cos: float):
    """Embree's closest hit of rays ``lo .. hi - 1`` (at most 16; those with ``tfar < 0`` skipped):
    ``tfar`` becomes the hit distance, ``prim``/``geom`` Embree's primID/geomID (-1: a miss), ``u, v``
    its barycentric coordinates."""
    ...
