"""Browser fixtures for tests in this folder: see tests/browser_support.py."""
from __future__ import annotations

import pytest

from browser_support import browser, lab, lab_server  # noqa: F401  (fixtures)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Let the `lab` fixture know whether the test failed (it then saves a screenshot)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
