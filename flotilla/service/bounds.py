"""Bounds on everything a client sends, checked before any arithmetic, storage or model building.

Why here and not in each model: a request body is hostile until proven
otherwise, and the expensive or crashing steps (Decimal work on ``1e99999``,
pydantic recursion on 500-deep arrays, a 64-bit column given ``2**63``, a
PostgreSQL text column given a NUL) come before any model sees a field.

* a body is read only up to :attr:`Limits.max_body_bytes` (413 past it);
* JSON is parsed strictly (:func:`load_json`): no ``NaN``/``Infinity``, no
  number that overflows a double, integers within 64 bits, at most
  :data:`MAX_DEPTH` levels of nesting and :data:`MAX_CONTAINERS` objects
  and arrays, no string longer than :data:`MAX_STRING_BYTES` (all three
  checked by a scan of the bytes before anything is decoded or parsed), at
  most :attr:`Limits.max_jobs` jobs, and every string and
  key valid text (:func:`text_problem`): no NUL, no lone UTF-16 surrogate
  (``"\\ud800"`` is valid JSON but not Unicode: UTF-8 cannot encode it, so
  a stored one would break every response, log line and page that shows
  it);
* a URL's path and query are percent-encoded UTF-8 (:func:`url_problem`);
* ids (queue, jobSetId, clientId, gangId) match :data:`ID_PATTERN` whole
  (``fullmatch``: ``$`` would let a trailing newline through);
* ids in a URL's path match it too, and a node name is a Kubernetes node name
  (:data:`NODE_NAME_PATTERN`, a DNS-1123 subdomain);
* priorities are within ±(2^53 - 1) (:data:`PRIORITY_MAX`), exact in any JSON reader;
* an integer is a JSON integer in a body (:data:`StrictInt`: not a string,
  a boolean or ``1.0``) and ASCII digits with an optional ``-`` in a query
  string or a form (:data:`QueryInt`, :func:`integer_from_text`): ``" 1"``,
  ``"1_0"``, ``"１"`` and ``"1.0"`` are refused, not read as numbers; a
  number is a JSON number (:data:`StrictFloat`: not a string or a boolean);
* a job's labels and annotations total at most :data:`MAX_METADATA_BYTES`
  (Kubernetes' own limit for annotations).

The same checks serve job files read from disk (:func:`check_value` on the
parsed YAML or JSON), so every path into the store is bounded alike.
"""

from __future__ import annotations

import codecs
import itertools
import json
import math
import re
from typing import Annotated, Any, Iterator
from urllib.parse import unquote_to_bytes

from pydantic import BeforeValidator, Field, Strict, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from flotilla.service.settings import Limits

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Job priorities: integers every JSON reader holds exactly (a double's 53 bits), well inside the 64-bit column.
PRIORITY_MIN, PRIORITY_MAX = -(2**53 - 1), 2**53 - 1
#: Queue names, job set ids, clientIds and gangIds: what URLs and the store's columns (255) can carry.
#: ``ID_PATTERN`` is for schemas (JSON Schema's ``$`` ends the text); Python matches ``ID_RE`` whole.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$"
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}", re.ASCII)
ID_RULE = "1-255 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"
#: A Kubernetes node name: a DNS-1123 subdomain of at most 253 characters (the API server's ValidateNodeName).
NODE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
NODE_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII)
#: Deepest nesting of objects and arrays in a body (a pod spec with affinity rules needs about 12).
MAX_DEPTH = 64
#: Most objects and arrays in one body: bounds what parsing can allocate whatever the body holds.
MAX_CONTAINERS = 1_000_000
#: Labels and annotations of one job, keys and values together (Kubernetes' TotalAnnotationSizeLimit).
MAX_METADATA_BYTES = 256 * 1024
#: The longest JSON string a body may hold, as written (quotes and escapes counted): 1.5 MiB, the most a whole
#: Kubernetes object may be (etcd's request limit), so no field of a pod, no label and no annotation is longer.
#: A longer one is refused while the body's structure is scanned, before the body is decoded or parsed.
MAX_STRING_BYTES = 1536 * 1024


