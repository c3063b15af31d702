"""What a GGUF file says about its model, read from its header without loading it.

LlamaCpp sizes its context from the file (the context the model was trained with) before
llama-cpp-python is imported, so the header is read here in plain Python: the key-value
section that follows the magic, version and counts, stopping at the first key wanted
after the architecture is known.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO, Final

_MAGIC: Final = b"GGUF"
# Value types of the GGUF key-value section, and the byte size of the fixed-size ones.
_STRING: Final = 8
_ARRAY: Final = 9
_FIXED: Final = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}
_MAX_KEYS: Final = 1 << 16  # a header claiming more is not one this reader trusts


class _Truncated(Exception):
    """The header ends before what it announced."""


def _read(f: BinaryIO, size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise _Truncated
    return data


def _unpack(f: BinaryIO, fmt: str) -> int | float | bool:
    value: int | float | bool = struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
    return value


def _string(f: BinaryIO) -> str:
    size = int(_unpack(f, "<Q"))
    return _read(f, size).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> object:
    """Read one value of `kind`; arrays are skipped (None), as no key wanted here is one."""
    if kind in _FIXED:
        return _unpack(f, _FIXED[kind])
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item, count = int(_unpack(f, "<I")), int(_unpack(f, "<Q"))
        if item in _FIXED:
            f.seek(struct.calcsize(_FIXED[item]) * count, 1)
        else:
            for _ in range(count):
                _value(f, item)
        return None
    raise _Truncated


def trained_context(path: str | os.PathLike[str]) -> int | None:
    """The context length the model in GGUF file `path` was trained with
    (`<architecture>.context_length`), or None when the file is not GGUF v2/v3 or does
    not say."""
    try:
        with open(path, "rb") as f:
            if _read(f, 4) != _MAGIC or int(_unpack(f, "<I")) < 2:
                return None
            _unpack(f, "<Q")  # tensor count
            keys = int(_unpack(f, "<Q"))
            architecture = None
            lengths: dict[str, int] = {}
            for _ in range(min(keys, _MAX_KEYS)):
                key, kind = _string(f), int(_unpack(f, "<I"))
                value = _value(f, kind)
                if key == "general.architecture" and isinstance(value, str):
                    architecture = value
                elif key.endswith(".context_length") and type(value) is int:
                    lengths[key] = value
                found = lengths.get(f"{architecture}.context_length") if architecture else None
                if found is not None:
                    return found if found > 0 else None
    except (OSError, _Truncated, struct.error):
        return None
    return None
