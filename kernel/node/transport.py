"""The node's HTTP transport and its bounds (spec/04 §9.8): what uvicorn does not bound itself.

uvicorn (with httptools, which the node uses) arms no timer on a connection until its first
response is sent, and counts no bytes of a request's head: a client that sends half a request
line holds its socket, and what it sent, for ever ("slowloris"), and enough of them exhaust the
process's file descriptors. Its `limit_concurrency` counts every open socket, so slow clients
holding the slots would make it answer 503 to everyone else. `BoundedHttpProtocol` adds:

- `header_timeout_ms`: a request's head (request line and headers) must be whole within it of
  when the head began: the connection's start, or its first byte after a response. Past it the
  socket is closed. A request's body is then the app's to bound (`request_body_ms_max`,
  kernel/node/app.py `RequestGuard`).
- `header_bytes_max`: a head still incomplete after that many bytes is answered 431 and closed.
- `connections_max`: at most that many sockets open. One more closes the oldest socket that is
  still sending a head (slow or idle; a slowloris's), or, when every socket is in the middle of
  a request, the new one. So any number of half-open sockets cost the node at most the cap,
  and a client that sends its request promptly is served. The cap is also held below the
  process's file limit (`effective_connections_max`), which `raise_open_files_limit` lifts to
  its hard limit at start, so `accept` never fails for want of a descriptor.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import resource
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from aos.kernel.node.errors import RequestHeaderTooLargeError, error_head
from aos.kernel.node.limits import NodeLimits

LISTEN_BACKLOG = 2048
"""Connections the kernel queues before the node accepts them (uvicorn's default); each
accepted one takes a descriptor before the node sees it, so the cap leaves room for them."""
FILES_RESERVED = 256
"""Descriptors kept for everything but client sockets (the store, logs, worker pipes)."""

_HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
)


def raise_open_files_limit() -> int:
    """Lift this process's soft limit on open files to its hard limit (the kernel's default
    soft limit is often 1024); returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def effective_connections_max(connections_max: int, open_files: int) -> int:
    """The cap in force: `connections_max`, or less when the file limit leaves less room."""
    if open_files == resource.RLIM_INFINITY:
        return connections_max
    return max(1, min(connections_max, open_files - LISTEN_BACKLOG - FILES_RESERVED))


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a head deadline, a head size bound and a connection
    cap. Use `bounded_protocol(limits)`: each server gets a subclass holding its limits and
    its own record of the connections still sending a head."""

    limits: ClassVar[NodeLimits]
    connections_max: ClassVar[int]
    heads: ClassVar[OrderedDict[BoundedHttpProtocol, None]]
    """The connections sending a head, oldest first: the ones a new connection may close."""

    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._begin_head()
        if len(self.connections) > self.connections_max:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_head()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._begin_head()  # the first byte of the next request, on a kept-alive socket
        if self._head_timer is not None:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._head_timer is not None and self._head_bytes > self.limits.header_bytes_max:
            self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:  # a pipelined request's head, behind one in flight
            self._begin_head()

    def on_headers_complete(self) -> None:
        self._end_head()
        super().on_headers_complete()

    def _begin_head(self) -> None:
        self._head_bytes = 0
        self.heads[self] = None
        self._head_timer = self.loop.call_later(
            self.limits.header_timeout_ms / 1000, self._head_timed_out
        )

    def _end_head(self) -> None:
        self.heads.pop(self, None)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self._close()

    def _refuse_head(self) -> None:
        limit = self.limits.header_bytes_max
        error = RequestHeaderTooLargeError(
            f"the request head is over {limit} bytes (header_bytes_max)",
            limit=limit,
            limit_name="header_bytes_max",
        )
        _, body = error_head(error)
        self.transport.write(_HEAD_TOO_LARGE % (len(body), body))
        self._close()

    def _make_room(self) -> None:
        """Close the oldest connection still sending a head: a slow or idle one. When that is
        this one (every other socket is mid-request), this one goes."""
        oldest = next(iter(self.heads), self)
        oldest._close()

    def _close(self) -> None:
        self._end_head()
        if not self.transport.is_closing():
            self.transport.close()


@contextlib.contextmanager
def tls_handshake_bounded(loop: asyncio.AbstractEventLoop, handshake_ms: int) -> Iterator[None]:
    """While uvicorn creates its server on `loop`: a TLS handshake must end within
    `handshake_ms` (asyncio's default is 60 s), since a socket is handed to the protocol, and
    its head deadline starts, only once the handshake is done. uvicorn has no option for it,
    so its call to `loop.create_server` gets the argument here."""
    create_server = loop.create_server
    bounded = functools.partial(create_server, ssl_handshake_timeout=handshake_ms / 1000)
    loop.create_server = _tls_only(create_server, bounded)  # type: ignore[method-assign]
    try:
        yield
    finally:
        del loop.create_server  # the instance attribute: the class's method again


def _tls_only(plain: Callable[..., Any], bounded: Callable[..., Any]) -> Callable[..., Any]:
    """`bounded` for a TLS server (asyncio refuses a handshake timeout without TLS)."""

    def create_server(*args: Any, **kwargs: Any) -> Any:
        return (bounded if kwargs.get("ssl") is not None else plain)(*args, **kwargs)

    return create_server


def bounded_protocol(limits: NodeLimits, open_files: int) -> type[BoundedHttpProtocol]:
    """The protocol class for one server (uvicorn's `Config(http=...)`)."""
    attributes: dict[str, Any] = {
        "limits": limits,
        "connections_max": effective_connections_max(limits.connections_max, open_files),
        "heads": OrderedDict(),
    }
    return type("NodeHttpProtocol", (BoundedHttpProtocol,), attributes)
