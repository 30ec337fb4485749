"""Fetch the Stanford bunny the examples use and write it as ``.device/meshes/bunny.npz``.

The bunny (1,839 vertices, 3,674 triangles, closed; public domain) comes from the npm
package ``bunny@1.0.1``: with ``npm`` on the PATH it is fetched by ``npm pack``, otherwise
the same tarball is downloaded from the npm registry. The ``.npz`` holds ``vertices``
float32 ``[V, 3]`` and ``faces`` int32 ``[F, 3]`` (0-based).

Run from anywhere (the default output is the one the examples read)::

    python examples/get_bunny.py                     # writes <repository>/.device/meshes/bunny.npz
    python examples/get_bunny.py --out meshes/bunny.npz
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "bunny@1.0.1"
TARBALL_URL = "https://registry.npmjs.org/bunny/-/bunny-1.0.1.tgz"


def fetch_tarball() -> bytes:
    """The package tarball's bytes (``npm pack`` if npm is installed, else a plain download)."""
    npm = shutil.which("npm")
    if npm:
        with tempfile.TemporaryDirectory() as work:
            subprocess.run([npm, "pack", "-q", PACKAGE], cwd=work, check=True, capture_output=True)
            return next(Path(work).glob("bunny-*.tgz")).read_bytes()
    with urllib.request.urlopen(TARBALL_URL, timeout=60) as response:
        return response.read()


def parse_bunny(tarball: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(vertices float32 [V, 3], faces int32 [F, 3])`` from the package's ``index.js``."""
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        source = archive.extractfile("package/index.js").read().decode()
    arrays = {name: json.loads(value) for name, value in re.findall(r"exports\.(\w+)\s*=\s*(\[.*?\]\])", source, re.S)}
    return np.asarray(arrays["positions"], np.float32), np.asarray(arrays["cells"], np.int32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".device" / "meshes" / "bunny.npz")
    args = parser.parse_args()
    vertices, faces = parse_bunny(fetch_tarball())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, vertices=vertices, faces=faces)
    print(f"wrote {args.out}: {len(vertices)} vertices, {len(faces)} faces")


if __name__ == "__main__":
    main()
