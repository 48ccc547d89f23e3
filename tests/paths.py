"""Where the tests are: the repository root, the files the tests read (``tests/files``), and the environment of a
child process that imports bert4long and the tests' helpers from this checkout, from any folder."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
FILES = os.path.join(TESTS, "files")


def child_env(**variables):
    """``os.environ`` with ``variables`` and a PYTHONPATH that starts with the repository root and ``tests/`` (the
    helpers a test file imports when it runs as a script)."""
    path = os.pathsep.join(filter(None, [ROOT, TESTS, os.environ.get("PYTHONPATH")]))
    return {**os.environ, **variables, "PYTHONPATH": path}
