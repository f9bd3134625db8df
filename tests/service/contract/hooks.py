"""Schemathesis hooks of the contract run (tests/service/test_contract.py loads this file through SCHEMATHESIS_HOOKS).

The API takes an integer only as a JSON integer literal: ``2.0`` for a priority is refused with 422, as are
``"2"`` and ``true`` (docs/service.md, "What the API accepts"). JSON Schema compares values, not spellings,
so for it ``2.0`` is the integer 2, and schemathesis spells a generated integer in a JSON body as a whole float
half the time, on purpose (a server that takes only one spelling is what it looks for). That refusal is this
API's rule, tested on its own; here every whole number of a generated JSON body is written as an integer literal.
The rewrite keeps each case's validity (JSON Schema reads ``2`` and ``2.0`` as the same value), so positive
cases stay positive and negative ones negative, and every check runs on every operation.
"""

from __future__ import annotations

import schemathesis

#: Beyond 2**53 a float no longer stands for one integer: schemathesis spells no integer as such a float, so a
#: larger whole float was drawn for a ``number`` and stays one.
_EXACT = 2**53


def integer_literals(value):
    """``value`` with every whole float within ±2**53 written as an int, in any nesting of lists and objects."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and -_EXACT <= value <= _EXACT else value
    if isinstance(value, list):
        return [integer_literals(item) for item in value]
    if isinstance(value, dict):
        return {key: integer_literals(item) for key, item in value.items()}
    return value


@schemathesis.hook
def map_body(context, body):
    return integer_literals(body)
