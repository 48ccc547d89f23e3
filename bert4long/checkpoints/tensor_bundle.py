"""TensorFlow's checkpoint files (the tensor-bundle format, ``prefix.index`` + ``prefix.data-0000i-of-0000n``) read and
written with NumPy alone, so that Google's original checkpoints load where TensorFlow is not installed (a JAX or
PyTorch machine) and what bert4long writes is read by TensorFlow, Google's code and Hugging Face's converters.

The index is a LevelDB table (``tensorflow/core/lib/io/table*``): blocks of prefix-compressed keys, each followed by
its compression byte and masked CRC32C, an index block of block handles and a 48-byte footer. Its keys are the
tensor names; the empty key holds the ``BundleHeaderProto`` (shard count, endianness), every other one a
``BundleEntryProto`` (dtype, shape, shard, offset, size, masked CRC32C of the bytes). Both protos are decoded here
(their field numbers from ``tensor_bundle.proto``, ``tensor_shape.proto``), not through TensorFlow's generated code.
Every block's and tensor's checksum is verified (`google_crc32c`); a damaged file is a `ValueError` naming it.
Partitioned variables (TF1's sliced saves) and compressed blocks are refused in one line: Google's BERT, ALBERT,
ELECTRA, NEZHA and RoFormer checkpoints hold neither.

Example:
>>> import numpy as np, tempfile, os
>>> from bert4long.checkpoints.tensor_bundle import BundleReader, write_bundle
>>> prefix = os.path.join(tempfile.mkdtemp(), "model.ckpt")
>>> write_bundle(prefix, {"bert/pooler/dense/bias": np.arange(3, dtype="float32"), "global_step": np.int64(7)})
>>> reader = BundleReader(prefix)
>>> reader.shapes, reader.get("bert/pooler/dense/bias").tolist(), int(reader.get("global_step"))
({'bert/pooler/dense/bias': (3,), 'global_step': ()}, [0.0, 1.0, 2.0], 7)
"""
import os
import struct

import google_crc32c
import ml_dtypes
import numpy as np

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_BYTES = 48
BLOCK_BYTES = 4096   # a data block is closed once it holds this much (TensorFlow's default)
# TensorFlow's DataType numbers of the dtypes a checkpoint of model weights holds.
DTYPES = {1: np.dtype("float32"), 2: np.dtype("float64"), 3: np.dtype("int32"), 4: np.dtype("uint8"),
          5: np.dtype("int16"), 6: np.dtype("int8"), 9: np.dtype("int64"), 10: np.dtype("bool"),
          14: np.dtype(ml_dtypes.bfloat16), 17: np.dtype("uint16"), 19: np.dtype("float16"),
          22: np.dtype("uint32"), 23: np.dtype("uint64")}
DT_STRING = 7
DATA_TYPES = {dtype: number for number, dtype in DTYPES.items()}


