"""``poset.ends``: a publication at the ends of a filter's ranges refutes covering only where
``qel.covers`` says no, and refutes what one dimension at a time (``poset.gaps``) cannot; a
filter held along one dimension at most proves covering only where ``qel.covers`` says yes,
and whenever one filter of the general side holds it all; the gaps read from the alternatives
(``has_gap``) are those of the columns (``poset.gaps``)."""

import pytest
from hypothesis import event, given, settings

import qel
from poset.ends import alternatives, has_gap, proves, refutes
from poset.gaps import columns, escapes
from qel.filters import filter_within
from tests.strategies import subscriptions
from workloads.shapes import Shapes

PREFIX = "@prefix ex: <http://example.org/> .\n"


def _refuted(general: qel.Subscription, specific: qel.Subscription) -> bool:
    compiled = alternatives(general.filters)
    return any(refutes(compiled, part) for part in specific.filters)


@pytest.mark.slow  # some 10 s of CPU: the fast tier has the shapes workload's pairs below
@settings(max_examples=3000)
@given(
    subscriptions(max_patterns=3, repeat_predicates=True),
    subscriptions(max_patterns=3, repeat_predicates=True),
)
def test_the_ends_refute_only_what_is_not_covered(general, specific):
    refuted = _refuted(general, specific)
    event(f"refuted: {refuted}, {len(general.filters)} filters")
    if refuted:
        assert not qel.covers(general, specific)


@settings(max_examples=500)
@given(subscriptions(max_patterns=3, repeat_predicates=True))
def test_a_subscription_is_not_refuted_against_itself(general):
    assert not _refuted(general, general)


def test_two_dimensions_refute_what_one_at_a_time_does_not():
    """Low power escapes the second alternative, an early registration the first."""
    general, specific = (
        qel.parse_subscription(PREFIX + text)
        for text in (
            "X : t(X, ex:power, P), t(X, ex:registered, R), (R >= 2019, R <= 2024 ; P > 90)",
            "X : t(X, ex:power, P), t(X, ex:registered, R), P <= 356, R < 2003",
        )
    )
    found = columns(general.filters)
    assert not any(escapes(found, part) for part in specific.filters)
    assert _refuted(general, specific)
    assert not qel.covers(general, specific)


def test_excluded_and_unbounded_ends_stand_for_the_values_next_to_them():
    """``P > 2`` has values next to 2 that ``P > 3`` rejects and ``P >= 2`` or ``P > 1`` do
    not, and far values that ``P < 5`` rejects; a gap in the middle of a range is left to the
    full test (neither end of ``1 <= P <= 4`` escapes both ``P <= 2`` and ``P >= 3``)."""
    cases = [
        ("P > 3 ; Q = 1", "P > 2, Q = 2", True),
        ("P >= 2 ; Q = 1", "P > 2, Q = 2", False),
        ("P < 5 ; Q = 1", "P > 2, Q = 2", True),
        ("P > 1 ; Q = 1", "P > 2, Q = 2", False),
        ("P < 2 ; Q = 1", "P > 2, Q = 2", True),
        ("P <= 2 ; P >= 3 ; Q = 1", "P >= 1, P <= 4, Q = 2", False),
    ]
    for general_text, specific_text, refuted in cases:
        general, specific = (
            qel.parse_subscription(PREFIX + f"X : t(X, ex:p, P), t(X, ex:q, Q), ({text})")
            for text in (general_text, specific_text)
        )
        assert _refuted(general, specific) is refuted, (general_text, specific_text)
        if refuted:
            assert not qel.covers(general, specific)


def test_on_the_shapes_workload_the_ends_refute_only_what_is_not_covered():
    shapes = Shapes(seed=3)
    drawn = [qel.parse_subscription(shapes.subscription()) for _ in range(300)]
    general = [subscription for subscription in drawn if len(subscription.filters) > 1]
    beyond_gaps = 0
    for first in general:
        found = columns(first.filters)
        compiled = alternatives(first.filters)
        for second in drawn:
            if not any(refutes(compiled, part) for part in second.filters):
                continue
            assert not qel.covers(first, second)
            beyond_gaps += not any(escapes(found, part) for part in second.filters)
    assert beyond_gaps > 1_000  # the test exercises what the gaps leave


