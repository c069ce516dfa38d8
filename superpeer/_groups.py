"""One connection's tasks fail for one reason: unwrap the nursery's exception group.

Trio wraps whatever a nursery's task raises in an ``ExceptionGroup``, so ``except
trio.BrokenResourceError`` around a nursery never matches: the group escapes to the daemon's
top nursery and ends the daemon for one broken connection. ``unwrapped(types)`` turns a group
made only of ``types`` into its first member; any other group (a bug, a cancellation) goes on
as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def unwrapped(*types: type[BaseException]) -> Iterator[None]:
    try:
        yield
    except BaseExceptionGroup as group:
        matched, rest = group.split(types)
        if matched is None or rest is not None:
            raise
        raise _first(matched) from None


def _first(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group
