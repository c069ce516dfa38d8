"""TCP proxies in front of the daemons, to cut, slow or stall their connections on purpose.

Each super-peer listens on an internal port and *advertises* its proxy's port, so every byte
another super-peer or a peer sends it crosses the proxy (``deploy.cluster`` does the wiring with
``front=``). A proxy is in one of four states:

* ``pass``: bytes go through as they come;
* ``slow``: each chunk waits ``delay`` seconds before it goes on (order kept, per direction);
* ``stall``: connections stay open and nothing moves (a half-dead link: TCP says nothing);
* ``cut``: every open connection is closed and new ones are closed at once.

The proxies of one run share one trio loop in a thread of their own (``Proxies``), so the harness
that drives them can stay blocking; state changes are calls into that loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import trio

CHUNK: Final = 65536
STATES: Final = ("pass", "slow", "stall", "cut")


@dataclass
class Proxy:
    listen: str
    target: str
    state: str = "pass"
    delay: float = 0.0
    changed: trio.Event = field(default_factory=trio.Event)
    scopes: set[trio.CancelScope] = field(default_factory=set)
    connections: int = 0

    def set(self, state: str, delay: float = 0.0) -> None:
        if state not in STATES:
            raise ValueError(f"unknown proxy state {state!r} (one of {', '.join(STATES)})")
        self.state, self.delay = state, delay
        if state == "cut":
            for scope in self.scopes:
                scope.cancel()
        self.changed.set()
        self.changed = trio.Event()

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        host, _, port = self.listen.rpartition(":")
        listeners = await trio.open_tcp_listeners(int(port), host=host)
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        if self.state == "cut":
            await trio.aclose_forcefully(client)
            return
        host, _, port = self.target.rpartition(":")
        try:
            server = await trio.open_tcp_stream(host, int(port))
        except OSError:
            await trio.aclose_forcefully(client)
            return
        self.connections += 1
        with trio.CancelScope() as scope:
            self.scopes.add(scope)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
                    nursery.start_soon(self._pump, server, client, nursery.cancel_scope)
            finally:
                self.scopes.discard(scope)
        await trio.aclose_forcefully(client)
        await trio.aclose_forcefully(server)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        try:
            while data := await source.receive_some(CHUNK):
                while self.state == "stall":
                    await self.changed.wait()
                if self.state == "slow" and self.delay > 0:
                    await trio.sleep(self.delay)
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        scope.cancel()  # one direction ended: the connection is over


class Proxies:
    """Proxies run by one trio loop in a background thread; every method is called from the
    harness's thread."""

    def __init__(self) -> None:
        self.proxies: dict[str, Proxy] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self._thread.start()
        self._ready.wait()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set()
            await trio.sleep_forever()

    def _call(self, function: Callable[[], object]) -> object:
        return trio.from_thread.run_sync(function, trio_token=self._token)

    def add(self, listen: str, target: str) -> Proxy:
        """A proxy on ``listen`` in front of ``target``, accepting once this returns."""
        proxy = Proxy(listen, target)

        async def start() -> None:
            assert self._nursery is not None
            await self._nursery.start(proxy.serve)

        trio.from_thread.run(start, trio_token=self._token)
        self.proxies[listen] = proxy
        return proxy

    def set(self, listen: str, state: str, delay: float = 0.0) -> None:
        proxy = self.proxies[listen]
        self._call(lambda: proxy.set(state, delay))

    def heal(self) -> None:
        for listen in self.proxies:
            self.set(listen, "pass")

    def close(self) -> None:
        if self._nursery is not None:
            self._call(self._nursery.cancel_scope.cancel)
        self._thread.join(timeout=5)
