"""Ports on 127.0.0.1 where nothing answers, held for as long as a test needs them dead.

A port found free and let go (bind to port 0, read it, close) is free for every other process too: a
test worker beside this one may start a server on it a moment later, and a "dead" URL then answers, or
hangs. `dead_port()` keeps a socket bound to the port and never listening: connecting to it is refused
(ECONNREFUSED, what a stopped server gives), and no other socket can bind it (the holder does not set
SO_REUSEADDR, so neither a plain nor a reusing bind shares it, and the kernel never hands a bound port
out as an ephemeral one) until the block ends.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def dead_port() -> Iterator[int]:
    """A port that refuses connections until the block ends."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        yield int(holder.getsockname()[1])


@contextlib.contextmanager
def dead_url(path: str = "") -> Iterator[str]:
    """`http://127.0.0.1:<dead port><path>`, dead until the block ends."""
    with dead_port() as port:
        yield f"http://127.0.0.1:{port}{path}"


# A test that takes `dead_url` gets one held for the whole test; a module registers the fixture by
# importing `dead_url_fixture` (as prom_services' and s3_server's fixtures are registered).
@pytest.fixture(name="dead_url")
def dead_url_fixture() -> Iterator[str]:
    with dead_url() as url:
        yield url
