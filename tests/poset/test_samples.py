"""What the poset keeps of a witness (``poset.samples``) matches as the witness does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from poset.samples import Sample, compact
from qel.matching import filter_matches
from qel.model import Publication
from qel.terms import URI, Literal
from tests.strategies import publications, subscriptions


@settings(max_examples=200, deadline=None)
@given(
    st.lists(publications(), min_size=1, max_size=6),
    st.lists(subscriptions(max_patterns=3, repeat_predicates=True), min_size=1, max_size=4),
)
def test_a_sample_matches_as_its_publication_does(samples, filters_of):
    """A sample made from what a node keeps of a witness (``compact``) has the publication's
    subject and objects by predicate, and matches every filter as the publication does."""
    kept = [Sample(compact(publication)) for publication in samples]
    for publication, sample in zip(samples, kept, strict=True):
        assert sample.subject == publication.subject
        assert {p: sorted(map(repr, o)) for p, o in sample.values.items()} == {
            p: sorted(map(repr, o)) for p, o in publication.values.items()
        }
    for subscription in filters_of:
        for compiled in subscription.filters:
            for publication, sample in zip(samples, kept, strict=True):
                assert filter_matches(compiled, sample) == filter_matches(compiled, publication)  # type: ignore[arg-type]


def test_equal_strings_of_two_witnesses_are_kept_once():
    """String values are interned: a class or a ``contains`` witness recurs in thousands of
    witnesses, each made as a string of its own."""
    texts = ["".join(("a ", "word")) for _ in range(2)]
    assert texts[0] is not texts[1]
    first, second = (
        compact(Publication(URI(f"urn:s{n}"), frozenset({(URI("urn:p"), Literal(text))})))
        for n, text in enumerate(texts)
    )
    assert first[-1] == "a word" and first[-1] is second[-1]
