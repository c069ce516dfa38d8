"""Subscriptions from the Follow page: a form's fields as QEL text, and where a query is wrong.

The form says what a person looks for in the words of the data: a class (``dc:article``) and
conditions, each on a property (``dc:creator contains "Nejdl"``), where a condition may accept
several values (alternatives: ``contains "Nejdl"`` or ``contains "Koubarakis"``). ``build_query``
writes it as QEL text; the language (``qel.parse_subscription``) then reads it like any typed
query, so the form can only make what the language accepts, and the page shows the canonical QEL
and SPARQL that the language writes back (``subscription.to_text()``, ``to_sparql()``).

A form::

    {"class": "dc:article",                      # optional
     "conditions": [
        {"property": "dc:creator", "operator": "contains", "values": ["Nejdl", "Koubarakis"]},
        {"property": "dc:date", "operator": "=", "values": ["2004"], "type": "number"},
        {"property": "dc:date", "operator": "between", "values": ["2004-01-01", "2004-06-30"],
         "type": "date"},
        {"property": "dc:subject", "operator": "exists"}]}

Operators: ``exists`` (the property is there), ``contains`` (text), ``=``, ``!=``, ``<``, ``<=``,
``>``, ``>=``, ``between`` (two values, both included). A value's ``type`` is ``text``,
``number``, ``date`` (``2004-01-01`` or a date and time), ``resource`` (``prefix:name`` or an
absolute IRI), or ``auto`` (the default: a number, a date or a known ``prefix:name`` are read as
such, anything else as text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import qel
from qel.prefixes import WELL_KNOWN

OPERATORS: Final = ("exists", "contains", "=", "!=", "<", "<=", ">", ">=", "between")
TYPES: Final = ("auto", "text", "number", "date", "resource")
MAX_CONDITIONS: Final = 32
MAX_ALTERNATIVES: Final = 32
"""Bounds of one form (the language's own limits apply to the query it makes)."""

_NUMBER: Final = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATE: Final = re.compile(r"-?[0-9]{4,}-[0-9]{2}-[0-9]{2}(?:Z|[+-][0-9]{2}:[0-9]{2})?")
_DATETIME: Final = re.compile(
    r"-?[0-9]{4,}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?"
    r"(?:Z|[+-][0-9]{2}:[0-9]{2})?"
)
_QNAME: Final = re.compile(
    r"([A-Za-z_][A-Za-z0-9_.-]*):([A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_-])?)?"
)
_ABSOLUTE_IRI: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^<>\"{}|^`\\\s]+")
_POSITION: Final = re.compile(r"line (\d+), column (\d+)")


