"""Wheels of this checkout (and of example packages) installed into fresh virtual environments.

A fresh environment has no system site packages and no pip of its own
(making one with ensurepip is the slow part): this interpreter's pip installs
into it. Flotilla's dependencies come from a wheel cache
(``~/.cache/flotilla/wheels/pyX.Y``, or ``$FLOTILLA_WHEEL_CACHE``), filled from
PyPI the first time and read offline after that. Sources are copied before
building, so no build directory is written into the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEEL_CACHE = Path(os.environ.get("FLOTILLA_WHEEL_CACHE",
                                  Path.home() / ".cache" / "flotilla" / "wheels" /
                                  f"py{sys.version_info.major}.{sys.version_info.minor}"))

SKIP_COPY = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".pytest_cache")


def pip(python: str | Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, f"pip {' '.join(args)}\n{result.stdout}\n{result.stderr}"


def build_wheel(source: Path, into: Path) -> Path:
    """A wheel of the project at ``source``, built with this interpreter's setuptools from a copy of it."""
    copy = into / "src" / source.name
    if source == ROOT:
        copy.mkdir(parents=True)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(source / name, copy / name)
        shutil.copytree(source / "flotilla", copy / "flotilla", ignore=SKIP_COPY)
    else:
        shutil.copytree(source, copy, ignore=SKIP_COPY)
    pip(sys.executable, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(into), str(copy))
    name = source.name.replace("-", "_") if source != ROOT else "flotilla"
    (wheel,) = into.glob(f"{name}-*.whl")
    return wheel


def fresh_venv(env_dir: Path, *requirements: str) -> Path:
    """A new virtual environment at ``env_dir`` with ``requirements`` (wheel paths, ``path[extra]``) installed;
    its python."""
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    install = ["--python", str(python), "install", "--quiet", "--no-compile", "--no-index",
               "--find-links", str(WHEEL_CACHE), *requirements]
    try:
        pip(sys.executable, *install)
    except AssertionError:
        # Something is missing from the cache (first run, a new dependency): fill it from PyPI, then offline again.
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        pip(sys.executable, "wheel", "--quiet", "--wheel-dir", str(WHEEL_CACHE), *requirements)
        for requirement in requirements:
            # This checkout's builds are not cached: a later run must install its own.
            for ours in WHEEL_CACHE.glob(f"{Path(requirement.split('[')[0]).name.split('-')[0]}-*.whl"):
                ours.unlink()
        pip(sys.executable, *install)
    return python


def clean_env() -> dict[str, str]:
    """This process's environment without what would make a venv's python import this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env["PYTHONNOUSERSITE"] = "1"
    return env
