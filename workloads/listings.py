"""A generated property-listings workload: alerts on homes for sale, where almost every subscription
is distinct, at any size, from a seed.

The digital library repeats itself (Zipf-popular authors and topics: 10^5 subscriptions have some
13,000 distinct forms), so its poset stays small. Alerts on listings do not: each buyer types their
own price ceiling, surface and date, so thresholds and ranges are drawn from wide value spaces and
nearly every subscription is new. That is the shape that stresses a super-peer's poset: long covering
chains (one price ceiling under another), ranges nested in two dimensions, DNF alternatives and a few
broad subscriptions above thousands of narrower ones.

Listings have a city (Zipf-popular), a kind (``rdf:type``), a price, a surface, a number of rooms, a
listing date, an agency and a free-text description. Subscription shapes (shares in
``subscription``): a city with a price ceiling; a price ceiling alone; a city and kind with a price
range; a city with minimum rooms and surface; words of the description with a ceiling; a city with
a DNF of two alternatives; an agency with a listing date; and, rarely, broad subscriptions (a city, a
kind, a word). Everything is a pure function of the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta

HOME = "http://homes.example.org/"
CITIES = tuple(f"home:city-{n}" for n in range(40))
KINDS = ("home:Flat", "home:House", "home:Studio", "home:Loft")
WORDS = (
    "balcony", "garden", "garage", "lift", "renovated", "quiet", "sunny", "view", "terrace",
    "parking", "fireplace", "cellar", "attic", "pool", "central", "bright", "spacious", "modern",
    "historic", "furnished", "station", "school", "park", "river", "shops", "office", "storage",
    "courtyard", "loggia", "duplex",
)  # fmt: skip
AGENCIES = 500
FIRST_DAY = date(2020, 1, 1)
DAYS = 5 * 365
PREFIXES = f"@prefix home: <{HOME}> .\n"


@dataclass
class Listings:
    """Draws listings (publications) and alerts (subscriptions) from one seeded generator."""

    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def city(self) -> str:
        # Zipf-like: the first cities are much busier, as capitals are.
        return CITIES[min(len(CITIES) - 1, int(self.rng.paretovariate(1.2)) - 1)]

    def price(self) -> int:
        """Euros, log-uniform between 50,000 and 2,000,000 (to the euro: people type their own)."""
        return round(50_000 * 40 ** self.rng.random())

    def surface(self) -> float:
        """Square metres, one decimal."""
        return round(self.rng.uniform(15, 300), 1)

    def day(self) -> date:
        return FIRST_DAY + timedelta(days=self.rng.randrange(DAYS))

    # -- publications ---------------------------------------------------------------------------
    def listing(self, number: int) -> dict[str, object]:
        """One listing's values (rendered by ``turtle``)."""
        return {
            "uri": f"home:listing-{self.seed}-{number}",
            "kind": self.rng.choice(KINDS),
            "city": self.city(),
            "price": self.price(),
            "surface": self.surface(),
            "rooms": self.rng.randint(1, 8),
            "listed": self.day().isoformat(),
            "agency": f"home:agency-{self.rng.randrange(AGENCIES)}",
            "description": " ".join(self.rng.sample(WORDS, self.rng.randint(3, 8))),
        }

    @staticmethod
    def turtle(listing: dict[str, object]) -> str:
        return (
            PREFIXES
            + f"{listing['uri']} a {listing['kind']} ;\n"
            + f"  home:city {listing['city']} ;\n"
            + f"  home:price {listing['price']} ;\n"
            + f"  home:surface {listing['surface']} ;\n"
            + f"  home:rooms {listing['rooms']} ;\n"
            + f'  home:listed "{listing["listed"]}"^^<http://www.w3.org/2001/XMLSchema#date> ;\n'
            + f"  home:agency {listing['agency']} ;\n"
            + f'  home:description "{listing["description"]}" .\n'
        )

    # -- subscriptions --------------------------------------------------------------------------
    def subscription(self) -> str:
        """An alert in the QEL text form."""
        kind = self.rng.random()
        if kind < 0.30:
            return PREFIXES + (
                f"X : t(X, home:city, {self.city()}), t(X, home:price, P), P <= {self.price()}"
            )
        if kind < 0.40:
            return PREFIXES + f"X : t(X, home:price, P), P <= {self.price()}"
        if kind < 0.55:
            low, high = sorted((self.price(), self.price()))
            return PREFIXES + (
                f"X : t(X, rdf:type, {self.rng.choice(KINDS)}), t(X, home:city, {self.city()}), "
                f"t(X, home:price, P), P >= {low}, P <= {high}"
            )
        if kind < 0.70:
            return PREFIXES + (
                f"X : t(X, home:city, {self.city()}), t(X, home:rooms, R), "
                f"t(X, home:surface, S), R >= {self.rng.randint(1, 6)}, S >= {self.surface()}"
            )
        if kind < 0.78:
            return PREFIXES + (
                f'X : t(X, home:description, T), t(X, home:price, P), T contains "{self._word()}", '
                f"P <= {self.price()}"
            )
        if kind < 0.88:
            return PREFIXES + (
                f"X : t(X, home:city, {self.city()}), t(X, home:price, P), t(X, home:surface, S), "
                f"(P <= {self.price()} ; S >= {self.surface()})"
            )
        if kind < 0.96:
            return PREFIXES + (
                f"X : t(X, home:agency, home:agency-{self.rng.randrange(AGENCIES)}), "
                f"t(X, home:listed, D), D >= {self.day().isoformat()}"
            )
        broad = self.rng.random()
        if broad < 0.4:
            return PREFIXES + f"X : t(X, home:city, {self.city()})"
        if broad < 0.7:
            return PREFIXES + f"X : t(X, rdf:type, {self.rng.choice(KINDS)})"
        return PREFIXES + f'X : t(X, home:description, T), T contains "{self._word()}"'

    def _word(self) -> str:
        return self.rng.choice(WORDS)
