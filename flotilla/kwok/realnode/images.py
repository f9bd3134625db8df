"""Container images made on this machine, as docker-archive tars that ``ctr images import`` reads: no registry.

``flotilla.local/busybox:1`` is one layer: Debian's static busybox at
``/bin/busybox`` with every applet it lists linked beside it, ``/etc/passwd``
and ``/etc/group`` for root and nobody, and the directories a container
expects. ``flotilla.local/pause:1`` is the pod sandbox's process alone
(``pause.c``, compiled static with gcc). Layers are written with fixed
times and modes, so the same inputs make the same image ids.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

DIRS = ("bin", "etc", "tmp", "proc", "sys", "dev", "dev/shm", "var", "var/run", "run", "root")
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
GROUP = b"root:x:0:\nnobody:x:65534:\n"


def _entry(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, size: int = 0,
           link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname, info.mtime = kind, mode, size, link, 0
    return info


def _layer(files: dict[str, tuple[bytes, int]], links: dict[str, str]) -> bytes:
    """A layer tar: the base directories, ``files`` (name -> (content, mode)) and symlinks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in DIRS:
            tar.addfile(_entry(name, tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755))
        for name, (data, mode) in sorted(files.items()):
            tar.addfile(_entry(name, mode=mode, size=len(data)), io.BytesIO(data))
        for name, target in sorted(links.items()):
            tar.addfile(_entry(name, tarfile.SYMTYPE, 0o777, link=target))
    return buffer.getvalue()


def write_archive(path: Path, tag: str, layer: bytes, cmd: list[str] | None,
                  entrypoint: list[str] | None = None) -> Path:
    """A docker-archive (``docker save`` format) of one layer, tagged ``tag``."""
    layer_id = hashlib.sha256(layer).hexdigest()
    config: dict = {"Env": ["PATH=/bin"], "Cmd": cmd}
    if entrypoint:
        config["Entrypoint"] = entrypoint
    config_blob = json.dumps({"architecture": "amd64", "os": "linux", "config": config,
                              "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]}},
                             sort_keys=True).encode()
    config_id = hashlib.sha256(config_blob).hexdigest()
    manifest = json.dumps([{"Config": f"{config_id}.json", "RepoTags": [tag],
                            "Layers": [f"{layer_id}/layer.tar"]}]).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, data in ((f"{layer_id}/layer.tar", layer), (f"{config_id}.json", config_blob),
                           ("manifest.json", manifest)):
            tar.addfile(_entry(name, size=len(data)), io.BytesIO(data))
    return path


def busybox_image(path: Path, tag: str, busybox: Path) -> Path:
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    links = {f"bin/{name}": "busybox" for name in applets if name and "/" not in name and name != "busybox"}
    layer = _layer({"bin/busybox": (busybox.read_bytes(), 0o755), "etc/passwd": (PASSWD, 0o644),
                    "etc/group": (GROUP, 0o644)}, links)
    return write_archive(path, tag, layer, ["/bin/sh"])


def pause_image(path: Path, tag: str, source: Path) -> Path:
    binary = path.with_suffix(".bin")
    result = subprocess.run(["gcc", "-static", "-Os", "-s", "-o", str(binary), str(source)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"gcc -static {source} failed: {result.stderr.strip()[-500:]} "
                           "(Debian's gcc and libc6-dev are needed)")
    layer = _layer({"pause": (binary.read_bytes(), 0o755)}, {})
    return write_archive(path, tag, layer, None, ["/pause"])


def build_images(out: Path, busybox: Path, pause_source: Path, busybox_tag: str, pause_tag: str) -> list[Path]:
    """Both images' tars in ``out``."""
    return [busybox_image(out / "busybox.tar", busybox_tag, busybox),
            pause_image(out / "pause.tar", pause_tag, pause_source)]
