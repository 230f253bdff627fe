"""A TCP proxy between a scheduler and the API server, for partitions on demand.

``cut()`` drops every connection at once and refuses new ones, so whatever the API server
sent but the scheduler had not read is lost (as on a real network partition, and unlike
SIGSTOP, where the kernel keeps buffering the stream for the frozen process);
``restore()`` lets connections through again. TLS passes through untouched: the serving
certificate names 127.0.0.1, whatever the port.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import yaml


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._up = True
        threading.Thread(target=self._accept, daemon=True, name="proxy accept").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                up = self._up
            if not up:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every connection (with a reset: no orderly end of stream) and refuse more."""
        with self._lock:
            self._up = False
            dropped, self._open = self._open, set()
        for sock in dropped:
            _reset(sock)

    def restore(self) -> None:
        with self._lock:
            self._up = True

    def close(self) -> None:
        self.cut()
        self._listener.close()

    def kubeconfig(self, original: Path, into: Path) -> Path:
        """A copy of ``original`` whose server is this proxy."""
        config = yaml.safe_load(original.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        into.write_text(yaml.safe_dump(config))
        return into


def _reset(sock: socket.socket) -> None:
    """End a connection at once, dropping what is unsent. shutdown() first: a plain close
    does nothing while another thread is blocked reading the socket."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
