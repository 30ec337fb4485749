"""rayd.torch.Camera refuses parameters on devices rayd does not run on (helper breakit25, session 25).

DESIGN.md, "Errors": ``ValueError`` for wrong devices, naming the call and the argument (as
``Mesh()`` does). A ``to_world`` or an intrinsic on torch's ``meta`` device stopped in torch's
host read of the values instead (``NotImplementedError: Cannot copy out of meta tensor``), at
``Camera()``; assigned later, it was accepted.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

META = torch.device("meta")


@pytest.mark.parametrize("kwargs, name", [
    (dict(fov_y=30.0, to_world=torch.eye(4, device=META)), "to_world"),
    (dict(fov_y=torch.tensor(30.0, device=META)), "fov_y"),
    (dict(fx=torch.tensor(3.0, device=META)), "fx"),
    (dict(fov_y=30.0, cy=torch.tensor(2.0, device=META)), "cy"),
])
def test_meta_parameters_are_refused_with_the_contract_error(kwargs, name):
    with pytest.raises(ValueError, match=rf"^rayd\.torch\.Camera\(\): '{name}' is on meta; rayd runs on"):
        rt.Camera(4, 4, **kwargs)


@pytest.mark.parametrize("name, value", [("to_world", torch.eye(4, device=META)), ("cx", torch.tensor(1.0, device=META))])
def test_meta_parameters_assigned_later_are_refused(name, value):
    camera = rt.Camera(4, 4, fov_y=30.0)
    with pytest.raises(ValueError, match=rf"'{name}' is on meta; rayd runs on"):
        setattr(camera, name, value)
    assert camera.generate_rays().d.device.type == "cpu"  # unchanged


def test_boundary_term_names_values_on_another_device():
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), torch.tensor([[0, 1, 2]])))
    scene.build()
    pose = torch.tensor([[1.0, 0, 0, 0.3], [0, 1, 0, 0.3], [0, 0, 1, -3], [0, 0, 0, 1]])
    samples = rt.Camera(8, 8, fov_y=30.0, to_world=pose).sample_edges(scene, 4)
    inside = torch.ones(4)
    with pytest.raises(ValueError, match=r"boundary_term\(\): 'f_inside' is on meta, but the record is on cpu"):
        samples.boundary_term(inside.to(META), torch.zeros(4))
    with pytest.raises(ValueError, match=r"boundary_term\(\): 'f_outside' is on meta"):
        samples.boundary_term(inside, torch.zeros(4, device=META))
