"""``ResourceVersions.next_expiry`` is asked after every input: it keeps a heap instead of
scanning every resource, and must still give the earliest expiry of a resource not retracted."""

import random

import qel
from superpeer.versions import ResourceVersions

DC = "http://purl.org/dc/elements/1.1/"


def publication(resource: str, text: str) -> qel.Publication:
    return qel.Publication(
        qel.URI(f"http://example.org/{resource}"),
        frozenset({(qel.URI(DC + "title"), qel.Literal(text))}),
        "owner",
        resource,
    )


def scanned(table: ResourceVersions, owners: list[str], resources: list[str]) -> float | None:
    expiries = [
        held.expires
        for owner in owners
        for resource in resources
        if (held := table.current(owner, resource)) is not None
        and held.expires is not None
        and not held.retracted
    ]
    return min(expiries, default=None)


def test_the_earliest_expiry_follows_updates_retractions_expiry_and_departures():
    chance = random.Random(7)
    owners, resources = ["a", "b"], [f"r{k}" for k in range(6)]
    table = ResourceVersions()
    now = 0.0
    for step in range(3000):
        owner, resource = chance.choice(owners), chance.choice(resources)
        held = table.current(owner, resource)
        expires = chance.choice([None, now + chance.uniform(1, 50)])
        action = chance.random()
        if held is None or not held.live(now):
            table.publish(owner, publication(resource, f"v{step}"), "publish", now, expires)
        elif action < 0.5:
            table.publish(owner, publication(resource, f"v{step}"), "update", now, expires)
        elif action < 0.8:
            table.withdraw(owner, resource, now)
        elif action < 0.9:
            now += chance.uniform(0, 10)
            table.expire(now)
        else:
            table.forget(owner)
        assert table.next_expiry() == scanned(table, owners, resources), step
