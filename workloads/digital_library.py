"""A generated digital-library workload: the design paper's domain, at any size, from a seed.

Documents are articles, books, theses and reports with Dublin Core metadata (``dc:creator``,
``dc:title``, ``dc:date`` as a year, ``dc:subject`` as a topic URI, ``rdf:type``). Author and topic
popularity follow a Zipf law, so some subscriptions are popular and many publications share values,
as in a real library. A publisher stands for an institution: given a ``group``, a document's authors
come from that group's own authors (one in ten from anywhere) and its topics from the group's three
favourite topics, so property/value advertisements say something about who publishes what. Subscriptions mix the language's constructs: equality, ranges, ``contains``
and DNF, and a share of them are deliberately generalised copies of others, so that covering
relations exist for the posets to exploit. Everything is a pure function of the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

DC = "http://purl.org/dc/elements/1.1/"
LIB = "http://library.example.org/"
CLASSES = ("dc:article", "dc:book", "lib:thesis", "lib:report")
FIRST_NAMES = ("W.", "M.", "P.", "S.", "A.", "C.", "E.", "J.", "K.", "L.", "R.", "T.")
SURNAMES = (
    "Nejdl", "Koubarakis", "Chirita", "Idreos", "Liarou", "Tryfonopoulos", "Carzaniga",
    "Rosenblum", "Wolf", "Schlosser", "Sintek", "Decker", "Kemper", "Kossmann", "Keidl",
    "Kreutz", "Hendler", "Regli", "Kopena", "Loo", "Fabret", "Jacobsen", "Shasha", "Franklin",
)  # fmt: skip
WORDS = (
    "semantic", "publish", "subscribe", "networks", "peer", "super", "routing", "indices",
    "queries", "continuous", "distributed", "metadata", "hash", "tables", "filtering", "xml",
    "rdf", "ontologies", "learning", "digital", "libraries", "event", "notification", "service",
    "scalable", "efficient", "algorithms", "data", "structures", "streams", "information", "alert",
)  # fmt: skip
TOPICS = tuple(f"lib:topic-{name}" for name in (
    "p2p", "pubsub", "databases", "semweb", "ir", "elearning", "networking", "xml", "dht",
    "filtering", "reasoning", "security", "systems", "theory", "hci", "ml",
))  # fmt: skip
PREFIXES = f"@prefix dc: <{DC}> .\n@prefix lib: <{LIB}> .\n"
QEL_PREFIXES = f"@prefix lib: <{LIB}> .\n"


@dataclass
class DigitalLibrary:
    """Draws authors, documents, subscriptions and advertisements from one seeded generator."""

    seed: int = 0
    authors: int = 400
    first_year: int = 1990
    last_year: int = 2025
    rng: random.Random = field(init=False)
    names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.names = [
            f"{FIRST_NAMES[i % len(FIRST_NAMES)]} {SURNAMES[i % len(SURNAMES)]}"
            + ("" if i < len(SURNAMES) else f" {i // len(SURNAMES)}")
            for i in range(self.authors)
        ]

    def _zipf(self, count: int, exponent: float = 1.1) -> int:
        """An index in [0, count), small indices far more likely (rank-frequency Zipf)."""
        weights = _zipf_weights(count, exponent)
        return self.rng.choices(range(count), cum_weights=weights)[0]

    def author(self) -> str:
        return self.names[self._zipf(len(self.names))]

    def topic(self) -> str:
        return TOPICS[self._zipf(len(TOPICS))]

    def year(self) -> int:
        # Recent years are busier.
        span = self.last_year - self.first_year
        return self.last_year - min(span, int(self.rng.expovariate(1 / 6)))

    # -- publications ---------------------------------------------------------------------------
    def group_author(self, group: int, groups: int) -> str:
        members = range(group % groups, len(self.names), groups)
        if self.rng.random() < 0.1 or not members:
            return self.author()
        return self.names[members[self._zipf(len(members))]]

    def group_topic(self, group: int) -> str:
        favourites = [TOPICS[(group * 7 + k * 5) % len(TOPICS)] for k in range(3)]
        return favourites[self._zipf(3)]

    def document(
        self, number: int, group: int | None = None, groups: int = 50
    ) -> dict[str, object]:
        """One document's metadata as plain values (used to render Turtle and to advertise)."""
        words = self.rng.sample(WORDS, self.rng.randint(3, 6))
        if group is None:
            creators = {self.author() for _ in range(self.rng.randint(1, 3))}
            topics = {self.topic() for _ in range(self.rng.randint(1, 2))}
        else:
            creators = {self.group_author(group, groups) for _ in range(self.rng.randint(1, 3))}
            topics = {self.group_topic(group) for _ in range(self.rng.randint(1, 2))}
        return {
            "uri": f"lib:doc-{self.seed}-{number}",
            "class": self.rng.choice(CLASSES),
            "creators": sorted(creators),
            "title": " ".join(words).capitalize(),
            "year": self.year(),
            "topics": sorted(topics),
        }

    @staticmethod
    def turtle(document: dict[str, object]) -> str:
        creators = ", ".join(_quote(c) for c in document["creators"])  # type: ignore[attr-defined]
        topics = ", ".join(document["topics"])  # type: ignore[arg-type]
        return (
            PREFIXES
            + f"{document['uri']} a {document['class']} ;\n"
            + f"  dc:creator {creators} ;\n"
            + f"  dc:title {_quote(document['title'])} ;\n"  # type: ignore[arg-type]
            + f"  dc:date {document['year']} ;\n"
            + f"  dc:subject {topics} .\n"
        )

    # -- subscriptions --------------------------------------------------------------------------
    def subscription(self) -> str:
        """A subscription in the QEL text form; about one in four generalises another shape."""
        kind = self.rng.random()
        cls = self.rng.choice(CLASSES)
        if kind < 0.25:
            return QEL_PREFIXES + (
                f"X : t(X, rdf:type, {cls}), t(X, dc:creator, Y), Y = {_quote(self.author())}"
            )
        if kind < 0.45:
            surname = self.author().split(" ")[1]
            low = self.year() - self.rng.randint(0, 5)
            return QEL_PREFIXES + (
                f'X : t(X, dc:creator, Y), t(X, dc:date, D), Y contains "{surname}", D >= {low}'
            )
        if kind < 0.6:
            a, b = self.author().split(" ")[1], self.author().split(" ")[1]
            return QEL_PREFIXES + (
                f"X : t(X, rdf:type, {cls}), t(X, dc:creator, Y), t(X, dc:date, D), "
                f'(Y contains "{a}" ; Y contains "{b}"), D = {self.year()}'
            )
        if kind < 0.75:
            low = self.year() - self.rng.randint(0, 10)
            high = low + self.rng.randint(0, 8)
            return QEL_PREFIXES + (
                f"X : t(X, dc:subject, {self.topic()}), t(X, dc:date, D), D >= {low}, D <= {high}"
            )
        if kind < 0.85:
            word = self.rng.choice(WORDS)
            return QEL_PREFIXES + f'X : t(X, dc:title, T), T contains "{word}"'
        if kind < 0.93:
            return QEL_PREFIXES + f"X : t(X, dc:subject, {self.topic()})"
        # Broad, covering shapes: a whole class, or an author at any time.
        if self.rng.random() < 0.5:
            return QEL_PREFIXES + f"X : t(X, rdf:type, {cls})"
        surname = self.author().split(" ")[1]
        return QEL_PREFIXES + f'X : t(X, dc:creator, Y), Y contains "{surname}"'

    # -- advertisements ------------------------------------------------------------------------
    def advertisement(self, documents: list[dict[str, object]]) -> dict[str, object]:
        """What a publisher of ``documents`` advertises, always allowing every one of them: mostly
        the property/value level (its own authors and years, as a library would), sometimes only
        the properties it uses (20%) or only its schemas (10%)."""
        level = self.rng.random()
        prefixes = {"dc": DC, "lib": LIB}
        if level < 0.1 or not documents:
            return {"prefixes": prefixes, "schemas": ["dc", "lib", "rdf"]}
        if level < 0.3:
            classes = sorted({str(d["class"]) for d in documents})
            return {
                "prefixes": prefixes,
                "properties": ["dc:creator", "dc:title", "dc:date", "dc:subject", *classes],
            }
        creators = sorted({c for d in documents for c in d["creators"]})  # type: ignore[attr-defined]
        years = [int(d["year"]) for d in documents]  # type: ignore[call-overload]
        classes = sorted({str(d["class"]) for d in documents})
        topics = sorted({t for d in documents for t in d["topics"]})  # type: ignore[attr-defined]
        return {
            "prefixes": prefixes,
            "values": {
                "dc:creator": creators,
                "dc:date": [{"min": min(years), "max": max(years)}],
                "rdf:type": [{"uri": c} for c in classes],
                "dc:subject": [{"uri": t} for t in topics],
            },
        }


_WEIGHTS: dict[tuple[int, float], list[float]] = {}


def _zipf_weights(count: int, exponent: float) -> list[float]:
    key = (count, exponent)
    if key not in _WEIGHTS:
        total = 0.0
        cumulative = []
        for rank in range(1, count + 1):
            total += 1 / rank**exponent
            cumulative.append(total)
        _WEIGHTS[key] = cumulative
    return _WEIGHTS[key]


def _quote(text: object) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'
