"""Exact products of an int8 query with every int8 row of the index, by ONNX Runtime's integer matrix product.

numpy has no fast int8 product: turning the rows into floats for each query costs more than scanning float32, and
float32 reads four times the bytes. ONNX Runtime (the warm process runs the model with it already) multiplies
integers with prepacked kernels (MLAS): the rows are packed once, when the matrix is loaded, and each query is one
``MatMulInteger`` of a 1 x D uint8 query by the D x N rows. Both are handed over as uint8 shifted by 128 (zero point
128), which is exact: u8 x u8 widens to 16 bits before it adds. (u8 x s8 is faster, but without VNNI its AVX2 kernel
adds pairs of products in 16 bits and saturates: wrong for most rows.) Measured here, MiniLM dims, a cold cache:
10k rows 0.38 ms against 1.25 for float32 BLAS, 100k rows 2.8 ms against 13.4 (docs/benchmarks.md, issue 24).

The graph is written as protobuf bytes here (five messages): importing the ``onnx`` package costs a second. When
ONNX Runtime cannot run it, :class:`Products` multiplies with numpy in blocks (exact, slower).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..rules.workers import beside

log = logging.getLogger(__name__)

#: From this many rows the product runs in two halves side by side, one in a worker thread (ONNX Runtime lets go of
#: the interpreter): a 100k recall 0.6 ms faster than with one session (paired, 300 queries).
SPLIT_MIN = 50_000
#: At most this many rows in one session: packing copies its rows twice for a moment (here, then into the graph),
#: so a larger matrix is packed a part at a time (~60 MB at a time at 384 dims).
PART_ROWS = 65_536
#: Rows multiplied at a time by the numpy fallback.
BLOCK = 8192

_UINT8, _INT32 = 2, 6  # onnx.TensorProto.DataType
_EXTERNAL = 1  # onnx.TensorProto.DataLocation


class Products:
    """``products(query)``: the int32 product of an int8 query (D,) with each of the int8 ``rows`` (N, D). The
    sessions hold the rows (packed); :attr:`rows` keeps them only when numpy multiplies."""

    def __init__(self, rows: Any) -> None:
        import numpy as np

        rows = np.ascontiguousarray(rows, dtype=np.int8)
        n = len(rows)
        count = max(-(-n // PART_ROWS), 2 if n >= SPLIT_MIN else 1)
        cuts = [n * i // count for i in range(count + 1)]
        self.rows: Any = None
        self._parts: list[Callable[[Any], Any]] | None = None
        try:
            self._parts = [_session(rows[start:stop]) for start, stop in zip(cuts, cuts[1:])]
        except Exception as exc:  # noqa: BLE001 - any runtime that cannot run the graph: numpy gives the same integers
            log.debug("integer products by numpy (%s)", exc)
            self.rows = rows

    @property
    def runtime(self) -> str:
        """Who multiplies: ``onnxruntime`` or ``numpy``."""
        return "numpy" if self._parts is None else "onnxruntime"

    def __call__(self, query: Any) -> Any:
        import numpy as np

        q = np.asarray(query, dtype=np.int8).reshape(-1)
        if self._parts is None:
            return by_numpy(self.rows, q)
        shifted = (q.view(np.uint8) + np.uint8(128)).reshape(1, -1)  # two's complement + 128: the value + 128
        if len(self._parts) == 1:
            return self._parts[0](shifted)
        mid = (len(self._parts) + 1) // 2
        first, second = self._parts[:mid], self._parts[mid:]
        tail, head = beside(lambda: [run(shifted) for run in second], lambda: [run(shifted) for run in first])
        return np.concatenate(head + tail)


def by_numpy(rows: Any, query: Any) -> Any:
    """:class:`Products` without ONNX Runtime: the same int32 products, by float32 BLAS a block at a time (products
    of int8 are exact in float32: 127² x D < 2²⁴ for D up to 1,040)."""
    import numpy as np

    out = np.empty(len(rows), dtype=np.int32)
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    for start in range(0, len(rows), BLOCK):
        out[start:start + BLOCK] = rows[start:start + BLOCK].astype(np.float32) @ q
    return out


def _session(rows: Any) -> Callable[[Any], Any]:
    """One ``MatMulInteger`` session holding ``rows`` (N, D) packed: a callable from a (1, D) uint8 query to (N,)
    int32 products."""
    import numpy as np
    import onnxruntime as ort

    n, dims = rows.shape
    packed = np.empty((dims, n), dtype=np.uint8)  # D x N, shifted by 128
    np.add(rows.T.view(np.uint8), np.uint8(128), out=packed)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # An external initializer: the rows are not serialized into the graph's bytes; the session copies them in, then
    # packs them, and keeps no reference to this array.
    options.add_external_initializers(["rows"], [ort.OrtValue.ortvalue_from_numpy(packed)])
    session = ort.InferenceSession(_graph(dims, n), options, providers=["CPUExecutionProvider"])
    del packed
    check = rows[: min(n, 4)].astype(np.int32)
    probe = np.arange(dims, dtype=np.int32) % 255 - 127
    got = session.run(None, {"query": (probe + 128).astype(np.uint8)[None, :]})[0].reshape(-1)
    if not np.array_equal(got[: len(check)], check @ probe):
        raise RuntimeError("MatMulInteger gave other integers than numpy")

    def run(query: Any) -> Any:
        return session.run(None, {"query": query})[0].reshape(-1)

    return run


# -------------------------------------------------------------------------------------------- the graph, as protobuf
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, value: int | str | bytes) -> bytes:
    """One protobuf field: an int as a varint, a str or bytes length-delimited."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _value_info(name: str, elem_type: int, shape: list[int]) -> bytes:
    dims = b"".join(_field(1, _field(1, d)) for d in shape)  # TensorShapeProto.dim: Dimension.dim_value
    tensor_type = _field(1, elem_type) + _field(2, dims)  # TypeProto.Tensor
    return _field(1, name) + _field(2, _field(1, tensor_type))  # ValueInfoProto: name, type.tensor_type


def _graph(dims: int, n: int) -> bytes:
    """The ModelProto of ``output = MatMulInteger(query, rows, 128, 128)`` with ``rows`` external (D x N uint8)."""
    node = b"".join(_field(1, x) for x in ("query", "rows", "zero", "zero")) + _field(2, "output") + \
        _field(4, "MatMulInteger")
    zero = _field(2, _UINT8) + _field(8, "zero") + _field(9, bytes([128]))  # a scalar: no dims
    rows = (_field(1, dims) + _field(1, n) + _field(2, _UINT8) + _field(8, "rows")
            + _field(13, _field(1, "location") + _field(2, "rows")) + _field(14, _EXTERNAL))
    graph = (_field(1, node) + _field(2, "memvault-products") + _field(5, zero) + _field(5, rows)
             + _field(11, _value_info("query", _UINT8, [1, dims])) + _field(12, _value_info("output", _INT32, [1, n])))
    opset = _field(1, "") + _field(2, 13)
    return _field(1, 8) + _field(7, graph) + _field(8, opset)  # ir_version 8, graph, opset_import


__all__ = ["PART_ROWS", "Products", "SPLIT_MIN", "by_numpy"]
