"""The message channel between the evaluating process and one worker: JSON lines over a socket pair.

Each worker inherits one end of a `socket.socketpair()` (its file descriptor number is in the worker's
argv). Messages are JSON objects, one per line; tensors never travel here, they go through files whose
names the parent derives itself (`pkit.harness.snapshot`). The parent reads without blocking and caps a
line's length, so a worker that floods or garbles its channel is cut off, not believed.

Example:
    >>> import socket
    >>> a, b = socket.socketpair()
    >>> parent, worker = ParentEnd(a), WorkerEnd(b.detach())
    >>> worker.send({"op": "hello", "rank": 0})
    >>> parent.poll()
    [{'op': 'hello', 'rank': 0}]
    >>> worker.close(); parent.close()
"""
from __future__ import annotations

import json
import os
import socket

MAX_LINE = 1 << 20
"""Longest message in bytes; a longer line ends the conversation (ProtocolError)."""


class ProtocolError(Exception):
    """A worker sent something that is not a well-formed message."""


class WorkerEnd:
    """The worker's side: blocking sends and receives on an inherited descriptor."""

    def __init__(self, fd: int):
        self._sock = socket.socket(fileno=fd)
        self._buffer = b""

    def send(self, message: dict) -> None:
        self._sock.sendall(json.dumps(message, default=str).encode() + b"\n")

    def recv(self) -> dict:
        """The next message from the parent; EOFError when the parent has gone."""
        while b"\n" not in self._buffer:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise EOFError("the evaluating process closed the channel")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        self._sock.close()


class ParentEnd:
    """The parent's side: non-blocking reads of whole messages, blocking sends of short replies."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.sock.setblocking(False)
        self._buffer = b""
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def poll(self) -> list[dict]:
        """Every complete message that has arrived; marks the channel closed at EOF."""
        while not self.closed:
            try:
                chunk = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                break
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE and b"\n" not in self._buffer[-MAX_LINE:]:
                self.closed = True
                raise ProtocolError(f"a message longer than {MAX_LINE} bytes")
        messages = []
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError as e:
                raise ProtocolError(f"not JSON: {line[:80]!r}") from e
            if not isinstance(message, dict) or not isinstance(message.get("op"), str):
                raise ProtocolError(f"not a message: {line[:80]!r}")
            messages.append(message)
        return messages

    def send(self, message: dict) -> bool:
        """Send one message; False when the worker is gone."""
        data = json.dumps(message).encode() + b"\n"
        self.sock.setblocking(True)
        try:
            self.sock.settimeout(5.0)
            self.sock.sendall(data)
            return True
        except OSError:
            return False
        finally:
            self.sock.setblocking(False)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


def pair() -> tuple[ParentEnd, int]:
    """A parent end and the descriptor to hand to a worker (inheritable; close it in the parent after the start)."""
    a, b = socket.socketpair()
    fd = b.detach()
    os.set_inheritable(fd, True)
    return ParentEnd(a), fd
