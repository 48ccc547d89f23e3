import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# --doctest-modules (pytest.ini) imports every module here; this helper imports torch, which the tests
# that use it import only after pytest.importorskip("torch").
collect_ignore = ["torch_reference.py"]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """A tiny BERT checkpoint in the Google layout: (config_path, checkpoint_prefix, vocab_path)."""
    from bert4long.testing import write_tiny_checkpoint

    return write_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny_bert")), model="bert", seed=1)


@pytest.fixture(scope="session")
def tiny_albert(tmp_path_factory):
    from bert4long.testing import write_tiny_checkpoint

    return write_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny_albert")), model="albert", seed=2)


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` the tests `slow_tests.txt` lists (measured times; ``-m "not slow"`` is the fast lane)."""
    from slow_tests import function_of, slow_functions

    slow = slow_functions()
    for item in items:
        if function_of(item.nodeid) in slow:
            item.add_marker(pytest.mark.slow)
