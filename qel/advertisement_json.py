"""Reading advertisements from the documented JSON shape (TOML with the same keys in peer configs)::

    {"prefixes": {"dc": "http://purl.org/dc/elements/1.1/"},
     "schemas": ["dc"],
     "properties": ["dc:creator", "dc:article"],
     "values": {"dc:creator": ["W. Nejdl", "P. Chirita"],
                "dc:year": [{"min": 2002}],
                "dc:date": [{"min": "2004-01-01", "max": "2004-12-31", "type": "date"}],
                "dc:type": [{"uri": "dc:article"}]}}

Every key is optional; unknown keys are errors (a typo must not silently widen or narrow what a peer
advertises). Names are prefixed names (the well-known prefixes need no declaration) or full IRIs; a
schema may also be a bare prefix name. A JSON string is a string literal, a number a numeric literal,
``{"uri": name}`` a URI, ``{"literal": text, "datatype": name}`` a typed literal, and
``{"min", "max", "type"}`` an inclusive range, either end open (``{"type": "number"}`` alone is every
number), ``type`` one of ``number`` (default), ``date``, ``dateTime``. The ends of a date range are
instants: ``"max": "2004-12-31"`` with ``"type": "date"`` includes that date and
``2004-12-31T00:00:00Z``, not later times of that day (write a dateTime to say otherwise).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction

from qel import domains
from qel.advertisements import Advertisement, ValueDomain
from qel.errors import AdvertisementError
from qel.limits import DEFAULT_LIMITS, Limits
from qel.prefixes import WELL_KNOWN
from qel.terms import (
    KIND_DATE,
    KIND_NUMBER,
    URI,
    XSD_DATE,
    XSD_DATETIME,
    Literal,
    number,
    parse_instant,
    parse_number_constant,
)

_KEYS = frozenset({"prefixes", "schemas", "properties", "values"})
_RANGE_KEYS = frozenset({"min", "max", "type"})


def parse_advertisement(obj: object, *, limits: Limits = DEFAULT_LIMITS) -> Advertisement:
    """An ``Advertisement`` from a parsed JSON/TOML mapping, or from JSON text."""
    if isinstance(obj, bytes | str):
        try:
            obj = json.loads(obj, parse_float=Decimal)
        except ValueError as error:
            raise AdvertisementError(f"the advertisement is not valid JSON: {error}") from None
        except RecursionError:
            raise AdvertisementError("the advertisement's JSON nests too deeply") from None
    if not isinstance(obj, Mapping):
        raise AdvertisementError("an advertisement is a JSON object")
    unknown = set(obj) - _KEYS
    if unknown:
        raise AdvertisementError(
            f"unknown advertisement key(s) {sorted(unknown)}; expected {sorted(_KEYS)}"
        )
    prefixes = dict(WELL_KNOWN)
    declared = obj.get("prefixes", {})
    if not isinstance(declared, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in declared.items()
    ):
        raise AdvertisementError('"prefixes" maps prefix names to namespace IRIs')
    prefixes.update(declared)
    schemas = [_schema(entry, prefixes) for entry in _list(obj, "schemas")]
    properties = [_name(entry, prefixes, "properties") for entry in _list(obj, "properties")]
    values_obj = obj.get("values", {})
    if not isinstance(values_obj, Mapping):
        raise AdvertisementError('"values" maps property names to lists of values')
    values: dict[URI, list[ValueDomain]] = {}
    for name, items in values_obj.items():
        prop = _name(name, prefixes, "values")
        if not isinstance(items, list):
            raise AdvertisementError(f'the values of "{name}" must be a list')
        values.setdefault(prop, []).extend(_value(item, prefixes, name, limits) for item in items)
    total = len(schemas) + len(properties) + sum(len(v) for v in values.values())
    if total > limits.max_advertisement_elements:
        raise AdvertisementError(
            f"the advertisement has {total} elements, more than "
            f"{limits.max_advertisement_elements} (max_advertisement_elements)"
        )
    return Advertisement.build(schemas=schemas, properties=properties, values=values)


def _list(obj: Mapping, key: str) -> list:
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise AdvertisementError(f'"{key}" must be a list')
    return value


def _schema(entry: object, prefixes: Mapping[str, str]) -> str:
    if not isinstance(entry, str) or not entry:
        raise AdvertisementError(f"a schema is a prefix name or a namespace IRI, got {entry!r}")
    bare = entry[:-1] if entry.endswith(":") else entry
    if bare in prefixes:
        return prefixes[bare]
    if "://" in entry or entry.startswith("urn:"):
        return entry.strip("<>")
    raise AdvertisementError(f'unknown schema prefix {entry!r} (declare it in "prefixes")')


def _name(entry: object, prefixes: Mapping[str, str], key: str) -> URI:
    if not isinstance(entry, str) or not entry:
        raise AdvertisementError(f'"{key}" holds names such as "dc:creator", got {entry!r}')
    if entry.startswith("<") and entry.endswith(">"):
        return URI(entry[1:-1])
    prefix, colon, local = entry.partition(":")
    if colon and prefix in prefixes and not local.startswith("//"):
        return URI(prefixes[prefix] + local)
    if (colon and local.startswith("//")) or entry.startswith("urn:"):
        return URI(entry)
    raise AdvertisementError(f'cannot resolve the name {entry!r} in "{key}" (unknown prefix?)')


def _value(item: object, prefixes: Mapping[str, str], prop: str, limits: Limits) -> ValueDomain:
    where = f'in the values of "{prop}"'
    if isinstance(item, bool):
        return domains.point(
            Literal("true" if item else "false", "http://www.w3.org/2001/XMLSchema#boolean")
        )  # type: ignore[return-value]
    if isinstance(item, str):
        if len(item) > limits.max_string_chars:
            raise AdvertisementError(
                f"a string {where} is longer than {limits.max_string_chars} characters "
                "(max_string_chars)"
            )
        return domains.point(Literal(item))  # type: ignore[return-value]
    if isinstance(item, int | float | Decimal | Fraction):
        return domains.point(number(_exact(item, where)))  # type: ignore[return-value]
    if isinstance(item, Mapping):
        keys = set(item)
        if keys == {"uri"}:
            return domains.point(_name(item["uri"], prefixes, "values"))  # type: ignore[return-value]
        if keys == {"literal", "datatype"}:
            datatype = _name(item["datatype"], prefixes, "values").value
            literal = Literal(str(item["literal"]), datatype)
            try:
                return domains.point(literal)  # type: ignore[return-value]
            except ValueError as error:
                raise AdvertisementError(f"{error} {where}") from None
        if keys and keys <= _RANGE_KEYS:
            return _range(item, where)
    raise AdvertisementError(
        f'unrecognised value {item!r} {where}: use a string, a number, {{"uri": ...}}, '
        '{"literal": ..., "datatype": ...} or {"min": ..., "max": ..., "type": ...}'
    )


def _exact(value: object, where: str) -> int | Fraction:
    if isinstance(value, int):
        return value
    if isinstance(value, Fraction):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise AdvertisementError(f"a non-finite number {where}")
        value = repr(value)
    if isinstance(value, Decimal):
        value = str(value)
    if isinstance(value, str):
        try:
            return parse_number_constant(value)
        except ValueError:
            raise AdvertisementError(f"{value!r} is not a number {where}") from None
    raise AdvertisementError(f"{value!r} is not a number {where}")


def _range(item: Mapping, where: str) -> ValueDomain:
    kind_name = item.get("type", "number")
    bounds: dict[str, int | Fraction] = {}
    for key in ("min", "max"):
        if key not in item:
            continue
        raw = item[key]
        if kind_name == "number":
            bounds[key] = _exact(raw, where)
        elif kind_name in ("date", "dateTime"):
            if not isinstance(raw, str):
                raise AdvertisementError(f"a {kind_name} bound is a string {where}, got {raw!r}")
            instant = parse_instant(raw, with_time=kind_name == "dateTime")
            if instant is None:
                datatype = XSD_DATETIME if kind_name == "dateTime" else XSD_DATE
                raise AdvertisementError(f"{raw!r} is not a valid <{datatype}> {where}")
            bounds[key] = instant
        else:
            raise AdvertisementError(
                f"unknown range type {kind_name!r} {where} (number, date or dateTime)"
            )
    kind = KIND_NUMBER if kind_name == "number" else KIND_DATE
    low, high = bounds.get("min"), bounds.get("max")
    if low is not None and high is not None and low > high:
        raise AdvertisementError(f"an empty range (min > max) {where}")
    return domains.RangeDomain(kind, low, low is not None, high, high is not None)