class BoundsError(ValueError):
    """Input out of bounds: ``status`` (413 for size, 422 otherwise), what, and the field path where known."""

    def __init__(self, message: str, field: str | None = None, status: int = 422):
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status


#: Lone UTF-16 surrogates: what a JSON escape ``\\ud800`` without its pair decodes to in Python.
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why the string ``value`` is not text the service takes (a NUL, a lone surrogate), or None."""
    if "\x00" in value:
        return "NUL characters are not allowed"
    bad = _SURROGATE.search(value)
    if bad is not None:
        return f"not valid Unicode: lone surrogate {shown_text(bad.group())} at character {bad.start() + 1}"
    return None


def shown_text(value: str) -> str:
    """``value`` with lone surrogates written as ``\\udXXX`` escapes: safe to put in a message or a field path."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATE.search(value) else value


def url_problem(raw_path: bytes | None, query: bytes) -> str | None:
    """Why a request's raw path or query string is not percent-encoded UTF-8 text, or None.

    Servers decode both leniently (an invalid byte becomes U+FFFD), so a
    name that cannot be stored would otherwise arrive changed rather than
    refused.
    """
    for where, raw in (("path", raw_path or b""), ("query", query.replace(b"+", b" "))):
        if b"%" not in raw and raw.isascii():
            continue
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return f"the {where} is not valid UTF-8 once percent-decoded"
    return None


def id_problem(value: Any) -> str | None:
    """Why ``value`` is not a valid id, or None."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        return f"{shown!r} is not a valid id: {ID_RULE}"
    return None


#: An integer as a query string or a form writes it: ASCII digits, an optional leading ``-`` and nothing else.
INTEGER_TEXT = re.compile(r"-?[0-9]+", re.ASCII)
#: What the API says of an integer it does not take (pydantic's words for a JSON string given for an integer).
NOT_AN_INTEGER = "Input should be a valid integer"
#: Integers and numbers in a JSON body: a string, a boolean (and, for an integer, ``1.0``) is refused.
StrictInt = Annotated[int, Strict()]
StrictFloat = Annotated[float, Strict()]


def integer_from_text(text: str) -> int:
    """``text`` (``^-?[0-9]+$``) as an integer within 64 bits; ValueError with the API's words otherwise."""
    if not INTEGER_TEXT.fullmatch(text):
        raise ValueError(NOT_AN_INTEGER)
    if len(text.lstrip("-")) > 19 or not INT64_MIN <= int(text) <= INT64_MAX:
        raise ValueError("integer out of the 64-bit range")
    return int(text)


def _query_integer(value: Any) -> Any:
    """A query string's integer: refused unless ``^-?[0-9]+$``; up to 40 digits it is converted and the
    parameter's own bounds name the limit, past them (never converted) it is out of the 64-bit range."""
    if isinstance(value, str):
        if not INTEGER_TEXT.fullmatch(value):
            raise PydanticCustomError("int_parsing", NOT_AN_INTEGER)
        if len(value) > 40:
            raise PydanticCustomError("int_parsing", "integer out of the 64-bit range")
        return int(value)
    return value


#: An integer in a query string (the schema's ``integer``): ``?limit=1.0``, ``?tail=%201`` are refused. Bounds go
#: in a ``Field`` before it (``Annotated[int, Query(...), Field(ge=0), QUERY_INTEGER]``).
QUERY_INTEGER = BeforeValidator(_query_integer)
_PRIORITY = TypeAdapter(Annotated[int, Field(ge=PRIORITY_MIN, le=PRIORITY_MAX)])


def priority_from_text(text: str) -> int:
    """A priority typed as text (a dashboard form), refused as the API refuses it in a JSON body.

    Only ``^-?[0-9]+$`` is an integer (``" 1"``, ``"1_0"``, ``"+1"`` are
    not); a literal past 64 bits gets :func:`load_json`'s message, a value
    past ±(2^53 - 1) the API model's (the same pydantic constraint);
    :class:`BoundsError` with field ``priority``.
    """
    try:
        value = integer_from_text(text)
    except ValueError as exc:
        message = str(exc)
        raise BoundsError(message if message != NOT_AN_INTEGER else f"priority: {message}", "priority") from None
    try:
        return _PRIORITY.validate_python(value)
    except ValidationError as exc:
        raise BoundsError(f"priority: {exc.errors()[0]['msg']}", "priority") from None


