"""A generated workload of every shape of subscription the language has (issue 34), at any size,
from a seed: alerts on a market of second-hand vehicles.

``workloads.listings`` is mostly families of bounds (one city, one kind, a price ceiling), which
``poset.families`` compares by their bounds; ``workloads.digital_library`` repeats itself. This one
draws each subscription from a grammar of the whole language, so that no single shortcut carries
a poset through it:

* fixed parts, each present or not: a class (``t(X, rdf:type, C)``, or a variable with a DNF of
  classes), a maker, a fuel, a seller (URIs), one or two features (a predicate repeated in one
  subscription), a boolean, a typed literal of a datatype of its own (``"..."^^car:vin``), the
  subject itself (``X = car:vehicle-17``);
* one to four constrained properties among integers (price, mileage, power, doors), decimals
  (engine, consumption; a constant is sometimes written as a double), dates (``xsd:date``) and
  date-times (``xsd:dateTime``, with time zones), strings (``contains`` one or two words on a
  title or a description; ``=`` on a colour, sometimes language-tagged); every operator
  (``= != < <= > >= contains``), ceilings, floors and two-sided ranges, open or closed;
* a constraint in DNF of 1 to 4 alternatives (before ``!=`` is rewritten), over those properties,
  besides the atoms common to every alternative;
* a share (``broad``) of broad subscriptions that cover many (a class, a maker, a fuel, a common
  word, a loose ceiling), and a share (``repeats``) of exact repeats of earlier subscriptions (a
  popular alert typed again), drawn from the first ``POOL`` ones.

Publications (``vehicle``, rendered by ``turtle``) draw their values from the same distributions
(a Zipf-popular maker, log-uniform prices, some optional properties, several features), so that a
realistic share of subscriptions match each one. Everything is a pure function of the seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone

CAR = "http://cars.example.org/"
PREFIXES = f"@prefix car: <{CAR}> .\n"
TURTLE_PREFIXES = PREFIXES + "@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .\n"
CLASSES = tuple(f"car:{name}" for name in (
    "Saloon", "Estate", "Hatchback", "Coupe", "Van", "Pickup", "Motorbike", "Camper",
))  # fmt: skip
MAKERS = 60
SELLERS = 2_000
FUELS = tuple(f"car:fuel-{name}" for name in ("petrol", "diesel", "electric", "hybrid", "gas"))
FEATURES = tuple(f"car:feature-{name}" for name in (
    "sunroof", "towbar", "navigation", "leather", "heated-seats", "cruise", "camera", "xenon",
    "alloys", "bluetooth", "isofix", "roof-rack",
))  # fmt: skip
COLOURS = ("red", "blue", "black", "white", "silver", "grey", "green", "yellow", "brown", "orange")
WORDS = (
    "clean", "rust", "service", "history", "owner", "garage", "kept", "warranty", "new", "tyres",
    "belt", "clutch", "dent", "scratch", "mot", "tax", "economical", "family", "sport", "classic",
    "import", "manual", "automatic", "diesel", "low", "miles", "full", "spare", "keys", "project",
)  # fmt: skip
VINS = 5_000
FIRST_DAY = date(2000, 1, 1)
DAYS = 26 * 365
LISTING_START = datetime(2025, 1, 1, tzinfo=UTC)
LISTING_SECONDS = 365 * 86_400
ZONES = ("Z", "+02:00", "-05:00")
POOL = 1_000
"""Exact repeats are drawn from the first this many subscriptions."""
ALTERNATIVES = (1, 1, 1, 1, 1, 2, 2, 2, 3, 4)
"""How many alternatives a constraint's DNF has, drawn uniformly from this tuple."""


