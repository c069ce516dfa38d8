"""Protocol messages: plain fields a codec can encode by name, validated when built."""

from dataclasses import FrozenInstanceError, fields, replace

import msgpack
import pytest

from hypercup import (
    MESSAGE_TYPES,
    Census,
    CensusReply,
    ChangeRequest,
    Grow,
    JoinDone,
    JoinRefused,
    JoinRequest,
    JoinWalk,
    LeaveWalk,
    Lookup,
    LookupReply,
    Message,
    MessageError,
    NeighbourUpdate,
    Reclaim,
    Released,
    ReturnTop,
    Shrink,
    UpdateAck,
    Welcome,
)

PEERS = {"b": ("b.sim:4000", (1, 3)), "c": ("c.sim:4000", (2,))}

ROUTED = JoinWalk(
    epoch=0,
    newcomer="n",
    newcomer_address="n.sim:4000",
    phase="route",
    position=0,
    bit=-1,
    admitted=False,
    anchor=None,
    anchor_address=None,
)
"""A walk on its way to the anchor (the malformed examples below are changes of it)."""

EXAMPLES: list[Message] = [
    JoinRequest(address="n.sim:4000"),
    JoinRefused(reason="n is still a member here", member=True),
    JoinWalk(
        epoch=2,
        newcomer="n",
        newcomer_address="n.sim:4000",
        phase="search",
        position=3,
        bit=0,
        admitted=True,
        anchor="a",
        anchor_address="a.sim:4000",
    ),
    ROUTED,
    Welcome(epoch=1, dimension=2, position=2, peers=PEERS),
    NeighbourUpdate(epoch=1, holders=PEERS, relay=True, ack_id=7),
    NeighbourUpdate(epoch=1, holders=PEERS, relay=False, ack_id=None),
    UpdateAck(epoch=1, ack_id=7),
    JoinDone(epoch=1, newcomer="n"),
    Grow(epoch=3, dimension=4, root=7),
    Shrink(epoch=4, dimension=3, root=0, absent="z"),
    Grow(epoch=3, dimension=4, root=7, resent=True),
    Census(epoch=3, origin="a", census=2, root=7, address="a.sim:4000", wanted=3),
    CensusReply(epoch=3, origin="a", census=2, doubled=(1, 4), ready=False),
    Shrink(epoch=4, dimension=3, root=0, absent="z", resent=True),
    ChangeRequest(since=2, address="n.sim:4000"),
    LeaveWalk(
        epoch=1,
        dimension=2,
        leaver="z",
        leaver_address="z.sim:4000",
        leaver_positions=(0, 2),
        leaver_peers=PEERS,
        failed=True,
        phase="route",
        position=2,
        bit=-1,
    ),
    Reclaim(
        epoch=1,
        dimension=2,
        column=0,
        base_holder="a",
        base_address="a.sim:4000",
        leaver="z",
        leaver_address="z.sim:4000",
        leaver_positions=(1,),
        leaver_peers=PEERS,
        failed=False,
    ),
    LeaveWalk(
        epoch=1,
        dimension=3,
        leaver="z",
        leaver_address="z.sim:4000",
        leaver_positions=(3,),
        leaver_peers=PEERS,
        failed=True,
        phase="search",
        position=1,
        bit=0,
        failed_too=("y", "x"),
        carried="y",
        carried_positions=(7,),
        carried_incarnation=2,
        carried_heard=12.5,
    ),
    Reclaim(
        epoch=1,
        dimension=3,
        column=2,
        base_holder="a",
        base_address="a.sim:4000",
        leaver="z",
        leaver_address="z.sim:4000",
        leaver_positions=(3, 7),
        leaver_peers=PEERS,
        failed=True,
        carried="y",
        carried_positions=(7,),
    ),
    ReturnTop(epoch=1, column=0, leaver="z", peers=PEERS),
    Released(),
    Lookup(epoch=1, target=5, avoid="z", requester="r", requester_address="r.sim:4000"),
    Lookup(
        epoch=1,
        target=5,
        avoid="z",
        requester="r",
        requester_address="r.sim:4000",
        visited=("r", "s"),
        detours=1,
    ),
    LookupReply(epoch=1, target=5, holder="h", address="h.sim:4000", positions=(5,)),
    LookupReply(
        epoch=1,
        target=5,
        holder="h",
        address="h.sim:4000",
        positions=(5,),
        failed=True,
        failed_incarnation=3,
        failed_heard=40.25,
    ),
]


