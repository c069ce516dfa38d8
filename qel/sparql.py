"""The SPARQL subset of the language, parsed with rdflib's SPARQL parser and algebra.

Accepted: ``SELECT`` (``DISTINCT``/``REDUCED`` allowed, ``*`` means every variable) or ``ASK`` over a
basic graph pattern on one subject variable, with constant predicates (``a`` included), FILTERs built
from ``= != < <= > >= && || ! IN``, ``NOT IN`` and ``CONTAINS`` (with ``STR(?v)`` allowed around a
variable), nested groups, and ``UNION`` of branches that have the same triple patterns (it only adds
alternatives to the constraint). ``!=``, ``!`` and ``NOT IN`` are accepted where they rewrite into the
language: on numbers and dates (``?d != 2004`` becomes ``?d < 2004 || ?d > 2004``).

Semantics differ from SPARQL's in three documented places, all following the paper's typed language:
string equality and ``contains`` ignore language tags; ``STR(?v)`` is read as ``?v``, so ``contains``
only ever holds for string literals (never for the text of a URI or a number); a constant in object
position is compared by value (``?x dc:date 2004`` also matches ``"2004.0"^^xsd:decimal``).

Everything else raises ``QueryError`` naming the construct and, where the text shows it, its position.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from pyparsing import ParseException
from rdflib.plugins.sparql.algebra import translateQuery
from rdflib.plugins.sparql.parser import parseQuery
from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.term import BNode as RdfBNode
from rdflib.term import Literal as RdfLiteral
from rdflib.term import URIRef as RdfURIRef
from rdflib.term import Variable as RdfVariable

from qel.constraints import FALSE, TRUE, Atom, Constraint, conjoin, disjoin, negate_atom
from qel.errors import QueryError
from qel.limits import DEFAULT_LIMITS, Limits
from qel.model import Pattern, Subscription
from qel.prefixes import WELL_KNOWN, compact
from qel.qel_text import format_term
from qel.terms import KIND_NUMBER, KIND_OTHER, URI, VALUE_DATATYPES, Literal, Term

_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NEGATE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_UNSUPPORTED_PATTERNS = {
    "LeftJoin": "OPTIONAL",
    "Minus": "MINUS",
    "Graph": "GRAPH",
    "Extend": "BIND",
    "ToMultiSet": "VALUES",
    "values": "VALUES",
    "ServiceGraphPattern": "SERVICE",
    "Group": "GROUP BY",
    "AggregateJoin": "an aggregate",
    "OrderBy": "ORDER BY",
    "Slice": "LIMIT/OFFSET",
}
_ARITHMETIC = {
    "AdditiveExpression": "+ or -",
    "MultiplicativeExpression": "* or /",
}
_KEYWORDS = {
    "OPTIONAL": "OPTIONAL",
    "MINUS": "MINUS",
    "GRAPH": "GRAPH",
    "BIND": "BIND",
    "VALUES": "VALUES",
    "SERVICE": "SERVICE",
    "GROUP BY": "GROUP",
    "an aggregate": "GROUP",
    "ORDER BY": "ORDER",
    "LIMIT/OFFSET": "LIMIT",
    "UNION": "UNION",
}


@dataclass
class _Branch:
    triples: set[tuple[object, object, object]] = field(default_factory=set)
    filters: list[object] = field(default_factory=list)


class _Translator:
    def __init__(self, text: str, limits: Limits) -> None:
        self.text = text
        self.limits = limits

    def error(self, message: str, keyword: str | None = None) -> QueryError:
        where = _locate(self.text, keyword) if keyword else None
        return QueryError(f"{message} (at {where})" if where else message)

    # -- graph patterns -----------------------------------------------------------------------
    def branches(self, node: CompValue) -> list[_Branch]:
        name = node.name
        if name == "BGP":
            return [_Branch(set(node.triples), [])]
        if name == "Filter":
            inner = self.branches(node.p)
            for branch in inner:
                branch.filters.append(node.expr)
            return inner
        if name == "Join":
            left, right = self.branches(node.p1), self.branches(node.p2)
            return [
                _Branch(a.triples | b.triples, a.filters + b.filters) for a in left for b in right
            ]
        if name == "Union":
            return self.branches(node.p1) + self.branches(node.p2)
        if name in ("Project", "Distinct", "Reduced"):
            return self.branches(node.p)
        construct = _UNSUPPORTED_PATTERNS.get(name, name)
        raise self.error(f"{construct} is not in the language", _KEYWORDS.get(construct))

    # -- triples ------------------------------------------------------------------------------
    def patterns(
        self, triples: Iterable[tuple[object, object, object]]
    ) -> tuple[str, list[Pattern]]:
        subjects: set[str] = set()
        patterns: list[Pattern] = []
        for subject, predicate, obj in sorted(triples, key=repr):
            if isinstance(subject, RdfBNode) or isinstance(obj, RdfBNode):
                raise self.error(
                    "a blank node in a triple pattern joins on an object, which is not in the "
                    "language",
                    "[",
                )
            if not isinstance(subject, RdfVariable):
                raise self.error(f"the subject must be a variable, found <{subject}>", str(subject))
            if isinstance(predicate, RdfVariable):
                raise self.error(
                    f"the variable ?{predicate} in predicate position is not in the language",
                    "?" + str(predicate),
                )
            if not isinstance(predicate, RdfURIRef):
                raise self.error("property paths are not in the language", "/")
            subjects.add(str(subject))
            if isinstance(obj, RdfVariable):
                patterns.append(Pattern(URI(str(predicate)), str(obj)))
            else:
                patterns.append(Pattern(URI(str(predicate)), self.term(obj)))
        if not patterns:
            raise self.error("a subscription needs at least one triple pattern")
        if len(patterns) > self.limits.max_patterns:
            raise self.error(f"more than {self.limits.max_patterns} triple patterns (max_patterns)")
        if len(subjects) > 1:
            objects = {p.object for p in patterns if isinstance(p.object, str)}
            for name in sorted(subjects & objects):
                raise self.error(
                    f"?{name} is both an object and a subject: joins on objects are not in the "
                    "language",
                    "?" + name,
                )
            names = ", ".join(sorted("?" + s for s in subjects))
            raise self.error(f"all triple patterns must share one subject variable, found {names}")
        return subjects.pop(), patterns

    def term(self, node: object) -> Term:
        if isinstance(node, RdfURIRef):
            return URI(str(node))
        if isinstance(node, RdfLiteral):
            datatype = str(node.datatype) if node.datatype is not None else None
            literal = Literal(str(node), datatype, node.language)
            if literal.kind == KIND_OTHER and datatype in VALUE_DATATYPES:
                raise self.error(f"{str(node)!r} is not a valid <{datatype}>", str(node))
            return literal
        if isinstance(node, CompValue) and node.name in ("UnaryMinus", "UnaryPlus"):
            inner = self.term(node.expr)
            if inner.kind != KIND_NUMBER or not isinstance(inner, Literal):
                raise self.error("a sign only applies to numbers", "-")
            if node.name == "UnaryPlus":
                return inner
            lexical = inner.lexical[1:] if inner.lexical.startswith("-") else "-" + inner.lexical
            return Literal(lexical.replace("-+", "-"), inner.datatype)
        raise self.error(f"expected a constant, found {_describe(node)}", _keyword_of(node))

    # -- filters ------------------------------------------------------------------------------
    def constraint(self, node: object, negated: bool = False, depth: int = 0) -> Constraint:
        if depth > self.limits.max_nesting:
            raise self.error(
                f"the FILTER nests deeper than {self.limits.max_nesting} (max_nesting)"
            )
        limit = self.limits.max_disjuncts
        if isinstance(node, RdfLiteral) and isinstance(node.toPython(), bool):
            return TRUE if node.toPython() != negated else FALSE
        if not isinstance(node, CompValue):
            raise self.error(f"{_describe(node)} is not a condition", _keyword_of(node))
        name = node.name
        try:
            if name in ("ConditionalOrExpression", "ConditionalAndExpression"):
                parts = [self.constraint(node.expr, negated, depth + 1)]
                parts += [self.constraint(other, negated, depth + 1) for other in node.other or ()]
                is_or = (name == "ConditionalOrExpression") != negated
                return (
                    disjoin(parts, max_disjuncts=limit)
                    if is_or
                    else conjoin(parts, max_disjuncts=limit)
                )
            if name == "UnaryNot":
                return self.constraint(node.expr, not negated, depth + 1)
            if name == "RelationalExpression":
                return self.relational(node, negated)
            if name == "Builtin_CONTAINS":
                if negated:
                    raise self.error("!CONTAINS (a negated contains) is not in the language", "!")
                variable = self.variable(node.arg1, "CONTAINS")
                value = self.term(node.arg2)
                return self.atom(variable, "contains", value, "CONTAINS")
        except OverflowError as error:
            raise self.error(str(error)) from None
        construct = name.removeprefix("Builtin_") if name.startswith("Builtin_") else name
        if name == "Function":
            construct = f"the function <{node.iri}>"
            raise self.error(f"{construct} is not in the language", str(node.iri))
        if name in _ARITHMETIC:
            raise self.error(f"arithmetic ({_ARITHMETIC[name]}) is not in the language")
        raise self.error(f"{construct} is not in the language", construct)

    def relational(self, node: CompValue, negated: bool) -> Constraint:
        op = node.op
        left, right = node.expr, node.other
        if op in ("IN", "NOT IN"):
            variable = self.variable(left, op)
            equal = (op == "IN") != negated
            parts = [
                self.atom(variable, "=" if equal else "!=", self.term(value), op) for value in right
            ]
            if equal:
                return disjoin(parts, max_disjuncts=self.limits.max_disjuncts)
            return conjoin(parts, max_disjuncts=self.limits.max_disjuncts)
        for side in (left, right):
            if isinstance(side, CompValue) and side.name in _ARITHMETIC:
                raise self.error(f"arithmetic ({_ARITHMETIC[side.name]}) is not in the language")
        left_is_var = _is_variable(left)
        right_is_var = _is_variable(right)
        if left_is_var and right_is_var:
            raise self.error(f"comparing two variables ({op}) is a join, not in the language", op)
        if not left_is_var and not right_is_var:
            raise self.error(f"a comparison ({op}) needs a variable on one side", op)
        if not left_is_var:
            left, right, op = right, left, _FLIP[op]
        if negated:
            op = _NEGATE[op]
        return self.atom(self.variable(left, op), op, self.term(right), op)

    def variable(self, node: object, construct: str) -> str:
        if isinstance(node, RdfVariable):
            return str(node)
        if isinstance(node, CompValue) and node.name == "Builtin_STR":
            return self.variable(node.arg, construct)
        raise self.error(
            f"{construct} needs a variable (or STR(?v)), found {_describe(node)}",
            _keyword_of(node),
        )

    def atom(self, variable: str, op: str, value: Term, construct: str) -> Constraint:
        try:
            if op == "!=":
                return negate_atom(Atom(variable, "=", value))
            return Constraint(((Atom(variable, op, value),),))
        except ValueError as error:
            raise self.error(f"{error} in a constraint on ?{variable}", construct) from None


def parse_sparql(text: str, *, limits: Limits = DEFAULT_LIMITS) -> Subscription:
    """Parses the SPARQL subset (see the module docstring) into a ``Subscription``."""
    if len(text) > limits.max_query_chars:
        raise QueryError(
            f"the query is longer than {limits.max_query_chars} characters (max_query_chars)"
        )
    try:
        query = translateQuery(parseQuery(text), initNs=dict(WELL_KNOWN))
    except RecursionError:
        raise QueryError("the query nests too deeply for the SPARQL parser") from None
    except ParseException as error:
        raise QueryError(
            f"SPARQL syntax error: {error.msg} (at line {error.lineno}, column {error.col})"
        ) from None
    except Exception as error:  # rdflib reports unknown prefixes and the like as bare Exception
        raise QueryError(f"SPARQL: {error}") from None
    translator = _Translator(text, limits)
    algebra = query.algebra
    if algebra.name not in ("SelectQuery", "AskQuery"):
        kind = algebra.name.removesuffix("Query").upper()
        raise translator.error(f"{kind} queries are not in the language", kind)
    if algebra.get("datasetClause"):
        raise translator.error("FROM clauses are not in the language", "FROM")
    branches = translator.branches(algebra.p)
    first = branches[0].triples
    if any(branch.triples != first for branch in branches[1:]):
        raise translator.error(
            "UNION of different graph patterns is not in the language (a UNION may only offer "
            "alternative FILTERs over the same triple patterns)",
            "UNION",
        )
    subject, patterns = translator.patterns(first)
    limit = limits.max_disjuncts
    try:
        constraint = disjoin(
            (
                conjoin(
                    (translator.constraint(expr) for expr in branch.filters), max_disjuncts=limit
                )
                for branch in branches
            ),
            max_disjuncts=limit,
        )
    except OverflowError as error:
        raise translator.error(str(error)) from None
    if constraint.atom_count() > limits.max_atoms:
        raise translator.error(
            f"more than {limits.max_atoms} atomic constraints in DNF (max_atoms)"
        )
    if algebra.name == "AskQuery":
        answer: tuple[str, ...] = ()
    else:
        answer = tuple(str(v) for v in algebra.PV)
    return Subscription(subject, tuple(patterns), constraint, answer)


def _is_variable(node: object) -> bool:
    return isinstance(node, RdfVariable) or (
        isinstance(node, CompValue) and node.name == "Builtin_STR"
    )


def _describe(node: object) -> str:
    if isinstance(node, CompValue):
        return node.name.removeprefix("Builtin_")
    if isinstance(node, RdfVariable):
        return f"?{node}"
    return repr(str(node))


def _keyword_of(node: object) -> str | None:
    if isinstance(node, CompValue):
        return node.name.removeprefix("Builtin_")
    return None


def _locate(text: str, keyword: str) -> str | None:
    """Line and column of the first occurrence of ``keyword`` outside strings, IRIs and comments."""
    pattern = re.compile(
        r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|<[^<>\s]*>|#[^\n]*|(' + re.escape(keyword) + ")",
        re.IGNORECASE,
    )
    for match in pattern.finditer(text):
        if match.group(1) is not None:
            offset = match.start(1)
            line = text.count("\n", 0, offset) + 1
            column = offset - (text.rfind("\n", 0, offset) + 1) + 1
            return f"line {line}, column {column}"
    return None


# -- formatting ---------------------------------------------------------------------------------


def _sparql_term(term: Term, used: set[str]) -> str:
    if isinstance(term, URI):
        short = compact(term.value)
        if short is None:
            return f"<{term.value}>"
        used.add(short.partition(":")[0])
        return short
    bare = format_term(term)
    # rdflib mis-parses signed bare numbers in triple patterns, so those get the typed form.
    if term.datatype is None or (term.kind == KIND_NUMBER and bare[0] not in '"+-'):
        return bare
    return f'"{_escape(term.lexical)}"^^{_sparql_term(URI(term.datatype), used)}'


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")


def _sparql_atom(atom: Atom, used: set[str]) -> str:
    if atom.op == "contains":
        return f"CONTAINS(?{atom.variable}, {_sparql_term(atom.value, used)})"
    return f"?{atom.variable} {atom.op} {_sparql_term(atom.value, used)}"


def format_sparql(subscription: Subscription) -> str:
    """The subscription as SPARQL text that ``parse_sparql`` reads back to an equal subscription."""
    used: set[str] = set()
    if subscription.answer:
        lines = ["SELECT " + " ".join(f"?{name}" for name in subscription.answer) + " WHERE {"]
    else:
        lines = ["ASK {"]
    for pattern in subscription.patterns:
        obj = (
            f"?{pattern.object}"
            if isinstance(pattern.object, str)
            else _sparql_term(pattern.object, used)
        )
        predicate = _sparql_term(pattern.predicate, used)
        lines.append(f"  ?{subscription.subject} {predicate} {obj} .")
    constraint = subscription.constraint
    if not constraint.is_true:
        alternatives = [
            "(" + " && ".join(_sparql_atom(atom, used) for atom in conjunction) + ")"
            for conjunction in constraint.disjuncts
        ]
        lines.append("  FILTER (" + " || ".join(alternatives) + ")")
    lines.append("}")
    prefixes = [f"PREFIX {name}: <{WELL_KNOWN[name]}>" for name in sorted(used)]
    return "\n".join(prefixes + lines)
