"""The images ``scripts/image`` builds (Flotilla's, and with ``--postgres`` the chart's bundled PostgreSQL) in the
real node's containerd, for the tests that run them on ``real-1``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import flotilla

REPO = Path(__file__).resolve().parents[2]
TAG = f"flotilla.local/flotilla:{flotilla.__version__}"
#: The chart's postgresql.image default; ``scripts/image --postgres`` tags it with the suite's PostgreSQL major
#: version, which is 15 on this machine's Debian (bookworm).
POSTGRES_TAG = "flotilla.local/postgresql:15"


def _ctr(*args: str) -> list[str]:
    from flotilla.kwok.realnode import node

    return ["ctr", "--address", str(node().socket), "-n", "k8s.io", "images", *args]


def build_and_import(out: Path, *flags: str, tag: str = TAG) -> str:
    """Build the archive into ``out`` (warm: the cached base and the project's wheel) and import it into real-1's
    containerd; the image's name. ``flags`` go to ``scripts/image`` (``--postgres``)."""
    built = subprocess.run([str(REPO / "scripts" / "image"), *flags, "--out", str(out)], capture_output=True,
                           text=True, timeout=3600, cwd=REPO)
    assert built.returncode == 0, built.stderr[-4000:]
    assert built.stdout.strip() == str(out)
    imported = subprocess.run(_ctr("import", str(out)), capture_output=True, text=True, timeout=600)
    assert imported.returncode == 0, imported.stderr
    assert tag in subprocess.run(_ctr("ls", "-q"), capture_output=True, text=True, check=True).stdout.split()
    return tag


def imported_image(out: Path) -> str:
    """The image already in real-1's containerd, or built and imported now."""
    have = subprocess.run(_ctr("ls", "-q"), capture_output=True, text=True, check=True).stdout.split()
    return TAG if TAG in have else build_and_import(out)


def imported_postgres_image(out: Path) -> str:
    """The bundled PostgreSQL's image already in real-1's containerd, or built and imported now."""
    have = subprocess.run(_ctr("ls", "-q"), capture_output=True, text=True, check=True).stdout.split()
    return POSTGRES_TAG if POSTGRES_TAG in have else build_and_import(out, "--postgres", tag=POSTGRES_TAG)
