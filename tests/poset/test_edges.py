"""A node's edges (``poset.edges``) against a plain list, and posets whose every edge set is in
the dictionary form against the same properties as with the usual tuples."""

from dataclasses import dataclass
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from poset import edges
from poset.edges import EdgeView, added, removed
from tests.poset import test_bulk, test_poset


@dataclass(eq=False)
class Node:
    id: int

    def __hash__(self) -> int:
        return self.id


NODES = [Node(number) for number in range(16)]


@given(st.integers(1, 6), st.lists(st.tuples(st.booleans(), st.sampled_from(NODES)), max_size=80))
def test_edges_hold_what_a_list_holds_in_its_order(few, operations):
    """With a small ``FEW``, so that both forms and the changes between them occur."""
    with patch.object(edges, "FEW", few):
        check_against_a_list(operations)


def check_against_a_list(operations: list[tuple[bool, Node]]) -> None:
    held: edges.Edges[Node] = ()
    model: list[Node] = []
    for adding, node in operations:
        if adding and node not in model:
            held = added(held, node)
            model.append(node)
        elif not adding and node in model:
            held = removed(held, node)
            model.remove(node)
        assert list(held) == model
        assert len(held) == len(model)
        assert all((node in held) == (node in model) for node in NODES)
        assert type(held) is dict or len(held) <= edges.FEW
        view = EdgeView(held)
        expected = {node.id: node for node in model}
        assert list(view.items()) == list(expected.items())
        assert view == expected
        assert list(view.values()) == model
        assert all((node.id in view) == (node.id in expected) for node in NODES)
        assert all(view[node.id] is node for node in model)


def test_posets_with_every_edge_set_a_dictionary_hold_their_properties(monkeypatch):
    """The dictionary form (a node with many children) through every change the poset makes,
    bulk insertion's renumbering included."""
    monkeypatch.setattr(edges, "FEW", 1)
    test_poset.test_invariants_hold_after_random_inserts_and_removes()
    test_bulk.test_insert_many_builds_what_one_at_a_time_insertion_builds()
    test_bulk.test_insert_many_numbers_and_represents_equivalent_subscriptions_as_insert_does()