def field_path(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + shown_text(str(part))
    return out


# -- any value: what JSON or YAML produced --------------------------------------------------------

def _problem(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if INT64_MIN <= value <= INT64_MAX else "integer out of the 64-bit range"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a finite number"
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, _Refused):
        return value.why
    return None


def _walk(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any, int]]:
    """(path, value, depth) of every value, iteratively (a deep value must not exhaust the stack)."""
    stack = [(path, value, 1)]
    while stack:
        where, item, depth = stack.pop()
        yield where, item, depth
        if depth > MAX_DEPTH:
            continue
        if isinstance(item, dict):
            for key, sub in reversed(list(item.items())):
                if isinstance(key, str) and text_problem(key):   # the key itself: named by its path
                    yield (*where, key), key, depth + 1
                stack.append(((*where, key), sub, depth + 1))
        elif isinstance(item, list):
            for index in range(len(item) - 1, -1, -1):
                stack.append(((*where, index), item[index], depth + 1))


def check_value(value: Any, limits: Limits | None = None) -> None:
    """Raise :class:`BoundsError` naming the first value out of bounds (depth, numbers, NUL, jobs)."""
    containers = 0
    for where, item, depth in _walk(value):
        if depth > MAX_DEPTH:
            raise BoundsError(f"nested more than {MAX_DEPTH} levels deep", field_path(where))
        if isinstance(item, (dict, list)):
            containers += 1
            if containers > MAX_CONTAINERS:
                raise BoundsError(f"more than {MAX_CONTAINERS} objects and arrays", None, 413)
            continue
        why = _problem(item)
        if why:
            raise BoundsError(why, field_path(where) or None)
    _check_job_count(value, limits or Limits())


def _check_job_count(value: Any, limits: Limits) -> None:
    if isinstance(value, dict) and isinstance(value.get("jobs"), list) and len(value["jobs"]) > limits.max_jobs:
        raise BoundsError(f"{len(value['jobs'])} jobs in one submission; at most {limits.max_jobs} "
                          f"(server.maxJobsPerSubmission)", "jobs", 413)


# -- JSON bodies --------------------------------------------------------------------------------------

