"""R's serialised data (XDR format, versions 2 and 3) read without R, for the novels that R packages ship.

Character vectors, numbers, lists and their attributes become Python str/None, int, float, list and an `RObject`;
anything executable (closures, environments, byte code, language objects) is refused, so nothing in the data can
run. Lazy-load databases (.rdx + .rdb) and save() files (.rda) are unwrapped to the serialisations they hold.
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import zlib
from dataclasses import dataclass

# R's SEXP types and special markers (R Internals, "Serialization formats")
_SYM, _LIST, _CHAR, _LGL, _INT, _REAL, _STR, _VEC = 1, 2, 9, 10, 13, 14, 16, 19
_REF, _NILVALUE, _EMPTYENV, _BASEENV, _GLOBALENV, _ALTREP = 255, 254, 242, 241, 253, 238
_NA_INT = -(2 ** 31)
_WRAPPERS = ("wrap_integer", "wrap_real", "wrap_string", "wrap_logical", "wrap_list")


@dataclass
class RObject:
    """A vector or list with its attributes (names, class, row.names, ...)."""

    value: object
    attributes: dict


def _flags(flags: int) -> tuple[int, bool, bool]:
    """(type, has attributes, has tag) of an item's flags word."""
    return flags & 0xFF, bool(flags & (1 << 9)), bool(flags & (1 << 10))


class _XDRReader:
    """Reads items from one serialisation, keeping the reference table that later items may point back into."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at, self.refs = memoryview(data), 0, []

    def _take(self, n: int) -> memoryview:
        """The next `n` bytes; a serialisation that ends early is refused."""
        if self.at + n > len(self.data):
            raise ValueError("truncated R serialisation")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def int(self) -> int:
        """The next big-endian 32-bit integer."""
        return struct.unpack(">i", self._take(4))[0]

    def header(self) -> None:
        """Check the "X\\n" format mark and the version, and skip what version 3 adds (the native encoding)."""
        if bytes(self._take(2)) != b"X\n":
            raise ValueError("not an XDR R serialisation")
        version = self.int()
        self._take(8)  # the R versions that wrote it and can read it
        if version == 3:
            self._take(self.int())
        elif version != 2:
            raise ValueError(f"R serialisation version {version} is not supported")

    def item(self) -> object:
        """The next item: None for NULL and the global environments, a str, a list, a dict (pairlists), or an
        RObject where a vector has attributes."""
        flags = self.int()
        kind, has_attr, has_tag = _flags(flags)
        if kind in (_NILVALUE, _EMPTYENV, _BASEENV, _GLOBALENV):
            return None
        if kind == _REF:
            index = flags >> 8 or self.int()
            return self.refs[index - 1]
        if kind == _SYM:
            symbol = self.item()
            self.refs.append(symbol)
            return symbol
        if kind == _LIST:
            return self._pairlist(has_attr, has_tag)
        if kind == _CHAR:
            length = self.int()
            return None if length == -1 else bytes(self._take(length)).decode("utf-8", errors="replace")
        if kind == _ALTREP:
            return self._altrep()
        value = self._vector(kind)
        attributes = self.item() if has_attr else None
        return RObject(value, attributes) if attributes else value

    def _pairlist(self, has_attr: bool, has_tag: bool) -> dict:
        """{tag or position: value} of a pairlist (attributes, a tagged list), iterated along its cdr rather than
        recursed, so a long one cannot exhaust the stack."""
        pairs = {}
        while True:
            if has_attr:
                self.item()  # a pairlist node's own attributes: never needed here
            tag = self.item() if has_tag else None
            pairs[tag if isinstance(tag, str) else len(pairs)] = self.item()
            kind, has_attr, has_tag = _flags(self.int())
            if kind == _NILVALUE:
                return pairs
            if kind != _LIST:
                raise ValueError(f"R pairlist ends in type {kind}")

    def _vector(self, kind: int) -> list:
        """The elements of a logical, integer, double, character or list vector; any other type is refused."""
        if kind in (_LGL, _INT):
            n = self.int()
            return [None if v == _NA_INT else v for v in struct.unpack(f">{n}i", self._take(4 * n))]
        if kind == _REAL:
            n = self.int()
            return list(struct.unpack(f">{n}d", self._take(8 * n)))
        if kind in (_STR, _VEC):
            return [self.item() for _ in range(self.int())]
        raise ValueError(f"R type {kind} (code, environment or other) is not read")

    def _altrep(self) -> object:
        """A compact sequence or a wrapper, which R >= 3.5 may write instead of a plain vector."""
        info, state, attributes = self.item(), self.item(), self.item()
        name = next(iter(info.values())) if isinstance(info, dict) else None
        if name == "compact_intseq":
            n, start, step = (state.value if isinstance(state, RObject) else state)[:3]
            value = [int(start + i * step) for i in range(int(n))]
        elif name in _WRAPPERS:
            value = state[0]
        elif name == "deferred_string":
            value = [str(v) for v in (state.get(0) if isinstance(state, dict) else state)]
        else:
            raise ValueError(f"R ALTREP class {name} is not supported")
        return RObject(value, attributes) if isinstance(attributes, dict) else value


def read_r_serialized(data: bytes) -> object:
    """One object of R's serialize() output, XDR format ("X\\n" header)."""
    reader = _XDRReader(data)
    reader.header()
    return reader.item()


def read_r_lazyload(index: bytes, database: bytes) -> dict[str, object]:
    """{name: object} of an R lazy-load database: the .rdx (a gzipped serialisation of list(variables = list(name =
    c(offset, length)), ...)) and the .rdb, whose blobs are a 4-byte big-endian length and a zlib stream."""
    variables = r_value(read_r_serialized(gzip.decompress(index)))
    names = r_value(variables["variables"])
    objects = {}
    for name, position in names.items():
        offset, length = (int(v) for v in r_value(position))
        blob = database[offset:offset + length]
        objects[name] = read_r_serialized(zlib.decompress(blob[4:]))
    return objects


def read_r_rda(data: bytes) -> dict[str, object]:
    """{name: object} of an .rda file (save()): gzip, bzip2 or xz, then "RDX2\\n" or "RDX3\\n" and a pairlist."""
    for decompress in (gzip.decompress, bz2.decompress, lzma.decompress):
        try:
            data = decompress(data)
            break
        except (OSError, ValueError, lzma.LZMAError):
            continue
    if data[:5] not in (b"RDX2\n", b"RDX3\n"):
        raise ValueError("not an R save() file")
    return read_r_serialized(data[5:])


def r_value(obj: object) -> object:
    """A vector or list without its attributes; a named list as a dict."""
    if isinstance(obj, RObject):
        names = obj.attributes.get("names")
        if isinstance(obj.value, list) and isinstance(names, list) and len(names) == len(obj.value):
            return dict(zip(names, obj.value))
        return obj.value
    return obj
