"""The delayed acknowledgement rule both ends share (``wire.acknowledging``); its use is tested
where it is used: ``tests/superpeer/test_channel.py`` (against an oracle) and
``tests/peer/test_session.py``."""

from __future__ import annotations

import pytest

from wire.acknowledging import DelayedAck


def test_owed_at_once_for_a_burst_else_a_delay_after_the_first_that_waits() -> None:
    ack = DelayedAck(every=3, delay=0.5)
    assert not ack.take(0.0) and ack.deadline is None, "nothing waits, nothing owed"
    ack.note(1.0)
    ack.note(1.2)
    assert ack.deadline == 1.5, "from the first"
    assert not ack.take(1.4)
    assert ack.take(1.5)
    assert not ack.take(9.0), "taken: nothing waits"
    ack.note(2.0, count=3)
    assert ack.take(2.0), "three at once: a burst"


def test_one_acknowledgement_that_went_otherwise_clears_what_waits() -> None:
    ack = DelayedAck(every=3, delay=0.5)
    ack.note(1.0)
    ack.clear()
    assert ack.deadline is None and not ack.take(5.0)


@pytest.mark.parametrize(("every", "delay"), [(0, 0.1), (1, -0.1)])
def test_a_count_below_one_or_a_negative_delay_is_refused(every: int, delay: float) -> None:
    with pytest.raises(ValueError, match="every 1 item or more"):
        DelayedAck(every=every, delay=delay)
