"""The QEL-style text form of subscriptions, mirroring the paper's notation.

Grammar (whitespace and ``#`` comments between tokens are ignored)::

    query      := prefix* head? formula
    prefix     := "@prefix" NAME? ":" IRI "."?  |  "PREFIX" NAME? ":" IRI
    head       := variable ("," variable)* ":"  |  ":"          (":" alone: no answer variables)
    formula    := conjunction (OR conjunction)*                 OR  := ";" | "|" | "or" | "∨" | "||"
    conjunction:= item (AND item)*                              AND := "," | "&" | "and" | "∧" | "&&"
    item       := "t" "(" variable "," iri "," (variable | constant) ")"
                | variable OP constant                          OP  := = != < <= > >= ≠ ≤ ≥
                | variable ("contains" | "⊇") string
                | "(" formula ")"
    variable   := "?" NAME  |  NAME starting with an upper-case letter
    iri        := "<" absolute IRI ">"  |  prefix:local  |  "⟨" prefix:local "⟩"
    constant   := iri | string ("@" lang | "^^" iri)? | number | date | dateTime | true | false

``,`` binds tighter than ``;`` (as in Prolog). Triple patterns must stand in the top-level
conjunction; alternatives go in the constraint. ``X != c`` on a number or date means
``(X < c ; X > c)``. Numbers: ``2004`` (xsd:integer), ``2.5`` (xsd:decimal), ``1.0E3`` (xsd:double);
dates: ``2004-01-01`` (xsd:date), ``2004-01-01T10:00:00Z`` (xsd:dateTime). The prefixes of
``qel.prefixes.WELL_KNOWN`` (rdf, rdfs, xsd, owl, dc, dcterms, foaf, lom, isl) need no declaration;
``<dc:article>`` written as in the paper is read as the QName when ``dc`` is a known prefix. Without a
head the answer variable is the subject. Example (the paper's Example 1)::

    X : t(X, rdf:type, dc:article), t(X, dc:creator, Y), t(X, dc:date, D),
        (Y contains "Nejdl" ; Y contains "Koubarakis"), D = 2004
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from qel.constraints import (
    Atom,
    Constraint,
    conjoin,
    disjoin,
    negate_atom,
)
from qel.errors import QueryError
from qel.limits import DEFAULT_LIMITS, Limits
from qel.model import Pattern, Subscription
from qel.prefixes import WELL_KNOWN, compact
from qel.terms import (
    KIND_DATE,
    KIND_NUMBER,
    KIND_OTHER,
    KIND_STRING,
    URI,
    VALUE_DATATYPES,
    XSD,
    XSD_DATE,
    XSD_DATETIME,
    XSD_DECIMAL,
    XSD_DOUBLE,
    XSD_INTEGER,
    Literal,
    Term,
)

_TOKEN_RE: Final = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<iri><[^<>"{}|^`\\\s]*:[^<>"{}|^`\\\s]*>)
  | (?P<uiri>⟨[^⟩\s]*⟩)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<datetime>-?[0-9]{4,}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?
                 (?:Z|[+-][0-9]{2}:[0-9]{2})?)
  | (?P<date>-?[0-9]{4,}-[0-9]{2}-[0-9]{2}(?:Z|[+-][0-9]{2}:[0-9]{2})?)
  | (?P<number>[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | (?P<var>\?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<qname>[A-Za-z_][A-Za-z0-9_.-]*:(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_-])?)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<prefixkw>@prefix\b)
  | (?P<op><=|>=|!=|&&|\|\||\^\^|[=<>≤≥≠⊇∧∨,;|&():.@])
    """,
    re.VERBOSE,
)
_LANG_RE: Final = re.compile(r"[A-Za-z]+(?:-[A-Za-z0-9]+)*")
_OR: Final = frozenset({";", "|", "||", "∨", "or"})
_AND: Final = frozenset({",", "&", "&&", "∧", "and"})
_COMPARE: Final = {
    "=": "=",
    "!=": "!=",
    "≠": "!=",
    "<": "<",
    "<=": "<=",
    "≤": "<=",
    ">": ">",
    ">=": ">=",
    "≥": ">=",
}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str
    offset: int


