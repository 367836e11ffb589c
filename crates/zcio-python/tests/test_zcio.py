"""zcio from Python: the tests `cargo test -p zcio-python` runs with the machine's python3.

Each test passes real messages between real processes (a child started with
`subprocess` or `multiprocessing`) or between two ends in this process, and checks the
bytes one by one. numpy is needed (the runner installs it where it is missing).
"""

import array
import mmap
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest
import uuid
import weakref

import zcio

import numpy as np


def unique(what):
    return f"zcio-py-{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def pattern(n, seed):
    return bytes((i * 7 + seed) % 251 for i in range(min(n, 251))) * (n // 251 + 1)


def pair():
    """Two connected ends in this process: a listener's accepted end and a client's."""
    name = unique("pair")
    lst = zcio.listen(name)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("rx", lst.accept(timeout=30)))
    t.start()
    tx = zcio.connect(name, timeout=30)
    t.join()
    lst.close()
    return tx, got["rx"]


def child(code, *args):
    """A separate Python process running `code` (with this module importable)."""
    env = dict(os.environ)
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Buffers(unittest.TestCase):
    def test_every_buffer_type_changed_after_send_arrives_as_it_was(self):
        tx, rx = pair()
        with tx, rx:
            n = 3 * 4096 + 17
            m = mmap.mmap(-1, n)
            m.write(pattern(n, 5)[:n])
            objs = {
                "bytes": pattern(n, 1)[:n],
                "bytearray": bytearray(pattern(n, 2)[:n]),
                "memoryview": memoryview(bytearray(pattern(n, 3)[:n])),
                "array": array.array("B", pattern(n, 4)[:n]),
                "mmap": m,
            }
            objs["numpy"] = np.frombuffer(pattern(n, 6)[:n], dtype=np.uint8).copy()
            for name, obj in objs.items():
                want = bytes(memoryview(obj).cast("B"))
                tx.send(obj)
                # Change it at once (bytes cannot change).
                if name != "bytes":
                    view = memoryview(obj).cast("B")
                    view[:] = b"\xee" * len(view)
                got = rx.recv(timeout=30)
                self.assertEqual(len(got), n, name)
                self.assertEqual(bytes(got), want, f"{name}: the receiver's bytes")

    def test_a_float_array_goes_as_its_bytes(self):
        tx, rx = pair()
        with tx, rx:
            a = array.array("d", [float(i) / 3 for i in range(100_000)])
            want = a.tobytes()
            tx.send(a)
            a[0] = -1.0
            got = rx.recv(timeout=30)
            self.assertEqual(bytes(got), want)
            back = array.array("d")
            back.frombytes(bytes(got))
            self.assertEqual(back[1], 1 / 3)
            # A 2-D numpy array of floats, C-contiguous, goes as its bytes, and is received
            # into an array of complex numbers of the same size.
            f = np.arange(2 * 3 * 4096, dtype=np.float32).reshape(6, 4096)
            want = f.tobytes()
            tx.send(f)
            f[:] = -1
            into = np.zeros(3 * 4096, dtype=np.complex64)
            self.assertEqual(rx.recv_into(into, timeout=30), len(want))
            self.assertEqual(into.tobytes(), want)

    def test_the_received_buffer_is_writable_its_own_and_freed_with_its_last_view(self):
        tx, rx = pair()
        with tx, rx:
            tx.send(b"\x01" * 10_000)
            buf = rx.recv(timeout=30)
            self.assertIsInstance(buf, zcio.Buffer)
            view = memoryview(buf)
            self.assertFalse(view.readonly)
            self.assertEqual(view.format, "B")
            view[0] = 9
            self.assertEqual(bytes(buf)[:2], b"\x09\x01")
            gone = weakref.ref(buf)
            del buf
            self.assertIsNotNone(gone(), "a view still holds it")
            view.release()
            del view
            self.assertIsNone(gone(), "freed with its last view")

    def test_recv_into_fills_a_buffer_of_the_callers_and_a_small_one_keeps_the_message(self):
        tx, rx = pair()
        with tx, rx:
            tx.send(pattern(50_000, 9)[:50_000])
            small = bytearray(1000)
            with self.assertRaises(zcio.TooSmall) as e:
                rx.recv_into(small, timeout=30)
            self.assertEqual(e.exception.needed, 50_000)
            self.assertIn("50000", str(e.exception))
            self.assertEqual(rx.peek_len(timeout=30), 50_000)
            big = bytearray(60_000)
            n = rx.recv_into(big, timeout=30)
            self.assertEqual(n, 50_000)
            self.assertEqual(bytes(big[:n]), pattern(50_000, 9)[:50_000])

    def test_a_read_only_target_or_a_non_buffer_is_refused_by_name(self):
        tx, rx = pair()
        with tx, rx:
            tx.send(b"abc")
            with self.assertRaises(BufferError) as e:
                rx.recv_into(b"xyz", timeout=30)
            self.assertIn("read-only", str(e.exception))
            # The message is still there.
            self.assertEqual(bytes(rx.recv(timeout=30)), b"abc")
            with self.assertRaises(TypeError) as e:
                tx.send("a str has no buffer")
            self.assertIn("buffer protocol", str(e.exception))
            with self.assertRaises(ValueError):
                tx.send(b"")
            with self.assertRaises(ValueError) as e:
                tx.send(b"x", semantics="move")
            self.assertIn("move", str(e.exception))

    def test_a_non_contiguous_array_is_refused_with_a_clear_message(self):
        tx, rx = pair()
        with tx, rx:
            a = np.arange(1000, dtype=np.float64).reshape(10, 100)
            for bad in (a[:, ::2], a.T):
                with self.assertRaises(BufferError) as e:
                    tx.send(bad)
                self.assertIn("not C-contiguous", str(e.exception))
            tx.send(np.ascontiguousarray(a.T))
            got = np.frombuffer(rx.recv(timeout=30), dtype=np.float64).reshape(100, 10)
            self.assertTrue((got == a.T).all())

    def test_numpy_views_a_received_buffer_writable_without_a_copy(self):
        tx, rx = pair()
        with tx, rx:
            a = np.arange(1 << 20, dtype=np.float32)
            tx.send(a)
            # 4 MiB: copied once into a sealed memory file, which the receiver maps.
            self.assertIn("sealed memory file", tx.last_path)
            a[:] = -1
            buf = rx.recv(timeout=30)
            self.assertIn("mapped privately", rx.last_path)
            b = np.frombuffer(buf, dtype=np.float32)
            self.assertTrue(b.flags.writeable)
            self.assertEqual(b[12345], 12345.0)
            b[0] = 42
            self.assertEqual(np.frombuffer(buf, dtype=np.float32)[0], 42, "the same memory")
            self.assertEqual(np.asarray(buf).dtype, np.uint8)


