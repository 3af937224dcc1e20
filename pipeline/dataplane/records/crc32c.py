"""CRC-32C (Castagnoli, the TFRecord checksum) of many byte strings at once, with numpy.

A TFRecord frames every record with a masked CRC-32C of its length and one of its bytes.
Computing those one record at a time in Python (or through `tf.io.TFRecordWriter.write`, one
call per record) costs about a microsecond per record; here whole batches go through numpy.

CRC arithmetic is linear over GF(2), which gives three vectorised building blocks:

- `raw_rows`: the CRC register (zero initial value, no final xor: the "raw" CRC) of every row
  of a `[rows, width]` byte block, byte column by byte column (wide blocks are cut into
  sub-blocks whose raw CRCs are then combined, so the number of numpy steps stays small);
- `raw_varlen`: the same for variable-length strings (a data buffer and offsets);
- `shift`: the register after `n` more zero bytes (`n` per row or one for all), from
  precomputed operator tables (4 lookups of 256 entries per shift).

Then `raw(A + B) == shift(raw(A), len(B)) ^ raw(B)`, and the standard CRC of a message whose
register started at 0xFFFFFFFF is the register after all of its pieces, xor 0xFFFFFFFF, so a
record's CRC is folded piece by piece (a feature at a time) without ever touching its
assembled bytes. `crc32c` is the plain one-string reference the tests check against.
"""

from __future__ import annotations

import functools

import numpy as np

POLY = 0x82F63B78  # CRC-32C, reflected
INIT = 0xFFFFFFFF
MASK_DELTA = 0xA282EAD8  # TFRecord's masked_crc32c constant
_BLOCK = 64  # bytes per sub-block in raw_rows for wide blocks


def _table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(POLY), t >> 1).astype(np.uint32)
    return t


TABLE = _table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """The standard CRC-32C of `data` (continuing from `crc`), one byte at a time."""
    c = crc ^ INIT
    table = TABLE.tolist()
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ INIT


