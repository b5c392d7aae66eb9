"""Run pytest and treat "no tests collected" (exit 5) as a failure: it means the setup is broken."""

from __future__ import annotations

import sys

import pytest

NO_TESTS_COLLECTED = 5


def main() -> int:
    """Run pytest with the given arguments; map exit 5 to a failure with a message."""
    code = int(pytest.main(sys.argv[1:]))
    if code == NO_TESTS_COLLECTED:
        sys.stderr.write("pytest collected no tests: the test setup is broken\n")
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
