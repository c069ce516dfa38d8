"""Advertisement routing indices: reference counts, the paper's Figure 4 setting, and the covering
look-up against brute force over every origin."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from indices.routing import AdvertisementIndex
from qel.advertisements import summarise
from tests.strategies import advertisements, subscriptions

EXAMPLE_1 = (
    "X : t(X, rdf:type, dc:article), t(X, dc:creator, Y), t(X, dc:date, D), "
    '(Y contains "Nejdl" ; Y contains "Koubarakis"), D = 2004'
)


def ad(obj) -> frozenset:
    return qel.parse_advertisement(obj).elements


def test_figure_4_style_indices_route_example_1_to_the_covering_super_peers():
    # SP/SP index of a super-peer that heard from four others (Examples 3-5 and a stranger).
    index = AdvertisementIndex()
    index.add("SP1", "SP1", ad({"schemas": ["dc", "lom"]}))
    index.add("SP6", "SP6", ad({"properties": ["dc:article", "dc:creator", "dc:date"]}))
    index.add(
        "SP2", "SP2", ad({"values": {"dc:creator": ["W. Nejdl"], "dc:year": [{"min": 2002}]}})
    )
    index.add("SP3", "SP3", ad({"schemas": ["foaf"]}))
    index.add("SP4", "SP4", ad({"values": {"dc:creator": ["P. Chirita"]}}))
    q = qel.parse_subscription(EXAMPLE_1)
    assert index.covering_origins(q) == {"SP1", "SP6", "SP2"}


def test_reference_counts_withdraw_only_what_no_peer_still_advertises():
    index = AdvertisementIndex()
    dc = ad({"schemas": ["dc"]})
    both = ad({"schemas": ["dc", "foaf"]})
    assert index.add("me", "alice", dc) == sorted(dc, key=repr)
    foaf_only = sorted(both - dc, key=repr)
    assert index.add("me", "bob", both) == foaf_only  # dc already stood for by alice
    assert index.remove_holder("me", "alice") == []  # bob still advertises dc
    assert index.remove_holder("me", "bob") == sorted(both, key=repr)
    assert index.origins() == []
    assert index.element_count() == 0


def test_withdrawing_an_unknown_claim_changes_nothing():
    index = AdvertisementIndex()
    index.add("me", "alice", ad({"schemas": ["dc"]}))
    assert index.remove("me", "mallory", ad({"schemas": ["dc"]})) == []
    assert index.elements("me") == ad({"schemas": ["dc"]})


@pytest.mark.slow
@settings(max_examples=200)
@given(
    st.lists(advertisements(), min_size=1, max_size=6),
    st.lists(subscriptions(repeat_predicates=True), max_size=6),
)
def test_covering_origins_equals_brute_force_over_origins(ads, queries):
    index = AdvertisementIndex()
    for number, advertisement in enumerate(ads):
        index.add(f"sp{number % 3}", f"peer{number}", advertisement.elements)
    for q in queries:
        expected = {o for o in index.origins() if qel.elements_cover(index.elements(o), q)}
        assert index.covering_origins(q) == expected
        assert all(index.covers(o, q) == (o in expected) for o in index.origins())


@settings(max_examples=100)
@given(st.lists(advertisements(), min_size=1, max_size=6), st.data())
def test_reference_counts_return_to_empty_after_every_peer_leaves(ads, data):
    index = AdvertisementIndex()
    for number, advertisement in enumerate(ads):
        index.add(f"sp{number % 2}", f"peer{number}", advertisement.elements)
    order = data.draw(st.permutations(range(len(ads))))
    withdrawn: dict[str, set] = {}
    for number in order:
        origin = f"sp{number % 2}"
        withdrawn.setdefault(origin, set()).update(index.remove_holder(origin, f"peer{number}"))
    assert index.origins() == []
    assert index.element_count() == 0
    assert index._values == {}
    assert index._broad.schemas == {} and index._broad.properties == {} and index._broad.open == {}
    for origin, elements in withdrawn.items():
        everything = set().union(*(a.elements for n, a in enumerate(ads) if f"sp{n % 2}" == origin))
        assert elements == everything


@settings(max_examples=200)
@given(advertisements(), subscriptions(), st.integers(0, 2))
def test_summaries_never_lose_a_covering_origin(advertisement, q, max_values):
    summary = summarise(advertisement.elements, max_values)
    if qel.elements_cover(advertisement.elements, q):
        assert qel.elements_cover(summary, q)
    index = AdvertisementIndex()
    index.add("sp", "sp", summary)
    assert index.covering_origins(q) == ({"sp"} if qel.elements_cover(summary, q) else set())


def test_bloom_summary_allows_every_summarised_value():
    values = {"dc:creator": [f"Author {i}" for i in range(500)]}
    elements = ad({"values": values})
    [bloom] = [e for e in summarise(elements, 10) if isinstance(e, qel.advertisements.BloomElement)]
    for i in range(500):
        assert bloom.holds("string", f"Author {i}")
    false_positives = sum(bloom.holds("string", f"Other {i}") for i in range(2000))
    assert false_positives < 100  # sized for 1%


@settings(max_examples=200)
@given(
    st.lists(advertisements(), min_size=1, max_size=4),
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 1), st.integers(0, 3), st.integers(0, 3)),
        max_size=30,
    ),
)
def test_claims_added_and_removed_in_any_order_match_a_set_per_element(ads, steps):
    """Holders are shared immutable sets, replaced on every change: the index still says what a
    mutable set per (origin, element) says, and returns exactly the elements that appear and
    disappear."""
    index = AdvertisementIndex()
    oracle: dict[tuple[str, object], set[str]] = {}
    for add, origin_number, holder_number, ad_number in steps:
        origin, holder = f"sp{origin_number}", f"h{holder_number}"
        elements = ads[ad_number % len(ads)].elements
        if add:
            fresh = index.add(origin, holder, elements)
            expected = {e for e in elements if not oracle.get((origin, e))}
            for element in elements:
                oracle.setdefault((origin, element), set()).add(holder)
            assert set(fresh) == expected
        else:
            gone = index.remove(origin, holder, elements)
            expected = {e for e in elements if oracle.get((origin, e)) == {holder}}
            for element in elements:
                oracle.get((origin, element), set()).discard(holder)
            assert set(gone) == expected
        for name in ("sp0", "sp1"):
            held = {e: hs for (o, e), hs in oracle.items() if o == name and hs}
            assert index.elements(name) == frozenset(held)
            assert index.holders(name) == frozenset().union(*held.values())
            for number in range(4):
                mine = {e for e, hs in held.items() if f"h{number}" in hs}
                assert index.elements_of(name, f"h{number}") == mine
