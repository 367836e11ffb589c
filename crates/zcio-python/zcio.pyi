"""zcio: large buffers between processes with copy semantics at zero-copy speed (Linux).

Two processes find each other by a name. `Channel.send` takes any C-contiguous object with
the buffer protocol under emulated copy: it returns once the message is queued, the caller may
change its object at once, and the receiver gets the bytes as they were at the call, in a
`Buffer` of its own (writable; `numpy.frombuffer(buf, dtype)` views it without a copy).

Inside `with numpy_memory():` numpy makes its large arrays in zcio's memory, and their sends
ship it without a copy.

Every blocking call releases the GIL; a signal whose handler raises (Ctrl-C) ends it, a
timeout raises `TimeoutError`, a peer that is gone raises `PeerGone`.
"""

from collections.abc import Buffer as _Buffer
from types import TracebackType
from typing import Any

class Error(Exception):
    """A zcio call failed; the message says what was wrong."""

class PeerGone(ConnectionError):
    """The process at the other end of the channel is gone."""

class TooSmall(ValueError):
    """The buffer is smaller than the next message, which stays queued."""

    needed: int
    """The next message's length."""

class Buffer:
    """A received message: bytes of this process's own, writable, with the buffer protocol.
    Freed when the last view of it is gone."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

class Channel:
    """One end of a channel (`connect`, `Listener.accept`, `Pipe`)."""

    @property
    def last_path(self) -> str:
        """The path the last send or receive's data took, as zcio reported it."""

    def send(self, obj: _Buffer, semantics: str = "emulated-copy") -> int:
        """Send the bytes of `obj` (C-contiguous, any buffer-protocol object) under
        `semantics`: "emulated-copy" (default: `obj` may change at once), "copy", or "share"
        and "emulated-share" (`obj` must not change until `wait(ticket)`). Returns a ticket."""
    def recv(self, timeout: float | None = None) -> Buffer:
        """Receive the next message into a `Buffer` of its own length."""
    def recv_into(self, obj: _Buffer, timeout: float | None = None) -> int:
        """Receive the next message into `obj` (writable, C-contiguous); returns its length.
        A longer message stays queued and `TooSmall.needed` says its length."""
    def peek_len(self, timeout: float | None = None) -> int:
        """The next message's length, waiting for it; the message stays queued."""
    def wait(self, ticket: int, timeout: float | None = None) -> None:
        """Wait until output `ticket` has reached the receiver."""
    def flush(self, timeout: float | None = None) -> None:
        """Wait until every output has reached the receiver."""
    def send_obj(self, obj: Any) -> None:
        """Send a picklable object (pickle protocol 5); the large buffers it holds go out of
        band under emulated copy, never pickled."""
    def recv_obj(self, timeout: float | None = None) -> Any:
        """Receive an object sent by `send_obj`; its buffers are `Buffer`s (numpy arrays on
        them are writable)."""
    def set_volatile_loans(self, yes: bool) -> None:
        """Trust the peer with volatile loans (both ends must): large sends reuse memory files
        lent to the receiver and given back when its `Buffer` is freed. Only for a peer you
        trust like your own process: nothing stops it writing a file while you hold it. A
        `Buffer` received so is the file's memory, shared with a child made by `os.fork()`
        while both hold it (copy it, `bytes(buf)` or `numpy.array(buf)`, where that matters)."""
    def fileno(self) -> int:
        """A descriptor readable when a message is ready (select, selectors, asyncio)."""
    def close(self) -> None:
        """Close this end; the peer's next call raises `PeerGone`."""
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Channel: ...
    def __exit__(
        self,
        t: type[BaseException] | None,
        v: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class Listener:
    """Listens on a name; each `accept()` is a channel to one client."""

    @property
    def name(self) -> str: ...
    def accept(self, timeout: float | None = None) -> Channel:
        """Wait for the next client (at most `timeout` seconds) and return its channel."""
    def close(self) -> None:
        """Stop listening; the name is free again."""
    def __enter__(self) -> Listener: ...
    def __exit__(
        self,
        t: type[BaseException] | None,
        v: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

def listen(name: str, window: int | None = None) -> Listener:
    """Listen on `name`: a plain name on this host (only this user's processes may connect),
    or "tcp://address:port" for peers on other hosts. `window`: the bytes of messages each end
    may have in flight before `send` waits for the receiver (16 MiB unless given)."""

def connect(name: str, timeout: float | None = None) -> Channel:
    """Connect to the listener of `name`, waiting up to `timeout` seconds (None: a minute)."""

def Pipe() -> tuple[Channel, Channel]:
    """Two connected ends, like `multiprocessing.Pipe()`: either may go to a child process
    (`multiprocessing` with spawn, forkserver or fork) before its first use."""

def alloc(n: int) -> Buffer:
    """`n` zeroed bytes of zcio's (2 MiB pages from 2 MiB), for an array to fill and send.
    From 1 MiB they are a memory file: the first emulated-copy send of them (or of a part)
    ships the file without a copy and makes these pages copy-on-write, so the send takes well
    under a millisecond at any length and each page written afterwards is copied by the kernel;
    a later send of the same memory copies it once. After a fork (`os.fork()`,
    `multiprocessing`'s fork start method) each process has its own copy, its bytes of the
    moment of the fork; the first send of it after the fork, in either process, copies it
    once."""

class NumpyMemory:
    """What `numpy_memory()` returns: a context manager; at its exit, the numpy memory handler
    current before it is back."""

    @property
    def min_bytes(self) -> int:
        """From how many bytes numpy's arrays are zcio's."""
    def __enter__(self) -> NumpyMemory: ...
    def __exit__(
        self,
        t: type[BaseException] | None,
        v: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

def numpy_memory(min_bytes: int = 1 << 20) -> NumpyMemory:
    """A context manager (a NumPy memory handler, NEP 49, named "zcio"): inside its `with`
    block numpy makes every array whose data is `min_bytes` or more (1 MiB to 1 GiB, zcio's
    largest message; else `ValueError`) in zcio's memory, as `alloc`'s: a memory file in 2 MiB
    pages, whose first emulated-copy send ships it without a copy and makes the sender's pages
    copy-on-write. Smaller arrays go to the handler current at the block's start (nested
    blocks chain so).

        with zcio.numpy_memory():
            a = np.arange(1 << 26, dtype=np.float32) * 2
        ch.send(a)          # no copy, at any size

    Each such array costs a memory file of its own, its pages allocated and zeroed when numpy
    asks (well under a millisecond for a few MiB, milliseconds for tens of MiB) and a
    descriptor until it is sent (or the process forks): keep small and short-lived arrays
    outside. Arrays made inside keep their memory after the block and are freed as usual.
    numpy's handler is per context (`contextvars`): a thread started inside the block does not
    use it, and an asyncio task uses the one current where it was created. After a fork
    (`os.fork()`, `multiprocessing`'s fork start method) each process has its own copy of such
    an array, its bytes of the moment of the fork, as with numpy's own memory; the first send
    of it after the fork, in either process, copies it once. `ImportError` where numpy (1.22
    or later) is not importable."""

def numpy_memory_stats() -> dict[str, int]:
    """`arrays`: how many blocks numpy holds in zcio's memory now; `bytes`: their length;
    `fallbacks`: how many arrays of `min_bytes` or more went to numpy's own memory because no
    memory file could be made for them (over 1 GiB, or the kernel refused), since the process
    began."""
