"""``peer.kept``: which publications a peer keeps because its access point holds them alone, and
when it forgets them."""

import dataclasses

from peer.kept import Kept, KeptLimits
from tests.peer.helpers import publication
from wire import messages as m

ALONE = m.Ack(request="publish n1", alone=True)


def publish(id: str = "n1", title: str = "t", change: str = "publish") -> m.Publish:
    return m.Publish(publication=publication(id=id, title=title), change=change)


def again(request: m.Publish) -> m.Publish:
    """As ``Kept`` sends it again (``Publish.again``)."""
    return dataclasses.replace(request, again=True)


def test_only_an_ack_that_says_alone_keeps_a_publication(tmp_path):
    kept = Kept(tmp_path)
    kept.answered(publish("n1"), m.Ack(request="publish n1"), 0.0)
    kept.answered(publish("n2"), m.Refused(request="publish n2", reason="no"), 0.0)
    kept.answered(m.Withdraw(id="n3"), m.Ack(request="retract n3", alone=True), 0.0)
    assert len(kept) == 0
    kept.answered(publish("n4"), ALONE, 0.0)
    assert kept.due(1.0) == [again(publish("n4"))]
    assert Kept(tmp_path).due(1.0) == [again(publish("n4"))], "kept on disk"


def test_the_next_answer_about_its_resource_decides():
    kept = Kept(None)
    kept.answered(publish("n1"), ALONE, 0.0)
    kept.answered(publish("n1"), ALONE, 5.0)
    assert len(kept) == 1, "still alone"
    later = publish("n1", "t2", "update")
    kept.answered(later, ALONE, 6.0)
    assert kept.due(7.0) == [again(later)], "the later change stands for the resource"
    kept.answered(again(later), ALONE, 7.5)
    assert len(kept) == 1, "its own re-send, still alone"
    kept.answered(later, m.Ack(request="publish n1"), 8.0)
    assert len(kept) == 0
    kept.answered(publish("n2"), ALONE, 0.0)
    kept.answered(m.Withdraw(id="n2"), m.Ack(request="retract n2"), 1.0)
    assert len(kept) == 0, "retracted: never brought back"


def test_a_refusal_of_the_kept_change_forgets_it_and_counts_it():
    kept = Kept(None)
    kept.answered(publish("n1"), ALONE, 0.0)
    kept.answered(publish("n1", "t2", "update"), m.Refused(request="publish n1", reason="x"), 1.0)
    assert len(kept) == 1, "another change refused: the kept one stands"
    refused = m.Refused(request="publish n1", reason="unknown here")
    kept.answered(again(publish("n1")), refused, 2.0)
    assert len(kept) == 0 and kept.forgotten == 1


def test_bounds_forget_the_oldest(tmp_path):
    kept = Kept(tmp_path, KeptLimits(max_kept=2, kept_seconds=100.0))
    for n in range(3):
        kept.answered(publish(f"n{n}"), ALONE, float(n))
    assert [p.publication.id for p in kept.due(3.0)] == ["n1", "n2"]
    assert kept.probe(50.0) == again(publish("n1"))
    assert [p.publication.id for p in kept.due(101.5)] == ["n2"], "n1 kept over 100 s"
    assert kept.forgotten == 2 and len(Kept(tmp_path)) == 1


def test_an_unreadable_record_is_skipped_and_clear_forgets_all(tmp_path):
    kept = Kept(tmp_path)
    kept.answered(publish("n1"), ALONE, 0.0)
    (tmp_path / "junk.json").write_text("{not json")
    reopened = Kept(tmp_path)
    assert reopened.due(1.0) == [again(publish("n1"))]
    reopened.clear()
    assert len(Kept(tmp_path)) == 0
