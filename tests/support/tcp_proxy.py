"""A TCP forwarder on 127.0.0.1 that a fault test can take down and bring back on the same port.

Why: moto_server keeps its objects in memory, so stopping the real server in the middle of a run would
also lose what the run had stored before. Clients talk to the proxy instead; `down()` closes its
listening socket and every open connection (clients then see exactly what a stopped server gives:
connection refused, or a reset), `up()` listens again on the same port, with the server's data intact.

The port is held from construction to `close()` by a socket bound to it and never listening: while the
proxy is down it refuses connections, and another test worker cannot take the port in the meantime (a
port let go between `down()` and `up()` could be, and the proxy would then come back on someone else's
server, or not at all). Holder and listener both set SO_REUSEADDR, which lets them share the port; the
kernel never hands a bound port out as an ephemeral one, and a plain bind of it fails (only a socket
that sets SO_REUSEADDR too and names this very port could share it).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._holder = socket.socket()
        self._holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._holder.bind(("127.0.0.1", 0))
        self.port = int(self._holder.getsockname()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        assert self._listener is None, "already up"
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            connections, self._connections = self._connections, set()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        """Down for good: the port is let go."""
        self.down()
        self._holder.close()

    @property
    def is_up(self) -> bool:
        return self._listener is not None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._connections |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for conn in (source, sink):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