class Semantics(unittest.TestCase):
    def test_share_keeps_the_buffer_until_the_ticket_completes(self):
        tx, rx = pair()
        with tx, rx:
            data = bytearray(pattern(5 * 4096, 4)[: 5 * 4096])
            t = tx.send(data, semantics="share")
            got = rx.recv(timeout=30)
            tx.wait(t, timeout=30)
            data[:] = b"\0" * len(data)
            self.assertEqual(bytes(got), pattern(5 * 4096, 4)[: 5 * 4096])

    def test_an_array_on_zcios_memory_ships_its_file_and_keeps_its_promise(self):
        tx, rx = pair()
        with tx, rx:
            a = np.frombuffer(zcio.alloc(8 << 20), dtype=np.uint32)
            self.assertTrue(a.flags.writeable)
            want = np.arange(a.size, dtype=np.uint32)
            a[:] = want
            before = a.ctypes.data
            # A part of it, from its second page: the file goes whole, the message is the part.
            tx.send(a[1024:])
            self.assertIn("the sender's mapping made private", tx.last_path)
            self.assertEqual(a.ctypes.data, before, "the array stays where it was")
            self.assertTrue((a == want).all(), "the sender reads what it sent")
            a[:] = 0  # at once: the kernel copies each page written
            a[-1] = 5
            got = np.frombuffer(rx.recv(timeout=30), dtype=np.uint32)
            self.assertTrue((got == want[1024:]).all())
            self.assertTrue(got.flags.writeable)
            got[0] = 9  # the receiver's own copy of the page
            self.assertEqual(int(a[1024]), 0)
            # Sent again: its bytes of now, copied once.
            tx.send(a)
            self.assertNotIn("made private", tx.last_path)
            a[:] = 7
            again = np.frombuffer(rx.recv(timeout=30), dtype=np.uint32)
            self.assertEqual(int(again[:-1].max()), 0)
            self.assertEqual(int(again[-1]), 5)
            self.assertTrue((got[1:] == want[1025:]).all(), "the first message never changed")

    def test_an_array_on_zcios_memory_reaches_another_process_as_it_was(self):
        name = unique("alloc")
        with zcio.listen(name) as lst:
            p = child(
                """
                import sys, numpy as np, zcio
                ch = zcio.connect(sys.argv[1], timeout=30)
                a = np.frombuffer(zcio.alloc(64 << 20), dtype=np.uint64)
                a[:] = np.arange(a.size, dtype=np.uint64) * 3
                ch.send(a)
                a[::512] = 0  # one word in every 4 KiB page, right after the send
                ch.send(b"changed")
                ch.recv(timeout=30)
                print(ch.last_path)
                """,
                name,
            )
            rx = lst.accept(timeout=30)
            got = np.frombuffer(rx.recv(timeout=30), dtype=np.uint64)
            self.assertEqual(bytes(rx.recv(timeout=30)), b"changed")
            self.assertTrue((got == np.arange(got.size, dtype=np.uint64) * 3).all())
            rx.send(b"ok")
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
            rx.close()

    def test_volatile_loans_between_trusting_ends_reuse_their_files(self):
        tx, rx = pair()
        with tx, rx:
            tx.set_volatile_loans(True)
            rx.set_volatile_loans(True)
            for i in range(4):
                data = bytearray(pattern(3 << 20, i)[: 3 << 20])
                tx.send(data)
                self.assertIn("volatile memory file lent", tx.last_path)
                data[:] = b"\0" * len(data)
                got = rx.recv(timeout=30)
                self.assertIn("volatile memory file mapped in place", rx.last_path)
                self.assertEqual(bytes(got), pattern(3 << 20, i)[: 3 << 20], f"message {i}")
                del got  # given back: the next send reuses its file


