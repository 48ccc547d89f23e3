"""TensorFlow's checkpoint format read and written without TensorFlow (`bert4long.checkpoints.tensor_bundle`), checked
against TensorFlow's own writer (``SaveV2``, ``MergeV2Checkpoints``, ``tf.train.Checkpoint``) and reader
(``tf.train.load_checkpoint``): the same names, shapes, dtypes and values, bit for bit."""
import os

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from bert4long.checkpoints.tensor_bundle import BundleReader, write_bundle
from bert4long.checkpoints.tf_format import CheckpointReader, latest_checkpoint, resolve_checkpoint


def tensors():
    """Every dtype a checkpoint of weights holds, a scalar step, a tensor larger than a block and enough names with
    shared prefixes for several index blocks."""
    rng = np.random.default_rng(0)
    found = {f"bert/encoder/layer_{i}/attention/self/query/kernel": rng.standard_normal((37, 13)).astype("float32")
             for i in range(40)}
    found.update({"global_step": np.int64(12), "x/bfloat16": rng.standard_normal(5).astype(ml_dtypes.bfloat16),
                  "x/float16": rng.standard_normal((2, 3)).astype("float16"), "x/float64": rng.standard_normal(4),
                  "x/int32": np.arange(7, dtype="int32"), "x/bool": np.array([True, False]),
                  "x/big": rng.standard_normal((300, 300)).astype("float32"), "x/empty": np.zeros((0, 3), "float32")})
    return found


def save_with_tensorflow(prefix, arrays, shards=1):
    names = sorted(arrays)
    groups = [names[i::shards] for i in range(shards)]
    parts = [prefix if shards == 1 else f"{prefix}-part{i}" for i in range(shards)]
    for part, group in zip(parts, groups):
        tf.raw_ops.SaveV2(prefix=part, tensor_names=group, shape_and_slices=[""] * len(group),
                          tensors=[tf.convert_to_tensor(arrays[n]) for n in group])
    if shards > 1:
        tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=parts, destination_prefix=prefix)


def assert_equal_to(read, arrays):
    """``read(name)`` equals ``arrays[name]`` in dtype, shape and every bit."""
    for name, expected in arrays.items():
        found = np.asarray(read(name))
        expected = np.asarray(expected)
        assert found.dtype == expected.dtype and found.shape == expected.shape, name
        assert found.tobytes() == expected.tobytes(), name


@pytest.mark.parametrize("shards", [1, 3])
def test_checkpoints_tensorflow_writes_are_read_as_tensorflow_reads_them(tmp_path, shards):
    arrays = tensors()
    prefix = str(tmp_path / "model.ckpt")
    save_with_tensorflow(prefix, arrays, shards)
    reference = tf.train.load_checkpoint(prefix)
    reader = BundleReader(prefix)
    assert reader.shapes == {name: tuple(shape) for name, shape in reference.get_variable_to_shape_map().items()}
    assert_equal_to(reader.get, {name: reference.get_tensor(name) for name in arrays})
    assert_equal_to(reader.get, arrays)


@pytest.mark.parametrize("sharded", [False, True])
def test_tensorflow_reads_what_bert4long_writes(tmp_path, sharded):
    arrays = tensors()
    shards = [["x/big"], sorted(set(arrays) - {"x/big"})] if sharded else None
    prefix = str(tmp_path / "model.ckpt")
    write_bundle(prefix, arrays, shards)
    reference = tf.train.load_checkpoint(prefix)
    assert {name: tuple(s) for name, s in reference.get_variable_to_shape_map().items()} == {
        name: np.shape(a) for name, a in arrays.items()}
    assert_equal_to(reference.get_tensor, arrays)
    assert sorted(os.listdir(tmp_path)) == [f"model.ckpt.data-{i:05d}-of-{len(shards or [0]):05d}"
                                            for i in range(len(shards or [0]))] + ["model.ckpt.index"]


def test_an_object_based_checkpoint_and_its_string_tensor_read_as_tensorflow_reads_them(tmp_path):
    checkpoint = tf.train.Checkpoint(weights=tf.Variable(np.arange(6.0).reshape(2, 3)), step=tf.Variable(3, tf.int64))
    prefix = checkpoint.write(str(tmp_path / "state"))
    reference = tf.train.load_checkpoint(prefix)
    reader = BundleReader(prefix)
    assert sorted(reader.shapes) == sorted(reference.get_variable_to_shape_map())
    graph = reader.get("_CHECKPOINTABLE_OBJECT_GRAPH")
    assert graph.shape == () and graph.item() == reference.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
    assert_equal_to(reader.get, {name: reference.get_tensor(name) for name in reader.shapes
                                 if name != "_CHECKPOINTABLE_OBJECT_GRAPH"})


def test_the_newest_checkpoint_of_a_folder_is_the_one_tensorflow_names(tmp_path):
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(tmp_path / "run dir"), 3)
    for _ in range(2):
        manager.save()
    assert latest_checkpoint(str(tmp_path / "run dir")) == tf.train.latest_checkpoint(str(tmp_path / "run dir"))
    assert resolve_checkpoint(str(tmp_path / "run dir")) == manager.latest_checkpoint
    assert latest_checkpoint(str(tmp_path)) is None


def damaged(prefix, suffix, change):
    path = prefix + suffix
    data = bytearray(open(path, "rb").read())
    with open(path, "wb") as f:
        f.write(change(data))


@pytest.mark.parametrize(("suffix", "change", "message"), [
    (".data-00000-of-00001", lambda d: d[:10] + bytes([d[10] ^ 1]) + d[11:], r"data file .* is damaged or truncated: "
                                                                              r"reading 'w' failed \(.*checksum"),
    (".data-00000-of-00001", lambda d: d[:-4], r"is damaged or truncated: reading 'w' failed \(.*truncated"),
    (".index", lambda d: d[:5] + bytes([d[5] ^ 1]) + d[6:], r"Cannot read checkpoint .*checksum does not match"),
    (".index", lambda d: d[:-3], r"Cannot read checkpoint .*not a TensorFlow checkpoint index"),
])
def test_a_damaged_checkpoint_is_named_in_one_line(tmp_path, suffix, change, message):
    prefix = str(tmp_path / "model.ckpt")
    save_with_tensorflow(prefix, {"w": np.arange(64, dtype="float32")})
    damaged(prefix, suffix, change)
    with pytest.raises(ValueError, match=message):
        CheckpointReader(prefix).get("w")


def test_a_partitioned_variable_is_refused_in_one_line(tmp_path):
    prefix = str(tmp_path / "model.ckpt")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=["w"], shape_and_slices=["4 0,2"], tensors=[tf.ones(2)])
    with pytest.raises(ValueError, match="'w' is a partitioned .* re-save the checkpoint unpartitioned"):
        BundleReader(prefix)


def test_an_array_no_checkpoint_holds_is_refused_before_a_file_is_written(tmp_path):
    with pytest.raises(ValueError, match="'names' is a <U1 array, which a TensorFlow checkpoint of weights does not"):
        write_bundle(str(tmp_path / "model.ckpt"), {"names": np.array(["a"]), "w": np.ones(2, "float32")})
    assert os.listdir(tmp_path) == []
