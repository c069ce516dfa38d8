"""``--expires`` text: a duration from now, or an absolute ISO 8601 time."""

import pytest

from peer.expires import parse_expires


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90", 1090.0), ("90s", 1090.0), ("30m", 2800.0), ("2h", 8200.0), ("1.5d", 130600.0)],
)
def test_a_duration_counts_from_now(text, expected):
    assert parse_expires(text, 1000.0) == expected


def test_an_absolute_time_is_kept_utc_if_no_zone():
    assert parse_expires("1970-01-02T00:00:00Z", 5.0) == 86400.0
    assert parse_expires("1970-01-02T00:00:00", 5.0) == 86400.0
    assert parse_expires("1970-01-02T01:00:00+01:00", 5.0) == 86400.0


def test_anything_else_says_what_is_accepted():
    with pytest.raises(ValueError, match="neither a duration"):
        parse_expires("tomorrow", 0.0)
