"""Advertisements: parsing, the allow rule, covering soundness (the "may" direction) and monotonicity."""

import itertools

import pytest
from hypothesis import assume, given, settings

import qel
from qel import URI, AdvertisementError
from tests.strategies import advertisements, small_publications, subscriptions, universe

DC = "http://purl.org/dc/elements/1.1/"

ISSUE_EXAMPLE = {
    "prefixes": {"dc": "http://purl.org/dc/elements/1.1/"},
    "schemas": ["dc"],
    "properties": ["dc:creator", "dc:article"],
    "values": {
        "dc:creator": ["W. Nejdl", "P. Chirita"],
        "dc:year": [{"min": 2002}],
        "dc:date": [{"min": "2004-01-01", "max": "2004-12-31", "type": "date"}],
        "dc:type": [{"uri": "dc:article"}],
    },
}


def pub(turtle: str) -> qel.Publication:
    [publication] = qel.parse_publications(
        "@prefix dc: <http://purl.org/dc/elements/1.1/> . @prefix ex: <http://example.org/> .\n"
        + turtle
    )
    return publication


def test_the_documented_shape_parses_and_round_trips():
    ad = qel.parse_advertisement(ISSUE_EXAMPLE)
    assert ad.schemas == {DC}
    assert ad.properties == {URI(DC + "creator"), URI(DC + "article")}
    assert {p for p, _ in ad.values} == {URI(DC + n) for n in ("creator", "year", "date", "type")}
    assert qel.parse_advertisement(ad.to_text()) == ad
    assert qel.parse_advertisement(ad.to_text()).elements == ad.elements


@given(advertisements())
def test_text_round_trip(ad):
    assert qel.parse_advertisement(ad.to_text()) == ad


def test_the_most_specific_level_wins_for_a_property():
    ad = qel.parse_advertisement(ISSUE_EXAMPLE)
    assert qel.advertisement_allows(ad, pub('ex:a dc:creator "W. Nejdl" ; dc:title "T" .'))
    assert not qel.advertisement_allows(ad, pub('ex:a dc:creator "Someone Else" .'))
    assert qel.advertisement_allows(
        ad, pub('ex:a dc:date "2004-05-01"^^<http://www.w3.org/2001/XMLSchema#date> .')
    )
    assert not qel.advertisement_allows(ad, pub("ex:a dc:year 1999 ."))
    assert qel.advertisement_allows(ad, pub("ex:a a dc:book ."))  # schema dc covers dc classes
    assert not qel.advertisement_allows(ad, pub('ex:a <http://xmlns.com/foaf/0.1/name> "x" .'))


def test_property_value_only_advertisements_leave_other_properties_open():
    ad = qel.parse_advertisement({"values": {"dc:creator": ["Nejdl"]}})
    assert qel.advertisement_allows(ad, pub('ex:a dc:creator "Nejdl" ; dc:title "anything" .'))
    assert not qel.advertisement_allows(ad, pub('ex:a dc:creator "Koubarakis" .'))


def test_classes_at_the_property_level_and_rdf_type():
    ad = qel.parse_advertisement({"properties": ["dc:article", "dc:creator"]})
    assert qel.advertisement_allows(ad, pub('ex:a a dc:article ; dc:creator "x" .'))
    assert not qel.advertisement_allows(ad, pub("ex:a a dc:book ."))
    q_type = qel.parse_subscription("X : t(X, rdf:type, C)")
    assert qel.advertisement_covers(ad, q_type)
    q_book = qel.parse_subscription("X : t(X, rdf:type, dc:book)")
    assert not qel.advertisement_covers(ad, q_book)
    every_class = qel.parse_advertisement({"properties": ["rdf:type"]})
    assert qel.advertisement_covers(every_class, q_book)