class _Parser:
    def __init__(self, text: str, limits: Limits) -> None:
        self.text = text
        self.limits = limits
        self.tokens = self._tokenise(text)
        self.index = 0
        self.depth = 0
        self.prefixes: dict[str, str] = dict(WELL_KNOWN)

    # -- tokens -----------------------------------------------------------------------------
    def _tokenise(self, text: str) -> list[_Token]:
        tokens: list[_Token] = []
        offset = 0
        while offset < len(text):
            match = _TOKEN_RE.match(text, offset)
            if match is None:
                raise self._error(f"unexpected character {text[offset]!r}", offset)
            kind = match.lastgroup or ""
            if kind != "ws":
                tokens.append(_Token(kind, match.group(), offset))
            offset = match.end()
        tokens.append(_Token("end", "", len(text)))
        return _split_glued_heads(tokens)

    def _where(self, offset: int) -> str:
        line = self.text.count("\n", 0, offset) + 1
        column = offset - (self.text.rfind("\n", 0, offset) + 1) + 1
        return f"line {line}, column {column}"

    def _error(self, message: str, offset: int | None = None) -> QueryError:
        if offset is None:
            offset = self.peek().offset
        return QueryError(f"{message} (at {self._where(offset)})")

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def next(self) -> _Token:
        token = self.peek()
        self.index += 1
        return token

    def expect(self, text: str) -> _Token:
        token = self.next()
        if token.text != text:
            shown = token.text or "the end of the query"
            raise self._error(f"expected {text!r} but found {shown!r}", token.offset)
        return token

    def at(self, *texts: str) -> bool:
        return self.peek().text in texts

    # -- query ------------------------------------------------------------------------------
    def parse(self) -> Subscription:
        self._prefixes()
        answer = self._head()
        start = self.peek().offset
        formula = self._formula()
        if self.peek().kind != "end":
            raise self._error(f"unexpected {self.peek().text!r}")
        return self._build(formula, answer, start)

    def _prefixes(self) -> None:
        while self.peek().kind == "prefixkw" or self.peek().text.upper() == "PREFIX":
            keyword = self.next()
            name_token = self.next()
            if name_token.kind == "qname" and name_token.text.endswith(":"):
                name = name_token.text[:-1]
            elif name_token.text == ":":
                name = ""
            else:
                raise self._error("expected a prefix name such as dc:", name_token.offset)
            iri_token = self.next()
            if iri_token.kind != "iri":
                raise self._error(
                    "expected <namespace IRI> after the prefix name", iri_token.offset
                )
            self.prefixes[name] = iri_token.text[1:-1]
            if keyword.kind == "prefixkw" and self.at("."):
                self.next()

    def _head(self) -> tuple[str, ...] | None:
        names: list[str] = []
        position = 0
        while True:
            token = self.peek(position)
            if token.kind == "qname" and token.text.endswith(":") and _is_var_name(token.text[:-1]):
                names.append(token.text[:-1])
                position += 1
                break
            name = _variable_name(token)
            if name is None:
                if token.text == ":" and (position == 0 or names):
                    position += 1
                    break
                return None
            names.append(name)
            position += 1
            separator = self.peek(position)
            if separator.text == ",":
                position += 1
                continue
            if separator.text == ":":
                position += 1
                break
            return None
        self.index += position
        return tuple(names)

    # -- formulas -----------------------------------------------------------------------------
    def _formula(self) -> tuple:
        parts = [self._conjunction()]
        while self.peek().text in _OR:
            self.next()
            parts.append(self._conjunction())
        return parts[0] if len(parts) == 1 else ("or", parts)

    def _conjunction(self) -> tuple:
        parts = [self._item()]
        while self.peek().text in _AND:
            self.next()
            parts.append(self._item())
        return parts[0] if len(parts) == 1 else ("and", parts)

    def _item(self) -> tuple:
        token = self.peek()
        if token.text == "(":
            self.next()
            self.depth += 1
            if self.depth > self.limits.max_nesting:
                raise self._error(
                    f"parentheses nested deeper than {self.limits.max_nesting} (max_nesting)",
                    token.offset,
                )
            inner = self._formula()
            self.expect(")")
            self.depth -= 1
            return inner
        if token.text == "t" and self.peek(1).text == "(":
            return self._triple()
        name = _variable_name(token)
        if name is None:
            shown = token.text or "the end of the query"
            raise self._error(f"expected a triple t(...), a constraint or '(' but found {shown!r}")
        self.next()
        operator = self.next()
        if operator.text in ("contains", "⊇"):
            value = self._constant()
            return ("atom", name, "contains", value, operator.offset)
        if operator.text not in _COMPARE:
            raise self._error(
                f"expected a comparison (= != < <= > >=) or contains after ?{name}",
                operator.offset,
            )
        value = self._constant()
        return ("atom", name, _COMPARE[operator.text], value, operator.offset)

    def _triple(self) -> tuple:
        start = self.next().offset
        self.expect("(")
        subject_token = self.next()
        subject = _variable_name(subject_token)
        if subject is None:
            raise self._error(
                "the subject of a triple pattern must be a variable", subject_token.offset
            )
        self.expect(",")
        predicate_token = self.peek()
        if _variable_name(predicate_token) is not None:
            raise self._error(
                "a variable in predicate position is not in the language", predicate_token.offset
            )
        predicate = self._iri()
        self.expect(",")
        object_token = self.peek()
        object_name = _variable_name(object_token)
        if object_name is not None:
            self.next()
            obj: str | Term = object_name
        else:
            obj = self._constant()
        self.expect(")")
        return ("triple", subject, predicate, obj, start)

    # -- terms ------------------------------------------------------------------------------
    def _iri(self) -> URI:
        token = self.next()
        if token.kind == "iri":
            inner = token.text[1:-1]
            prefix, _, local = inner.partition(":")
            if prefix in self.prefixes and not local.startswith("//"):
                return URI(self.prefixes[prefix] + local)
            return URI(inner)
        if token.kind == "uiri":
            return self._expand(token.text[1:-1], token.offset)
        if token.kind == "qname":
            return self._expand(token.text, token.offset)
        shown = token.text or "the end of the query"
        raise self._error(f"expected an IRI or prefix:name but found {shown!r}", token.offset)

    def _expand(self, qname: str, offset: int) -> URI:
        prefix, _, local = qname.partition(":")
        if prefix not in self.prefixes:
            if local.startswith("//"):
                return URI(qname)
            raise self._error(f"unknown prefix {prefix!r} (declare it with @prefix)", offset)
        return URI(self.prefixes[prefix] + local)

    def _constant(self) -> Term:
        token = self.peek()
        if token.kind in ("iri", "uiri", "qname"):
            return self._iri()
        self.next()
        if token.kind == "string":
            return self._string_literal(token)
        if token.kind == "number":
            return _number_literal(token.text)
        if token.kind == "date":
            return Literal(token.text, XSD_DATE)
        if token.kind == "datetime":
            return Literal(token.text, XSD_DATETIME)
        if token.text in ("true", "false"):
            return Literal(token.text, XSD + "boolean")
        shown = token.text or "the end of the query"
        raise self._error(f"expected a constant but found {shown!r}", token.offset)

    def _string_literal(self, token: _Token) -> Literal:
        body = token.text[1:-1]
        if token.text[0] == "'":
            body = body.replace('\\"', '"').replace("\\'", "'").replace('"', '\\"')
        try:
            value = json.loads('"' + body + '"')
        except ValueError:
            raise self._error("malformed escape in string", token.offset) from None
        if len(value) > self.limits.max_string_chars:
            raise self._error(
                f"string constant longer than {self.limits.max_string_chars} characters "
                "(max_string_chars)",
                token.offset,
            )
        if self.at("@") and self.peek().offset == token.offset + len(token.text):
            self.next()
            lang = self.next()
            if not _LANG_RE.fullmatch(lang.text):
                raise self._error("malformed language tag", lang.offset)
            return Literal(value, None, lang.text)
        if self.at("^^"):
            self.next()
            datatype = self._iri()
            return _typed_literal(value, datatype.value, lambda m: self._error(m, token.offset))
        return Literal(value)

    # -- building -----------------------------------------------------------------------------
    def _build(self, formula: tuple, answer: tuple[str, ...] | None, start: int) -> Subscription:
        items = formula[1] if formula[0] == "and" else [formula]
        triples = [item for item in items if item[0] == "triple"]
        others = [item for item in items if item[0] != "triple"]
        for item in others:
            nested = _find_triple(item)
            if nested is not None:
                raise self._error(
                    "a triple pattern inside a disjunction is not in the language: keep the "
                    "patterns in the top-level conjunction and put the alternatives in the "
                    "constraints",
                    nested,
                )
        if not triples:
            raise self._error("a subscription needs at least one triple pattern t(X, p, o)", start)
        if len(triples) > self.limits.max_patterns:
            raise self._error(
                f"more than {self.limits.max_patterns} triple patterns (max_patterns)", start
            )
        subjects = {item[1] for item in triples}
        if len(subjects) > 1:
            names = ", ".join(sorted("?" + name for name in subjects))
            raise self._error(
                f"all triple patterns must share one subject variable, found {names}",
                triples[0][4],
            )
        subject = triples[0][1]
        patterns = [Pattern(item[2], item[3]) for item in triples]
        try:
            constraint = conjoin(
                (self._constraint(item) for item in others),
                max_disjuncts=self.limits.max_disjuncts,
            )
        except OverflowError as error:
            raise self._error(str(error), start) from None
        if constraint.atom_count() > self.limits.max_atoms:
            raise self._error(
                f"more than {self.limits.max_atoms} atomic constraints in DNF (max_atoms)", start
            )
        return Subscription(
            subject, tuple(patterns), constraint, answer if answer is not None else (subject,)
        )

    def _constraint(self, item: tuple) -> Constraint:
        kind = item[0]
        if kind == "atom":
            _, name, op, value, offset = item
            try:
                if op == "!=":
                    return negate_atom(Atom(name, "=", value))
                return Constraint(((Atom(name, op, value),),))
            except ValueError as error:
                raise self._error(f"{error} in a constraint on ?{name}", offset) from None
        parts = [self._constraint(part) for part in item[1]]
        try:
            if kind == "and":
                return conjoin(parts, max_disjuncts=self.limits.max_disjuncts)
            return disjoin(parts, max_disjuncts=self.limits.max_disjuncts)
        except OverflowError as error:
            raise self._error(str(error)) from None


