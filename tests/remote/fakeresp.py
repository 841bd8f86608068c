"""A hostile fake server speaking RESP at the backend boundary: it answers each command with
the bytes a test gives it (a lie about a size, a value past every limit, a reply of the wrong
shape), so the client's handling of what a real Redis never sends can be tested."""

from __future__ import annotations

import socket
import threading
from typing import Callable

# What a real server answers the connection handshake with (``HELLO 3``: a map).
HELLO = b"%1\r\n+proto\r\n:3\r\n"


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def _read_command(f) -> list[bytes] | None:
    line = f.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.split()
    out = []
    for _ in range(int(line[1:])):
        n = int(f.readline()[1:])
        out.append(f.read(n + 2)[:-2])
    return out


class FakeResp:
    """A loopback server answering ``replies[COMMAND](args)`` (bytes, or a function of the
    command's arguments); HELLO answers a real map and PING ``+PONG`` unless given, anything
    else ``+OK``. ``seen`` lists the command names asked."""

    def __init__(self, replies: dict[bytes, bytes | Callable[[list[bytes]], bytes]]):
        self.replies = {b"HELLO": HELLO, b"PING": b"+PONG\r\n", **replies}
        self.seen: list[bytes] = []
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.url = f"redis://127.0.0.1:{self.server.getsockname()[1]}/0"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        try:
            while (cmd := _read_command(f)) is not None:
                op = cmd[0].upper()
                self.seen.append(op)
                reply = self.replies.get(op, b"+OK\r\n")
                conn.sendall(reply(cmd[1:]) if callable(reply) else reply)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.server.close()
