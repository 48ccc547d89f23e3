"""Every attention kernel describes itself (options, lengths, keys per query, training memory), and the command
line's help and tables are generated from the registry, a user kernel included."""
import numpy as np
import pytest

from bert4long.attention import (
    AttentionKernel,
    KernelOption,
    get_attention_kernel,
    register_attention_kernel,
    registered_kernels,
)
from bert4long.attention.base import _KERNELS
from bert4long.kernel_names import BUILT_IN_KERNELS, DEFAULT_KERNEL, KERNEL_CLASSES


def test_the_help_names_are_the_registry():
    built_in = {name: cls for name, cls in registered_kernels().items() if cls.__module__.startswith("bert4long.")}
    assert set(built_in) == set(BUILT_IN_KERNELS) and DEFAULT_KERNEL in built_in


def test_the_registry_loads_each_built_in_kernel_from_its_one_line():
    assert list(registered_kernels())[:len(BUILT_IN_KERNELS)] == list(BUILT_IN_KERNELS)
    for name, location in KERNEL_CLASSES.items():
        cls = registered_kernels()[name]
        assert f"{cls.__module__}:{cls.__qualname__}" == location and cls.kernel_name == name
    with pytest.raises(ValueError, match="give it a name"):
        register_attention_kernel()(type("Unlisted", (AttentionKernel,), {}))


@pytest.mark.parametrize("name", BUILT_IN_KERNELS)
def test_every_kernel_describes_itself_completely(name):
    cls = registered_kernels()[name]
    assert cls.summary() and not cls.summary().startswith(" ")
    options = cls.options()
    assert options and all(isinstance(option, KernelOption) for option in options)
    for option in options:
        assert option.name and option.type is not object and option.help, option
    assert {"seed", "dropout_seed"} <= {option.name for option in options}
    kernel = get_attention_kernel(name)   # every option has a default
    assert kernel.length_multiple >= 1 and isinstance(kernel.padding_changes_outputs, bool)
    for length in (64, 4096):
        assert 0 < kernel.keys_per_query(length) and kernel.training_memory_bytes(2, 4, length) > 0
    assert kernel.training_memory_bytes(2, 4, 1024, layers=3) >= kernel.training_memory_bytes(2, 4, 1024)


def test_full_attention_memory_is_its_scores_probabilities_and_dropout_mask():
    """An independent count: float32 scores ``[batch, heads, L, L]`` are batch·heads·L²·4 bytes, three of them."""
    batch, heads, length = 3, 5, 200
    q = np.zeros((batch, length, heads, 2), "float32")
    materialised = np.einsum("bqhd,bkhd->bhqk", q, q).astype("float32").nbytes  # what full attention forms
    assert materialised == batch * heads * length**2 * 4
    assert get_attention_kernel("full").training_memory_bytes(batch, heads, length) == 3 * materialised
    assert get_attention_kernel("full").training_memory_bytes(batch, heads, length, layers=2) == 6 * materialised


def test_sparse_kernels_count_their_keys():
    assert get_attention_kernel("sliding_window", window=8).keys_per_query(100) == 9
    assert get_attention_kernel("bigbird", block_size=4).keys_per_query(1000) == 4 * (3 + 1 + 3)
    assert get_attention_kernel("lsh", bucket_size=8, num_hashes=3).keys_per_query(1000) == 3 * 2 * 8
    chunked = get_attention_kernel("chunked", block_size=16)
    assert chunked.training_memory_bytes(1, 2, 64, layers=12) == 3 * 2 * 16 * 64 * 4   # one block, recomputed


def test_length_checks_live_in_the_kernels():
    registered_kernels()["chunked"].check_length({}, 8)  # the default block is not checked, a given one is
    with pytest.raises(ValueError, match="block_size=16 is larger than --seq-len 8"):
        registered_kernels()["chunked"].check_length({"block_size": 16}, 8, "--seq-len")
    with pytest.raises(ValueError, match="window=512 is larger than the sequence length 100"):
        registered_kernels()["sliding_window"].check_length({}, 100)


@pytest.fixture
def user_kernel():
    @register_attention_kernel("user_mean")
    class MeanOfValues(AttentionKernel):   # no docstring, no facts: the defaults describe it
        def __init__(self, scale=1.0, **kwargs):
            super().__init__(**kwargs)
            self.scale = scale

        def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None):
            from keras import ops

            keep = ops.cast(key_mask, v.dtype)[:, :, None, None]
            mean = ops.sum(v * keep, axis=1, keepdims=True) / ops.sum(keep, axis=1, keepdims=True)
            return self.scale * ops.broadcast_to(mean, ops.shape(v))

        def get_config(self):
            return {**super().get_config(), "scale": self.scale}

    yield MeanOfValues
    del _KERNELS["user_mean"]


def test_a_user_kernel_without_a_description_works(user_kernel, capsys):
    from bert4long.attention import MultiHeadAttention
    from bert4long.cli.checkpoint_tools import _print_attention_fit
    from bert4long.cli.options import parse_attention_config

    assert [option[:3] for option in user_kernel.options()][0] == ("scale", float, 1.0)
    assert user_kernel.summary() == "MeanOfValues"
    kernel = get_attention_kernel("user_mean")
    assert kernel.length_multiple == 1 and kernel.keys_per_query(10) == 10
    assert parse_attention_config(["scale=2.0"], "user_mean") == {"scale": 2.0}
    with pytest.raises(ValueError, match="scale=1.0"):
        parse_attention_config(["scal=2"], "user_mean")
    layer = MultiHeadAttention(heads=2, head_size=4, attention="user_mean")
    assert tuple(layer([np.ones((1, 5, 8), "float32"), np.ones((1, 5), bool)]).shape) == (1, 5, 8)
    _print_attention_fit({"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2}, 1000, 2**40, 1)
    table = capsys.readouterr().out
    assert all(f"  {name} " in table for name in [*BUILT_IN_KERNELS, "user_mean"])


def test_attention_help_lists_every_registered_kernel(capsys):
    from bert4long.cli import main

    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    listed = help_text.split("--attention ATTENTION attention kernel:", 1)[1].split("--attention-config", 1)[0]
    assert set(BUILT_IN_KERNELS) <= {name.strip(",;() ") for name in listed.split()}