def _split_glued_heads(tokens: list[_Token]) -> list[_Token]:
    """``X:t(...)`` (the head glued to the first triple) reads as a QName; split it back."""
    result = []
    for number, token in enumerate(tokens):
        prefix, _, local = token.text.partition(":")
        following = tokens[number + 1] if number + 1 < len(tokens) else None
        if (
            token.kind == "qname"
            and local == "t"
            and _is_var_name(prefix)
            and following is not None
            and following.text == "("
        ):
            result += [
                _Token("name", prefix, token.offset),
                _Token("op", ":", token.offset + len(prefix)),
                _Token("name", "t", token.offset + len(prefix) + 1),
            ]
        else:
            result.append(token)
    return result


def _find_triple(item: tuple) -> int | None:
    if item[0] == "triple":
        return item[4]
    if item[0] in ("and", "or"):
        for part in item[1]:
            found = _find_triple(part)
            if found is not None:
                return found
    return None


def _is_var_name(text: str) -> bool:
    return bool(text) and text[0].isupper() and text.replace("_", "a").isalnum()


def _variable_name(token: _Token) -> str | None:
    if token.kind == "var":
        return token.text[1:]
    if token.kind == "name" and _is_var_name(token.text):
        return token.text
    return None


def _number_literal(text: str) -> Literal:
    if re.fullmatch(r"[+-]?[0-9]+", text):
        return Literal(text, XSD_INTEGER)
    if "e" in text or "E" in text:
        return Literal(text, XSD_DOUBLE)
    return Literal(text, XSD_DECIMAL)


