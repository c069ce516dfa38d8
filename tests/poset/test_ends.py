"""``poset.ends``: a publication at the ends of a filter's ranges refutes covering only where
``qel.covers`` says no, and refutes what one dimension at a time (``poset.gaps``) cannot."""

from hypothesis import event, given, settings

import qel
from poset.ends import alternatives, refutes
from poset.gaps import columns, escapes
from tests.strategies import subscriptions
from workloads.shapes import Shapes

PREFIX = "@prefix ex: <http://example.org/> .\n"


def _refuted(general: qel.Subscription, specific: qel.Subscription) -> bool:
    compiled = alternatives(general.filters)
    return any(refutes(compiled, part) for part in specific.filters)


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
