"""`MeshBase`: the argument sequence and accessors of both frontends' ``Mesh``.

``Mesh(vertices, faces, *, normals=None, uv=None, to_world=None)`` checks its
arguments in one order for every array library: vertices, faces, the device of the
vertices, the faces' device, then each optional per-vertex attribute (type, device,
row count), the transform, and last the face index range (one read of the faces). A
frontend's ``Mesh`` subclasses this and provides the checks in its own array library.

Hooks a subclass defines:

- nothing for its name: ``_name`` (``"rayd.torch.Mesh"``) comes from :class:`~rayd.core.frontend.PublicName`;
- ``_check_float(call, name, value, components)``: a float (n, components) array, else raise;
- ``_check_faces(call, name, value)``: an integer (F, 3) array, else raise;
- ``_device_of(call, name, value)``: the device of a checked array (refusing ones rayd cannot run on);
- ``_same_device(call, name, value, device, owner)``: raise ``ValueError`` unless on ``device``;
- ``_rows(call, name, value)``: the row count n of a checked array (raising if malformed);
- ``_count(value)``: the row count of a stored array (no checks);
- ``_shape_text(value)``: its shape in messages (``(3, 3)``, ``width 3``);
- ``_check_rows(call, name, value, count)``: raise ``ValueError`` unless it has ``count`` rows like 'vertices';
- ``_check_transform(call, name, value, vertices)``: the checked (4, 4) matrix;
- ``_check_face_range(call, name, faces, num_vertices)``: raise unless every index is in ``[0, V)``;
- ``_trimesh_converter(call, **options)``: ``from_trimesh``'s own options (torch: ``device``,
  ``dtype``; Dr.Jit: ``backend``, ``dtype``, ``ad``) checked, and ``convert(name, array)``, the
  NumPy array of :func:`~rayd.core.meshio.trimesh_arrays` in the frontend's array type.

``from_trimesh`` is this class's code; its docstring is the frontend's ``mesh.DOCS`` (bound by
:class:`~rayd.core.docs.FrontendDocs`) and its shown signature puts the converter's options
ahead of ``normals``, ``uv`` and ``to_world``.
"""

from __future__ import annotations

import inspect
from typing import Any

from rayd.core.docs import FrontendDocs
from rayd.core.frontend import PublicName, frontend_module
from rayd.core.meshio import build_as, trimesh_arrays