def _typed_literal(value: str, datatype: str, error) -> Literal:  # type: ignore[no-untyped-def]
    literal = Literal(value, datatype)
    if literal.kind == KIND_OTHER and datatype in VALUE_DATATYPES:
        raise error(f"{value!r} is not a valid xsd:{datatype.removeprefix(XSD)}")
    return literal


def parse_qel(text: str, *, limits: Limits = DEFAULT_LIMITS) -> Subscription:
    """Parses the QEL text form; raises ``QueryError`` naming the construct and position."""
    if len(text) > limits.max_query_chars:
        raise QueryError(
            f"the query is longer than {limits.max_query_chars} characters (max_query_chars)"
        )
    return _Parser(text, limits).parse()


# -- formatting ---------------------------------------------------------------------------------


def format_term(term: Term, prefixes: Mapping[str, str] = WELL_KNOWN) -> str:
    """A term as the QEL text form writes it (and reads it back)."""
    if isinstance(term, URI):
        short = compact(term.value, prefixes)
        return short if short is not None else f"<{term.value}>"
    quoted = json.dumps(term.lexical, ensure_ascii=False)
    if term.lang is not None:
        return f"{quoted}@{term.lang}"
    if term.datatype is None:
        return quoted
    if term.kind == KIND_NUMBER and _number_literal(term.lexical).datatype == term.datatype:
        return term.lexical
    if term.kind == KIND_DATE:
        return term.lexical
    if term.kind == KIND_STRING:
        return quoted
    return f"{quoted}^^{format_term(URI(term.datatype), prefixes)}"


