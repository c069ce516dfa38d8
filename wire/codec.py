"""msgpack encoding of messages, by field type, with validation on the way in.

A message on the wire is ``[version, kind, id, fields]``: the protocol version (every message
carries it), the message's ``KIND``, an id chosen by the sender (for traces; may be empty) and a map
from field name to the field's plain form (``wire.model`` for language objects). Decoding is pure
and strict: an unknown kind, a wrong version, a missing or extra field, a value of the wrong type or
a language object that does not validate all raise ``WireError`` naming what was wrong, and
msgpack's own limits (string, binary, array and map lengths, from ``WireLimits``) bound what one
message can make the decoder allocate.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgpack

import qel
from qel.advertisements import Element
from qel.axioms import Axiom
from wire import model

PROTOCOL_VERSION: Final = 13
READABLE_VERSIONS: Final = frozenset({2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
"""Versions whose messages decode: a daemon reads the records an earlier version stored (3 added
hybrid times and clock fields, each with a default, and a hybrid time in every sequenced
frame's header: ``superpeer.channel``; 4 added the copies of gone origins' logs asked of their
holders, ``CatchUp.origin``, the other super-peers a peer is told of, ``Welcome.alternates``,
and ``Handover.search``, each with a default; 5 added the anchor's incarnation to a join's
walk, ``JoinWalk.anchor_incarnation``, with a default; 6 added the floor of a leaver's log
to its hand-over, ``AdoptLog.floor``, the origins an asker knows lost to a catch-up,
``CatchUp.lost``, and the newcomer's incarnation to a join's report, ``JoinDone.newcomer_incarnation``,
each with a default; 7 added whether a publication was acknowledged with its access point's
copy alone, ``Ack.alone``, and whether one is sent again for that, ``Publish.again``, each
with a default; 8 added the census a full cube's anchor takes before it grows,
``hypercup.census`` and ``hypercup.census_reply``: a daemon of 7 would not know them; 9
replaced a lookup's last hop, ``Lookup.via``, by every member it passed, ``Lookup.visited``:
a daemon of 8 would refuse it. Lookups are never stored; 10 added the super-peers a heartbeat
names, ``Heartbeat.known``, with a default; 11 added from when an access point may miss
things to its ``Clock`` s and a peer's move statement, ``Clock.missing_since`` and
``Moved.missing_since``, each with a default: a peer of 10 would refuse such a ``Clock``; 12
added from when a leaver cannot vouch for an adopted peer's mail, ``Adopt.unvouched_since``,
with a default: a daemon of 11 would refuse such an ``Adopt``; 13 added the super-peers an
access point names now to its ``Clock`` s, ``Clock.alternates``, with a default: a peer of 12
would refuse such a ``Clock``). A
connection speaks the one
version: both ends check it at ``Hello``."""


class WireError(ValueError):
    """Bytes that are not a valid message of this protocol; the text says what is wrong."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WireLimits:
    """Bounds on what one message may contain (each is checked while decoding)."""

    max_frame_bytes: int = 1024 * 1024
    max_string_bytes: int = 64 * 1024
    max_binary_bytes: int = 256 * 1024
    max_collection_items: int = 100_000
    max_depth: int = 32


DEFAULT_WIRE_LIMITS: Final = WireLimits()

Converter = tuple[Callable[[Any], Any], Callable[[Any], Any]]
_REGISTRY: dict[str, type] = {}
_FIELDS: dict[type, tuple[tuple[str, Converter], ...]] = {}
_DEFAULTED: dict[type, frozenset[str]] = {}
_ENVELOPES: dict[type, bytes] = {}
"""Per class, the encoding of an envelope's array header, version and kind."""
_IMMUTABLE: set[type] = set()
"""Classes whose fields hold no mutable container (``_immutable``)."""
_PACKERS: dict[type, _FieldPacker] = {}


def register(*classes: type) -> None:
    """Makes message classes known to the codec (their fields' types must be supported)."""
    for cls in classes:
        kind = cls.KIND  # type: ignore[attr-defined]
        if kind in _REGISTRY and _REGISTRY[kind] is not cls:
            raise ValueError(f"two message classes claim the kind {kind!r}")
        hints = typing.get_type_hints(cls)
        _FIELDS[cls] = tuple((f.name, _converter(hints[f.name])) for f in dataclasses.fields(cls))
        _PACKERS[cls] = _FieldPacker(_FIELDS[cls], hints)
        # [version, kind, "", None] packed, less its last two bytes (the empty id and nil)
        _ENVELOPES[cls] = msgpack.packb([PROTOCOL_VERSION, kind, "", None])[:-2]
        if all(_immutable(hints[f.name]) for f in dataclasses.fields(cls)):
            _IMMUTABLE.add(cls)
        else:
            _IMMUTABLE.discard(cls)
        _DEFAULTED[cls] = frozenset(
            f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING
        )
        _REGISTRY[kind] = cls


