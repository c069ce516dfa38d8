"""RDF terms as the language sees them: URIs and typed literals with comparable values.

Every term carries a ``kind`` and a ``value`` computed once, when it is built, so that matching a
publication never re-parses a lexical form:

* ``URI``: kind ``"uri"``, value the IRI string.
* string literals (plain, ``xsd:string``, language-tagged): kind ``"string"``, value the lexical form.
  The language tag is kept (a notification carries the triples as published) but ignored for matching.
* numeric literals (``xsd:integer`` and its derived types, ``xsd:decimal``, ``xsd:double``,
  ``xsd:float``): kind ``"number"``, value an ``int``, an exact ``Fraction`` or a ``float``, so the
  three compare numerically and exactly with each other.
* ``xsd:date`` and ``xsd:dateTime``: kind ``"date"``, value the instant as an exact number of
  seconds since 1970-01-01T00:00:00Z (a date is its first instant; a value without a time zone is read
  as UTC, the implicit time zone XSD leaves to the implementation). Dates and date-times therefore
  compare in time order with each other, and any year is accepted.
* any other literal, or an ill-formed lexical form of a known datatype: kind ``"other"``, value
  ``(lexical, datatype)``; such a term only equals itself.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

XSD: Final = "http://www.w3.org/2001/XMLSchema#"
RDF: Final = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
XSD_STRING: Final = XSD + "string"
XSD_INTEGER: Final = XSD + "integer"
XSD_DECIMAL: Final = XSD + "decimal"
XSD_DOUBLE: Final = XSD + "double"
XSD_FLOAT: Final = XSD + "float"
XSD_DATE: Final = XSD + "date"
XSD_DATETIME: Final = XSD + "dateTime"
RDF_LANGSTRING: Final = RDF + "langString"
RDF_TYPE_IRI: Final = RDF + "type"

KIND_URI: Final = "uri"
KIND_STRING: Final = "string"
KIND_NUMBER: Final = "number"
KIND_DATE: Final = "date"
KIND_OTHER: Final = "other"

Number = int | Fraction | float

_INTEGER_TYPES: Final = frozenset(
    XSD + name
    for name in (
        "integer",
        "int",
        "long",
        "short",
        "byte",
        "nonNegativeInteger",
        "positiveInteger",
        "negativeInteger",
        "nonPositiveInteger",
        "unsignedLong",
        "unsignedInt",
        "unsignedShort",
        "unsignedByte",
    )
)
VALUE_DATATYPES: Final = _INTEGER_TYPES | {
    XSD_DECIMAL,
    XSD_DOUBLE,
    XSD_FLOAT,
    XSD_DATE,
    XSD_DATETIME,
}
"""Datatypes whose lexical forms are checked: an ill-formed one is an error in a query."""
_INTEGER_RE: Final = re.compile(r"[+-]?[0-9]+")
_DECIMAL_RE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
# rdflib rewrites INF and NaN as Python spells them (inf, nan); both spellings are accepted.
_DOUBLE_RE: Final = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:INF|inf)|NaN|nan"
)
_DATE_RE: Final = re.compile(
    r"(-?[0-9]{4,})-([0-9]{2})-([0-9]{2})"
    r"(?:T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?)?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?"
)


@dataclass(frozen=True, slots=True)
class URI:
    """An IRI. Never equal to a plain ``str``: a URI and a string literal are different terms."""

    value: str

    kind = KIND_URI

    def __post_init__(self) -> None:
        if not isinstance(self.value, str) or not self.value:
            raise ValueError(f"a URI needs a non-empty string, got {self.value!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is URI:
            return self.value == other.value  # type: ignore[attr-defined, no-any-return]
        return NotImplemented

    def __hash__(self) -> int:
        """The value's hash: the dataclass's built a tuple per call, and the poset hashes a
        URI some 145 times per placement on shapes (a dictionary look-up with an equal, not
        identical, key took 211 ns, 154 this way; issue 34, stop 60). Equal URIs have equal
        values, so equal hashes; ``__eq__`` is the dataclass's without its tuples."""
        return hash(self.value)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"URI({self.value!r})"