@dataclass
class Shapes:
    """Draws vehicles (publications) and alerts (subscriptions) from one seeded generator."""

    seed: int = 0
    repeats: float = 0.10
    broad: float = 0.06
    rng: random.Random = field(init=False)
    pool: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # -- values, shared by publications and subscriptions ---------------------------------------
    def maker(self) -> str:
        return f"car:maker-{min(MAKERS, int(self.rng.paretovariate(1.1))) - 1}"

    def price(self) -> int:
        """Euros, log-uniform between 500 and 200,000."""
        return round(500 * 400 ** self.rng.random())

    def mileage(self) -> int:
        return self.rng.randrange(400_000)

    def power(self) -> int:
        return self.rng.randint(40, 400)

    def doors(self) -> int:
        return self.rng.randint(2, 5)

    def engine(self) -> str:
        """Litres, an ``xsd:decimal`` with one decimal place."""
        return f"{self.rng.randint(8, 60) / 10:.1f}"

    def consumption(self) -> str:
        """Litres per 100 km, an ``xsd:decimal`` with two decimal places."""
        hundredths = self.rng.randint(200, 2000)
        return f"{hundredths // 100}.{hundredths % 100:02d}"

    def registered(self) -> str:
        return (FIRST_DAY + timedelta(days=self.rng.randrange(DAYS))).isoformat()

    def listed(self) -> str:
        """An ``xsd:dateTime`` in one of ``ZONES``."""
        instant = LISTING_START + timedelta(seconds=self.rng.randrange(LISTING_SECONDS))
        zone = self.rng.choice(ZONES)
        if zone != "Z":
            hours = int(zone[:3])
            instant = instant.astimezone(timezone(timedelta(hours=hours)))
        return instant.strftime("%Y-%m-%dT%H:%M:%S") + zone

    def words(self, low: int, high: int) -> list[str]:
        return self.rng.sample(WORDS, self.rng.randint(low, high))

    # -- publications ---------------------------------------------------------------------------
    def vehicle(self, number: int) -> dict[str, object]:
        """One vehicle's values (rendered by ``turtle``); some properties are optional, some
        repeat (classes, features)."""
        rng = self.rng
        classes = {rng.choice(CLASSES) for _ in range(1 if rng.random() < 0.8 else 2)}
        return {
            "uri": f"car:vehicle-{number}",
            "classes": sorted(classes),
            "maker": self.maker(),
            "fuel": rng.choice(FUELS),
            "seller": f"car:seller-{rng.randrange(SELLERS)}",
            "features": sorted(rng.sample(FEATURES, rng.randint(0, 4))),
            "certified": rng.random() < 0.5,
            "vin": f"VIN{rng.randrange(VINS):05d}",
            "price": self.price(),
            "mileage": self.mileage(),
            "power": self.power(),
            "doors": self.doors(),
            "engine": self.engine(),
            "consumption": self.consumption() if rng.random() < 0.8 else None,
            "registered": self.registered(),
            "listed": self.listed(),
            "title": " ".join(self.words(2, 4)),
            "description": " ".join(self.words(5, 10)) if rng.random() < 0.9 else None,
            "colour": rng.choice(COLOURS),
            "colour_lang": rng.random() < 0.3,
        }

    @staticmethod
    def turtle(vehicle: dict[str, object]) -> str:
        lines = [
            f"{vehicle['uri']} a {', '.join(vehicle['classes'])}",  # type: ignore[arg-type]
            f"car:maker {vehicle['maker']}",
            f"car:fuel {vehicle['fuel']}",
            f"car:seller {vehicle['seller']}",
            f"car:certified {'true' if vehicle['certified'] else 'false'}",
            f'car:vin "{vehicle["vin"]}"^^car:vin',
            f"car:price {vehicle['price']}",
            f"car:mileage {vehicle['mileage']}",
            f"car:power {vehicle['power']}",
            f"car:doors {vehicle['doors']}",
            f"car:engine {vehicle['engine']}",
            f'car:registered "{vehicle["registered"]}"^^xsd:date',
            f'car:listed "{vehicle["listed"]}"^^xsd:dateTime',
            f'car:title "{vehicle["title"]}"',
            f'car:colour "{vehicle["colour"]}"' + ("@en" if vehicle["colour_lang"] else ""),
        ]
        if vehicle["features"]:
            lines.append(f"car:feature {', '.join(vehicle['features'])}")  # type: ignore[arg-type]
        if vehicle["consumption"] is not None:
            lines.append(f"car:consumption {vehicle['consumption']}")
        if vehicle["description"] is not None:
            lines.append(f'car:description "{vehicle["description"]}"')
        return TURTLE_PREFIXES + " ;\n  ".join(lines) + " .\n"

    # -- subscriptions --------------------------------------------------------------------------
    def subscription(self) -> str:
        """An alert in the QEL text form: a repeat, a broad one or a composed one."""
        if self.pool and self.rng.random() < self.repeats:
            return self.rng.choice(self.pool)
        text = PREFIXES + (self._broad() if self.rng.random() < self.broad else self._composed())
        if len(self.pool) < POOL:
            self.pool.append(text)
        return text

    def _broad(self) -> str:
        rng = self.rng
        kind = rng.randrange(5)
        if kind == 0:
            return f"X : t(X, rdf:type, {rng.choice(CLASSES)})"
        if kind == 1:
            return f"X : t(X, car:maker, {self.maker()})"
        if kind == 2:
            return f"X : t(X, car:fuel, {rng.choice(FUELS)})"
        if kind == 3:
            return f'X : t(X, car:title, T), T contains "{rng.choice(WORDS[:8])}"'
        return f"X : t(X, car:price, P), P <= {rng.choice((50_000, 100_000, 150_000))}"

    def _composed(self) -> str:
        rng = self.rng
        patterns: list[str] = []
        common: list[str] = []
        if rng.random() < 0.45:
            if rng.random() < 0.8:
                patterns.append(f"t(X, rdf:type, {rng.choice(CLASSES)})")
            else:
                patterns.append("t(X, rdf:type, C)")
                chosen = rng.sample(CLASSES, rng.randint(2, 3))
                common.append("(" + " ; ".join(f"C = {c}" for c in chosen) + ")")
        if rng.random() < 0.35:
            if rng.random() < 0.8:
                patterns.append(f"t(X, car:maker, {self.maker()})")
            else:
                patterns.append("t(X, car:maker, M)")
                common.append(f"M = {self.maker()}")
        if rng.random() < 0.10:
            patterns.append(f"t(X, car:fuel, {rng.choice(FUELS)})")
        if rng.random() < 0.05:
            patterns.append(f"t(X, car:seller, car:seller-{rng.randrange(SELLERS)})")
        if rng.random() < 0.08:
            for feature in rng.sample(FEATURES, rng.randint(1, 2)):
                patterns.append(f"t(X, car:feature, {feature})")
        if rng.random() < 0.05:
            patterns.append("t(X, car:certified, true)")
        if rng.random() < 0.02:
            patterns.append(f't(X, car:vin, "VIN{rng.randrange(VINS):05d}"^^car:vin)')
        if rng.random() < 0.03:
            common.append(f"X = car:vehicle-{rng.randrange(100_000)}")
        chosen = rng.sample(CONSTRAINED, rng.randint(1 if patterns else 2, 4))
        variables = []
        for number, (predicate, _) in enumerate(chosen):
            variables.append(f"V{number}")
            patterns.append(f"t(X, car:{predicate}, V{number})")
        count = rng.choice(ALTERNATIVES)
        if count == 1:
            for variable, (_, atoms) in zip(variables, chosen, strict=True):
                common.extend(atoms(self, variable, True))
        else:
            free = list(range(len(chosen)))
            if len(free) > 1 and rng.random() < 0.5:  # one constrained outside the alternatives
                shared = free.pop(rng.randrange(len(free)))
                common.extend(chosen[shared][1](self, variables[shared], False))
            alternatives = []
            for _ in range(count):
                picked = rng.sample(free, rng.randint(1, min(2, len(free))))
                atoms = [a for at in picked for a in chosen[at][1](self, variables[at], False)]
                alternatives.append(", ".join(atoms))
            common.append("(" + " ; ".join(alternatives) + ")")
        return "X : " + ", ".join(patterns + common)

    # -- atoms ----------------------------------------------------------------------------------
    def _bounds(self, variable: str, draw: Callable[[], str], unequal: bool) -> list[str]:
        """A ceiling, a floor, a two-sided range (each end open or closed), an equality, or
        (when ``unequal``) ``!=``; the constants drawn as the publications' values are."""
        rng = self.rng
        shape = rng.random()
        if shape < 0.35:
            return [f"{variable} {rng.choice(('<=', '<=', '<'))} {draw()}"]
        if shape < 0.6:
            return [f"{variable} {rng.choice(('>=', '>=', '>'))} {draw()}"]
        if shape < 0.9:
            low, high = sorted((draw(), draw()), key=_order)
            if _order(low) == _order(high):  # one point: closed at both ends, written once
                # (``8.56E0`` and ``8.56`` order alike here, but the double is not the decimal:
                # ``>= 8.56E0, <= 8.56`` is empty, and the parser refuses it: 1 in 271,606)
                return [f"{variable} >= {low}", f"{variable} <= {low}"]
            return [
                f"{variable} {rng.choice(('>=', '>'))} {low}",
                f"{variable} {rng.choice(('<=', '<'))} {high}",
            ]
        if shape < 0.95 or not unequal:
            return [f"{variable} = {draw()}"]
        return [f"{variable} != {draw()}"]

    def _integer(self, draw: Callable[[], int], rounding: int) -> Callable[[], str]:
        def drawn() -> str:
            value = draw()
            if rounding > 1 and self.rng.random() < 0.4:  # people type round figures
                value = max(rounding, round(value / rounding) * rounding)
            return str(value)

        return drawn

    def _price(self, variable: str, unequal: bool) -> list[str]:
        return self._bounds(variable, self._integer(self.price, 1_000), unequal)

    def _mileage(self, variable: str, unequal: bool) -> list[str]:
        return self._bounds(variable, self._integer(self.mileage, 10_000), unequal)

    def _power(self, variable: str, unequal: bool) -> list[str]:
        return self._bounds(variable, self._integer(self.power, 10), unequal)

    def _doors(self, variable: str, unequal: bool) -> list[str]:
        return self._bounds(variable, self._integer(self.doors, 1), unequal)

    def _engine(self, variable: str, unequal: bool) -> list[str]:
        return self._bounds(variable, self.engine, unequal)

    def _consumption(self, variable: str, unequal: bool) -> list[str]:
        def drawn() -> str:
            text = self.consumption()
            return text + "E0" if self.rng.random() < 0.2 else text  # an xsd:double

        return self._bounds(variable, drawn, unequal)

    def _registered(self, variable: str, unequal: bool) -> list[str]:
        return self._bounds(variable, self.registered, unequal)

    def _listed(self, variable: str, unequal: bool) -> list[str]:
        return self._bounds(variable, self.listed, unequal)

    def _title(self, variable: str, unequal: bool) -> list[str]:
        return [f'{variable} contains "{word}"' for word in self.words(1, 2)]

    def _description(self, variable: str, unequal: bool) -> list[str]:
        return [f'{variable} contains "{word}"' for word in self.words(1, 2)]

    def _colour(self, variable: str, unequal: bool) -> list[str]:
        tag = "@en" if self.rng.random() < 0.3 else ""
        return [f'{variable} = "{self.rng.choice(COLOURS)}"{tag}']


Atoms = Callable[[Shapes, str, bool], list[str]]

CONSTRAINED: tuple[tuple[str, Atoms], ...] = (
    ("price", Shapes._price),
    ("price", Shapes._price),
    ("mileage", Shapes._mileage),
    ("power", Shapes._power),
    ("doors", Shapes._doors),
    ("engine", Shapes._engine),
    ("consumption", Shapes._consumption),
    ("registered", Shapes._registered),
    ("listed", Shapes._listed),
    ("title", Shapes._title),
    ("description", Shapes._description),
    ("colour", Shapes._colour),
)
"""The properties a subscription constrains through a variable, with how their atoms are drawn
(price twice: the most asked). Drawn without replacement, except that price may come twice:
then one subscription has two patterns on ``car:price``, each with its own variable."""


def _order(constant: str) -> float:
    """Sort key of two constants of one property, as the language compares them."""
    if "T" in constant:
        return datetime.fromisoformat(constant.replace("Z", "+00:00")).timestamp()
    if constant.count("-") == 2:
        return date.fromisoformat(constant).toordinal()
    return float(constant)