def test_union_of_elements_never_narrows_another_peers_advertisement():
    restricted = qel.parse_advertisement({"schemas": ["dc"], "values": {"dc:creator": ["Nejdl"]}})
    broad = qel.parse_advertisement({"schemas": ["dc"]})
    q = qel.parse_subscription('X : t(X, dc:creator, Y), Y = "Koubarakis"')
    assert not qel.advertisement_covers(restricted, q)
    assert qel.advertisement_covers(broad, q)
    assert qel.elements_cover(restricted.elements | broad.elements, q)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"schema": ["dc"]}, "unknown advertisement key(s) ['schema']"),
        ({"schemas": "dc"}, '"schemas" must be a list'),
        ({"schemas": ["nope"]}, "unknown schema prefix 'nope'"),
        ({"properties": ["nope:x"]}, "cannot resolve the name 'nope:x'"),
        ({"values": {"dc:creator": "Nejdl"}}, 'the values of "dc:creator" must be a list'),
        ({"values": {"dc:year": [{"min": 2005, "max": 2000}]}}, "an empty range (min > max)"),
        ({"values": {"dc:date": [{"min": "2004-13-01", "type": "date"}]}}, "is not a valid"),
        ({"values": {"dc:date": [{"min": 1, "type": "week"}]}}, "unknown range type 'week'"),
        ({"values": {"dc:x": [{"foo": 1}]}}, "unrecognised value {'foo': 1}"),
        ("{not json", "not valid JSON"),
        ([1, 2], "an advertisement is a JSON object"),
    ],
)
def test_advertisement_errors(obj, message):
    with pytest.raises(AdvertisementError) as caught:
        qel.parse_advertisement(obj)
    assert message in str(caught.value)


def test_advertisement_size_limit():
    with pytest.raises(AdvertisementError, match="max_advertisement_elements"):
        qel.parse_advertisement(
            {"values": {"dc:creator": [str(i) for i in range(20)]}},
            limits=qel.Limits(max_advertisement_elements=10),
        )


def allowed_matching(ad, subscription):
    """A publication the advertisement allows that matches, searched in the oracle universe."""
    choices = universe(subscription)
    for compiled in subscription.filters:
        predicates = sorted({p for p, _ in compiled.patterns}, key=lambda u: u.value)
        for publication in small_publications(predicates, choices):
            if qel.advertisement_allows(ad, publication) and qel.matches(subscription, publication):
                return publication
    return None


@pytest.mark.slow
@settings(max_examples=300)
@given(advertisements(), subscriptions())
def test_advertisement_covering_is_sound_in_the_may_direction(ad, subscription):
    if allowed_matching(ad, subscription) is not None:
        assert qel.advertisement_covers(ad, subscription)


@pytest.mark.slow
@settings(max_examples=300)
@given(advertisements(), subscriptions(), subscriptions())
def test_advertisement_covering_is_monotone(ad, general, specific):
    assume(qel.covers(general, specific))
    if qel.advertisement_covers(ad, specific):
        assert qel.advertisement_covers(ad, general)


@settings(max_examples=200)
@given(advertisements(), advertisements(), subscriptions())
def test_covering_over_a_union_of_elements_includes_each_advertisement(first, second, q):
    union = first.elements | second.elements
    for ad in (first, second):
        if qel.advertisement_covers(ad, q):
            assert qel.elements_cover(union, q)


def test_exhaustive_allow_rule_agrees_with_elements_for_small_cases():
    # Every combination of one schema / property / value level over two properties.
    levels = [
        {},
        {"schemas": ["dc"]},
        {"properties": ["dc:creator"]},
        {"values": {"dc:creator": ["a"]}},
        {"schemas": ["dc"], "values": {"dc:creator": ["a"]}},
        {"properties": ["dc:title"], "values": {"dc:creator": ["a"]}},
    ]
    documents = [
        'ex:s dc:creator "a" .',
        'ex:s dc:creator "b" .',
        'ex:s dc:title "a" .',
        'ex:s dc:creator "a" ; dc:title "t" .',
    ]
    expected = {
        (0, 0): False,
        (0, 1): False,
        (0, 2): False,
        (0, 3): False,
        (1, 0): True,
        (1, 1): True,
        (1, 2): True,
        (1, 3): True,
        (2, 0): True,
        (2, 1): True,
        (2, 2): False,
        (2, 3): False,
        (3, 0): True,
        (3, 1): False,
        (3, 2): True,
        (3, 3): True,
        (4, 0): True,
        (4, 1): False,
        (4, 2): True,
        (4, 3): True,
        (5, 0): True,
        (5, 1): False,
        (5, 2): True,
        (5, 3): True,
    }
    for (i, level), (j, document) in itertools.product(enumerate(levels), enumerate(documents)):
        ad = qel.parse_advertisement(level)
        assert qel.advertisement_allows(ad, pub(document)) == expected[i, j], (level, document)
