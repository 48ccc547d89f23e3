"""The tests marked ``slow`` (deselect them with ``pytest -m "not slow"``: the edit loop's fast lane), from measured
times, not guesses.

``slow_tests.txt`` lists, one per line, the tests that took at least `SLOW_SECONDS` in a full run on 2 CPU cores:
a function (``path::name``) when every case of it did, else each slow case (``path::name[case]``: a
parametrized test keeps its fast cases in the fast lane); `tests/conftest.py` marks them. A module's
shared fixture is timed with the first test that uses it, so the fast lane's own run is read too: a fast test
that pays a slow fixture there joins the list (a test may also be marked ``@pytest.mark.slow`` in its file, as the
family suite's checks beyond parity are, to keep the fast lane under 3 minutes). Regenerate it from both runs'
JUnit XML::

    python -m pytest -q tests bert4long --junitxml=/tmp/all.xml
    python tests/slow_tests.py /tmp/all.xml
    python -m pytest -q -m "not slow" tests bert4long --junitxml=/tmp/fast.xml
    python tests/slow_tests.py /tmp/all.xml /tmp/fast.xml

>>> slow_entries([("tests/test_a.py::test_x[1]", 0.2), ("tests/test_a.py::test_x[2]", 3.0),
...               ("tests/test_b.py::test_y", 1.0), ("tests/test_c.py::test_z[1]", 2.5),
...               ("tests/test_c.py::test_z[2]", 4.0), ("tests/test_c.py::test_z[2]", 0.5)], 2.0)
['tests/test_a.py::test_x[2]', 'tests/test_c.py::test_z']
"""
import os
import sys
import xml.etree.ElementTree as ElementTree

SLOW_SECONDS = 2.0
LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow_tests.txt")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def function_of(nodeid):
    """``path::name`` of a test id, without its parametrization."""
    return nodeid.split("[", 1)[0]


def slow_entries(timed, seconds):
    """The entries (sorted) of the cases of ``timed`` ``(nodeid, seconds)`` that took at least ``seconds`` in
    one of their runs: the function when all its cases did, else each such case."""
    longest = {}
    for nodeid, taken in timed:
        longest[nodeid] = max(taken, longest.get(nodeid, 0.0))
    cases = {}
    for nodeid, taken in longest.items():
        cases.setdefault(function_of(nodeid), {})[nodeid] = taken
    entries = set()
    for function, times in cases.items():
        slow = [nodeid for nodeid, taken in times.items() if taken >= seconds]
        entries.update([function] if slow and len(slow) == len(times) else slow)
    return sorted(entries)


def junit_times(path):
    """``(nodeid, seconds)`` of every test case in a pytest JUnit XML file (setup and teardown included)."""
    timed = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        parts = case.get("classname").split(".")
        for k in range(len(parts), 0, -1):   # the longest dotted prefix that is a file of the repository
            module = "/".join(parts[:k])
            path_of = next((p for p in (f"{module}.py", f"{module}/__init__.py") if os.path.exists(os.path.join(ROOT, p))),
                           None)
            if path_of:
                timed.append(("::".join([path_of, *parts[k:], case.get("name")]), float(case.get("time"))))
                break
    return timed


def slow_functions():
    """The functions and cases ``slow_tests.txt`` lists."""
    if not os.path.exists(LIST):
        return set()
    with open(LIST, encoding="utf-8") as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def main(junits):
    slow = slow_entries([timed for junit in junits for timed in junit_times(junit)], SLOW_SECONDS)
    with open(LIST, "w", encoding="utf-8") as f:
        f.write(f"# Tests of at least {SLOW_SECONDS:g} s in a full run or the fast lane on 2 CPU cores (a function: all its\n"
                "# cases; path::name[case]: that case), marked slow by conftest.py. Regenerate: see tests/slow_tests.py.\n")
        f.writelines(name + "\n" for name in slow)
    print(f"{len(slow)} slow tests written to {LIST}")


if __name__ == "__main__":
    main(sys.argv[1:])