class Objects(unittest.TestCase):
    def test_send_obj_carries_a_dict_of_arrays_out_of_band(self):
        tx, rx = pair()
        with tx, rx:
            obj = {
                "x": np.arange(1 << 18, dtype=np.int64),
                "y": np.ones((64, 64), dtype=np.float32),
                "empty": np.zeros(0, dtype=np.uint8),
                "name": "frames",
                "n": [1, 2, 3],
            }
            tx.send_obj(obj)
            obj["x"][:] = 0
            got = rx.recv_obj(timeout=30)
            self.assertEqual(got["name"], "frames")
            self.assertEqual(got["n"], [1, 2, 3])
            self.assertTrue((got["x"] == np.arange(1 << 18)).all())
            self.assertTrue(got["x"].flags.writeable)
            self.assertEqual(got["y"].shape, (64, 64))
            self.assertEqual(got["empty"].size, 0)

    def test_send_obj_of_plain_objects_and_bytearrays(self):
        tx, rx = pair()
        with tx, rx:
            big = bytearray(pattern(1 << 20, 3)[: 1 << 20])
            tx.send_obj({"a": pickle.PickleBuffer(big), "b": (1, "two")})
            big[:10] = b"\0" * 10
            got = rx.recv_obj(timeout=30)
            self.assertEqual(bytes(got["a"]), pattern(1 << 20, 3)[: 1 << 20])
            self.assertEqual(got["b"], (1, "two"))

    def test_recv_obj_of_an_ordinary_message_says_so(self):
        tx, rx = pair()
        with tx, rx:
            tx.send(b"not a header")
            with self.assertRaises(zcio.Error) as e:
                rx.recv_obj(timeout=30)
            self.assertIn("not a send_obj header", str(e.exception))
            tx.send_obj([1])
            self.assertEqual(rx.recv_obj(timeout=30), [1])


class Processes(unittest.TestCase):
    def test_two_processes_started_apart_find_each_other_by_name_and_pass_1_gib(self):
        name = unique("gib")
        n = 1 << 30
        lst = zcio.listen(name)
        p = child(
            """
            import sys, zcio
            n = 1 << 30
            with zcio.connect(sys.argv[1], timeout=60) as ch:
                a = bytearray(n)
                for k in range(0, n, 1 << 20):
                    a[k] = (k >> 20) % 251
                ch.send(a)
                # Changed at once: the receiver must see the bytes of the call.
                for k in range(0, n, 1 << 20):
                    a[k] = 0xFF
                ch.flush(timeout=60)
            print("sent")
            """,
            name,
        )
        with lst, lst.accept(timeout=60) as ch:
            buf = ch.recv(timeout=120)
            self.assertEqual(len(buf), n)
            view = memoryview(buf)
            for k in range(0, n, 1 << 20):
                self.assertEqual(view[k], (k >> 20) % 251, f"byte {k}")
            self.assertEqual(view[1], 0)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("sent", out)

    def test_multiprocessing_children_connect_by_name_under_spawn_and_fork(self):
        import multiprocessing as mp

        for method in ("spawn", "fork", "forkserver"):
            ctx = mp.get_context(method)
            name = unique(method)
            with zcio.listen(name) as lst:
                proc = ctx.Process(target=_mp_sender, args=(name, method))
                proc.start()
                with lst.accept(timeout=60) as ch:
                    got = ch.recv_obj(timeout=60)
                proc.join(60)
                self.assertEqual(proc.exitcode, 0, method)
                self.assertEqual(got["method"], method)
                self.assertEqual(bytes(got["data"]), pattern(300_000, 7)[:300_000])

    def test_a_killed_peer_raises_peer_gone_a_connection_error(self):
        name = unique("killed")
        with zcio.listen(name) as lst:
            p = child(
                """
                import sys, time, zcio
                ch = zcio.connect(sys.argv[1], timeout=60)
                print("connected", flush=True)
                time.sleep(600)
                """,
                name,
            )
            with lst.accept(timeout=60) as ch:
                self.assertEqual(p.stdout.readline().strip(), "connected")
                p.kill()
                p.communicate()
                with self.assertRaises(zcio.PeerGone) as e:
                    ch.recv(timeout=30)
                self.assertIsInstance(e.exception, ConnectionError)

    def test_a_wait_times_out_and_ctrl_c_raises_keyboard_interrupt(self):
        tx, rx = pair()
        with tx, rx:
            t0 = time.monotonic()
            with self.assertRaises(TimeoutError):
                rx.recv(timeout=0.2)
            self.assertGreaterEqual(time.monotonic() - t0, 0.2)
            tx.send(b"after the timeout")
            self.assertEqual(bytes(rx.recv(timeout=30)), b"after the timeout")
        p = child(
            """
            import sys, threading, time, zcio, uuid
            name = "zcio-py-int-" + uuid.uuid4().hex
            l = zcio.listen(name)
            got = {}
            t = threading.Thread(target=lambda: got.setdefault("rx", l.accept()))
            t.start()
            tx = zcio.connect(name)
            t.join()
            print("waiting", flush=True)
            try:
                got["rx"].recv()
            except KeyboardInterrupt:
                print("interrupted %.0f" % (time.monotonic() * 1000), flush=True)
            """
        )
        self.assertEqual(p.stdout.readline().strip(), "waiting")
        time.sleep(0.3)
        sent = time.monotonic() * 1000
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        self.assertIn("interrupted", out, err)
        took = float(out.split("interrupted")[1]) - sent
        print(f"\nKeyboardInterrupt {took:.1f} ms after SIGINT", file=sys.stderr)
        self.assertEqual(p.returncode, 0, err)

    def test_connect_to_a_name_nobody_listens_on_times_out(self):
        t0 = time.monotonic()
        with self.assertRaises(TimeoutError):
            zcio.connect(unique("nobody"), timeout=0.3)
        self.assertLess(time.monotonic() - t0, 30)