def masked(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC: rotate right by 15 bits, add a constant (mod 2**32)."""
    crc = np.asarray(crc, np.uint32)
    return (((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(MASK_DELTA)).astype(
        np.uint32)


def _step(state: np.ndarray, byte: np.ndarray) -> np.ndarray:
    return TABLE[(state ^ byte) & 0xFF] ^ (state >> np.uint32(8))


def _apply(op: np.ndarray, state: np.ndarray) -> np.ndarray:
    """A linear operator on the 32-bit register, as its `[4, 256]` table, applied to `state`."""
    s = np.asarray(state, np.uint32)
    return (op[0][s & 0xFF] ^ op[1][(s >> np.uint32(8)) & 0xFF]
            ^ op[2][(s >> np.uint32(16)) & 0xFF] ^ op[3][s >> np.uint32(24)])


def _wide(op: np.ndarray) -> np.ndarray:
    """The same operator as a `[2, 65536]` table (half the lookups, for long vectors)."""
    i = np.arange(1 << 16)
    return np.stack([op[0][i & 0xFF] ^ op[1][i >> 8], op[2][i & 0xFF] ^ op[3][i >> 8]])


def apply(op: np.ndarray, state: np.ndarray) -> np.ndarray:
    """Apply an operator given as a `[4, 256]` or (faster) a `[2, 65536]` table."""
    if op.shape[0] == 4:
        return _apply(op, state)
    s = np.asarray(state, np.uint32)
    return op[0][s & np.uint32(0xFFFF)] ^ op[1][s >> np.uint32(16)]


@functools.lru_cache(maxsize=64)
def _zeros_op_pow2(k: int) -> np.ndarray:
    """The operator "feed 2**k zero bytes", as a `[4, 256]` table."""
    if k == 0:
        basis = (np.arange(256, dtype=np.uint32)[None, :]
                 << (np.arange(4, dtype=np.uint32)[:, None] * np.uint32(8)))
        return (TABLE[basis & 0xFF] ^ (basis >> np.uint32(8))).astype(np.uint32)
    half = _zeros_op_pow2(k - 1)
    return _apply(half, half)


@functools.lru_cache(maxsize=256)
def zeros_op(n: int) -> np.ndarray:
    """The operator "feed `n` zero bytes" (n >= 0), as a `[4, 256]` table."""
    op = (np.arange(256, dtype=np.uint32)[None, :]
          << (np.arange(4, dtype=np.uint32)[:, None] * np.uint32(8)))  # the identity
    k = 0
    while n:
        if n & 1:
            op = _apply(_zeros_op_pow2(k), op)
        n >>= 1
        k += 1
    return op


@functools.lru_cache(maxsize=32)
def zeros_op_wide(n: int) -> np.ndarray:
    """`zeros_op(n)` as a `[2, 65536]` table."""
    return _wide(zeros_op(n))


@functools.lru_cache(maxsize=8)
def word_op(zeros_after: int = 0) -> np.ndarray:
    """The raw CRC of 4 bytes (a little-endian uint32) followed by `zeros_after` zero bytes,
    as a linear function of the uint32: a `[2, 65536]` table."""
    by_byte = np.stack([_apply(zeros_op(3 - j + zeros_after), TABLE) for j in range(4)])
    return _wide(by_byte)


def shift(state: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """The registers `state` after `n` more zero bytes (`n`: one count, or one per row)."""
    state = np.asarray(state, np.uint32)
    if np.isscalar(n) or np.ndim(n) == 0:
        return apply(zeros_op_wide(int(n)), state) if int(n) else state.copy()
    n = np.asarray(n, np.int64)
    out = state.copy()
    lengths = np.unique(n)
    if len(lengths) <= 8:  # few distinct lengths (the usual case): one operator each
        for length in lengths.tolist():
            if length:
                rows = np.flatnonzero(n == length) if len(lengths) > 1 else slice(None)
                out[rows] = apply(zeros_op_wide(length), out[rows])
        return out
    bit = 0
    while (n >> bit).any():  # many lengths: compose 2**k-zero-byte shifts per set bit
        rows = np.flatnonzero((n >> bit) & 1)
        if len(rows):
            out[rows] = _apply(_zeros_op_pow2(bit), out[rows])
        bit += 1
    return out


def raw_rows(block: np.ndarray) -> np.ndarray:
    """The raw CRC (zero initial register, no final xor) of each row of a `[rows, width]`
    uint8 block."""
    block = np.ascontiguousarray(block, np.uint8)
    rows, width = block.shape
    if width <= 2 * _BLOCK:
        s = np.zeros(rows, np.uint32)
        for j in range(width):
            s = _step(s, block[:, j])
        return s
    # Leading zero bytes leave a zero-initialised register at zero: pad each row at the front
    # to a power-of-two number of sub-blocks, CRC the sub-blocks side by side, then combine
    # neighbours pairwise (raw(A + B) = shift(raw(A), len(B)) ^ raw(B)) up the tree.
    blocks = 1 << int(np.ceil(np.log2(-(-width // _BLOCK))))
    padded = np.zeros((rows, blocks * _BLOCK), np.uint8)
    padded[:, blocks * _BLOCK - width:] = block
    tree: np.ndarray = raw_rows(padded.reshape(rows * blocks, _BLOCK)).reshape(rows, blocks)
    size = _BLOCK
    while tree.shape[1] > 1:
        tree = _apply(zeros_op(size), tree[:, 0::2]) ^ tree[:, 1::2]
        size *= 2
    return np.asarray(tree[:, 0], np.uint32)


def raw_varlen(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The raw CRC of each string `data[offsets[i]:offsets[i + 1]]` (uint8 data, int offsets)."""
    offsets = np.asarray(offsets, np.int64)
    starts, lengths = offsets[:-1], np.diff(offsets)
    n = len(lengths)
    out = np.zeros(n, np.uint32)
    if n == 0 or not lengths.any():
        return out
    order = np.argsort(-lengths, kind="stable")  # longest first: the active rows are a prefix
    st, ln = starts[order], lengths[order]
    s = np.zeros(n, np.uint32)
    active = np.searchsorted(-ln, -np.arange(int(ln[0])), side="left")  # rows with len > j
    for j, m in enumerate(active.tolist()):
        s[:m] = _step(s[:m], data[st[:m] + j])
    out[order] = s
    return out