def kinds() -> list[str]:
    return sorted(_REGISTRY)


def encode(message: object, message_id: str = "") -> bytes:
    """``[version, kind, id, fields]`` in msgpack. An array's encoding is its header and then its
    items', so the envelope's first two items are packed once per class and the fields once per
    message object (of a class whose fields hold no mutable container): a super-peer relays one
    notification to each of its children, and in the simulator one ``Elements`` object travels
    through every super-peer."""
    cls = type(message)
    packer = _PACKERS.get(cls)
    if packer is None:
        raise TypeError(f"{cls.__name__} is not a registered message")
    payload = _RECENT_PAYLOADS(message, packer) if cls in _IMMUTABLE else packer(message)
    return b"".join((_ENVELOPES[cls], _pack(message_id), payload))


class _Packer(threading.local):
    """A msgpack packer per thread, made once: ``msgpack.packb`` makes a packer, and with it a
    buffer, for every call (about a microsecond, of the few that packing a message's fields
    takes; an encoding calls it twice). A packer is not safe to share between threads."""

    def __init__(self) -> None:
        self.pack = msgpack.Packer(use_bin_type=True).pack


_PACKER = _Packer()


def _pack(value: object) -> bytes:
    """``msgpack.packb(value, use_bin_type=True)``, on this thread's packer."""
    return _PACKER.pack(value)