class Pipes(unittest.TestCase):
    def test_a_pipe_in_one_process_carries_both_ways(self):
        a, b = zcio.Pipe()
        with a, b:
            a.send(b"ping" * 100_000)
            self.assertEqual(bytes(b.recv(timeout=30)), b"ping" * 100_000)
            b.send(b"pong")
            self.assertEqual(bytes(a.recv(timeout=30)), b"pong")

    def test_a_pipes_end_goes_to_a_child_under_spawn_forkserver_and_fork(self):
        import multiprocessing as mp

        for method in ("spawn", "forkserver", "fork"):
            ctx = mp.get_context(method)
            a, b = zcio.Pipe()
            proc = ctx.Process(target=_pipe_echo, args=(b,))
            proc.start()
            n = (3 << 20) + 5
            data = bytearray(pattern(n, 11)[:n])
            with a:
                a.send(data)
                data[:] = b"\0" * n
                got = a.recv(timeout=60)
                self.assertEqual(bytes(got), pattern(n, 11)[:n], method)
                a.send(b"bye")
                self.assertEqual(bytes(a.recv(timeout=60)), b"bye", method)
            proc.join(60)
            self.assertEqual(proc.exitcode, 0, method)

    def test_a_channel_in_use_cannot_be_pickled_and_an_end_sent_away_is_not_used_here(self):
        a, b = zcio.Pipe()
        with a, b:
            a.send(b"x")
            with self.assertRaises(TypeError) as e:
                pickle.dumps(a)
            self.assertIn("cannot be pickled", str(e.exception))
            c = pickle.loads(pickle.dumps(b))
            with self.assertRaises(ValueError) as e:
                b.recv(timeout=1)
            self.assertIn("another process", str(e.exception))
            with c:
                self.assertEqual(bytes(c.recv(timeout=30)), b"x")


