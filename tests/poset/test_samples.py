"""What the poset keeps of a witness (``poset.samples``) matches as the witness does."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from poset.samples import Sample
from qel.matching import filter_matches
from tests.strategies import publications, subscriptions


@settings(max_examples=200, deadline=None)
@given(
    st.lists(publications(), min_size=1, max_size=6),
    st.lists(subscriptions(max_patterns=3, repeat_predicates=True), min_size=1, max_size=4),
)
def test_a_sample_matches_as_its_publication_does(samples, filters_of):
    """What the poset keeps of a witness (``Sample``, its objects of one predicate
    shared with other samples' when they are neither numbers nor dates) matches every filter
    as the publication does; equal shared objects are one tuple."""
    kept = [Sample(publication) for publication in samples]
    for subscription in filters_of:
        for compiled in subscription.filters:
            for publication, sample in zip(samples, kept, strict=True):
                assert filter_matches(compiled, sample) == filter_matches(compiled, publication)  # type: ignore[arg-type]
    for first, second in itertools.combinations(kept, 2):
        for predicate, objects in first.values.items():
            other = second.values.get(predicate)
            if other == objects and all(kind not in ("number", "date") for kind, _ in objects):
                assert other is objects
