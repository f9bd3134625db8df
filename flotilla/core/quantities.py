r"""Exact resource quantities, resource names and durations.

Kubernetes notation (``500m``, ``64Mi``, ``1.5``, ``2e3``) is parsed to
integers so that no float drift ever reaches a fit check: ``cpu`` is counted
in millicores, every other resource in its base unit (bytes for memory,
devices for ``nvidia.com/gpu``). A quantity that does not come out whole in
that unit is an error, not a rounding.

The text is held to Kubernetes' grammar exactly, because a job Flotilla
accepts must be one the cluster accepts: ASCII digits only (Python's
``\d`` and ``float`` also take full-width and Arabic-Indic digits), no
surrounding spaces or newline, and only the known suffixes. Resource names
are Kubernetes qualified names (:func:`resource_name_problem`).
"""

from __future__ import annotations

import math
import re
from decimal import Context, Decimal, InvalidOperation

#: Resources counted in thousandths; everything else is counted in base units.
MILLI_RESOURCES = frozenset({"cpu"})

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}
#: The largest quantity in its counting unit (a 64-bit integer), and the longest text looked at.
MAX_QUANTITY = 2**63 - 1
MAX_QUANTITY_TEXT = 64
#: Exact for every text that passes the checks above: at most 64 digits, times at most 2**60 * 1000.
_EXACT = Context(prec=200, Emax=400, Emin=-400)
#: Kubernetes' quantity grammar (resource.Quantity): a signed decimal, then a binary suffix (Ki..Ei), a
#: decimal one (n u m k M G T P E) or a decimal exponent (e3, E-2). Matched whole (fullmatch), so no trailing
#: newline slips through as it would past ``$``.
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?",
                       re.ASCII)


class QuantityError(ValueError):
    """A quantity or duration that cannot be parsed exactly."""


def parse_quantity(value: str | int | float, resource: str = "") -> int:
    """Parse a Kubernetes quantity into an exact integer.

    ``cpu`` (see :data:`MILLI_RESOURCES`) comes back in millicores, any other
    resource in base units. Negative, malformed or fractional-in-base-unit
    values raise :class:`QuantityError` with a message that says what was
    expected.
    """
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity such as 500m, 2 or 64Mi, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError(f"expected a finite quantity, got {value!r}")
    if isinstance(value, int) and not -MAX_QUANTITY <= value <= MAX_QUANTITY:   # no 4,300-digit str()
        raise QuantityError(f"quantity is above the maximum ({MAX_QUANTITY})")
    text = str(value)
    if len(text) > MAX_QUANTITY_TEXT:
        raise QuantityError(f"expected a quantity of at most {MAX_QUANTITY_TEXT} characters, got {len(text)}")
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise QuantityError(f"expected a quantity such as 500m, 2 or 64Mi, got {text!r}")
    number, suffix = match.group(1), match.group(2) or ""
    # Bound the exponent before any Decimal arithmetic: 1e99999 must cost nothing and 1e1000000 not overflow.
    mantissa, _, exponent = number.lower().partition("e")
    whole, _, fraction = mantissa.lstrip("+-").partition(".")
    digits = (whole + fraction).strip("0")
    leading = len(whole.lstrip("0")) - 1 if whole.strip("0") else -(len(fraction) - len(fraction.lstrip("0"))) - 1
    magnitude = (int(exponent) if exponent else 0) + leading    # the power of ten of the first digit
    if digits and magnitude > 30:
        raise QuantityError(f"{text!r} is above the maximum quantity ({MAX_QUANTITY})")
    if digits and magnitude < -40:
        raise QuantityError(f"{text!r} is not a whole number of units for {resource or 'this resource'}")
    try:
        amount = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the regex already guards this
        raise QuantityError(f"expected a quantity, got {text!r}") from exc
    amount = _EXACT.multiply(amount, _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
    if amount < 0:
        raise QuantityError(f"expected a non-negative quantity, got {text!r}")
    if resource in MILLI_RESOURCES:
        amount = _EXACT.multiply(amount, 1000)
    if amount > MAX_QUANTITY:
        raise QuantityError(f"{text!r} is above the maximum quantity ({MAX_QUANTITY} in its unit)")
    if amount != amount.to_integral_value():
        unit = "millicores" if resource in MILLI_RESOURCES else "bytes" if resource == "memory" else "units"
        raise QuantityError(f"{text!r} is not a whole number of {unit} for {resource or 'this resource'}")
    return int(amount)


#: Kubernetes' qualified name (IsQualifiedName): an optional DNS-1123 subdomain prefix and "/", then a name
#: of 1-63 characters. Resource names in requests, limits, node resources and queue limits are such names.
_NAME_PART = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*", re.ASCII)
RESOURCE_NAME_RULE = ("a Kubernetes qualified name: an optional DNS subdomain prefix (lower-case letters, digits, "
                      "'-' and '.', at most 253 characters) and '/', then 1-63 letters, digits, '-', '_' or '.', "
                      "starting and ending with a letter or digit")


def resource_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid resource name (a Kubernetes qualified name), or None."""
    if isinstance(name, str):
        prefix, slash, part = name.rpartition("/")
        if len(part) <= 63 and _NAME_PART.fullmatch(part) and (
                not slash or (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix))):
            return None
    shown = name if not isinstance(name, str) or len(name) <= 80 else name[:80] + "..."
    return f"{shown!r} is not a valid resource name: {RESOURCE_NAME_RULE}"


def format_quantity(amount: int, resource: str = "") -> str:
    """Format an integer quantity back into the shortest exact Kubernetes notation."""
    if resource in MILLI_RESOURCES:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if amount == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)


#: The longest duration: about 292 years, what a 64-bit count of nanoseconds (Kubernetes' durations) holds.
MAX_DURATION = float(2**63 // 10**9)
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)?", re.ASCII)
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: str | int | float) -> float:
    """Parse ``30s``, ``5m``, ``2h``, ``3d``, ``250ms`` or a number of seconds into seconds."""
    if isinstance(value, bool):
        raise QuantityError(f"expected a duration such as 30s, 5m, 2h, 3d or seconds, got {value!r}")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(f"expected a finite duration, got {value!r}")
        if value < 0:
            raise QuantityError(f"expected a non-negative duration, got {value!r}")
        if value > MAX_DURATION:
            raise QuantityError(f"expected a duration of at most {MAX_DURATION:g} seconds, got {value:g}")
        return float(value)
    text = str(value)
    match = _DURATION.fullmatch(text) if len(text) <= MAX_QUANTITY_TEXT else None
    if not match:
        raise QuantityError(f"expected a duration such as 30s, 5m, 2h, 3d or seconds, got {text[:80]!r}")
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not seconds <= MAX_DURATION:
        raise QuantityError(f"expected a duration of at most {MAX_DURATION:g} seconds, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Format seconds compactly (``90`` -> ``1m30s``); used in reports and messages."""
    whole = int(seconds)
    if whole != seconds or whole == 0:
        return f"{seconds:g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    return "".join(parts)