def test_every_kind_has_an_example_and_a_unique_name() -> None:
    assert {type(m) for m in EXAMPLES} == set(MESSAGE_TYPES.values())
    assert all(kind.startswith("hypercup.") for kind in MESSAGE_TYPES)
    assert all(kind == cls.KIND for kind, cls in MESSAGE_TYPES.items())


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_messages_survive_a_codec_that_only_knows_field_names(message: Message) -> None:
    payload = {f.name: getattr(message, f.name) for f in fields(message)}
    data = msgpack.packb([message.KIND, payload])
    kind, decoded = msgpack.unpackb(data)
    assert MESSAGE_TYPES[kind](**decoded) == message


def test_messages_are_frozen_and_normalised() -> None:
    update = NeighbourUpdate(
        epoch=0, holders={"b": ["b.sim:4000", [3, 1]]}, relay=False, ack_id=None
    )
    assert update.holders == {"b": ("b.sim:4000", (1, 3))}
    with pytest.raises(FrozenInstanceError):
        update.epoch = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: JoinRequest(address=""), "JoinRequest.address must be a non-empty string"),
        (lambda: Grow(epoch=-1, dimension=1, root=0), "Grow.epoch must be an int >= 0"),
        (lambda: Grow(epoch=True, dimension=1, root=0), "Grow.epoch must be an int"),
        (lambda: UpdateAck(epoch=0, ack_id=-2), "ack_id must be an int >= 0"),
        (
            lambda: JoinRequest(address="a.sim:4000", incarnation=-1),
            "JoinRequest.incarnation must be an int >= 0",
        ),
        (
            lambda: Welcome(epoch=0, dimension=1, position=1, peers=PEERS, incarnation="7"),
            "Welcome.incarnation must be an int",
        ),
        (
            lambda: NeighbourUpdate(epoch=0, holders=PEERS, relay=True, ack_id=None),
            "a relayed update is acknowledged",
        ),
        (
            lambda: NeighbourUpdate(epoch=0, holders={}, relay=False, ack_id=None),
            "holders is empty",
        ),
        (
            lambda: Welcome(epoch=0, dimension=1, position=1, peers={"b": ("b", (1, 1))}),
            "distinct positions",
        ),
        (
            lambda: Welcome(epoch=0, dimension=1, position=1, peers={"b": "b.sim:4000"}),
            r"must be \(address, positions\)",
        ),
        (lambda: replace(ROUTED, phase="search"), "only an admitted walk searches"),
        (lambda: replace(ROUTED, phase="fly"), "phase must be one of"),
        (
            lambda: Census(epoch=1, origin="a", census=0, root=1, address="a:1", wanted=1),
            "Census.census must be an int >= 1",
        ),
        (
            lambda: Census(epoch=1, origin="a", census=1, root=1, address="a:1", wanted=0),
            "Census.wanted must be an int >= 1",
        ),
        (
            lambda: CensusReply(epoch=1, origin="", census=1, doubled=(), ready=True),
            "CensusReply.origin must be a non-empty string",
        ),
        (
            lambda: CensusReply(epoch=1, origin="a", census=1, doubled=(-1,), ready=True),
            "CensusReply.doubled must be an int >= 0",
        ),
        (
            lambda: CensusReply(epoch=1, origin="a", census=1, doubled=3, ready=True),
            "CensusReply.doubled must be a list of columns",
        ),
        (
            lambda: Lookup(
                epoch=1, target=5, avoid="z", requester="r", requester_address="r:1", visited="r"
            ),
            "Lookup.visited must be a list of node ids",
        ),
        (
            lambda: Lookup(
                epoch=1, target=5, avoid="z", requester="r", requester_address="r:1", visited=[""]
            ),
            "Lookup.visited must be a non-empty string",
        ),
    ],
)
def test_malformed_messages_are_refused(build, message: str) -> None:
    with pytest.raises(MessageError, match=message):
        build()
