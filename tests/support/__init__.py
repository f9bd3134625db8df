"""What test modules share: helpers and fixtures, imported as ``tests.support.<module>``.

A test module imports from here (or gets fixtures from tests/conftest.py), never from another test
module: a helper two test modules need lives here, under the name it had.
"""
