"""Advertisements that outlive their origin (``superpeer.core``, "When the cube changes"): an
origin that crashed for good while the cube was rebuilt by rejoins is never named in a
``Departed``, so nothing but these rules keeps its elements from being spread, on every new
edge, for good (found by the partitions property with the restarted rule of ``hypercup``:
``partition_counterexample_catchup_planned_while_joining.json``)."""

import dataclasses

from superpeer.core import SuperPeerCore
from tests.superpeer import test_restarted_neighbour as restarted_neighbour
from wire import messages as m


@dataclasses.dataclass(frozen=True)
class View:
    """A view with the given neighbours, each the parent of every tree (enough for an
    advertisement to be taken from it)."""

    neighbouring: tuple[str, ...]
    root_position: int = 0
    positions: frozenset[int] = frozenset({0})
    dimension: int = 2

    def neighbours(self) -> frozenset[str]:
        return frozenset(self.neighbouring)

    def parent(self, root_position: int) -> str | None:
        return self.neighbouring[0] if self.neighbouring else None

    def children(self, root_position: int) -> tuple[str, ...]:
        return ()


ALONE = View((), dimension=0)


def advertisement_of(origin: str) -> m.Elements:
    """``origin``'s advertisement, of its first incarnation."""
    return dataclasses.replace(restarted_neighbour.advertisement_of(origin), incarnation=1)


def test_an_advertisement_from_a_sender_that_becomes_a_neighbour_in_time_is_taken():
    """The race a newcomer runs: a member that has it in its view already sends it the
    advertisements of its trees before the newcomer's own view (its ``Welcome``) names that
    member. They are held, and taken when the view does, within ``settle_seconds``."""
    core = SuperPeerCore("sp1", "sp1:1", View(("sp2",)))
    core.superpeer_message("sp3", advertisement_of("sp0"), 100, 1.0)
    assert "sp0" not in core.ads.origins()
    core.topology_changed(View(("sp3", "sp2")), 1.0 + core.config.settle_seconds / 2)
    assert "sp0" in core.ads.origins()


def test_an_advertisement_from_a_sender_that_never_becomes_a_neighbour_is_dropped():
    """sp3, cut off alone with the view of a cube that had rebuilt itself without it, relayed
    sp0's advertisement to sp7 (not its neighbour any more), stood alone, forgot sp0 (which had
    crashed for good), and joined sp7's cube: taken from anyone, the advertisement made sp7 the
    one holder of a dead origin's elements, passed on to whoever joined below it. A message
    from a super-peer that is no neighbour is held ``settle_seconds``, advertisements included,
    then dropped."""
    core = SuperPeerCore("sp7", "sp7:1", View(("sp2", "sp6")))
    core.superpeer_message("sp3", advertisement_of("sp0"), 100, 1.0)
    core.timer(1.0 + core.config.settle_seconds)
    core.topology_changed(View(("sp2", "sp6", "sp3")), 2.0 + core.config.settle_seconds)
    assert "sp0" not in core.ads.origins()
    assert core.statistics.dropped == 1


def test_a_super_peer_alone_in_its_cube_forgets_every_other_origin_and_refuses_it_after():
    """Alone (it stood alone, or its cube shrank to it), no other origin is in its cube,
    announced departed or not; its elements, still on their way from the old cube, are
    refused as a departed one's are (a later incarnation is taken: it rejoined)."""
    core = SuperPeerCore("sp3", "sp3:1", View(("sp1",)))
    elements = advertisement_of("sp0")
    core.superpeer_message("sp1", elements, 100, 1.0)
    assert "sp0" in core.ads.origins()
    core.topology_changed(ALONE, 2.0)
    assert "sp0" not in core.ads.origins()
    core.topology_changed(View(("sp1",)), 3.0)
    core.superpeer_message(
        "sp1", dataclasses.replace(elements, version=elements.version + 1), 100, 3.0
    )
    assert "sp0" not in core.ads.origins()
    later = dataclasses.replace(elements, incarnation=elements.incarnation + 1, version=1)
    core.superpeer_message("sp1", later, 100, 3.5)
    assert "sp0" in core.ads.origins()
