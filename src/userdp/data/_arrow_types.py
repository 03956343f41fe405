"""Arrow column types that the id encoders cannot take directly, turned into ones they can.

Polars exports its strings as ``string_view`` and its Categorical/Enum columns as dictionaries
of ``string_view``; Arrow has no ``take`` or cast kernels for views in several versions, so
``dictionary_encode`` and the hashing of ids failed with a raw ``ArrowNotImplementedError``.
Views become ``large_string`` / ``large_binary`` (no 2 GiB limit), and dictionaries are
decoded through their (converted) dictionary, which holds the same values.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["plain_arrow"]


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    return t


def _decode(chunk: pa.DictionaryArray) -> pa.Array:
    values = chunk.dictionary
    wanted = _plain_type(values.type)
    if wanted != values.type:
        values = values.cast(wanted)
    return pa.DictionaryArray.from_arrays(chunk.indices, values).dictionary_decode()


def plain_arrow(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    """``arr`` with view types replaced and dictionaries decoded (values unchanged).

    Examples
    --------
    >>> a = pa.chunked_array([pa.array(["x", "y"]).cast(pa.string_view())])
    >>> plain_arrow(a).type
    DataType(large_string)
    >>> d = pa.chunked_array([pa.array(["x", "y", "x"]).cast(pa.string_view()).dictionary_encode()])
    >>> plain_arrow(d).to_pylist()
    ['x', 'y', 'x']
    """
    t = arr.type
    if pa.types.is_dictionary(t):
        value_type = _plain_type(t.value_type)
        chunks = [_decode(c) for c in arr.chunks]
        return pa.chunked_array(chunks, type=value_type)
    wanted = _plain_type(t)
    return arr if wanted == t else arr.cast(wanted)