class NumpyMemory(unittest.TestCase):
    """Arrays numpy makes itself inside `with zcio.numpy_memory():` (a NEP 49 handler)."""

    def test_a_large_array_is_zcios_a_small_one_numpys_and_the_handler_ends_with_the_block(self):
        outside = handler_name()
        before = zcio.numpy_memory_stats()
        with zcio.numpy_memory() as m:
            self.assertEqual(m.min_bytes, 1 << 20)
            self.assertEqual(handler_name(), "zcio")
            big = np.empty(8 << 20, dtype=np.uint8)
            self.assertEqual(handler_name(big), "zcio")
            now = zcio.numpy_memory_stats()
            self.assertEqual(now["arrays"], before["arrays"] + 1)
            self.assertEqual(now["bytes"], before["bytes"] + (8 << 20))
            # A small one: numpy records the handler in every array, but its bytes are the
            # default handler's (chained to), not a memory file.
            small = np.empty(1000, dtype=np.float64)
            just_below = np.empty((1 << 20) - 1, dtype=np.uint8)
            self.assertEqual(zcio.numpy_memory_stats()["arrays"], now["arrays"])
            small[:] = 1.5
            just_below[:] = 7
            self.assertEqual(float(small.sum()), 1500.0)
            at_bound = np.empty(1 << 20, dtype=np.uint8)
            self.assertEqual(zcio.numpy_memory_stats()["arrays"], now["arrays"] + 1)
            del at_bound
        self.assertEqual(handler_name(), outside)
        after = np.empty(8 << 20, dtype=np.uint8)
        self.assertEqual(handler_name(after), outside)
        self.assertEqual(zcio.numpy_memory_stats()["arrays"], before["arrays"] + 1, "big")
        del big, small, just_below
        self.assertEqual(zcio.numpy_memory_stats(), before)

    def test_an_array_numpy_made_in_the_block_reaches_another_process_as_it_was(self):
        name = unique("npmem")
        n = (6 << 20) // 4
        with zcio.listen(name) as lst:
            p = child(
                """
                import sys, numpy as np, zcio
                n = int(sys.argv[2])
                want = ((np.arange(n, dtype=np.uint64) * 2654435761 + 11) % (1 << 32)).astype(np.uint32)
                with zcio.connect(sys.argv[1], timeout=30) as ch:
                    whole = np.frombuffer(ch.recv(timeout=30), dtype=np.uint32)
                    part = np.frombuffer(ch.recv(timeout=30), dtype=np.uint32)
                    print(ch.last_path)
                    bad = []
                    for what, got, exp in (("whole", whole, want), ("part", part, want[1001:-3] + 1)):
                        g, e = got.view(np.uint8), exp.view(np.uint8)
                        if g.size != e.size:
                            bad.append(f"{what}: {g.size} bytes, want {e.size}")
                        elif not np.array_equal(g, e):
                            bad.append(f"{what}: byte {int(np.flatnonzero(g != e)[0])} differs")
                    ch.send(("; ".join(bad) or "ok").encode())
                    ch.flush(timeout=30)
                """,
                name,
                str(n),
            )
            with lst.accept(timeout=30) as ch:
                with zcio.numpy_memory():
                    a = ((np.arange(n, dtype=np.uint64) * 2654435761 + 11) % (1 << 32)).astype(
                        np.uint32
                    )
                    b = a + 1
                self.assertEqual(handler_name(a), "zcio")
                where = a.ctypes.data
                ch.send(a)
                self.assertIn("the sender's mapping made private", ch.last_path)
                a[:] = 0xFFFFFFFF  # every byte, right after the send
                # A part of another array, from an offset inside a page, to the end less three.
                ch.send(b[1001:-3])
                self.assertIn("the sender's mapping made private", ch.last_path)
                b[:] = 0
                self.assertEqual(a.ctypes.data, where, "the array stays where it was")
                self.assertEqual(bytes(ch.recv(timeout=60)), b"ok")
                self.assertTrue((a == 0xFFFFFFFF).all(), "the sender's own writes")
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
            self.assertIn("mapped privately", out)

    def test_the_receiver_writes_its_array_and_the_senders_is_unchanged(self):
        name = unique("npmem-w")
        n = 4 << 20
        with zcio.listen(name) as lst:
            p = child(
                """
                import sys, numpy as np, zcio
                with zcio.connect(sys.argv[1], timeout=30) as ch:
                    got = np.frombuffer(ch.recv(timeout=30), dtype=np.uint8)
                    got[:] = 0xAB
                    ok = bool((got == 0xAB).all())
                    ch.send(b"written" if ok else b"the write did not hold")
                    ch.recv(timeout=30)
                """,
                name,
            )
            with lst.accept(timeout=30) as ch, zcio.numpy_memory():
                a = np.empty(n, dtype=np.uint8)
                a[:] = np.arange(n, dtype=np.uint64) % 253
                want = a.copy()
                ch.send(a)
                self.assertIn("made private", ch.last_path)
                self.assertEqual(bytes(ch.recv(timeout=60)), b"written")
                self.assertTrue(np.array_equal(a, want), "the receiver's write reached the sender")
                ch.send(b"bye")
                ch.flush(timeout=30)
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)

    def test_zeros_are_zeros_and_resize_keeps_the_bytes(self):
        with zcio.numpy_memory():
            for _ in range(3):
                dirty = np.empty(4 << 20, dtype=np.uint8)
                dirty[:] = 0xFF
                del dirty
                z = np.zeros(4 << 20, dtype=np.uint8)
                self.assertEqual(handler_name(z), "zcio")
                self.assertFalse(z.any())
            count = zcio.numpy_memory_stats()["arrays"]
            r = np.empty(3 << 20, dtype=np.uint8)
            r[:] = np.arange(r.size, dtype=np.uint64) % 251
            want = r.copy()
            r.resize(9 << 20, refcheck=False)
            self.assertEqual(r.size, 9 << 20)
            self.assertEqual(handler_name(r), "zcio")
            self.assertEqual(zcio.numpy_memory_stats()["arrays"], count + 2, "the old file freed")
            self.assertTrue(np.array_equal(r[: 3 << 20], want), "grown: the bytes kept")
            self.assertFalse(r[3 << 20 :].any(), "grown: numpy zeroes the rest")
            r.resize(2 << 20, refcheck=False)
            self.assertTrue(np.array_equal(r, want[: 2 << 20]), "shrunk: the bytes kept")
            r.resize(100_000, refcheck=False)
            self.assertTrue(np.array_equal(r, want[:100_000]), "shrunk below: the bytes kept")
            # `want` is zcio's; `r`, under 1 MiB now, is in numpy's default memory.
            self.assertEqual(zcio.numpy_memory_stats()["arrays"], count + 1)
            del r, z, want

    def test_arrays_outlive_the_block_and_are_freed_with_their_files(self):
        before = zcio.numpy_memory_stats()
        with zcio.numpy_memory():
            kept = np.ones(4 << 20, dtype=np.uint8)
        self.assertEqual(handler_name(kept), "zcio")
        kept[::4096] = 3
        self.assertEqual(int(kept.sum()), (4 << 20) + 2 * 1024)
        self.assertEqual(zcio.numpy_memory_stats()["arrays"], before["arrays"] + 1)
        tx, rx = pair()
        with tx, rx:
            tx.send(kept)
            self.assertIn("made private", tx.last_path, "sent after the block ended")
            kept[:] = 0
            self.assertEqual(int(np.frombuffer(rx.recv(timeout=30), dtype=np.uint8)[4096]), 3)
        del kept
        self.assertEqual(zcio.numpy_memory_stats(), before)
        fds = len(os.listdir("/proc/self/fd"))
        for i in range(200):
            with zcio.numpy_memory():
                x = np.empty(2 << 20, dtype=np.uint8)
                y = np.zeros((3 << 20) // 8)
            x[::4096] = i % 256
            y[-1] = i
            del x, y
        self.assertEqual(zcio.numpy_memory_stats(), before)
        self.assertEqual(len(os.listdir("/proc/self/fd")), fds, "descriptors left open")

    def test_nested_blocks_chain_and_restore(self):
        outside = handler_name()
        before = zcio.numpy_memory_stats()["arrays"]

        def count():
            return zcio.numpy_memory_stats()["arrays"] - before

        with zcio.numpy_memory():
            with zcio.numpy_memory(8 << 20) as inner:
                self.assertEqual(inner.min_bytes, 8 << 20)
                self.assertEqual(handler_name(), "zcio")
                # Below the inner block's threshold: the outer block's handler takes it.
                mid = np.empty(2 << 20, dtype=np.uint8)
                self.assertEqual(count(), 1)
                large = np.empty(16 << 20, dtype=np.uint8)
                self.assertEqual(count(), 2)
                tiny = np.empty(10)
                self.assertEqual(count(), 2)
            self.assertEqual(handler_name(), "zcio")
            again = np.empty(2 << 20, dtype=np.uint8)
            self.assertEqual(count(), 3)
            # The same object entered inside its own block restores each level.
            m = zcio.numpy_memory(4 << 20)
            with m:
                with m:
                    self.assertEqual(handler_name(), "zcio")
                self.assertEqual(handler_name(), "zcio")
        self.assertEqual(handler_name(), outside)
        self.assertEqual(handler_name(np.empty(2 << 20, dtype=np.uint8)), outside)
        mid[:] = 1
        large[:] = 2
        again[:] = 3
        tiny[:] = 4
        del mid, large, tiny, again
        self.assertEqual(count(), 0)

    def test_a_thread_started_in_the_block_keeps_numpys_handler(self):
        seen = []
        with zcio.numpy_memory():
            t = threading.Thread(target=lambda: seen.append(handler_name()))
            t.start()
            t.join()
            self.assertEqual(handler_name(), "zcio")
        self.assertEqual(seen, ["default_allocator"], "a thread starts in a context of its own")

    def test_an_array_beyond_zcios_largest_message_falls_back_to_numpys_memory(self):
        before = zcio.numpy_memory_stats()
        with zcio.numpy_memory():
            huge = np.empty((1 << 30) + 1, dtype=np.uint8)
        huge[-1] = 1
        now = zcio.numpy_memory_stats()
        self.assertEqual(now["fallbacks"], before["fallbacks"] + 1)
        self.assertEqual(now["arrays"], before["arrays"])
        del huge

    def test_a_bad_min_bytes_or_no_numpy_is_refused_clearly(self):
        for bad in (0, -1, 1000, (1 << 20) - 1, (1 << 30) + 1):
            with self.assertRaises(ValueError) as e:
                zcio.numpy_memory(bad)
            self.assertIn("1048576", str(e.exception))
        self.assertEqual(zcio.numpy_memory(1 << 30).min_bytes, 1 << 30)
        p = child(
            """
            import sys
            sys.modules["numpy"] = None
            import zcio
            print(zcio.numpy_memory_stats()["arrays"])
            try:
                zcio.numpy_memory()
            except ImportError as e:
                print("ImportError:", e)
            """
        )
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("ImportError: zcio.numpy_memory needs numpy", out)


class Forks(unittest.TestCase):
    """zcio's memory across a fork: each process its own copy, as of the moment of the fork.

    Before each `os.fork()` (which multiprocessing's fork start method goes through) zcio makes
    the memory files of `zcio.alloc` and `numpy_memory` not yet sent private to the process:
    the child inherits a private mapping of a file nobody can change."""

    HOWS = ("os.fork", "multiprocessing")

    @staticmethod
    def arrays(seed):
        """An array numpy made under numpy_memory and one on zcio.alloc (an odd length), filled,
        and copies of their bytes in numpy's own memory."""
        n, m = 4 << 20, (3 << 20) + 4097
        with zcio.numpy_memory():
            a = np.empty(n, dtype=np.uint8)
        b = np.frombuffer(zcio.alloc(m), dtype=np.uint8)
        a[:] = (np.arange(n, dtype=np.uint64) * 7 + seed) % 251
        b[:] = (np.arange(m, dtype=np.uint64) * 13 + seed) % 253
        return a, b, a.copy(), b.copy()

    @staticmethod
    def fork(how, target):
        """Run `target()` in a child made by fork (`os.fork()` or multiprocessing's fork start
        method); its result is the child's exit code (0: all held). Returns a function that
        waits for the child and gives its exit code."""
        def run():
            try:
                return target()
            except BaseException:
                import traceback

                traceback.print_exc()
                return 99

        if how == "os.fork":
            pid = os.fork()
            if pid == 0:
                code = 98
                try:
                    code = run()
                finally:
                    os._exit(code)
            return lambda: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        import multiprocessing as mp

        proc = mp.get_context("fork").Process(target=lambda: sys.exit(run()))
        proc.start()
        return lambda: (proc.join(60), proc.exitcode)[1]

    def same(self, got, want, what):
        self.assertEqual(got.size, want.size, what)
        diff = np.flatnonzero(got != want)
        self.assertEqual(diff.size, 0, f"{what}: {diff.size} bytes differ, the first at "
                         f"{int(diff[0]) if diff.size else None}")

    def test_the_childs_writes_never_reach_the_parent(self):
        for how in self.HOWS:
            a, b, want_a, want_b = self.arrays(1)
            self.assertEqual(handler_name(a), "zcio")
            before = zcio._fork_stats()
            done_r, done_w = os.pipe()

            def child():
                os.close(done_r)
                fork_bytes = np.array_equal(a, want_a) and np.array_equal(b, want_b)
                a[:] = 0xEE  # every page
                b[:] = 0xEE
                own = bool((a == 0xEE).all() and (b == 0xEE).all())
                os.write(done_w, b"w")
                return 0 if fork_bytes and own else 2 if not fork_bytes else 3

            wait = self.fork(how, child)
            os.close(done_w)
            self.assertEqual(os.read(done_r, 1), b"w", how)
            os.close(done_r)
            self.assertEqual(wait(), 0, f"{how}: the child's view (2: not the bytes of the fork)")
            self.same(a, want_a, f"{how}: numpy_memory's array after the child wrote it")
            self.same(b, want_b, f"{how}: alloc's memory after the child wrote it")
            now = zcio._fork_stats()
            self.assertEqual(now["forks"], before["forks"] + 1, how)
            self.assertEqual(now["kept"], before["kept"] + 2, f"{how}: {now}")
            self.assertEqual(now["failed"], before["failed"], f"{how}: {now}")
            # The parent's own writes still land where the array is.
            a[1] = b[1] = 5
            self.assertEqual((int(a[1]), int(b[1])), (5, 5))

    def test_the_parents_writes_after_the_fork_never_reach_the_child(self):
        for how in self.HOWS:
            a, b, want_a, want_b = self.arrays(2)
            go_r, go_w = os.pipe()

            def child():
                os.close(go_w)
                self_sent = os.read(go_r, 1)
                if self_sent != b"g":
                    return 4
                if not np.array_equal(a, want_a):
                    return 2
                if not np.array_equal(b, want_b):
                    return 3
                return 0

            wait = self.fork(how, child)
            os.close(go_r)
            a[:] = 0x11  # every page, after the fork
            b[:] = 0x22
            os.write(go_w, b"g")
            os.close(go_w)
            self.assertEqual(wait(), 0, f"{how}: the child saw the parent's writes (2, 3)")
            self.assertTrue((a == 0x11).all() and (b == 0x22).all(), how)

    def test_after_a_fork_the_parent_sends_its_bytes_of_now_by_copy(self):
        receiver = """
            import hashlib, sys, zcio
            with zcio.connect(sys.argv[1], timeout=30) as ch:
                for _ in range(2):
                    got = ch.recv(timeout=30)
                    if bytes(ch.recv(timeout=30)) != b"written":
                        sys.exit("no 'written' after the array")
                    ch.send(hashlib.sha256(got).hexdigest().encode())
                ch.recv(timeout=30)
            """
        import hashlib

        for how in self.HOWS:
            name = unique("fork-send")
            with zcio.listen(name) as lst:
                p = child(receiver, name)
                with lst.accept(timeout=30) as ch:
                    a, b, want_a, want_b = self.arrays(3)

                    def child_writes():
                        a[:] = 0xEE
                        b[:] = 0xEE
                        return 0

                    self.assertEqual(self.fork(how, child_writes)(), 0, how)
                    a[::8192] = 0x42  # the parent's bytes of now: half its pages written
                    b[1::8192] = 0x43
                    for arr in (a, b):
                        now = arr.tobytes()
                        ch.send(arr)
                        self.assertNotIn("made private", ch.last_path, f"{how}: kept: a copy")
                        self.assertIn("sealed memory file", ch.last_path, how)
                        arr[:] = 0x77  # after the send: never the receiver's
                        ch.send(b"written")
                        self.assertEqual(
                            bytes(ch.recv(timeout=30)).decode(),
                            hashlib.sha256(now).hexdigest(),
                            f"{how}: the receiver's bytes are the parent's of the send",
                        )
                    ch.send(b"bye")
                    ch.flush(timeout=30)
                out, err = p.communicate(timeout=60)
                self.assertEqual(p.returncode, 0, err)

    def test_the_child_sends_its_own_copy(self):
        for how in self.HOWS:
            a, b, want_a, want_b = self.arrays(4)
            mine, theirs = zcio.Pipe()

            def child():
                with theirs:
                    a[4096:] = 0x5C  # the child's bytes: the first page as of the fork
                    b[:-1] = 0x5D
                    paths = []
                    for arr in (a, b):
                        theirs.send(arr)
                        paths.append(theirs.last_path)
                        arr[:] = 0  # after the send
                    theirs.flush(timeout=60)
                    return 5 if any("made private" in p for p in paths) else 0

            wait = self.fork(how, child)
            with mine:
                got_a = np.frombuffer(mine.recv(timeout=60), dtype=np.uint8)
                got_b = np.frombuffer(mine.recv(timeout=60), dtype=np.uint8)
            self.assertEqual(wait(), 0, f"{how}: 5: the child's send was not a copy")
            exp_a = want_a.copy()
            exp_a[4096:] = 0x5C
            exp_b = want_b.copy()
            exp_b[:-1] = 0x5D
            self.same(got_a, exp_a, f"{how}: the child's array as it sent it")
            self.same(got_b, exp_b, f"{how}: the child's alloc memory as it sent it")
            self.same(a, want_a, f"{how}: the parent's array")
            self.same(b, want_b, f"{how}: the parent's alloc memory")

    def test_an_array_sent_before_the_fork_is_each_processs_own_too(self):
        for how in self.HOWS:
            a, b, want_a, want_b = self.arrays(5)
            tx, rx = pair()
            with tx, rx:
                for arr in (a, b):
                    tx.send(arr)
                    self.assertIn("made private", tx.last_path, how)
                    rx.recv(timeout=30)
            before = zcio._fork_stats()
            go_r, go_w = os.pipe()

            def child():
                os.close(go_w)
                a[:] = 0xC1
                b[:] = 0xC2
                os.read(go_r, 1)
                return 0 if (a == 0xC1).all() and (b == 0xC2).all() else 6

            wait = self.fork(how, child)
            os.close(go_r)
            time.sleep(0.05)  # the child writes meanwhile (or not yet: either way, its own)
            self.same(a, want_a, f"{how}: kept before the fork, the parent's array")
            self.same(b, want_b, f"{how}: kept before the fork, the parent's alloc memory")
            a[:] = 0x01
            b[:] = 0x02
            os.write(go_w, b"g")
            os.close(go_w)
            self.assertEqual(wait(), 0, f"{how}: 6: the parent's writes reached the child")
            now = zcio._fork_stats()
            self.assertEqual(now["kept"], before["kept"], f"{how}: private already: {now}")

    def test_repeated_forks_leave_no_descriptor_open(self):
        a, b, _, _ = self.arrays(6)
        wait = self.fork("os.fork", lambda: 0)
        self.assertEqual(wait(), 0)
        fds = len(os.listdir("/proc/self/fd"))
        for i in range(20):
            with zcio.numpy_memory():
                x = np.empty(2 << 20, dtype=np.uint8)
            y = np.frombuffer(zcio.alloc(1 << 20), dtype=np.uint8)
            x[::4096] = i
            y[::4096] = i
            self.assertEqual(self.fork(self.HOWS[i % 2], lambda: 0)(), 0)
            del x, y
        a[:] = 1
        b[:] = 2
        self.assertEqual(len(os.listdir("/proc/self/fd")), fds, "descriptors left open")
        self.assertEqual(zcio._fork_stats()["failed"], 0)


def handler_name(arr=None):
    """The name of numpy's memory handler of `arr`, or of the one new arrays get now."""
    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import get_handler_name
    return get_handler_name() if arr is None else get_handler_name(arr)


def _pipe_echo(ch):
    with ch:
        while True:
            m = ch.recv(timeout=60)
            ch.send(m)
            if bytes(m) == b"bye":
                ch.flush(timeout=60)
                return


def _mp_sender(name, method):
    with zcio.connect(name, timeout=60) as ch:
        data = bytearray(pattern(300_000, 7)[:300_000])
        ch.send_obj({"method": method, "data": pickle.PickleBuffer(data)})
        data[:] = b"\0" * len(data)
        ch.flush(timeout=60)


if __name__ == "__main__":
    unittest.main()