class _FieldPacker:
    """Packs one class's fields as the map of their plain forms, in three parts: the fields whose
    plain form is their value (strings, numbers, flags) are read in one go, the others
    converted, and a publication (the bulk of a notification) is spliced in as bytes packed once
    per publication object (a super-peer encodes one publication in the notification it logs,
    the mail it keeps and the ``Notify`` it sends). A map's entries may come in any order, so the
    spliced ones go last under a header that counts them, and after them the number a message
    has in its peer's mail (``NUMBERED``), under a 3-byte header: ``renumbered``."""

    def __init__(self, fields: tuple[tuple[str, Converter], ...], hints: dict[str, Any]) -> None:
        plain, converted, spliced = [], [], []
        self.numbered = None
        for name, (to_plain, _) in fields:
            hint = hints[name]
            if name == NUMBERED and hint is int:
                self.numbered = name
            elif hint in (qel.Publication, qel.Publication | None):
                spliced.append(name)
            elif to_plain is _identity or _plain_union(hint):
                plain.append(name)
            else:
                converted.append((name, to_plain))
        self._plain = tuple(plain)
        self._read = operator.attrgetter(*plain) if plain else None
        self._converted = tuple(converted)
        self._spliced = tuple((name, msgpack.packb(name)) for name in spliced)

    def __call__(self, message: object) -> bytes:
        read = self._read
        if read is None:
            fields: dict[str, object] = {}
        elif len(self._plain) == 1:
            fields = {self._plain[0]: read(message)}
        else:
            fields = dict(zip(self._plain, read(message), strict=True))
        for name, to_plain in self._converted:
            fields[name] = to_plain(getattr(message, name))
        tail = []
        for name, key in self._spliced:
            value = getattr(message, name)
            if value is None:
                fields[name] = None
            else:
                tail.append(key)
                tail.append(packed_publication(value))
        body = _pack(fields)
        if self.numbered is not None:
            tail.append(_NUMBERED_KEY)
            tail.append(_pack(getattr(message, self.numbered)))
            header = b"\xde" + (len(fields) + len(tail) // 2).to_bytes(2, "big")
        elif tail:
            header = _map_header(len(fields) + len(tail) // 2)
        else:
            return body
        return b"".join((header, body[_map_header_size(len(fields)) :], *tail))


NUMBERED: Final = "delivery"
"""The field that numbers a message in its peer's mail (``Notify.delivery``): packed last."""
_NUMBERED_KEY: Final = msgpack.packb(NUMBERED)


def renumbered(data: bytes, cls: type, number: int) -> bytes | None:
    """What ``encode`` makes, with no message id, of the ``cls`` message that ``data`` encodes
    (with no id, as ``encode`` makes it) but with ``number`` in its ``NUMBERED`` field: ``data``
    less its last entry, and the new one. An access point keeps a notification's encoding in a
    peer's mail, which numbers it, and sends the numbered one: one encoding, not two. None if
    ``data`` is not of that layout (a store's mail written before it): encode the message."""
    start = _ENVELOPES[cls] + b"\xa0\xde"  # the envelope, the empty id, a 3-byte map header
    if _PACKERS[cls].numbered is None or not data.startswith(start):
        return None
    head, key, _ = data.rpartition(_NUMBERED_KEY)  # the last entry's key: the number's bytes
    return b"".join((head, key, _pack(number)))  # cannot hold it


def _plain_union(hint: object) -> bool:
    """A union of types whose plain form is the value itself (``float | None``)."""
    args = typing.get_args(hint)
    return (
        typing.get_origin(hint) in (typing.Union, types.UnionType)
        and bool(args)
        and all(arg in _SIMPLE and _SIMPLE[arg][0] is _identity for arg in args)
    )


def _map_header(count: int) -> bytes:
    return bytes((0x80 | count,)) if count < 16 else b"\xde" + count.to_bytes(2, "big")


def _map_header_size(count: int) -> int:
    return 1 if count < 16 else 3


class _Recent:
    """What ``make`` gave for the last few objects, by identity (each entry holds its object, so
    an id is not reused while it is here): the packed fields of a message relayed to several
    neighbours, the plain form and the bytes of the publication in it."""

    def __init__(self, size: int) -> None:
        self._entries: dict[int, tuple[object, Any]] = {}
        self._size = size

    def __call__(self, value: object, make: Callable[[Any], Any]) -> Any:
        entry = self._entries.get(id(value))
        if entry is not None and entry[0] is value:
            return entry[1]
        made = make(value)
        if len(self._entries) >= self._size:
            del self._entries[next(iter(self._entries))]
        self._entries[id(value)] = (value, made)
        return made


_RECENT_PAYLOADS = _Recent(64)
_RECENT_PLAIN = _Recent(64)
_RECENT_PACKED = _Recent(64)


def plain_publication(publication: qel.Publication) -> object:
    """``publication``'s plain form (``wire.model``), made once for the last few encoded."""
    return _RECENT_PLAIN(publication, model.publication_to_plain)


def packed_publication(publication: qel.Publication) -> bytes:
    """``publication`` in msgpack (its plain form packed), made once for the last few encoded:
    what a message that carries it holds, and what a store may keep of it."""
    return _RECENT_PACKED(publication, lambda p: _pack(plain_publication(p)))


def unpacked_publication(data: bytes) -> qel.Publication:
    """The publication ``packed_publication`` made ``data`` of (``WireError`` if it is not)."""
    try:
        return model.publication_from_plain(msgpack.unpackb(data, raw=False))
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError) as error:
        raise WireError(f"not a packed publication: {error}") from None


def _immutable(hint: object) -> bool:
    """Whether a field of type ``hint`` holds no mutable container (its encoding can be kept);
    the language's objects (``_SIMPLE``) are immutable."""
    if hint in (dict, list, set) or typing.get_origin(hint) in (dict, list, set):
        return False
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and hasattr(hint, "KIND"):
        nested = typing.get_type_hints(hint)
        return all(_immutable(nested[f.name]) for f in dataclasses.fields(hint))
    return all(_immutable(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)


def decode(
    data: bytes | memoryview, limits: WireLimits = DEFAULT_WIRE_LIMITS
) -> tuple[object, str]:
    """The message and its id; ``WireError`` for anything malformed."""
    if len(data) > limits.max_frame_bytes:
        raise WireError(f"message of {len(data)} bytes exceeds max_frame_bytes")
    try:
        envelope = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,
            max_str_len=limits.max_string_bytes,
            max_bin_len=limits.max_binary_bytes,
            max_array_len=limits.max_collection_items,
            max_map_len=limits.max_collection_items,
            max_ext_len=0,
        )
    except (
        ValueError,
        TypeError,
        msgpack.ExtraData,
        msgpack.FormatError,
        msgpack.StackError,
    ) as error:
        raise WireError(f"not a msgpack message: {error}") from None
    if not isinstance(envelope, list) or len(envelope) != 4:
        raise WireError("a message is [version, kind, id, fields]")
    version, kind, message_id, payload = envelope
    if (
        isinstance(version, bool)
        or not isinstance(version, int)
        or version not in READABLE_VERSIONS
    ):
        raise WireError(
            f"protocol version {version!r} is not supported (this is {PROTOCOL_VERSION})"
        )
    cls = _REGISTRY.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise WireError(f"unknown message kind {kind!r}")
    if not isinstance(message_id, str):
        raise WireError("a message id is a string")
    if not isinstance(payload, dict):
        raise WireError(f"{kind}: the fields are a map")
    if len(data) > _COUNTED_BYTES or _containers_at_most(data) > limits.max_depth:
        _check_depth(payload, limits.max_depth, kind)
    fields = _FIELDS[cls]
    expected = {name for name, _ in fields}
    # a field added later with a default (``Subscribe.expires``) may be absent: what an older
    # peer sends, and what a store written before it holds, still reads
    optional = _DEFAULTED[cls]
    if not expected - optional <= set(payload) <= expected:
        missing = sorted(expected - optional - set(payload))
        extra = sorted(str(k) for k in set(payload) - expected)
        raise WireError(f"{kind}: missing fields {missing}, unexpected fields {extra}")
    values = {}
    for name, (_, from_plain) in fields:
        if name not in payload:
            continue
        try:
            values[name] = from_plain(payload[name])
        except (model.ModelError, WireError) as error:
            raise WireError(f"{kind}.{name}: {error}") from None
    try:
        return cls(**values), message_id
    except (ValueError, TypeError) as error:  # a message class validating its own fields
        raise WireError(f"{kind}: {error}") from None


_COUNTED_BYTES: Final = 4096
"""Messages up to this size have their container bytes counted before their depth is walked;
longer ones are walked at once. Counting reads every byte (a file chunk's 192 KiB took 300 us,
as long as the rest of its decoding thirty times over), where the walk visits containers only
(a chunk's payload is one map); a long message with many containers is walked anyway."""

_CONTAINER_BYTES: Final = bytes((*range(0x80, 0xA0), *range(0xDC, 0xE0)))
"""The bytes msgpack begins a map or an array with (fixmap, fixarray, array 16/32, map 16/32)."""


def _containers_at_most(data: bytes | memoryview) -> int:
    """A bound on the maps and arrays in ``data``, and so on how deep they nest: each begins
    with one of ``_CONTAINER_BYTES`` (strings and numbers may hold some too). Counted in one pass
    in C, where walking the decoded message visits every container in Python: a message with
    no more than ``max_depth`` of them cannot nest deeper, and is not walked."""
    raw = data if isinstance(data, bytes) else bytes(data)
    return len(raw) - len(raw.translate(None, _CONTAINER_BYTES))


def _check_depth(value: object, limit: int, kind: str) -> None:
    """Rejects nesting deeper than ``limit`` (the C unpacker already stops at 1024 levels; this
    makes the bound the protocol's own), visiting containers only."""
    level: list[object] = [value]
    depth = 0
    while level:
        if depth > limit:
            raise WireError(f"{kind}: nesting deeper than max_depth ({limit})")
        deeper: list[object] = []
        for item in level:
            if type(item) is list:
                deeper.extend(x for x in item if type(x) is list or type(x) is dict)
            elif type(item) is dict:
                deeper.extend(x for x in item.values() if type(x) is list or type(x) is dict)
        level = deeper
        depth += 1


# -- converters by type -----------------------------------------------------------------------


def _identity(value: object) -> object:
    return value


def _checked(expected: type | tuple[type, ...], name: str) -> Callable[[Any], Any]:
    def check(value: object) -> object:
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is int):
            raise WireError(f"expected {name}, got {type(value).__name__}")
        return value

    return check


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"expected a number, got {type(value).__name__}")
    return float(value)


