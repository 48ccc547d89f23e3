"""The code stays clean under the ruff rules in ruff.toml (run `ruff check --fix` or read the listed rules)."""
import subprocess
import sys

import pytest
from paths import ROOT


def test_ruff_check_is_clean():
    pytest.importorskip("ruff", reason="ruff is not installed: `pip install -e .[test]` brings it")
    command = [sys.executable, "-m", "ruff", "check", "--no-cache", "bert4long", "tests", "benchmarks", "studies", "examples",
               "setup.py"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"ruff found problems (settings in ruff.toml):\n{result.stdout}{result.stderr}"
