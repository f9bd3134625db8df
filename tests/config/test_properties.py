"""Property tests (hypothesis): the parsers answer every input with a value or a clear error, never a crash.

Shapes from probing a running service are seeded into the strategies:
huge numbers, NaN and infinities, deep nesting, NUL, long strings.
"""

from __future__ import annotations

import copy
import json
import math

from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

from flotilla.core.quantities import MAX_QUANTITY, QuantityError, parse_duration, parse_quantity
from flotilla.service.bounds import BoundsError, load_json
from flotilla.service.jobspec import prepare
from flotilla.service.store import NewJob, SubmissionRejected
from tests.support.service import job, job_file, settings

FAST = hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SETTINGS = settings()

NUMBER_TEXT = st.from_regex(r"\A[+-]?(\d{1,70}|\d{0,5}\.\d{1,70})([eE][+-]?\d{1,8})?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?\Z")
HOSTILE_SCALARS = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=300), st.sampled_from(["NaN", "Infinity", "1e4400", "1e1000000", "a\x00b", "x" * 5000,
                                            2**63, -(2**63) - 1, 10**30, float("nan"), float("inf")]),
    st.booleans(), st.none(), NUMBER_TEXT)


@FAST
@given(st.one_of(NUMBER_TEXT, HOSTILE_SCALARS), st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]))
@example("1e99999", "cpu")
@example("1e1000000", "memory")
@example(float("nan"), "cpu")
def test_a_quantity_parses_to_a_bounded_integer_or_a_quantity_error(value, resource):
    try:
        amount = parse_quantity(value, resource)
    except QuantityError as exc:
        assert str(exc)
        return
    assert isinstance(amount, int) and 0 <= amount <= MAX_QUANTITY


@FAST
@given(HOSTILE_SCALARS)
def test_a_duration_parses_to_finite_seconds_or_a_quantity_error(value):
    try:
        seconds = parse_duration(value)
    except QuantityError as exc:
        assert str(exc)
        return
    assert math.isfinite(seconds) and seconds >= 0


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


JSONISH = st.recursive(HOSTILE_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=20), inner, max_size=4)), max_leaves=20)

#: Where a hostile value goes in an otherwise valid job file.
PATHS = [("jobs", 0, "priority"), ("jobs", 0, "clientId"), ("jobSetId",), ("queue",),
         ("jobs", 0, "annotations", "armadaproject.io/gangId"), ("jobs", 0, "labels", "team"),
         ("jobs", 0, "podSpec", "terminationGracePeriodSeconds"), ("jobs", 0, "podSpec", "activeDeadlineSeconds"),
         ("jobs", 0, "podSpec", "containers", 0, "resources", "requests", "cpu"),
         ("jobs", 0, "podSpec", "containers", 0, "resources", "limits", "memory"),
         ("jobs", 0, "podSpec", "nodeSelector", "zone"), ("jobs", 0, "podSpec", "tolerations"),
         ("jobs", 0, "podSpec", "containers", 0, "args"), ("jobs", 0, "podSpec"), ("jobs", 0), ("jobs",)]


def with_value(path, value) -> dict:
    raw = job_file("A", "s", [job("x", memory="1Gi")])
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    node[path[-1]] = copy.deepcopy(value)
    return raw


def answer(raw) -> None:
    """prepare() gives valid jobs or a SubmissionRejected with text; anything else fails the test."""
    try:
        _, jobs = prepare(raw, SETTINGS)
    except SubmissionRejected as exc:
        assert exc.rejections and str(exc)
        return
    assert all(isinstance(j, NewJob) and math.isfinite(j.deadline) and math.isfinite(j.grace_period)
               and abs(j.priority) < 2**53 for j in jobs)


@FAST
@given(st.sampled_from(PATHS), st.one_of(JSONISH, st.builds(deep, st.integers(0, 300))))
@example(("jobs", 0, "podSpec", "containers", 0, "args"), deep(500))
@example(("jobs", 0, "priority"), 2**63)
@example(("jobs", 0, "podSpec", "activeDeadlineSeconds"), float("nan"))
@example(("jobs", 0, "clientId"), "c" * 300)
@example(("jobs", 0, "clientId"), "a\x00b")
def test_the_job_file_parser_gives_jobs_or_a_clear_rejection(path, value):
    answer(with_value(path, value))


@FAST
@given(JSONISH)
def test_any_value_as_a_whole_job_file_gives_jobs_or_a_clear_rejection(value):
    answer(value)


@FAST
@given(st.one_of(st.binary(max_size=200), JSONISH.map(lambda v: json.dumps(v).encode()),
                 st.sampled_from([b"[" * 100000, b'{"a": NaN}', b"1e400", b"9" * 5000, b'"\\u0000"', b"\xff"])))
def test_a_request_body_parses_within_bounds_or_is_a_bounds_error(body):
    try:
        load_json(body)
    except BoundsError as exc:
        assert exc.status in (413, 422) and exc.message