def _variable(name: str) -> str:
    return name if _is_var_name(name) else f"?{name}"


def _atom_text(atom: Atom, prefixes: Mapping[str, str]) -> str:
    return f"{_variable(atom.variable)} {atom.op} {format_term(atom.value, prefixes)}"


def format_subscription(
    subscription: Subscription, prefixes: Mapping[str, str] = WELL_KNOWN
) -> str:
    """The canonical text form: ``parse_qel`` reads it back to an equal subscription."""
    head = ", ".join(_variable(name) for name in subscription.answer)
    subject = _variable(subscription.subject)
    parts = [
        f"t({subject}, {format_term(p.predicate, prefixes)}, "
        + (_variable(p.object) if isinstance(p.object, str) else format_term(p.object, prefixes))
        + ")"
        for p in subscription.patterns
    ]
    disjuncts = subscription.constraint.disjuncts
    if len(disjuncts) == 1:
        parts += [_atom_text(atom, prefixes) for atom in disjuncts[0]]
    elif disjuncts:
        alternatives = [
            ", ".join(_atom_text(atom, prefixes) for atom in conjunction)
            for conjunction in disjuncts
        ]
        parts.append("(" + " ; ".join(alternatives) + ")")
    declarations = "".join(
        f"@prefix {name}: <{base}> .\n"
        for name, base in sorted(prefixes.items())
        if WELL_KNOWN.get(name) != base
    )
    opening = f"{head} : " if head else ": "
    return declarations + opening + ", ".join(parts)