@dataclass(frozen=True, slots=True)
class Literal:
    """An RDF literal: lexical form, datatype IRI (``None`` for a plain or language-tagged string),
    language tag. Equality is RDF term equality; ``kind`` and ``value`` give the comparable value."""

    lexical: str
    datatype: str | None = None
    lang: str | None = None
    kind: str = field(init=False, compare=False, repr=False)
    value: object = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.lexical, str):
            raise TypeError(f"a literal's lexical form must be a string, got {self.lexical!r}")
        datatype = self.datatype
        if self.lang is not None:
            if datatype not in (None, RDF_LANGSTRING):
                raise ValueError("a literal with a language tag cannot have another datatype")
            object.__setattr__(self, "datatype", None)
            object.__setattr__(self, "lang", self.lang.lower())
            datatype = None
        elif datatype == XSD_STRING:
            # RDF 1.1: a simple literal and an xsd:string literal are the same term.
            object.__setattr__(self, "datatype", None)
            datatype = None
        kind, value = _interpret(self.lexical, datatype)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "value", value)

    def __hash__(self) -> int:
        return hash((self.lexical, self.datatype, self.lang))


Term = URI | Literal


def string(value: str, lang: str | None = None) -> Literal:
    return Literal(value, None, lang)


def number(value: int | Fraction | float | str) -> Literal:
    """A numeric literal in the narrowest XSD type that represents ``value`` exactly."""
    if isinstance(value, str):
        value = parse_number_constant(value)
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number literal")
    if type(value) is int:
        return _read(str(value), XSD_INTEGER, KIND_NUMBER, value)
    if type(value) is Fraction:
        if value.denominator == 1:
            return _read(str(value.numerator), XSD_INTEGER, KIND_NUMBER, value.numerator)
        return _read(_fraction_to_decimal(value), XSD_DECIMAL, KIND_NUMBER, value)
    if isinstance(value, int):
        return Literal(str(value), XSD_INTEGER)
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return Literal(str(value.numerator), XSD_INTEGER)
        return Literal(_fraction_to_decimal(value), XSD_DECIMAL)
    return Literal(_float_lexical(value), XSD_DOUBLE)


def _read(lexical: str, datatype: str, kind: str, value: object) -> Literal:
    """The literal ``Literal(lexical, datatype)``, whose ``kind`` and ``value`` the caller gives:
    it wrote ``lexical`` from ``value`` in a form that ``_interpret`` reads back as exactly that
    (same kind, same value of the same type). Why: a witness publication (``qel.filters.witness``)
    writes out a range's sample value, and reading it back (a regular expression, a ``Fraction``
    parsed from text, a date's calendar) was most of the cost of a probe's witnesses in the poset
    (issue 34, stop 60). Tested against reading back on every value kind written this way."""
    made = object.__new__(Literal)
    set_field = object.__setattr__
    set_field(made, "lexical", lexical)
    set_field(made, "datatype", datatype)
    set_field(made, "lang", None)
    set_field(made, "kind", kind)
    set_field(made, "value", value)
    return made


def parse_number_constant(text: str) -> int | Fraction:
    """Reads a number written in a query: exact, so ``0.1`` is one tenth, not a binary float."""
    if _INTEGER_RE.fullmatch(text):
        return int(text)
    if _DOUBLE_RE.fullmatch(text) and not text.lstrip("+-").lower().startswith(("inf", "nan")):
        return _normalise_fraction(Fraction(text))
    raise ValueError(f"not a finite number: {text!r}")


def _normalise_fraction(value: Fraction) -> int | Fraction:
    return value.numerator if value.denominator == 1 else value


def _fraction_to_decimal(value: Fraction) -> str:
    """Decimal lexical form of a fraction whose denominator divides a power of ten."""
    denominator = value.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:
        raise ValueError(f"{value} has no finite decimal form")
    digits = max(twos, fives)
    scaled = abs(value.numerator) * (10**digits) // value.denominator
    sign = "-" if value < 0 else ""
    text = str(scaled).rjust(digits + 1, "0")
    return f"{sign}{text[:-digits]}.{text[-digits:]}"


