"""A neighbour that restarted, seen by the routing core (``superpeer.core``, "When the cube
changes"): what was sent to the process it restarted as does not count, and nothing sent to the
member it became is withdrawn before the settle window, whatever the cube does meanwhile."""

import dataclasses

import qel
from superpeer.actions import ToSuperPeer
from superpeer.core import SuperPeerCore
from superpeer.sim.topology import hypercube_views
from wire import messages as m

QUERY = 'X : t(X, <http://purl.org/dc/elements/1.1/subject>, S), S contains "x"'
ORIGIN_POSITION = 3


@dataclasses.dataclass(frozen=True)
class View:
    """sp1's view of a cube of 4 (it holds position 0): who is the next hop toward the origin
    at position 3, and who its neighbours are. Nothing else about the trees matters here."""

    toward_origin: str
    neighbouring: frozenset[str]
    root_position: int = 0
    positions: frozenset[int] = frozenset({0})
    dimension: int = 2

    def neighbours(self) -> frozenset[str]:
        return self.neighbouring

    def parent(self, root_position: int) -> str | None:
        return self.toward_origin if root_position == ORIGIN_POSITION else None

    def children(self, root_position: int) -> tuple[str, ...]:
        return ()


def test_routes_sent_to_a_restarted_neighbour_once_it_is_back_are_kept_through_a_flap():
    """Found by the skewed chaos plan (issue 39), on daemons: sp0 restarted (its new incarnation
    spoke to sp1 before it was a member again), joined through sp1 and was sent sp1's routes,
    and relayed an origin's notifications to sp1 through them. A repair then gave sp1 a direct
    route to the origin, and took sp0 out of sp1's view and put it back within the settle
    window: sp1 still counted sp0 as "restarted" and withdrew every route it had sent the new
    member, at once, not after the window. A notification on its way through sp0 found no route
    and was lost (the direct route was 130 ms late at the origin). Entering the view as a
    member ends "restarted": what is sent to it from then on reaches the member it is now."""
    through_sp0 = View("sp0", frozenset({"sp0"}))
    direct = View("sp2", frozenset({"sp0", "sp2"}))
    without_sp0 = View("sp2", frozenset({"sp2"}))
    core = SuperPeerCore("sp1", "sp1:1", View("", frozenset()))
    core.attach("reader", 0.0)
    core.peer_message(
        "reader", m.Subscribe(id="s", subscription=qel.parse_subscription(QUERY)), 100, 0.0
    )
    # sp0's new incarnation speaks before it is a member again (not in sp1's view)
    core.neighbour_restarted("sp0", 1.0)
    # it joins through sp1 (a member now), and passes on the origin sp2's advertisement
    core.topology_changed(through_sp0, 2.0)
    core.superpeer_message("sp0", advertisement_of("sp2"), 100, 2.0)
    assert {hop for node in core.poset for hop in node.sent} == {"sp0"}
    # a repair: sp1 reaches the origin directly; sp0 leaves its view and comes back at once
    out = core.topology_changed(direct, 3.0)
    out += core.topology_changed(without_sp0, 3.1)
    out += core.topology_changed(direct, 3.2)
    retracted = [
        a.node for a in out if isinstance(a, ToSuperPeer) and isinstance(a.message, m.Retract)
    ]
    assert retracted == []
    # the window closes: sp0 no longer needs the route, and it is withdrawn then
    out = core.timer(3.2 + core.config.settle_seconds)
    retracted = [
        a.node for a in out if isinstance(a, ToSuperPeer) and isinstance(a.message, m.Retract)
    ]
    assert retracted == ["sp0"]


def advertisement_of(origin: str) -> m.Elements:
    """``origin``'s advertisement of the Dublin Core schema, as its tree carries it."""
    views = hypercube_views(["a", "b"])
    announcer = SuperPeerCore("a", "a:1", views["a"])
    announcer.attach("publisher", 0.0)
    advertise = m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]}))
    [elements] = [
        a.message
        for a in announcer.peer_message("publisher", advertise, 100, 0.0)
        if isinstance(a, ToSuperPeer)
    ]
    return dataclasses.replace(elements, origin=origin, origin_position=ORIGIN_POSITION, address="")