class FormError(ValueError):
    """A field of the form that cannot be used; ``field`` names it (``conditions.2.values.0``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Query:
    """A query the language accepted: what was given, and its canonical QEL and SPARQL."""

    text: str
    qel: str
    sparql: str


def build_query(form: Mapping[str, Any]) -> str:
    """The QEL text of ``form`` (see the module docstring); ``FormError`` names a bad field."""
    patterns: list[str] = []
    constraints: list[str] = []
    kind = _text(form, "class", "class")
    if kind:
        patterns.append(f"t(X, rdf:type, {qel_iri(kind, 'class')})")
    conditions = form.get("conditions") or []
    if not isinstance(conditions, list):
        raise FormError("conditions", "conditions must be a list")
    if len(conditions) > MAX_CONDITIONS:
        raise FormError("conditions", f"at most {MAX_CONDITIONS} conditions")
    for number, condition in enumerate(conditions):
        where = f"conditions.{number}"
        if not isinstance(condition, Mapping):
            raise FormError(where, "a condition is an object")
        prop = _text(condition, "property", f"{where}.property")
        if not prop:
            raise FormError(f"{where}.property", "which property?")
        variable = f"V{number + 1}"
        patterns.append(f"t(X, {qel_iri(prop, f'{where}.property')}, {variable})")
        constraint = _constraint(condition, variable, where)
        if constraint:
            constraints.append(constraint)
    if not patterns:
        raise FormError("class", "say what to follow: a class, or a condition on a property")
    return "X : " + ", ".join(patterns + constraints)


def _constraint(condition: Mapping[str, Any], variable: str, where: str) -> str:
    operator = condition.get("operator") or "exists"
    if operator not in OPERATORS:
        raise FormError(f"{where}.operator", f"the operator is one of {', '.join(OPERATORS)}")
    if operator == "exists":
        return ""
    kind = condition.get("type") or "auto"
    if kind not in TYPES:
        raise FormError(f"{where}.type", f"the type is one of {', '.join(TYPES)}")
    values = condition.get("values")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise FormError(f"{where}.values", "values is a list of texts")
    given = [(n, v.strip()) for n, v in enumerate(values) if v.strip()]
    if not given:
        raise FormError(f"{where}.values.0", "give a value")
    if operator == "between":
        if len(given) != 2:
            raise FormError(f"{where}.values", "between takes two values: from and to")
        (low_at, low), (high_at, high) = given
        return (
            f"{variable} >= {_constant(low, kind, f'{where}.values.{low_at}')}, "
            f"{variable} <= {_constant(high, kind, f'{where}.values.{high_at}')}"
        )
    if len(given) > MAX_ALTERNATIVES:
        raise FormError(f"{where}.values", f"at most {MAX_ALTERNATIVES} alternatives")
    if operator == "contains":
        atoms = [
            f"{variable} contains {json.dumps(value, ensure_ascii=False)}" for _, value in given
        ]
    else:
        atoms = [
            f"{variable} {operator} {_constant(value, kind, f'{where}.values.{at}')}"
            for at, value in given
        ]
    return atoms[0] if len(atoms) == 1 else "(" + " ; ".join(atoms) + ")"


def _text(mapping: Mapping[str, Any], key: str, where: str) -> str:
    value = mapping.get(key) or ""
    if not isinstance(value, str):
        raise FormError(where, f"{key} is a text")
    return value.strip()


def qel_iri(text: str, where: str) -> str:
    """``text`` as an IRI in QEL: a ``prefix:name`` of a known prefix, or ``<absolute IRI>``;
    ``FormError`` (naming the field ``where``) for anything else."""
    text = text.strip().removeprefix("<").removesuffix(">")
    found = _QNAME.fullmatch(text)
    if found is not None and found[1] in WELL_KNOWN:
        return text
    if _ABSOLUTE_IRI.fullmatch(text) and (found is None or "/" in text or text.startswith("urn:")):
        return f"<{text}>"
    known = ", ".join(WELL_KNOWN)
    raise FormError(where, f"{text!r} is neither prefix:name (of {known}) nor an absolute IRI")


def expand_iri(text: str, where: str) -> qel.URI:
    """``text`` (``prefix:name`` or an absolute IRI) as the full IRI."""
    written = qel_iri(text, where).removeprefix("<").removesuffix(">")
    prefix, _, local = written.partition(":")
    return qel.URI(WELL_KNOWN[prefix] + local if prefix in WELL_KNOWN else written)


def _constant(value: str, kind: str, where: str) -> str:
    if kind == "auto":
        kind = infer_type(value)
    if kind == "text":
        return json.dumps(value, ensure_ascii=False)
    if kind == "number":
        if not _NUMBER.fullmatch(value):
            raise FormError(where, f"{value!r} is not a number")
        return value
    if kind == "date":
        if _DATE.fullmatch(value):
            return value
        if _DATETIME.fullmatch(value):
            date, _, time = value.partition("T")
            clock = re.match(r"[0-9:.]+", time)
            assert clock is not None
            if clock[0].count(":") == 1:  # hh:mm, as a browser's date-time field gives it
                value = f"{date}T{clock[0]}:00{time[clock.end() :]}"
            return value
        raise FormError(where, f"{value!r} is not a date (2004-05-31) or a date and time")
    return qel_iri(value, where)


def infer_type(value: str) -> str:
    """What ``auto`` reads ``value`` as: ``number``, ``date``, ``resource`` or ``text``."""
    if _NUMBER.fullmatch(value):
        return "number"
    if _DATE.fullmatch(value) or _DATETIME.fullmatch(value):
        return "date"
    found = _QNAME.fullmatch(value)
    if found is not None and found[1] in WELL_KNOWN and found[2]:
        return "resource"
    return "text"


def check_query(text: str) -> Query:
    """``text`` read by the language; ``qel.QueryError`` says what is wrong and where."""
    subscription = qel.parse_subscription(text)
    return Query(text=text, qel=subscription.to_text(), sparql=subscription.to_sparql())


def error_position(message: str) -> tuple[int, int] | None:
    """The line and column (from 1) an error message of the language points at, if it does:
    both parsers name the place as ``line L, column C`` (``qel.qel_text``, ``qel.sparql``)."""
    found = _POSITION.search(message)
    return (int(found[1]), int(found[2])) if found else None
