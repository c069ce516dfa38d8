"""``chains._matches_each`` on a top of several filters writes ``qel.matches`` out: it answers
as ``qel.matches`` on every witness, on hypothesis-drawn subscriptions against drawn
publications and other subscriptions' witnesses, and on the shapes workload."""

from hypothesis import event, given, settings
from hypothesis import strategies as st

import qel
from poset.chains import _matches_each
from qel.filters import witness
from tests.strategies import publications, subscriptions
from workloads.shapes import Shapes

SAMPLES = st.one_of(
    publications(),
    subscriptions(max_patterns=4, repeat_predicates=True).map(
        lambda other: witness(other.filters[-1])
    ),
)


@settings(max_examples=3000, deadline=None)
@given(subscriptions(max_patterns=4, repeat_predicates=True, max_disjuncts=4), st.data())
def test_a_top_of_several_filters_matches_each_witness_as_qel_matches(top, data):
    if len(top.filters) == 1:
        return
    own = st.sampled_from(top.filters).map(witness)  # matches the top
    samples = tuple(data.draw(st.lists(st.one_of(own, SAMPLES), min_size=1, max_size=3)))
    answer = _matches_each(top, samples)
    event(f"matches each: {answer}")
    assert answer == all(qel.matches(top, sample) for sample in samples)


def test_on_the_shapes_workload_a_top_of_several_filters_matches_as_qel_matches():
    shapes = Shapes(seed=11)
    drawn = [qel.parse_subscription(shapes.subscription()) for _ in range(400)]
    tops = [subscription for subscription in drawn if len(subscription.filters) > 1]
    probes = [tuple(map(witness, subscription.filters)) for subscription in drawn[:150]]
    probes += [(witness(top.filters[0]), witness(top.filters[-1])) for top in tops[:50]]
    answers = [0, 0]
    for top in tops:
        for samples in probes:
            answer = _matches_each(top, samples)
            assert answer == all(qel.matches(top, sample) for sample in samples)
            answers[answer] += 1
    assert min(answers) > 200