class MeshBase(PublicName, FrontendDocs):
    """Shared construction and accessors of ``rayd.torch.Mesh`` and ``rayd.drjit.Mesh`` (module docstring)."""

    _name = "rayd.Mesh"
    _DOCUMENTED = "Mesh"
    _DOCS_MODULE = "_mesh_docs"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "from_trimesh" in cls.__dict__ and "_trimesh_converter" in cls.__dict__:  # a frontend's Mesh
            method = cls.__dict__["from_trimesh"].__func__
            method.__annotations__["return"] = cls  # it makes a mesh of this frontend
            method.__signature__ = _trimesh_signature(method, cls._trimesh_converter)

    def __init__(self, vertices: Any, faces: Any, *, normals: Any = None, uv: Any = None,
                 to_world: Any = None) -> None:
        call = f"{self._name}()"
        vertices = self._check_float(call, "vertices", vertices, 3)
        faces = self._check_faces(call, "faces", faces)
        device = self._device_of(call, "vertices", vertices)
        self._same_device(call, "faces", faces, device, "'vertices'")
        num_vertices = self._rows(call, "vertices", vertices)
        attributes = {}
        for name, value, components in (("normals", normals, 3), ("uv", uv, 2)):
            if value is not None:
                value = self._check_float(call, name, value, components)
                self._same_device(call, name, value, device, "'vertices'")
                self._check_rows(call, name, value, num_vertices)
            attributes[name] = value
        if to_world is not None:
            to_world = self._check_transform(call, "to_world", to_world, vertices)
        self._check_face_range(call, "faces", faces, num_vertices)
        self._arrays = {"vertices": vertices, "faces": faces, "normals": attributes["normals"],
                        "uv": attributes["uv"], "to_world": to_world}

    @classmethod
    def from_trimesh(cls, mesh: object, *, normals: bool = False, uv: bool = False, to_world: Any = None,
                     **options: Any) -> Any:
        """A mesh from a ``trimesh.Trimesh``: the frontend's options checked (``_trimesh_converter``),
        then the arrays of :func:`~rayd.core.meshio.trimesh_arrays` converted (the frontend documents it)."""
        call = f"{cls._name}.from_trimesh()"
        accepted = inspect.signature(cls._trimesh_converter).parameters
        for name in options:
            if name not in accepted or name == "call":
                raise TypeError(f"{call} got an unexpected keyword argument '{name}'")
        return cls._from_trimesh(call, mesh, normals, uv, to_world, cls._trimesh_converter(call, **options))

    @classmethod
    def _from_trimesh(cls, call: str, mesh: Any, normals: bool, uv: bool, to_world: Any, convert: Any) -> Any:
        """``from_trimesh``'s shared steps, after the frontend checked its own options.

        The arrays of :func:`~rayd.core.meshio.trimesh_arrays` (float64 vertices, normals
        and uv, int64 faces) are handed to ``convert(name, array)`` (``name`` one of
        ``"vertices"``, ``"faces"``, ``"normals"``, ``"uv"``; absent ones stay ``None``)
        and the mesh is made from them, its errors reported as ``call``'s.
        """
        arrays = dict(zip(("vertices", "faces", "normals", "uv"), trimesh_arrays(call, mesh, normals, uv)))

        def make() -> Any:
            made = {name: None if array is None else convert(name, array) for name, array in arrays.items()}
            return cls(made["vertices"], made["faces"], normals=made["normals"], uv=made["uv"], to_world=to_world)

        return build_as(call, f"{cls._name}()", make)

    vertices = property(lambda self: self._arrays["vertices"], lambda self, value: self._refuse("vertices"),
                        doc="(V, 3) vertex positions, the array given to ``Mesh()`` (read-only attribute).")
    faces = property(lambda self: self._arrays["faces"], lambda self, value: self._refuse("faces"),
                     doc="(F, 3) vertex indices, the array given to ``Mesh()`` (read-only attribute).")
    normals = property(lambda self: self._arrays["normals"], lambda self, value: self._refuse("normals"),
                       doc="(V, 3) per-vertex shading normals or ``None`` (read-only attribute).")
    uv = property(lambda self: self._arrays["uv"], lambda self, value: self._refuse("uv"),
                  doc="(V, 2) per-vertex texture coordinates or ``None`` (read-only attribute).")
    to_world = property(lambda self: self._arrays["to_world"], lambda self, value: self._refuse("to_world"),
                        doc="(4, 4) object-to-world matrix or ``None`` (read-only attribute).")

    def _refuse(self, name: str) -> None:
        """``AttributeError``: a mesh's arrays are fixed at ``Mesh()`` (a scene registered them; assigning
        a new array would be seen by some queries and not by others, so it is refused)."""
        how = _REPLACE[name].replace("Scene.", f"{self._name.rsplit('.', 1)[0]}.Scene.")
        raise AttributeError(f"{self._name}: '{name}' cannot be assigned (a scene holds the array given to "
                             f"{self._name}()); {how}. In-place writes into the array are seen as documented")

    @property
    def num_vertices(self) -> int:
        """V."""
        return self._count(self.vertices)

    @property
    def num_faces(self) -> int:
        """F."""
        return self._count(self.faces)

    def __repr__(self) -> str:
        extras = [name for name in ("normals", "uv", "to_world") if getattr(self, name) is not None]
        more = f", with {', '.join(extras)}" if extras else ""
        where = frontend_module(self, "_convert").where(self.vertices)  # device=cpu, type=drjit.llvm.Array3f
        return f"{self._name}(V={self.num_vertices}, F={self.num_faces}, {where}{more})"


#: How to change each of a mesh's arrays instead of assigning the attribute (``MeshBase._refuse``).
_REPLACE = {
    "vertices": "use Scene.update_mesh_vertices(mesh_id, vertices) (a mesh added with dynamic=True)",
    "to_world": "use Scene.set_mesh_transform(shape_id, to_world)",
    "faces": "make a new Mesh, add it and build() again",
    "normals": "make a new Mesh, add it and build() again",
    "uv": "make a new Mesh, add it and build() again",
}


def _trimesh_signature(method: Any, converter: Any) -> inspect.Signature:
    """``from_trimesh``'s shown signature: ``(cls, mesh, *, <converter's options>, normals, uv, to_world)``,
    with the annotations of ``method`` (the frontend's copy) and of ``converter``."""
    core = inspect.signature(method)
    params = [p for p in core.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    options = [p for p in inspect.signature(converter).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return core.replace(parameters=params[:2] + options + params[2:])
