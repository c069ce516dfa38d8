"""Subscriptions and publications (Definitions 2 and 4).

Both are immutable and hashable. A ``Subscription`` keeps what the user wrote (variable names, answer
variables, patterns, the DNF constraint) for display and round trips, and compiles itself once into
``filters`` (see ``qel.filters``), which is what matching, covering and the indices use. A
``Publication`` keeps its triples as published and an index from predicate to object values, built
once, so that matching many subscriptions against it costs no re-parsing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from qel import domains
from qel.constraints import Constraint, conjunction_domains
from qel.errors import PublicationError, QueryError
from qel.filters import Filter, simplify
from qel.terms import KIND_URI, RDF_TYPE, URI, Literal, Term, namespace


@dataclass(frozen=True, slots=True)
class Pattern:
    """``t(S, predicate, object)``: ``object`` is a variable name (``str``) or a constant term."""

    predicate: URI
    object: str | Term

    def __post_init__(self) -> None:
        if not isinstance(self.predicate, URI):
            raise QueryError(f"a predicate must be a URI, got {self.predicate!r}")
        if isinstance(self.object, str) and not self.object:
            raise QueryError("an object variable needs a name")

    def sort_key(self) -> tuple[str, int, str]:
        obj = self.object
        return (self.predicate.value, 0 if isinstance(obj, str) else 1, repr(obj))


@dataclass(frozen=True, slots=True)
class Subscription:
    """A single-resource, multi-predicate query (Definition 2).

    ``subject`` is the subject variable's name; ``answer`` the answer variables (empty for ASK);
    ``constraint`` a DNF over the subject and object variables. Validated when built: object
    variables are distinct and differ from the subject (joins are only on the subject), every
    constrained or answer variable occurs in a pattern, the subject is only compared with URIs, and
    the constraint is satisfiable.
    """

    subject: str
    patterns: tuple[Pattern, ...]
    constraint: Constraint
    answer: tuple[str, ...] = ()
    filters: tuple[Filter, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "patterns", tuple(sorted(set(self.patterns), key=Pattern.sort_key))
        )
        self._validate()
        object.__setattr__(self, "filters", self._compile())

    def _validate(self) -> None:
        if not self.patterns:
            raise QueryError("a subscription needs at least one triple pattern")
        seen: set[str] = set()
        for pattern in self.patterns:
            if isinstance(pattern.object, str):
                if pattern.object == self.subject:
                    raise QueryError(
                        f"variable ?{self.subject} is both subject and object of "
                        f"<{pattern.predicate.value}>: only joins on the subject are allowed"
                    )
                if pattern.object in seen:
                    raise QueryError(
                        f"variable ?{pattern.object} is the object of two patterns: "
                        "joins on objects are not in the language"
                    )
                seen.add(pattern.object)
        known = seen | {self.subject}
        for name in self.constraint.variables() | set(self.answer):
            if name not in known:
                raise QueryError(f"variable ?{name} does not occur in any triple pattern")
        if len(set(self.answer)) != len(self.answer):
            raise QueryError("an answer variable is listed twice")
        for conjunction in self.constraint.disjuncts:
            for atom in conjunction:
                if atom.variable == self.subject and (
                    atom.op != "=" or atom.value.kind != KIND_URI
                ):
                    raise QueryError(
                        f"the subject ?{self.subject} can only be compared with a URI (X = <uri>), "
                        f"not with {atom.op}"
                    )

    def _compile(self) -> tuple[Filter, ...]:
        compiled: list[Filter] = []
        for conjunction in self.constraint.disjuncts:
            found = conjunction_domains(conjunction)
            if found is None:
                continue
            compiled.append(
                Filter(
                    found.get(self.subject, domains.ANY),
                    tuple(
                        (
                            pattern.predicate,
                            found.get(pattern.object, domains.ANY)
                            if isinstance(pattern.object, str)
                            else domains.point(pattern.object),
                        )
                        for pattern in self.patterns
                    ),
                )
            )
        if not compiled:
            raise QueryError("the constraint is unsatisfiable: no publication can ever match")
        return simplify(compiled)

    @property
    def key(self) -> frozenset[Filter]:
        """Equal keys mean equivalent subscriptions, whatever their variable names or layout."""
        return frozenset(self.filters)

    def variables(self) -> tuple[str, ...]:
        return (self.subject, *(p.object for p in self.patterns if isinstance(p.object, str)))

    def to_text(self) -> str:
        from qel.qel_text import format_subscription

        return format_subscription(self)

    def to_sparql(self) -> str:
        from qel.sparql import format_sparql

        return format_sparql(self)

    def __str__(self) -> str:
        return self.to_text()


def properties(subscription: Subscription) -> frozenset[URI]:
    """properties(q) of the paper: predicates, with an ``rdf:type C`` pattern counting the class C.

    An ``rdf:type`` pattern whose object is not fixed to URIs counts as ``rdf:type`` itself.
    """
    found: set[URI] = set()
    for compiled in subscription.filters:
        found |= filter_items(compiled)
    return frozenset(found)


def filter_items(compiled: Filter) -> set[URI]:
    items: set[URI] = set()
    for predicate, domain in compiled.patterns:
        if (
            predicate == RDF_TYPE
            and isinstance(domain, domains.PointDomain)
            and domain.kind == KIND_URI
        ):
            items.add(domain.term)  # type: ignore[arg-type]
        else:
            items.add(predicate)
    return items


def schemas(subscription: Subscription) -> frozenset[str]:
    """schemas(q) of the paper: the namespaces of ``properties(q)``."""
    return frozenset(namespace(item) for item in properties(subscription))


@dataclass(frozen=True, slots=True)
class Publication:
    """A set of ground triples about one subject, with its publisher and id (Definition 4)."""

    subject: URI
    statements: frozenset[tuple[URI, Term]]
    publisher: str = ""
    id: str = ""
    values: dict[URI, tuple[tuple[str, object], ...]] = field(
        init=False, compare=False, repr=False, hash=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.subject, URI):
            raise PublicationError(f"a publication's subject must be a URI, got {self.subject!r}")
        if not self.statements:
            raise PublicationError(f"the publication about <{self.subject}> has no triples")
        index: dict[URI, list[tuple[str, object]]] = {}
        for predicate, obj in self.statements:
            if not isinstance(predicate, URI) or not isinstance(obj, URI | Literal):
                raise PublicationError(f"not a ground triple: {predicate!r} {obj!r}")
            index.setdefault(predicate, []).append((obj.kind, obj.value))
        object.__setattr__(self, "values", {p: tuple(v) for p, v in index.items()})

    @classmethod
    def of(
        cls, triples: Iterable[tuple[URI, URI, Term]], *, publisher: str = "", id: str = ""
    ) -> Publication:
        """From (subject, predicate, object) triples, which must share one subject."""
        statements: set[tuple[URI, Term]] = set()
        subject: URI | None = None
        for s, p, o in triples:
            if subject is None:
                subject = s
            elif s != subject:
                raise PublicationError(
                    f"a publication is about one subject, got <{subject}> and <{s}>"
                )
            statements.add((p, o))
        if subject is None:
            raise PublicationError("a publication needs at least one triple")
        return cls(subject, frozenset(statements), publisher, id)

    @property
    def triples(self) -> frozenset[tuple[URI, URI, Term]]:
        return frozenset((self.subject, p, o) for p, o in self.statements)

    def to_text(self) -> str:
        from qel.rdf import format_publication

        return format_publication(self)
