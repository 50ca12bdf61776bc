"""Settings every test shares: the time limit of the slow and multi-process tests."""

import pytest

# pytest.ini's limit (300 s) is for unit tests; end-to-end and multi-process
# tests run whole trainings in children whose own deadlines go up to 600 s.
SLOW_TIMEOUT = 900


def pytest_collection_modifyitems(items):
  """Gives tests marked slow or multiprocess SLOW_TIMEOUT, unless they set a timeout of their own."""
  for item in items:
    marked = item.get_closest_marker('slow') or item.get_closest_marker('multiprocess')
    if marked and item.get_closest_marker('timeout') is None:
      item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
