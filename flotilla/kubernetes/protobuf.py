"""Kubernetes' protobuf wire format for the one object Flotilla writes in bulk: the pod.

The API server decodes a protobuf request body several times faster than
the same pod in JSON, and answers in protobuf too when asked, which is
cheaper still to produce (kube-scheduler and every controller talk to it
this way). Flotilla creates thousands of pods a second, so the pods its
lease creates are sent as protobuf; everything else stays JSON.

Only the fields :func:`flotilla.kubernetes.pods.pod_manifest` produces are
encoded (field numbers from ``k8s.io/api/core/v1/generated.proto``); a
manifest with anything else raises :class:`Unsupported` and is sent as JSON.
"""

from __future__ import annotations

from typing import Any, Mapping

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class Unsupported(ValueError):
    """The manifest has a field this encoder does not know; send it as JSON."""


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _string(field: int, value: str) -> bytes:
    return _bytes(field, value.encode())


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(int(value))


def _bool(field: int, value: bool) -> bytes:
    return _key(field, 0) + (b"\x01" if value else b"\x00")


def _string_map(field: int, mapping: Mapping[str, str]) -> bytes:
    # Go's protobuf marshalling sorts map keys; the API server does not require it, but stay deterministic.
    return b"".join(_bytes(field, _string(1, k) + _string(2, str(mapping[k]))) for k in sorted(mapping))


def _quantity_map(field: int, mapping: Mapping[str, str]) -> bytes:
    return b"".join(_bytes(field, _string(1, k) + _bytes(2, _string(1, str(mapping[k])))) for k in sorted(mapping))


def _check(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = set(obj) - allowed
    if extra:
        raise Unsupported(f"{where}: {', '.join(sorted(extra))}")


def _meta(meta: Mapping[str, Any]) -> bytes:
    _check(meta, {"name", "generateName", "namespace", "labels", "annotations"}, "metadata")
    out = b""
    if "name" in meta:
        out += _string(1, meta["name"])
    if "generateName" in meta:
        out += _string(2, meta["generateName"])
    if "namespace" in meta:
        out += _string(3, meta["namespace"])
    out += _string_map(11, meta.get("labels") or {})
    out += _string_map(12, meta.get("annotations") or {})
    return out


def _resources(res: Mapping[str, Any]) -> bytes:
    _check(res, {"limits", "requests"}, "resources")
    return _quantity_map(1, res.get("limits") or {}) + _quantity_map(2, res.get("requests") or {})


def _container(c: Mapping[str, Any]) -> bytes:
    _check(c, {"name", "image", "command", "args", "resources"}, "container")
    out = _string(1, c["name"])
    if "image" in c:
        out += _string(2, c["image"])
    out += b"".join(_string(3, part) for part in c.get("command") or ())
    out += b"".join(_string(4, part) for part in c.get("args") or ())
    if "resources" in c:
        out += _bytes(8, _resources(c["resources"]))
    return out


def _toleration(t: Mapping[str, Any]) -> bytes:
    _check(t, {"key", "operator", "value", "effect", "tolerationSeconds"}, "toleration")
    out = b""
    for field, name in ((1, "key"), (2, "operator"), (3, "value"), (4, "effect")):
        if t.get(name):
            out += _string(field, t[name])
    if t.get("tolerationSeconds") is not None:
        out += _int(5, t["tolerationSeconds"])
    return out


def _spec(spec: Mapping[str, Any]) -> bytes:
    _check(spec, {"containers", "restartPolicy", "terminationGracePeriodSeconds", "activeDeadlineSeconds",
                  "nodeSelector", "automountServiceAccountToken", "nodeName", "schedulerName", "tolerations",
                  "priorityClassName", "enableServiceLinks"}, "spec")
    out = b"".join(_bytes(2, _container(c)) for c in spec.get("containers") or ())
    if "restartPolicy" in spec:
        out += _string(3, spec["restartPolicy"])
    if spec.get("terminationGracePeriodSeconds") is not None:
        out += _int(4, spec["terminationGracePeriodSeconds"])
    if spec.get("activeDeadlineSeconds") is not None:
        out += _int(5, spec["activeDeadlineSeconds"])
    out += _string_map(7, spec.get("nodeSelector") or {})
    if spec.get("nodeName"):
        out += _string(10, spec["nodeName"])
    if spec.get("schedulerName"):
        out += _string(19, spec["schedulerName"])
    if "automountServiceAccountToken" in spec:
        out += _bool(21, spec["automountServiceAccountToken"])
    out += b"".join(_bytes(22, _toleration(t)) for t in spec.get("tolerations") or ())
    if spec.get("priorityClassName"):
        out += _string(24, spec["priorityClassName"])
    if "enableServiceLinks" in spec:
        out += _bool(30, spec["enableServiceLinks"])
    return out


def encode_pod(manifest: Mapping[str, Any]) -> bytes:
    """The pod as the API server's protobuf envelope (``k8s\\0`` + runtime.Unknown); :class:`Unsupported` if it cannot."""
    _check(manifest, {"apiVersion", "kind", "metadata", "spec"}, "pod")
    if manifest.get("apiVersion", "v1") != "v1" or manifest.get("kind", "Pod") != "Pod":
        raise Unsupported("not a v1 Pod")
    pod = _bytes(1, _meta(manifest.get("metadata") or {})) + _bytes(2, _spec(manifest.get("spec") or {}))
    type_meta = _string(1, "v1") + _string(2, "Pod")
    return MAGIC + _bytes(1, type_meta) + _bytes(2, pod)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _fields(data: bytes):
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
        elif wire == 2:
            length, i = _read_varint(data, i)
            value, i = data[i:i + length], i + length
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield field, value


def decode_status(data: bytes) -> dict[str, Any]:
    """A metav1.Status answer in protobuf as the dict JSON would give (``reason``, ``message``, ``code``)."""
    if not data.startswith(MAGIC):
        raise ValueError("not a Kubernetes protobuf envelope")
    raw = b""
    for field, value in _fields(data[len(MAGIC):]):
        if field == 2:
            raw = value
    out: dict[str, Any] = {"kind": "Status"}
    for field, value in _fields(raw):
        if field == 2:
            out["status"] = value.decode()
        elif field == 3:
            out["message"] = value.decode()
        elif field == 4:
            out["reason"] = value.decode()
        elif field == 6:
            out["code"] = value
    return out


__all__ = ["CONTENT_TYPE", "Unsupported", "decode_status", "encode_pod"]
