"""docs/architecture.md's example of adding an attention kernel runs, and its kernel is right."""
import pathlib
import re

import numpy as np
import pytest
from paths import ROOT

from bert4long.attention import FullAttention
from bert4long.attention.base import _KERNELS

DOC = pathlib.Path(ROOT) / "docs" / "architecture.md"


def example_code():
    """The one ```python block of docs/architecture.md."""
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    return block


@pytest.fixture
def kernel_registry():
    """The registry as it was before the example registered its kernel (other tests list the registered ones)."""
    before = dict(_KERNELS)
    yield
    _KERNELS.clear()
    _KERNELS.update(before)


def test_the_kernel_example_runs_and_matches_full_attention(capsys, kernel_registry):
    namespace = {}
    exec(compile(example_code(), str(DOC), "exec"), namespace)
    assert capsys.readouterr().out.strip() == "(1, 12, 16)"
    band = namespace["BandAttention"]
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 7, 2, 4)).astype("float32") for _ in range(3))
    key_mask = np.array([[1] * 7, [1] * 5 + [0] * 2], bool)
    # wide enough to see every key: exactly full attention, padding included
    np.testing.assert_allclose(band(width=7)(q, k, v, key_mask), FullAttention()(q, k, v, key_mask), atol=1e-6)
    # width 0: each token sees only itself
    np.testing.assert_allclose(band(width=0)(q, k, v, np.ones((2, 7), bool)), v, atol=1e-6)
    # causal, wide: full attention with the causal mask
    np.testing.assert_allclose(band(width=7, causal=True)(q, k, v, key_mask),
                               FullAttention(causal=True)(q, k, v, key_mask), atol=1e-6)
