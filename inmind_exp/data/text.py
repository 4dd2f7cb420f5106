"""Size limits, UTF-8 checks and date parsing shared by the task and trace loaders.

Input bytes are decoded with ``surrogateescape`` so that an invalid byte becomes a marker inside the string it sits
in: the loader can then name the line and the key holding it instead of failing with a bare ``UnicodeDecodeError``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, BinaryIO, Iterator

#: Longest line of a task file (bytes, newline excluded). Real tasks are well under 4 KiB; a longer line is an
#: accident (a pasted document, a binary file) that would be sent to every judge and answerer.
MAX_LINE_BYTES = 256 * 1024
#: Longest single text field: a task field or a trace turn's content (bytes of UTF-8).
MAX_FIELD_BYTES = 64 * 1024

_ESCAPED = re.compile("[\udc80-\udcff]")
#: LongMemEval's date format, e.g. ``2023/05/20 (Sat) 02:21``.
LONGMEMEVAL_DATE = "%Y/%m/%d (%a) %H:%M"


def read_lines(f: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes, int]]:
    """``(line number, first limit+1 bytes, full length)`` per line, without ever holding more than ``limit+1``
    bytes of one line in memory; the newline is stripped."""
    lineno = 0
    while True:
        chunk = f.readline(limit + 1)
        if not chunk:
            return
        lineno += 1
        head, length = chunk, len(chunk)
        while not chunk.endswith(b"\n"):
            chunk = f.readline(1 << 20)
            if not chunk:
                break
            length += len(chunk)
        if head.endswith(b"\n"):
            head, length = head[:-1], length - 1
        elif chunk.endswith(b"\n"):
            length -= 1
        yield lineno, head, length


def decode(raw: bytes) -> str:
    """Decode UTF-8, turning each invalid byte into a lone surrogate that ``invalid_utf8`` finds again."""
    return raw.decode("utf-8", errors="surrogateescape")


def invalid_utf8(text: str) -> str | None:
    """A description of the first invalid byte in ``text`` (decoded by ``decode``), or None if it is clean."""
    m = _ESCAPED.search(text)
    if m is None:
        return None
    return f"not valid UTF-8 (byte 0x{ord(m.group()) - 0xDC00:02x} at character {m.start() + 1})"


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def strings(node: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a parsed JSON value (object keys included) with its dotted key path, in document order."""
    if isinstance(node, str):
        yield key, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield (f"{key}.{k}" if key else str(k)), str(k)
            yield from strings(v, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from strings(v, f"{key}[{i}]")


def parse_date(value: Any) -> datetime | None:
    """A session date in LongMemEval's format (``2023/05/20 (Sat) 02:21``) or ISO 8601; None if it is neither."""
    if not isinstance(value, str) or not value.strip():
        return None
    s = value.strip()
    try:
        return datetime.strptime(s, LONGMEMEVAL_DATE)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
