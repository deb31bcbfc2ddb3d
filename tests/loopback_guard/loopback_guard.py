"""Tests reach only loopback: refuse, record and name every other destination.

Two layers, both installed by tests/conftest.py for the pytest process and everything it
starts:

- Python: ``install()`` wraps ``socket.socket.connect``/``connect_ex``/``sendto``/``sendmsg``
  and name resolution. A destination outside 127.0.0.0/8 and ::1 (or a host name other than
  ``localhost``, whose lookup would itself send a DNS query) raises
  :class:`NonLoopbackConnectionError` before any packet leaves. Child Python processes get the
  same guard from ``sitecustomize.py`` beside this file, on ``PYTHONPATH``.
- Everything that speaks HTTP(S) through the standard proxy variables (Terraform and its Go
  provider, pip, boto3): ``HTTP(S)_PROXY`` points at :class:`RefusingProxy` on loopback, which
  records the destination and answers 403. Go never proxies loopback, so the provider's calls
  to the AWS emulator on 127.0.0.1 go straight through; anything else lands here.

Every refusal is appended to the file named by ``LOOPBACK_GUARD_LOG``; an autouse fixture
fails the test that caused one, naming the address, even where the code under test caught
the error (an SSH transport reports an unreachable node, pip warns and goes on).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import socketserver
import sys
import threading
from typing import Any

LOG_ENV = "LOOPBACK_GUARD_LOG"
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}


class NonLoopbackConnectionError(PermissionError):
    """A test tried to reach an address outside loopback."""


def is_loopback(host: object) -> bool:
    if host is None:
        return True  # getaddrinfo(None, port): the local wildcard or loopback
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return False
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a name: resolving it would ask DNS


def resolves_without_dns(host: object) -> bool:
    """Loopback names and any IP literal: looking them up sends nothing."""
    if is_loopback(host):
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    try:
        ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return False
    return True


def record(what: str) -> None:
    line = f"pid {os.getpid()} ({' '.join(sys.argv)[:200]}): {what}\n"
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(line)


def refuse(what: str) -> NonLoopbackConnectionError:
    record(what)
    return NonLoopbackConnectionError(
        errno.EACCES, f"loopback guard: refused {what} (tests reach only 127.0.0.0/8 and ::1)"
    )


def _check_address(sock: socket.socket, address: Any, verb: str) -> None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # unix sockets, netlink: no network
    host = address[0] if isinstance(address, tuple) and address else address
    if not is_loopback(host):
        port = address[1] if isinstance(address, tuple) and len(address) > 1 else "?"
        raise refuse(f"{verb} to {host}:{port}")


_installed = False


def install() -> None:
    """Wrap the socket module in this process (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    original_sendto = socket.socket.sendto
    original_sendmsg = socket.socket.sendmsg
    original_getaddrinfo = socket.getaddrinfo
    original_gethostbyname = socket.gethostbyname
    original_gethostbyname_ex = socket.gethostbyname_ex

    def connect(self: socket.socket, address: Any) -> None:
        _check_address(self, address, "connection")
        return original_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _check_address(self, address, "connection")
        return original_connect_ex(self, address)

    def sendto(self: socket.socket, data: Any, *args: Any) -> int:
        _check_address(self, args[-1], "datagram")
        return original_sendto(self, data, *args)

    def sendmsg(self: socket.socket, buffers: Any, *args: Any) -> int:
        if len(args) >= 3 and args[2] is not None:
            _check_address(self, args[2], "datagram")
        return original_sendmsg(self, buffers, *args)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not resolves_without_dns(host):
            raise refuse(f"name lookup of {host!r}")
        return original_getaddrinfo(host, *args, **kwargs)

    def gethostbyname(host: str) -> str:
        if not resolves_without_dns(host):
            raise refuse(f"name lookup of {host!r}")
        return original_gethostbyname(host)

    def gethostbyname_ex(host: str) -> Any:
        if not resolves_without_dns(host):
            raise refuse(f"name lookup of {host!r}")
        return original_gethostbyname_ex(host)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.socket.sendto = sendto  # type: ignore[assignment]
    socket.socket.sendmsg = sendmsg  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname
    socket.gethostbyname_ex = gethostbyname_ex


class _ProxyHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline(4096).decode("latin-1").strip()
        # "CONNECT host:443 HTTP/1.1" (HTTPS) or "GET http://host/path HTTP/1.1" (HTTP).
        parts = line.split()
        target = parts[1] if len(parts) > 1 else line
        record(f"proxied request {line.split(' ')[0] if line else '?'} {target}")
        self.wfile.write(
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )


class RefusingProxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy on loopback that forwards nothing: it records and refuses."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def proxy_environment(proxy_url: str) -> dict[str, str]:
    """Proxy variables that send every non-loopback HTTP(S) request to ``proxy_url``."""
    no_proxy = "localhost,127.0.0.1,::1,127.0.0.0/8"
    return {
        "HTTP_PROXY": proxy_url,
        "HTTPS_PROXY": proxy_url,
        "http_proxy": proxy_url,
        "https_proxy": proxy_url,
        "ALL_PROXY": proxy_url,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
    }
