"""A loopback HTTP server that answers every request with scripted raw writes.

For what the scripted upstream (:mod:`app.testing.upstream`) does not do on purpose:
exact byte boundaries between writes, any content type. ``RawUpstream.reply`` sets the
writes (bytes, each sent after an optional pause); requests are recorded as
``(request line, headers, body)``. The connection is closed after the last write.
"""

from __future__ import annotations

import socket
import threading
import time


class RawUpstream:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.base_url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.writes: list[tuple[float, bytes]] = []
        self.requests: list[tuple[bytes, bytes, bytes]] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def reply(self, status: str, headers: list[tuple[str, str]], *parts: bytes | float) -> None:
        """Answer with ``status`` and ``headers`` (``connection: close`` added), then the
        body ``parts``: bytes are written as one write each, a float pauses that long."""
        head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
        writes: list[tuple[float, bytes]] = [(0.0, (head + "connection: close\r\n\r\n").encode())]
        pause = 0.0
        for part in parts:
            if isinstance(part, float):
                pause += part
            else:
                writes.append((pause, part))
                pause = 0.0
        self.writes = writes

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(body) < length:
                body += conn.recv(65536)
            self.requests.append((head.split(b"\r\n")[0], head, body))
            for pause, chunk in self.writes:
                if pause:
                    time.sleep(pause)
                conn.sendall(chunk)

    def close(self) -> None:
        self.sock.close()