_SIMPLE: dict[object, Converter] = {
    str: (_identity, _checked(str, "a string")),
    int: (_identity, _checked(int, "an integer")),
    bool: (_identity, _checked(bool, "a boolean")),
    bytes: (_identity, _checked(bytes, "bytes")),
    float: (_identity, _float),
    type(None): (_identity, _checked(type(None), "nil")),
    qel.Subscription: (model.subscription_to_plain, model.subscription_from_plain),
    qel.Publication: (plain_publication, model.publication_from_plain),
    qel.Advertisement: (model.advertisement_to_plain, model.advertisement_from_plain),
    Element: (model.element_to_plain, model.element_from_plain),
    Axiom: (model.axiom_to_plain, model.axiom_from_plain),
}


def _converter(hint: object) -> Converter:
    if hint in _SIMPLE:
        return _SIMPLE[hint]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and hasattr(hint, "KIND"):
        return _nested(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        inner_to, inner_from = _converter(args[0])
        if args[0] in _SCALARS:  # a notification names up to 1,000 subscription ids
            scalar = args[0]
            return list, lambda value: _scalars(value, scalar, inner_from)
        return (
            lambda value: [inner_to(v) for v in value],
            lambda value: tuple(inner_from(v) for v in _sequence(value)),
        )
    if origin is tuple and args:
        parts = [_converter(a) for a in args]
        return (
            lambda value: [to(v) for (to, _), v in zip(parts, value, strict=True)],
            lambda value: _fixed_tuple(value, parts),
        )
    if origin is dict and len(args) == 2:
        key_to, key_from = _converter(args[0])
        value_to, value_from = _converter(args[1])
        return (
            lambda value: {key_to(k): value_to(v) for k, v in value.items()},
            lambda value: _mapping(value, key_from, value_from),
        )
    if origin in (typing.Union, types.UnionType):
        options = [_converter(a) for a in args]
        return (
            lambda value: _union_to(value, args, options),
            lambda value: _union_from(value, options),
        )
    raise TypeError(f"the codec does not support fields of type {hint!r}")


def _nested(cls: type) -> Converter:
    """A message carried inside another (``Mail`` carries ``Notify``): its fields as a map,
    checked exactly as a message of its own would be."""
    hints = typing.get_type_hints(cls)
    fields = tuple((f.name, _converter(hints[f.name])) for f in dataclasses.fields(cls))
    expected = {name for name, _ in fields}

    def to_plain(value: object) -> object:
        return {name: convert(getattr(value, name)) for name, (convert, _) in fields}

    def from_plain(value: object) -> object:
        if not isinstance(value, dict) or set(value) != expected:
            raise WireError(f"expected a {cls.KIND} map with fields {sorted(expected)}")  # type: ignore[attr-defined]
        try:
            return cls(**{name: convert(value[name]) for name, (_, convert) in fields})
        except (ValueError, TypeError) as error:
            raise WireError(f"{cls.KIND}: {error}") from None  # type: ignore[attr-defined]

    return to_plain, from_plain


_SCALARS: Final = (str, bytes)
"""Item types a sequence of which is encoded as it is and checked by type in one pass in C."""


def _scalars(value: object, scalar: type, check: Callable[[Any], Any]) -> tuple:
    """A sequence of ``scalar`` s: checked by the set of its items' exact types; an item of
    another type is named by ``check``'s error."""
    items = _sequence(value)
    if not set(map(type, items)) <= {scalar}:
        for item in items:
            check(item)
    return tuple(items)


def _sequence(value: object) -> list:
    if not isinstance(value, list):
        raise WireError(f"expected a list, got {type(value).__name__}")
    return value


def _fixed_tuple(value: object, parts: list[Converter]) -> tuple:
    items = _sequence(value)
    if len(items) != len(parts):
        raise WireError(f"expected {len(parts)} items, got {len(items)}")
    return tuple(from_plain(item) for (_, from_plain), item in zip(parts, items, strict=True))


def _mapping(value: object, key_from: Callable, value_from: Callable) -> dict:
    if not isinstance(value, dict):
        raise WireError(f"expected a map, got {type(value).__name__}")
    return {key_from(k): value_from(v) for k, v in value.items()}


def _union_to(value: object, args: tuple, options: list[Converter]) -> object:
    for arg, (to_plain, _) in zip(args, options, strict=True):
        if arg is type(None) and value is None:
            return None
        if arg is not type(None) and isinstance(value, typing.get_origin(arg) or arg):
            return to_plain(value)
    raise TypeError(f"{value!r} matches none of {args}")


def _union_from(value: object, options: list[Converter]) -> object:
    errors = []
    for _, from_plain in options:
        try:
            return from_plain(value)
        except (WireError, model.ModelError) as error:
            errors.append(str(error))
    raise WireError("; ".join(errors))
