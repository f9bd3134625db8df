"""Flotilla's image (``scripts/image``) in the real node's containerd, for the tests that run it on ``real-1``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import flotilla

REPO = Path(__file__).resolve().parents[2]
TAG = f"flotilla.local/flotilla:{flotilla.__version__}"


def _ctr(*args: str) -> list[str]:
    from flotilla.kwok.realnode import node

    return ["ctr", "--address", str(node().socket), "-n", "k8s.io", "images", *args]


def build_and_import(out: Path) -> str:
    """Build the archive into ``out`` (warm: the cached base and the project's wheel) and import it into real-1's
    containerd; the image's name."""
    built = subprocess.run([str(REPO / "scripts" / "image"), "--out", str(out)], capture_output=True, text=True,
                           timeout=3600, cwd=REPO)
    assert built.returncode == 0, built.stderr[-4000:]
    assert built.stdout.strip() == str(out)
    imported = subprocess.run(_ctr("import", str(out)), capture_output=True, text=True, timeout=600)
    assert imported.returncode == 0, imported.stderr
    assert TAG in subprocess.run(_ctr("ls", "-q"), capture_output=True, text=True, check=True).stdout.split()
    return TAG


def imported_image(out: Path) -> str:
    """The image already in real-1's containerd, or built and imported now."""
    have = subprocess.run(_ctr("ls", "-q"), capture_output=True, text=True, check=True).stdout.split()
    return TAG if TAG in have else build_and_import(out)
