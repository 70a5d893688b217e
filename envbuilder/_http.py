"""envbuilder's one HTTP client (on urllib3, which the docker SDK brings): what registries
(``run.registry``) and package indexes (``knowledge.indexcheck``) are asked through.

* Only ``http``/``https`` (no ``file://``, ``ftp://``...), for the first URL and every redirect.
  Plain HTTP only to true loopback (``localhost``, or an address that *parses* as loopback:
  ``127.0.0.1.example.com`` is a name) unless the caller allows it for a URL the user gave;
  a redirect never goes from HTTPS down to plain HTTP elsewhere.
* Redirects are followed by hand, at most ``MAX_REDIRECTS``; an ``Authorization`` is sent only
  to the origin (scheme, host, port) it is bound to, never across a redirect to another.
* A total deadline per request, headers and body included: a watchdog shuts the socket down
  when it passes (a server dripping a byte at a time cannot hold the command), and one per
  client (a command). No connection outlives its request.
* Bodies are bounded (Content-Length judged first, then while reading) and kept as sent (no
  Content-Encoding undone): what is hashed is what the server stored.
* Every failure is one line (``HTTPFailure``, an OperationError: exit 1).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import BinaryIO, Any, Mapping

from envbuilder.errors import OperationError, redact

MAX_REDIRECTS = 5
_CTL = re.compile(r"[\x00-\x20\x7f]")


class HTTPFailure(OperationError):
    """A request that failed: refused, reset, malformed, too large, too slow (exit 1)."""


def _fail(msg: str, step: str) -> HTTPFailure:
    return HTTPFailure(redact(msg), step=step)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, ``[::1]`` bracketed or not) is this machine's
    loopback: ``localhost`` or an address in 127.0.0.0/8 or ::1, decided by parsing it."""
    h = host.strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` with the default port spelled out (the unit
    credentials are bound to)."""
    u = urllib.parse.urlsplit(url)
    scheme = u.scheme.lower()
    try:
        port = u.port
    except ValueError:
        port = None
    port = port or {"http": 80, "https": 443}.get(scheme)
    host = (u.hostname or "").lower()
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


def check_url(url: str, what: str, *, plain_http: bool = False, step: str = "inspect") -> str:
    """``url`` when envbuilder may fetch it: http(s) only, plain HTTP only to loopback (or
    anywhere with ``plain_http``: a URL the user gave), no space or control character, a
    host; else one line, exit 1. ``what`` names it ("the registry's token realm")."""
    if _CTL.search(url) or len(url) > 8192:
        raise _fail(f"{what} {url[:200]!r} is not a URL (spaces or control "
                    f"characters)", step)
    u = urllib.parse.urlsplit(url)
    scheme = u.scheme.lower()
    if scheme not in ("http", "https"):
        raise _fail(f"{what} {url[:200]!r} is not an http(s) URL: envbuilder "
                    f"fetches nothing else", step)
    try:
        u.port  # noqa: B018 - a bad port raises
    except ValueError:
        raise _fail(f"{what} {url[:200]!r} has a bad port", step) from None
    if not u.hostname:
        raise _fail(f"{what} {url[:200]!r} names no host", step)
    if scheme == "http" and not plain_http and not is_loopback(u.hostname):
        raise _fail(f"{what} {url[:200]!r} is plain HTTP to {u.hostname}, not "
                    f"loopback: envbuilder uses plain HTTP only on this machine", step)
    return url


# -- the transport ------------------------------------------------------------------------

_active = threading.local()  # the deadline watchdog of the request in flight on this thread


class _Watch:
    """Shuts the sockets of one request down when its deadline passes: a blocked read returns
    at once, whatever the server drips."""

    def __init__(self, seconds: float) -> None:
        self.fds: list[int] = []
        self.fired = False
        self.lock = threading.Lock()
        self.timer = threading.Timer(max(seconds, 0.001), self._fire)
        self.timer.daemon = True
        self.timer.start()

    def add(self, sock: socket.socket) -> None:
        with self.lock:
            fd = os.dup(sock.fileno())
            self.fds.append(fd)
            if self.fired:
                self._shut(fd)

    @staticmethod
    def _shut(fd: int) -> None:
        s = socket.socket(fileno=fd)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            s.detach()

    def _fire(self) -> None:
        with self.lock:
            self.fired = True
            for fd in self.fds:
                self._shut(fd)

    def close(self) -> None:
        self.timer.cancel()
        with self.lock:
            for fd in self.fds:
                os.close(fd)
            self.fds.clear()


def _pool_manager(proxy: str | None) -> Any:
    import urllib3
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Watched:
        """A connection whose new sockets join the active watch (one class for both schemes)."""

        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()  # type: ignore[misc]
            w = getattr(_active, "watch", None)
            if w is not None:
                w.add(sock)
            return sock

    class Conn(Watched, HTTPConnection):
        pass

    class SConn(Watched, HTTPSConnection):
        pass

    class Pool(HTTPConnectionPool):
        ConnectionCls = Conn

    class SPool(HTTPSConnectionPool):
        ConnectionCls = SConn

    pm = urllib3.ProxyManager(proxy, num_pools=4) if proxy else urllib3.PoolManager(num_pools=4)
    pm.pool_classes_by_scheme = {"http": Pool, "https": SPool}
    return pm


@dataclass(frozen=True)
class Response:
    url: str  # the URL that answered (after redirects)
    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def media_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip()


class Client:
    """GETs with a deadline per request (``timeout`` seconds) and one for the client (``total``
    seconds: a command); ``name`` says whom failures are about ("the registry X")."""

    def __init__(self, name: str, *, timeout: float, total: float, step: str) -> None:
        self.name, self.timeout, self.total, self.step = name, timeout, total, step
        self.deadline = time.monotonic() + total
        self._by_command = False  # whether the command's deadline, not the request's, binds
        self._pools: dict[str | None, Any] = {}

    def request(self, url: str, headers: Mapping[str, str], *, limit: int,
                auth: str | None = None, auth_origin: str | None = None,
                what: str = "answer", plain_http: bool = False,
                sink: BinaryIO | None = None) -> Response:
        """GET ``url``, following redirects by hand: ``auth`` (an Authorization value) goes
        only to ``auth_origin``; ``plain_http`` allows plain HTTP for ``url`` itself (one the
        user gave), not for a redirect. ``sink``: a 2xx answer's body is written there as it
        arrives (a layer blob of gigabytes), not kept (the Response's body is then empty)."""
        start = time.monotonic()
        for hop in range(MAX_REDIRECTS + 1):
            check_url(url, "URL" if hop == 0 else "redirect", plain_http=plain_http and hop == 0,
                      step=self.step)
            hdrs = {"User-Agent": "envbuilder", **headers}
            if auth and auth_origin and origin(url) == auth_origin:
                hdrs["Authorization"] = auth
            own = self.timeout - (time.monotonic() - start)
            left = self.deadline - time.monotonic()
            remaining, self._by_command = min(own, left), left < own
            if remaining <= 0:
                raise self._late(url)
            status, rh, body = self._once(url, hdrs, remaining, limit, what, sink)
            if status in (301, 302, 303, 307, 308):
                loc = rh.get("location")
                if not loc:
                    raise _fail(f"{self.name} answered {status} without a Location for {url}",
                                self.step)
                url = urllib.parse.urljoin(url, loc)
                continue
            return Response(url, status, rh, body)
        raise _fail(f"{self.name} redirected more than {MAX_REDIRECTS} times from {url}", self.step)

    def _late(self, url: str) -> HTTPFailure:
        if self._by_command:
            return _fail(f"{self.name} did not answer {url} within the command's deadline "
                         f"({self.total:g} s for all its requests{self.deadline_hint})", self.step)
        return _fail(f"{self.name} did not answer {url} within its deadline ({self.timeout:g} s "
                     f"a request{self.timeout_hint})", self.step)

    timeout_hint = ""
    deadline_hint = ""

    def _pool(self, url: str) -> Any:
        import urllib.request

        host = urllib.parse.urlsplit(url).hostname or ""
        proxy = None
        if not is_loopback(host) and not urllib.request.proxy_bypass(host):
            proxy = urllib.request.getproxies().get(urllib.parse.urlsplit(url).scheme)
        if proxy not in self._pools:
            self._pools[proxy] = _pool_manager(proxy)
        return self._pools[proxy]

    def _once(self, url: str, headers: dict[str, str], remaining: float, limit: int,
              what: str, sink: BinaryIO | None = None) -> tuple[int, dict[str, str], bytes]:
        import http.client

        import urllib3

        watch = _Watch(remaining)
        _active.watch = watch
        resp = None
        try:
            resp = self._pool(url).request(
                "GET", url, headers=headers, redirect=False, retries=False,
                preload_content=False, timeout=urllib3.Timeout(connect=remaining, read=remaining))
            rh = {k.lower(): v for k, v in resp.headers.items()}
            if resp.status in (301, 302, 303, 307, 308):
                return resp.status, rh, b""
            clen = rh.get("content-length", "")
            if clen.isdigit() and int(clen) > limit:
                raise _fail(f"{url}: the {what} is {int(clen)} bytes, more than {limit}", self.step)
            body = bytearray()  # the bytes as stored (no Content-Encoding undone): what is hashed
            streamed = 0
            to_sink = sink is not None and 200 <= resp.status < 300
            for chunk in resp.stream(1 << 16, decode_content=False):
                if to_sink:
                    assert sink is not None
                    sink.write(chunk)
                    streamed += len(chunk)
                else:
                    body += chunk
                if len(body) + streamed > limit:
                    raise _fail(f"{url}: the {what} is more than {limit} bytes", self.step)
            if watch.fired:
                raise self._late(url)
            return resp.status, rh, bytes(body)
        except OperationError:
            raise
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError,
                ValueError, UnicodeError) as e:
            if watch.fired:
                raise self._late(url) from None
            reason = getattr(e, "reason", None) or e
            raise _fail(f"cannot reach {self.name} ({url}): {type(reason).__name__}: "
                        f"{str(reason)[:300]}", self.step) from None
        finally:
            _active.watch = None
            if resp is not None:
                resp.release_conn()
                resp.close()
            # no connection outlives its request: the next one connects afresh, under its
            # own watchdog (a kept-alive socket would be outside it)
            self._pool(url).clear()
            watch.close()