def _float_lexical(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "INF" if value > 0 else "-INF"
    return repr(value).replace("e+", "E").replace("e", "E")


def _interpret(lexical: str, datatype: str | None) -> tuple[str, object]:
    if datatype is None:
        return KIND_STRING, lexical
    if datatype in _INTEGER_TYPES:
        if _INTEGER_RE.fullmatch(lexical):
            return KIND_NUMBER, int(lexical)
    elif datatype == XSD_DECIMAL:
        if _DECIMAL_RE.fullmatch(lexical):
            return KIND_NUMBER, _normalise_fraction(Fraction(lexical))
    elif datatype in (XSD_DOUBLE, XSD_FLOAT):
        if _DOUBLE_RE.fullmatch(lexical):
            return KIND_NUMBER, float(lexical)
    elif datatype in (XSD_DATE, XSD_DATETIME):
        instant = parse_instant(lexical, with_time=datatype == XSD_DATETIME)
        if instant is not None:
            return KIND_DATE, instant
    return KIND_OTHER, (lexical, datatype)


def parse_instant(lexical: str, *, with_time: bool) -> int | Fraction | None:
    """Seconds since the epoch (UTC) of an ``xsd:date`` / ``xsd:dateTime``, or None if ill-formed."""
    match = _DATE_RE.fullmatch(lexical)
    if match is None:
        return None
    year_s, month_s, day_s, hour_s, minute_s, second_s, fraction_s, zone = match.groups()
    if (hour_s is not None) != with_time:
        return None
    year, month, day = int(year_s), int(month_s), int(day_s)
    if year_s.lstrip("-").startswith("0") and len(year_s.lstrip("-")) > 4:
        return None
    if not 1 <= month <= 12 or not 1 <= day <= _days_in_month(year, month):
        return None
    seconds: int | Fraction = _days_from_civil(year, month, day) * 86400
    if with_time:
        hour, minute, second = int(hour_s), int(minute_s), int(second_s)
        frac = Fraction(fraction_s) if fraction_s else 0
        if hour == 24 and (minute or second or frac):
            return None
        if hour > 24 or minute > 59 or second > 59:
            return None
        seconds += hour * 3600 + minute * 60 + second + frac
    if zone and zone != "Z":
        zone_hours, zone_minutes = int(zone[1:3]), int(zone[4:6])
        if zone_hours > 14 or zone_minutes > 59 or (zone_hours == 14 and zone_minutes):
            return None
        offset = (zone_hours * 60 + zone_minutes) * 60
        seconds -= offset if zone[0] == "+" else -offset
    return _normalise_fraction(Fraction(seconds)) if isinstance(seconds, Fraction) else seconds


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar, for any year (H. Hinnant)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def instant_literal(seconds: int | Fraction) -> Literal:
    """An ``xsd:dateTime`` literal (UTC) for a number of seconds since the epoch."""
    whole = seconds // 1 if isinstance(seconds, Fraction) else seconds
    fraction = Fraction(seconds) - whole
    days, rest = divmod(int(whole), 86400)
    year, month, day = _civil_from_days(days)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{year:04d}-{month:02d}-{day:02d}T{hours:02d}:{minutes:02d}:{secs:02d}"
    exact = True
    if fraction:
        exact = _has_decimal(fraction)
        text += _fraction_to_decimal(fraction)[1:] if exact else f".{int(fraction * 10**9):09d}"
    if exact and year >= 0 and type(seconds) in (int, Fraction):
        # Read back: this calendar day, time and decimal fraction, the same number of seconds
        # (an int without a fraction, else a Fraction); a negative year is written in fewer
        # than four digits and is read as "other", a fraction without a decimal form rounded.
        value = seconds if type(seconds) is int else _normalise_fraction(seconds)
        return _read(text + "Z", XSD_DATETIME, KIND_DATE, value)
    return Literal(text + "Z", XSD_DATETIME)


def _has_decimal(value: Fraction) -> bool:
    denominator = value.denominator
    for factor in (2, 5):
        while denominator % factor == 0:
            denominator //= factor
    return denominator == 1


def _civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719468
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096
    ) // 365
    year = year_of_era + era * 400
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    mp = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return year + (month <= 2), month, day


def namespace(uri: URI | str) -> str:
    """The schema of a URI: everything up to and including its last ``#`` or ``/``."""
    text = uri.value if isinstance(uri, URI) else uri
    cut = max(text.rfind("#"), text.rfind("/"))
    return text[: cut + 1] if cut >= 0 else text


RDF_TYPE: Final = URI(RDF_TYPE_IRI)