def masked_crc32c(data):
    """TensorFlow's stored form of a CRC32C: rotated right by 15 bits plus a constant (``crc32c::Mask``)."""
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(data, at):
    """``(value, next position)`` of the base-128 varint at ``at``."""
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _encode_varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(message):
    """``[(field number, value)]`` of a serialized protobuf message (varints as ints, fixed32 as ints, length-
    delimited fields as bytes)."""
    fields, at = [], 0
    while at < len(message):
        key, at = _varint(message, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(message, at)
        elif wire == 2:
            length, at = _varint(message, at)
            value, at = bytes(message[at:at + length]), at + length
        elif wire == 5:
            value, at = struct.unpack_from("<I", message, at)[0], at + 4
        elif wire == 1:
            value, at = struct.unpack_from("<Q", message, at)[0], at + 8
        else:
            raise ValueError(f"protobuf wire type {wire} is not one a tensor bundle uses")
        fields.append((number, value))
    return fields


def _encode_fields(fields):
    """A serialized protobuf message of ``[(field number, value)]``: ints as varints, ``("fixed32", int)`` as
    fixed32, bytes as length-delimited."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, bytes):
            out += _encode_varint(number << 3 | 2) + _encode_varint(len(value)) + value
        elif isinstance(value, tuple):
            out += _encode_varint(number << 3 | 5) + struct.pack("<I", value[1])
        else:
            out += _encode_varint(number << 3) + _encode_varint(value)
    return bytes(out)


def _block_entries(block, where):
    """The ``(key, value)`` pairs of one table block (its trailer already checked)."""
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end, at, key, entries = len(block) - 4 - 4 * restarts, 0, b"", []
    while at < end:
        shared, at = _varint(block, at)
        unshared, at = _varint(block, at)
        length, at = _varint(block, at)
        key = key[:shared] + bytes(block[at:at + unshared])
        at += unshared
        entries.append((key, bytes(block[at:at + length])))
        at += length
    if at != end:
        raise ValueError(f"{where}: a block of the index is damaged (its entries overrun its restart points)")
    return entries


def _read_block(table, handle, where):
    """The contents of the block at ``handle`` (bytes: offset varint, size varint), its checksum verified."""
    offset, at = _varint(handle, 0)
    size, _ = _varint(handle, at)
    block, trailer = table[offset:offset + size], table[offset + size:offset + size + 5]
    if len(trailer) != 5:
        raise ValueError(f"{where} is truncated: a block ends past the end of the file. Copy the checkpoint again.")
    if trailer[0] != 0:
        raise ValueError(f"{where}: its blocks are compressed (type {trailer[0]}), which TensorFlow's checkpoints are "
                         "not; this index was written by another writer: re-save it with TensorFlow")
    if masked_crc32c(block + trailer[:1]) != struct.unpack_from("<I", trailer, 1)[0]:
        raise ValueError(f"{where} is damaged: a block's checksum does not match. Copy the checkpoint again.")
    return block


def _table(path):
    """``{key: value}`` of the LevelDB table at ``path``."""
    with open(path, "rb") as f:
        table = f.read()
    if len(table) < FOOTER_BYTES or struct.unpack_from("<Q", table, len(table) - 8)[0] != TABLE_MAGIC:
        raise ValueError(f"{path!r} is not a TensorFlow checkpoint index (no table footer): it is truncated or another "
                         "file. Copy the checkpoint again, or pass its prefix (the name before .index)")
    footer = table[-FOOTER_BYTES:]
    _, at = _varint(footer, _varint(footer, 0)[1])   # the metaindex handle, unused
    index = _read_block(table, footer[at:], path)
    entries = {}
    for _, handle in _block_entries(index, path):
        entries.update(_block_entries(_read_block(table, handle, path), path))
    return entries


def _shape(message):
    """The shape of a serialized ``TensorShapeProto`` (its ``dim`` fields, each with its ``size``)."""
    return tuple(next((value for number, value in _fields(dim) if number == 1), 0)
                 for number, dim in _fields(message) if number == 2)


class BundleReader:
    """The tensors of the checkpoint at ``prefix`` (``prefix.index`` and its data files), read on demand.

    ``shapes``: ``{name: shape}`` from the index alone; `get` reads one tensor, checksum verified.
    """

    def __init__(self, prefix):
        self.prefix = os.fspath(prefix)
        index = self.prefix + ".index"
        entries = _table(index)
        header = dict(_fields(entries.pop(b"", b"")))
        if header.get(2, 0) != 0:
            raise ValueError(f"{index!r} was written big-endian, which this reader does not read: re-save it on a "
                             "little-endian machine")
        self.shards = header.get(1, 1)
        parsed = {key: _fields(value) for key, value in entries.items()}
        for key, fields in parsed.items():   # (before the names: a slice's own key is no text)
            if any(number == 7 for number, _ in fields):
                raise ValueError(f"{index!r}: {key.decode(errors='replace')!r} is a partitioned (sliced) variable, "
                                 "which this reader does not join: re-save the checkpoint unpartitioned with TensorFlow")
        self.entries = {}
        for key, fields in parsed.items():
            entry = dict(fields)
            self.entries[key.decode()] = (entry.get(1, 0), _shape(entry.get(2, b"")), entry.get(3, 0),
                                          entry.get(4, 0), entry.get(5, 0), entry.get(6))
        self.shapes = {name: entry[1] for name, entry in self.entries.items()}

    def data_file(self, shard):
        return f"{self.prefix}.data-{shard:05d}-of-{self.shards:05d}"

    def get(self, name):
        """The numpy array of tensor ``name`` (``KeyError`` if the index has none)."""
        dtype, shape, shard, offset, size, crc = self.entries[name]
        path = self.data_file(shard)
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(size)
        if len(data) != size:
            raise ValueError(f"{path!r} is truncated: {name!r} needs bytes {offset}-{offset + size} of it. Copy the "
                             "checkpoint again.")
        value = _strings(data, shape) if dtype == DT_STRING else None
        checked = value[1] if value is not None else data
        if crc is not None and masked_crc32c(checked) != crc:
            raise ValueError(f"{path!r} is damaged: the checksum of {name!r} does not match. Copy the checkpoint again.")
        if value is not None:
            return value[0]
        if dtype not in DTYPES:
            raise ValueError(f"{self.prefix!r}: {name!r} holds TensorFlow dtype {dtype}, which no model weight has")
        return np.frombuffer(data, DTYPES[dtype].newbyteorder("<")).reshape(shape).astype(DTYPES[dtype])


def _strings(data, shape):
    """``(array, checksummed bytes)`` of a string tensor's bytes: a varint length per element, the masked CRC32C of
    the lengths, then the strings. Its entry's checksum covers the lengths as uint32s (uint64s from 4 GiB on), that
    masked CRC and the strings (``WriteStringTensor`` in tensor_bundle.cc)."""
    lengths, at = [], 0
    for _ in range(int(np.prod(shape, dtype=np.int64))):
        length, at = _varint(data, at)
        lengths.append(length)
    sizes = b"".join(struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n) for n in lengths)
    checksum, at = data[at:at + 4], at + 4
    values = []
    for length in lengths:
        values.append(bytes(data[at:at + length]))
        at += length
    return np.array(values, dtype=object).reshape(shape), sizes + checksum + b"".join(values)


def _table_bytes(entries):
    """A LevelDB table of the sorted ``(key, value)`` pairs: data blocks of about `BLOCK_BYTES` (every entry a
    restart point), an empty metaindex block, the index block and the footer."""
    out, index = bytearray(), []

    def block(pairs):
        body = bytearray()
        restarts = []
        for key, value in pairs:
            restarts.append(len(body))
            body += _encode_varint(0) + _encode_varint(len(key)) + _encode_varint(len(value)) + key + value
        body += b"".join(struct.pack("<I", r) for r in restarts or [0]) + struct.pack("<I", len(restarts or [0]))
        handle = _encode_varint(len(out)) + _encode_varint(len(body))
        out.extend(body + b"\0" + struct.pack("<I", masked_crc32c(body + b"\0")))
        return handle

    pending, size = [], 0
    for key, value in entries:
        pending.append((key, value))
        size += len(key) + len(value)
        if size >= BLOCK_BYTES:
            index.append((pending[-1][0], block(pending)))
            pending, size = [], 0
    if pending:
        index.append((pending[-1][0], block(pending)))
    metaindex = block([])
    index_handle = block(index)
    footer = (metaindex + index_handle).ljust(FOOTER_BYTES - 8, b"\0") + struct.pack("<Q", TABLE_MAGIC)
    return bytes(out + footer)


def write_bundle(prefix, tensors, shards=None):
    """Write ``{name: array}`` as a TensorFlow checkpoint at ``prefix`` (``prefix.index``, then the data files);
    ``shards``: lists of names, one data file each (None: one file). Not atomic by itself: write into a temporary
    folder and move the files (`bert4long.checkpoints.tf_format.write_checkpoint`)."""
    names = sorted(tensors)
    shards = shards or [names]
    for name in names:
        dtype = np.asarray(tensors[name]).dtype
        if dtype not in DATA_TYPES:
            raise ValueError(f"{name!r} is a {dtype} array, which a TensorFlow checkpoint of weights does not hold: "
                             f"give one of {', '.join(sorted(str(d) for d in DATA_TYPES))}")
    placed = {}
    for shard, group in enumerate(shards):
        with open(f"{prefix}.data-{shard:05d}-of-{len(shards):05d}", "wb") as f:
            for name in group:
                array = np.asarray(tensors[name])
                data = np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()
                placed[name] = (DATA_TYPES[array.dtype], array.shape, shard, f.tell(), data)
                f.write(data)
    header = _encode_fields([(1, len(shards)), (2, 0), (3, _encode_fields([(1, 1)]))])
    entries = [(b"", header)]
    for name in names:
        dtype, shape, shard, offset, data = placed[name]
        dims = _encode_fields([(2, _encode_fields([(1, n)])) for n in shape])
        entries.append((name.encode(), _encode_fields([(1, dtype), (2, dims), (3, shard), (4, offset),
                                                       (5, len(data)), (6, ("fixed32", masked_crc32c(data)))])))
    with open(prefix + ".index", "wb") as f:
        f.write(_table_bytes(entries))