class _Refused:
    """What a number that cannot be taken parses to; :func:`check_value` then names its path."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


class _Parser:
    """json.loads hooks that turn numbers out of bounds into :class:`_Refused` and remember that they did."""

    def __init__(self):
        self.refused = False

    def _refuse(self, why: str) -> _Refused:
        self.refused = True
        return _Refused(why)

    def parse_int(self, text: str) -> Any:
        value = int(text) if len(text) <= 20 else None  # never convert a huge digit string
        if value is None or not INT64_MIN <= value <= INT64_MAX:
            return self._refuse("integer out of the 64-bit range")
        return value

    def parse_float(self, text: str) -> Any:
        value = float(text)
        return value if math.isfinite(value) else self._refuse(f"{text[:40]} is too large for a number")

    def parse_constant(self, text: str) -> Any:
        return self._refuse(f"{text} is not allowed: numbers must be finite")


#: JSON strings, and the longest run of text made of whole strings and what lies between them (possessive:
#: no backtracking); the inside of a string up to its closing quote, for a string longer than a window.
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"')
_OUTSIDE = re.compile(rb'(?:[^"]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")*+')
_STRING_BODY = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+')
_BRACKETS = bytes(range(256)).translate(None, b"[]{},")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1, ord(","): 0}
#: What the path of a place in a body is made of: strings and the structural characters.
_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[\]{},:]')
#: Bytes handled by one C-level step of the scans, the decoding and the parsing below: each holds the
#: interpreter lock about a millisecond, so a thread doing them leaves the event loop its turn (a 16 MiB body is
#: never one long C call). Larger windows held it 20 to 60 ms each (a 256 KiB window of a 10,000-job body).
WINDOW = 32 * 1024
#: Values a body of an endpoint other than a submission may hold beyond ``server.maxJobsPerSubmission``
#: (a cancellation names up to that many job ids). Such a body is validated in one C call, a few microseconds
#: per value: 900,000 unknown keys held the interpreter lock for 2 s.
VALUES_BEYOND_JOBS = 1000
#: Bodies larger than this are parsed piecewise (:func:`_parse_piecewise`), for the same reason.
PIECEWISE_BYTES = 64 * 1024
#: The most one C call of the piecewise parse is given: a container that fits, or a run of small array members.
PARSE_STEP = 16 * 1024


def _path_at(body: bytes, offset: int) -> str | None:
    """The field path of the value (or key) starting at byte ``offset`` of a JSON text, from what comes before.

    Used only to name a refused string; None past :data:`MAX_DEPTH` levels or in text that is no JSON.
    """
    frames: list[list] = []   # [index] for an array, [key, expecting_a_key] for an object
    for token in _TOKEN.finditer(body, 0, offset):
        text = token.group()
        if text == b"[":
            frames.append([0])
        elif text == b"{":
            frames.append([None, True])
        elif text in (b"]", b"}"):
            if frames:
                frames.pop()
        elif text == b",":
            if frames and len(frames[-1]) == 1:
                frames[-1][0] += 1
            elif frames:
                frames[-1][1] = True
        elif text == b":":
            if frames and len(frames[-1]) == 2:
                frames[-1][1] = False
        elif frames and len(frames[-1]) == 2 and frames[-1][1]:   # a key
            try:
                frames[-1][0] = json.loads(text)
            except ValueError:
                return None
        if len(frames) > MAX_DEPTH:
            return None
    parts: list = []
    for frame in frames:
        if len(frame) == 1:
            parts.append(frame[0])
        elif not frame[1]:   # a member's value; a key being read names the object it is in
            parts.append(frame[0])
    return field_path(parts) or None


def _too_long(body: bytes, start: int) -> BoundsError:
    return BoundsError(f"a string of more than {MAX_STRING_BYTES} bytes; no field takes one (the most a "
                       f"Kubernetes object holds)", _path_at(body, start), 413)


def _structure(body: bytes) -> tuple[int, int, int]:
    """(containers, deepest nesting, commas) of a JSON text outside its strings, in windows of :data:`WINDOW`
    bytes (containers and commas together bound how many values it holds).

    Stops counting once more than :data:`MAX_CONTAINERS` are seen; raises :class:`BoundsError` (413, with the
    field's path) as soon as a string passes :data:`MAX_STRING_BYTES`, without reading the rest of it.
    """
    n, pos, depth, deepest, containers, commas = len(body), 0, 0, 0, 0, 0
    while pos < n:
        end = _OUTSIDE.match(body, pos, min(pos + WINDOW, n)).end()
        if end > pos:   # whole strings and the structure between them
            brackets = _STRING.sub(b"", body[pos:end]).translate(None, _BRACKETS)
            pos = end
            if not brackets:
                continue
            opened = brackets.count(b"[") + brackets.count(b"{")
            separators = brackets.count(b",")
            containers += opened
            commas += separators
            if containers > MAX_CONTAINERS:
                return containers, deepest, commas
            if opened:
                deepest = max(deepest, max(itertools.accumulate(map(_STEP.__getitem__, brackets), initial=depth)))
            depth += 2 * opened + separators - len(brackets)
            continue
        start = pos   # a string that goes past the window: to its closing quote, a window at a time
        pos += 1
        while pos < n:
            inside = _STRING_BODY.match(body, pos, min(pos + WINDOW, n)).end()
            if inside - start >= MAX_STRING_BYTES:   # the closing quote would be past the limit
                raise _too_long(body, start)
            if inside < n and body[inside] == 0x22:   # '"'
                pos = inside + 1
                break
            if inside == pos:   # a backslash ends the text: unterminated, the parser says where
                return containers, deepest, commas
            pos = inside
        else:
            return containers, deepest, commas
    return containers, deepest, commas


def _decoded(body: bytes) -> str:
    """``body`` as UTF-8 text, :data:`WINDOW` bytes per C call; UnicodeDecodeError at its place in ``body``."""
    if len(body) <= WINDOW:
        return body.decode("utf-8")
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts = []
    n = len(body)
    for start in range(0, n, WINDOW):
        pending = len(decoder.getstate()[0])
        try:
            parts.append(decoder.decode(body[start:start + WINDOW], final=start + WINDOW >= n))
        except UnicodeDecodeError as exc:
            raise UnicodeDecodeError("utf-8", body, start - pending + exc.start, start - pending + exc.end,
                                     exc.reason) from None
    return "".join(parts)


#: A JSON escape that decodes to NUL or may decode to a lone surrogate: only then is the parsed body walked.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


def _has_suspect_escape(body: bytes) -> bool:
    """Whether ``body`` holds a :data:`_SUSPECT_ESCAPE`, searched a window at a time (overlapping by 5 bytes)."""
    n = len(body)
    return any(_SUSPECT_ESCAPE.search(body, start, min(start + WINDOW + 5, n)) for start in range(0, n, WINDOW))


_TEXT_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_FLAT = r'(?:[^\[\]{}"]++|' + _TEXT_STRING + r')*+'
#: A run of array members, each a scalar or a container with no container inside, each followed by a comma.
_RUN = re.compile(r'(?:\s*+(?:' + _TEXT_STRING + r'|[^\[\]{}",\s]++|\[' + _FLAT + r'\]|\{' + _FLAT + r'\})\s*+,)++')


def _parse_piecewise(text: str, decoder: json.JSONDecoder) -> Any:
    """``decoder.decode(text)``, in steps of bounded size.

    A value is handed to the C scanner on a slice of 256 bytes, then 4 KiB,
    then :data:`PARSE_STEP`; a container that fits none is walked here,
    member by member. No single C call then sees more than
    :data:`PARSE_STEP` of structure (a string, at most
    :data:`MAX_STRING_BYTES`, is one fast C call), so the thread parsing a
    large body gives up the interpreter lock often. Errors are
    :class:`json.JSONDecodeError` at their place in ``text``.
    """
    scan = decoder.scan_once
    scanstring = json.decoder.scanstring
    ws = json.decoder.WHITESPACE.match
    n = len(text)

    def skip(i: int) -> int:
        return ws(text, i).end()

    def fail(message: str, i: int):
        raise json.JSONDecodeError(message, text, i)

    def scan_at(i: int) -> tuple[Any, int]:
        try:
            return scan(text, i)
        except StopIteration as exc:
            fail("Expecting value", exc.value)

    def value(i: int) -> tuple[Any, int]:
        first = text[i:i + 1]
        if first not in ("[", "{"):
            return scan_at(i)        # a scalar: bounded by its own length
        for size in (256, 4096, PARSE_STEP):
            if i + size >= n:
                return scan_at(i)
            try:
                item, end = scan(text[i:i + size], 0)
                return item, i + end
            except (StopIteration, json.JSONDecodeError):
                continue
        return (array if first == "[" else mapping)(i + 1)

    def run(i: int) -> tuple[list, int]:
        """The members of a run of at most :data:`PARSE_STEP` of small members (and their commas), in one C call."""
        found = _RUN.match(text, i, min(i + PARSE_STEP, n))
        if found is None:
            return [], i
        try:
            return scan("[" + text[i:found.end() - 1] + "]", 0)[0], found.end()
        except StopIteration as exc:
            fail("Expecting value", i + exc.value - 1)
        except json.JSONDecodeError as exc:
            fail(exc.msg, i + exc.pos - 1)

    def array(i: int) -> tuple[list, int]:
        out: list = []
        i = skip(i)
        if text[i:i + 1] == "]":
            return out, i + 1
        while True:
            members, i = run(i)
            if members:
                out.extend(members)
                i = skip(i)
                continue
            item, i = value(i)
            out.append(item)
            i = skip(i)
            nxt = text[i:i + 1]
            if nxt == "]":
                return out, i + 1
            if nxt != ",":
                fail("Expecting ',' delimiter", i)
            i = skip(i + 1)

    def mapping(i: int) -> tuple[dict, int]:
        out: dict = {}
        i = skip(i)
        if text[i:i + 1] == "}":
            return out, i + 1
        while True:
            if text[i:i + 1] != '"':
                fail("Expecting property name enclosed in double quotes", i)
            key, i = scanstring(text, i + 1)
            i = skip(i)
            if text[i:i + 1] != ":":
                fail("Expecting ':' delimiter", i)
            out[key], i = value(skip(i + 1))
            i = skip(i)
            nxt = text[i:i + 1]
            if nxt == "}":
                return out, i + 1
            if nxt != ",":
                fail("Expecting ',' delimiter", i)
            i = skip(i + 1)

    result, end = value(skip(0))
    end = skip(end)
    if end != n:
        fail("Extra data", end)
    return result


def load_json(body: bytes, limits: Limits | None = None, max_values: int | None = None) -> Any:
    """Parse a request body within every bound; :class:`BoundsError` names the first problem.

    The structure (containers, depth, strings of at most
    :data:`MAX_STRING_BYTES`) is checked before decoding and parsing; a body
    is decoded a window at a time and, over :data:`PIECEWISE_BYTES`, parsed
    piecewise, so that no step holds the interpreter lock for long (call
    this off the event loop). ``max_values``: the most values (members of
    objects and arrays, counted by their commas, and containers) the body
    may hold, checked by the same scan.
    """
    limits = limits or Limits()
    if len(body) > limits.max_body_bytes:
        raise BoundsError(f"body of {len(body)} bytes; at most {limits.max_body_bytes} (server.maxBodySize)",
                          None, 413)
    containers, depth, commas = _structure(body)
    if containers > MAX_CONTAINERS:
        raise BoundsError(f"more than {MAX_CONTAINERS} objects and arrays in one body", None, 413)
    if max_values is not None and containers + commas > max_values:
        raise BoundsError(f"more than {max_values} values in one body; this endpoint takes at most {max_values} "
                          f"(server.maxJobsPerSubmission + {VALUES_BEYOND_JOBS})", None, 413)
    if depth > MAX_DEPTH:
        raise BoundsError(f"nested {depth} levels deep; at most {MAX_DEPTH}")
    try:
        text = _decoded(body)
        parser = _Parser()
        decoder = json.JSONDecoder(parse_int=parser.parse_int, parse_float=parser.parse_float,
                                   parse_constant=parser.parse_constant)
        value = decoder.decode(text) if len(body) <= PIECEWISE_BYTES else _parse_piecewise(text, decoder)
    except UnicodeDecodeError as exc:
        raise BoundsError(f"the body is not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise BoundsError(f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (RecursionError, ValueError) as exc:
        raise BoundsError(f"the body cannot be parsed: {type(exc).__name__}") from None
    if parser.refused or _has_suspect_escape(body):
        check_value(value, limits)
    _check_job_count(value, limits)
    return value


# -- submissions: what one validation step may see -----------------------------------------------------

#: Most values (members of objects and arrays and containers, at any depth, the job itself included) one job of
#: a submission may hold: far beyond any real pod spec, and one job is validated in one C call (a few
#: microseconds per value), so this bounds that call to tens of milliseconds.
MAX_JOB_VALUES = 10_000


def _values_within(value: Any, most: int) -> int:
    """How many values ``value`` holds (itself included), counted iteratively; stops at ``most`` + 1."""
    count, stack = 0, [value]
    while stack and count <= most:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def job_values(raw: Any, limits: Limits | None = None) -> list[int]:
    """How many values each job of a parsed submission holds; :class:`BoundsError` (413) for a job over
    :data:`MAX_JOB_VALUES` (its path) or a file holding more than :data:`VALUES_BEYOND_JOBS` values besides
    its jobs (those are validated in one C call with the file's own fields)."""
    if not isinstance(raw, dict):
        return []
    rest = _values_within([v for k, v in raw.items() if k != "jobs"], VALUES_BEYOND_JOBS + 1) - 1
    if rest > VALUES_BEYOND_JOBS:
        raise BoundsError(f"more than {VALUES_BEYOND_JOBS} values besides the jobs in one submission", None, 413)
    jobs = raw.get("jobs")
    counts = []
    for index, job in enumerate(jobs if isinstance(jobs, list) else ()):
        counts.append(_values_within(job, MAX_JOB_VALUES))
        if counts[-1] > MAX_JOB_VALUES:
            raise BoundsError(f"a job of more than {MAX_JOB_VALUES} values (objects, arrays and their members)",
                              f"jobs[{index}]", 413)
    return counts


# -- job files ---------------------------------------------------------------------------------------

def metadata_size(labels: dict, annotations: dict) -> int:
    return sum(len(str(k).encode()) + len(str(v).encode()) for m in (labels, annotations) for k, v in m.items())


def _seconds_problem(value: Any) -> str | None:
    if value is None:
        return None
    if not math.isfinite(value):
        return f"{value!r} is not a finite number of seconds"
    if abs(value) > INT64_MAX:
        return f"{value:g} is out of the 64-bit range"
    return None


def job_file_problems(file: Any) -> list:
    """What a parsed job file (:class:`jobspec.JobFile`) carries out of bounds, as rejections naming each job.

    Ids (queue, jobSetId, clientId, gangId) against :data:`ID_PATTERN`,
    priorities within 64 bits, labels and annotations within
    :data:`MAX_METADATA_BYTES`, and seconds that are finite.
    """
    from flotilla.core.model import GANG_ID_ANNOTATION
    from flotilla.service.store import Rejection

    out = []
    for name in ("queue", "jobSetId"):
        why = id_problem(getattr(file, name))
        if why:
            out.append(Rejection(None, None, name, why))
    for index, job in enumerate(file.jobs):
        def add(field: str, message: str) -> None:
            out.append(Rejection(index, job.clientId, field, message))

        if job.clientId is not None and (why := id_problem(job.clientId)):
            add("clientId", why)
        if not PRIORITY_MIN <= job.priority <= PRIORITY_MAX:
            add("priority", f"{job.priority} is out of range: priorities are within ±(2^53 - 1)")
        gang = job.annotations.get(GANG_ID_ANNOTATION)
        if gang and (why := id_problem(gang)):
            add(f"annotations.{GANG_ID_ANNOTATION}", why)
        size = metadata_size(job.labels, job.annotations)
        if size > MAX_METADATA_BYTES:
            add("annotations", f"labels and annotations total {size} bytes; at most {MAX_METADATA_BYTES} "
                               f"(Kubernetes' limit)")
        specs = [("podSpec", job.podSpec)] if job.podSpec is not None else \
            [(f"podSpecs[{k}]", spec) for k, spec in enumerate(job.podSpecs or [])]
        for path, spec in specs:
            for name, attribute in (("terminationGracePeriodSeconds", "termination_grace_period_seconds"),
                                    ("activeDeadlineSeconds", "active_deadline_seconds")):
                why = _seconds_problem(getattr(spec, attribute, getattr(spec, name, None)))
                if why:
                    add(f"{path}.{name}", why)
    return out


__all__ = ["Limits", "BoundsError", "ID_PATTERN", "INTEGER_TEXT", "NODE_NAME_PATTERN",
           "NODE_NAME_RE", "QUERY_INTEGER", "StrictFloat", "StrictInt", "integer_from_text", "ID_RULE", "INT64_MIN", "INT64_MAX", "PRIORITY_MIN", "PRIORITY_MAX",
           "MAX_DEPTH",
           "MAX_CONTAINERS", "MAX_JOB_VALUES", "MAX_METADATA_BYTES", "MAX_STRING_BYTES", "job_values", "check_value", "id_problem", "job_file_problems", "load_json",
           "metadata_size", "priority_from_text", "shown_text", "text_problem", "url_problem"]
