"""Records' public names (``_name``, used in messages and ``repr``) come from their frontend."""

import pytest


def test_torch_record_names():
    pytest.importorskip("torch")
    from rayd.torch import edges, intersection, paths, reflections

    assert [c._name for c in (edges.EdgeTopology, edges.NearestEdge, paths.SpecularPathSet,
                              reflections.ReflectionChain, reflections.SpecularPaths,
                              intersection.Intersection)] == [
        "rayd.torch.EdgeTopology", "rayd.torch.NearestEdge", "rayd.torch.SpecularPathSet",
        "rayd.torch.ReflectionChain", "rayd.torch.SpecularPaths", "rayd.torch.Intersection"]


def test_drjit_record_names():
    pytest.importorskip("drjit")
    from rayd.drjit import _scene_allhits, edges, intersection, reflections

    assert [c._name for c in (edges.EdgeTopology, edges.NearestEdge, reflections.ReflectionChain,
                              reflections.SpecularPaths, reflections.SpecularPathSet,
                              intersection.Intersection, _scene_allhits.Intersections)] == [
        "rayd.drjit.EdgeTopology", "rayd.drjit.NearestEdge", "rayd.drjit.ReflectionChain",
        "rayd.drjit.SpecularPaths", "rayd.drjit.SpecularPathSet", "rayd.drjit.Intersection",
        "rayd.drjit.Intersections"]


def test_names_only_inside_the_frontends():
    from rayd.core.frontend import PublicName

    class Mine(PublicName):
        pass

    class Named(PublicName):
        _name = "mine.Named"

    assert not hasattr(Mine, "_name")  # defined here, not in rayd.torch / rayd.drjit
    assert Named._name == "mine.Named"
