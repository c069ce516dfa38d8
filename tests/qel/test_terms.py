"""``URI``'s hand-written equality and hash agree with the dataclass's they replace: equal iff
the values are, equal URIs hash alike, never equal to a string or another term."""

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from qel.terms import URI, Literal

IRIS = st.one_of(st.sampled_from(["u:1", "u:2", "http://example.org/p"]), st.text(min_size=1))


@dataclass(frozen=True, slots=True)
class _Generated:
    """What ``@dataclass(frozen=True)`` gives a URI: equality and hash of ``(value,)``."""

    value: str


@given(IRIS, IRIS)
def test_uris_are_equal_and_hash_alike_as_the_dataclass_had_them(first, second):
    one, other = URI(first), URI(second)
    expected = _Generated(first) == _Generated(second)
    assert (one == other) is expected
    assert (one != other) is not expected
    if expected:
        assert hash(one) == hash(other)
        assert {one: 1}[other] == 1
    assert one == URI(first)
    assert one != first
    assert one != Literal(first)
    assert one != _Generated(first)
