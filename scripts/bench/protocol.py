"""The pipe protocol between the bench and a measured system's process
(``scripts.bench.host``): one message is a JSON header, optionally followed
by one array.

Frame: 4 bytes, big-endian, the header's length in bytes; the header (UTF-8
JSON, an object); then, when the header has ``"array"`` (``{"dtype":
"float32", "shape": [n, d]}``), the array's bytes in C order
(``dtype.itemsize * prod(shape)`` bytes). JSON and raw bytes cross any two
Python environments (the bench's and a line's or the peers' venv, whatever
their numpy versions), where pickles would not.

Standard library only at import time (numpy is imported when an array is
sent or received): a host runs this in every environment the bench drives.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO

HEADER = struct.Struct(">I")


class ProtocolError(RuntimeError):
    """The other side closed the pipe or sent something that is not a frame."""


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    """Exactly ``n`` bytes from ``stream``; ``ProtocolError`` when it ends first."""
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise ProtocolError(f"pipe closed with {left} of {n} bytes unread")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send(stream: BinaryIO, header: dict, array=None) -> None:
    """Write one message: ``header`` (JSON-able dict) and, given, ``array``
    (anything ``numpy.asarray`` takes; sent as it is, C order)."""
    header = dict(header)
    payload = b""
    if array is not None:
        import numpy as np

        array = np.ascontiguousarray(array)
        header["array"] = {"dtype": array.dtype.str, "shape": list(array.shape)}
        payload = array.tobytes()
    body = json.dumps(header).encode()
    stream.write(HEADER.pack(len(body)) + body + payload)
    stream.flush()


def receive(stream: BinaryIO) -> tuple[dict, object]:
    """Read one message: ``(header, array or None)``. ``ProtocolError`` when
    the pipe closes mid-frame or before one."""
    (size,) = HEADER.unpack(_read_exact(stream, HEADER.size))
    try:
        header = json.loads(_read_exact(stream, size))
    except ValueError as e:
        raise ProtocolError(f"header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise ProtocolError(f"header is a {type(header).__name__}, not an object")
    spec = header.pop("array", None)
    if spec is None:
        return header, None
    import numpy as np

    dtype = np.dtype(spec["dtype"])
    count = 1
    for n in spec["shape"]:
        count *= int(n)
    data = _read_exact(stream, dtype.itemsize * count)
    return header, np.frombuffer(data, dtype=dtype).reshape(spec["shape"])