@pytest.mark.slow  # some 10 s of CPU: the fast tier has the shapes workload's pairs below
@settings(max_examples=3000)
@given(
    subscriptions(max_patterns=3, repeat_predicates=True),
    subscriptions(max_patterns=3, repeat_predicates=True),
)
def test_what_is_held_along_one_dimension_is_covered(general, specific):
    compiled = alternatives(general.filters)
    proved = [proves(compiled, part) for part in specific.filters]
    event(f"proved: {sum(proved)} of {len(proved)}, {len(general.filters)} filters")
    for part, held in zip(specific.filters, proved, strict=True):
        if held:
            assert qel.covering.filter_covered(part, general.filters)
        elif len(part.patterns) == len(part.predicates):
            assert not any(filter_within(part, other) for other in general.filters)


def test_a_union_along_one_dimension_proves_what_no_one_filter_holds():
    """``P > 898, P <= 58000 ; P >= 8612`` holds ``P > 946, Q = 1`` between them."""
    general, specific, beyond = (
        qel.parse_subscription(PREFIX + f"X : t(X, ex:p, P), t(X, ex:q, Q), {text}")
        for text in ("(P > 898, P <= 58000 ; P >= 8612)", "P > 946, Q = 1", "P > 897, Q = 1")
    )
    compiled = alternatives(general.filters)
    assert not any(filter_within(specific.filters[0], other) for other in general.filters)
    assert proves(compiled, specific.filters[0])
    assert not proves(compiled, beyond.filters[0])
    assert qel.covers(general, specific) and not qel.covers(general, beyond)


def test_a_filter_that_narrows_two_dimensions_proves_nothing_on_either():
    """``P < 5, Q < 5`` narrows ``P > 0, Q > 0`` on both: with ``Q >= 5`` the union on ``Q``
    is everything, yet ``P = 10, Q = 1`` escapes both."""
    general, specific = (
        qel.parse_subscription(PREFIX + f"X : t(X, ex:p, P), t(X, ex:q, Q), {text}")
        for text in ("(P < 5, Q < 5 ; Q >= 5)", "P > 0, Q > 0")
    )
    assert not proves(alternatives(general.filters), specific.filters[0])
    assert not qel.covers(general, specific)


def test_on_the_shapes_workload_what_is_held_along_one_dimension_is_covered():
    shapes = Shapes(seed=4)
    drawn = [qel.parse_subscription(shapes.subscription()) for _ in range(300)]
    general = [subscription for subscription in drawn if len(subscription.filters) > 1]
    beyond_within = 0
    for first in general:
        compiled = alternatives(first.filters)
        for second in drawn:
            for part in second.filters:
                if not proves(compiled, part):
                    continue
                assert qel.covering.filter_covered(part, first.filters)
                beyond_within += not any(filter_within(part, other) for other in first.filters)
    assert beyond_within >= 5  # 7 of these pairs need the union along one dimension


@pytest.mark.slow  # some 10 s of CPU: the fast tier has the shapes workload's pairs below
@settings(max_examples=3000)
@given(
    subscriptions(max_patterns=3, repeat_predicates=True),
    subscriptions(max_patterns=3, repeat_predicates=True),
)
def test_the_gaps_read_from_the_alternatives_are_the_columns_gaps(general, specific):
    found, compiled = columns(general.filters), alternatives(general.filters)
    for part in specific.filters:
        gap = has_gap(compiled, part)
        event(f"gap: {gap}, {len(general.filters)} filters")
        assert gap == escapes(found, part)
    assert not any(has_gap(compiled, part) for part in general.filters)


def test_on_the_shapes_workload_the_gaps_read_from_the_alternatives_are_the_columns_gaps():
    shapes = Shapes(seed=3)
    drawn = [qel.parse_subscription(shapes.subscription()) for _ in range(300)]
    gaps = 0
    for first in drawn:
        if len(first.filters) == 1:
            continue
        found, compiled = columns(first.filters), alternatives(first.filters)
        for second in drawn:
            for part in second.filters:
                gap = has_gap(compiled, part)
                assert gap == escapes(found, part)
                gaps += gap
    assert gaps > 10_000
