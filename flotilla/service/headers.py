"""The HTTP protocol ``serve`` runs: uvicorn's h11 protocol with a deadline for a request's headers.

Why: uvicorn bounds the idle time between requests (keep-alive) but not
the time a client takes to send a request's headers, so a client sending
one byte every few seconds held a connection (and its buffers) forever;
a thousand of them are a cheap way to exhaust the server's sockets. Here
every request's headers must be complete within ``server.headerTimeout``
(10 s by default) of the connection opening or of the first byte after the
previous answer; past it the connection is answered ``408 Request
Timeout`` and closed. The body is not subject to it (a large upload may
take its time, within ``server.maxBodySize``).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEADER_TIMEOUT = 10.0
_TIMEOUT_ANSWER = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                   b"content-length: 45\r\nconnection: close\r\n\r\n"
                   b"request headers not complete within the limit")


class HeaderDeadlineProtocol(H11Protocol):
    """h11, closing a connection whose request headers do not arrive within :attr:`header_timeout` seconds."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:   # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._headers_of = None   # the request whose headers arrived last
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None and self.cycle is not self._headers_of:   # a request's headers are complete
            self._headers_of = self.cycle
            self._disarm()
        elif self.cycle is None or self.cycle.response_complete:   # the next request's headers are arriving
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and self.cycle is not self._headers_of:   # headers came with a pipelined answer
            return
        if self.cycle is not None and not self.cycle.response_complete:     # a request is being answered
            return
        self.transport.write(_TIMEOUT_ANSWER)
        self.transport.close()


def protocol_with(header_timeout: float) -> type[HeaderDeadlineProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` with this deadline, in seconds."""
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout": float(header_timeout)})


__all__ = ["DEFAULT_HEADER_TIMEOUT", "HeaderDeadlineProtocol", "protocol_with"]
