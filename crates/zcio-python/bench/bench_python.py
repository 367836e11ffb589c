"""Moving a numpy array from Python process A to Python process B: zcio against the standard
library's ways (and iceoryx2's, where its Python package is installed).

The job, the same for every contender: A holds a numpy array of `bytes` bytes (a pattern
that depends on each byte's offset); it hands the array over and changes it at once (one
byte in every 4 KiB page, and the last byte); B must end with a writable array of its own
holding the bytes of the moment of the send, and must not see A's change. Each run does
this twice, with two arrays A made before the clock: the second transfer is the one
measured, the first runs each process's code paths once (Python's first call of anything
costs tens of microseconds more than its next, which would be read as Python's overhead);
its times are reported beside the second's.

- `zcio`: B listens on a unique name, A connects; `ch.send(a)` (emulated copy), B holds
  `numpy.frombuffer(ch.recv(), dtype)`.
- `zcio-alloc`: the same, A's array made in memory of zcio's (`numpy.frombuffer(zcio.alloc(n))`,
  filled before the clock): a memory file, which the send seals and hands to B without a
  copy, A's pages becoming copy-on-write; A's change then has the kernel copy each page it
  writes.
- `zcio-numpy`: the same, A's array made by numpy itself (the pattern's `numpy.arange`)
  inside `with zcio.numpy_memory():`, which has numpy allocate large arrays in zcio's memory
  files: the send then goes as for `zcio-alloc`.
- `zcio-volatile`: as `zcio`, both ends having said they trust each other with volatile
  loans (`ch.set_volatile_loans(True)`): the memory file A's bytes are copied into is lent
  to B and given back when B drops its array, and A's next send reuses it (Fbufs' volatile
  buffers, cached per channel) instead of fresh pages.
- `rust`, `rust-alloc`, `rust-volatile`: the same job done by two Rust processes through the
  Rust channel, with the calls zcio's module makes for `zcio`, `zcio-alloc` and
  `zcio-volatile` (A's bytes, in private memory asked for in 2 MiB pages as numpy asks,
  copied into a loan and sent; A's bytes in a loan sent and kept; volatile loans): the
  baseline that Python's overhead is read against. Run by the executable named in
  `$ZCIO_BENCH_PEER` (`zcio bench python --peer a`), which prints the same measures.
- `pipe`: `multiprocessing.Pipe`, `conn.send(a)` and `conn.recv()` (the array pickled).
- `queue`: `multiprocessing.Queue`, `q.put(a)` and `q.get()`.
- `shared_memory`: a `multiprocessing.shared_memory` block of the array's size, made and
  touched by A and opened by B before the clock (as a block that is reused); A copies its
  array in and says so over a Pipe, B copies it out into an array of its own.
- `iceoryx2`: publish-subscribe of a `Slice[c_uint8]` sized for the array (service and ports
  made before the clock); A loans a sample, copies its array into it and sends it; B, polling
  its subscriber, copies the sample out into an array of its own.

Each run is a fresh pair of processes: the orchestrator starts A (`--role a`), A starts B
with `multiprocessing` (spawn), so that each run's peak RSS (`ru_maxrss`) is its own. A and
B are pinned to two different CPUs (where the process may run on two), as `zcio bench
channel` pins its processes: unpinned, the scheduler may wake B on A's CPU and queue it
behind A's change, which measures the scheduler rather than the transfer. Both
read `time.monotonic_ns()` (CLOCK_MONOTONIC, one clock on one host). BLAS's threads are held
to one (`OPENBLAS_NUM_THREADS=1` and its kin): the job does no linear algebra, and
OpenBLAS's threads, started at numpy's import, spin while they wait and take the CPUs A and
B are pinned to.

- latency: from A's send start to B holding its array (B reports its time back), for the
  second transfer; first_latency: the same for the first;
- send: A's time blocked in its send call(s) (shared_memory: the copy in and the notice;
  iceoryx2: loan, copy, send); first_send: the same for the first;
- cpu: A's CPU time from the send start to the end of its change, plus B's from its wait
  start to holding its array (`time.process_time_ns`, user and system, whole process);
- rss: each process's peak resident set (KiB) over its whole life, numpy's import included;
- verified: at both transfers, B's array, checked once A said it had changed its own, has
  the array's length, is writable, and holds at every 4096th byte and at the first and last
  the original pattern or A's change of that byte; saw_later_change: it held A's change at one of those
  bytes at least (the bytes sampled are the bytes A changes), which B must not see.

Usage: bench_python.py [--sizes 8388608,134217728] [--contenders zcio,pipe,...] [--rounds 3]
prints {"rows": [...]} on stdout and one `progress: ...` line per run on stderr. One size,
one contender and `--rounds 1` is one run.
"""

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import time
import traceback
import uuid

CONTENDERS = [
    "zcio",
    "zcio-alloc",
    "zcio-numpy",
    "zcio-volatile",
    "rust",
    "rust-alloc",
    "rust-volatile",
    "pipe",
    "queue",
    "shared_memory",
    "iceoryx2",
]
# Contenders through zcio's Python module.
ZCIO = ("zcio", "zcio-alloc", "zcio-numpy", "zcio-volatile")
# Contenders whose A and B are Rust processes: the executable `$ZCIO_BENCH_PEER` (zcio's).
RUST = ("rust", "rust-alloc", "rust-volatile")
DEFAULT_SIZES = [8 << 20, 128 << 20]
K = 0x9E3779B97F4A7C15
SEED = 0x7A63696F
TIMEOUT = 120.0
# Transfers per run, each of an array of its own: the last is measured, the first warms the
# code paths of both processes (the first's times are reported beside it).
TRANSFERS = 2
# The job runs no linear algebra: BLAS's threads, started at numpy's import and spinning while
# they wait for work, would only take the two CPUs from A and B.
QUIET_BLAS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def pattern(n):
    """`n` bytes (a multiple of 8) whose word k is k*K ^ SEED, as a numpy uint8 array."""
    import numpy as np

    words = np.arange(n // 8, dtype=np.uint64)
    words *= np.uint64(K)
    words ^= np.uint64(SEED)
    return words.view(np.uint8)


def sample_offsets(n):
    import numpy as np

    idx = np.arange(0, n, 4096, dtype=np.int64)
    return np.unique(np.concatenate([idx, np.array([0, n - 1], dtype=np.int64)]))


def expected_at(idx):
    import numpy as np

    w = (idx // 8).astype(np.uint64) * np.uint64(K) ^ np.uint64(SEED)
    return ((w >> ((idx % 8).astype(np.uint64) * np.uint64(8))) & np.uint64(0xFF)).astype(
        np.uint8
    )


def change(a):
    """A's change right after its send: every 4096th byte and the last, flipped."""
    a[::4096] ^= 0xFF
    a[-1] ^= 0xFF


def check(arr, n):
    """(verified, saw_later_change, why) of B's array against the original pattern."""
    import numpy as np

    b = arr.view(np.uint8).reshape(-1)
    if b.size != n:
        return False, False, f"B's array has {b.size} bytes, not {n}"
    if not b.flags.writeable:
        return False, False, "B's array is not writable"
    idx = sample_offsets(n)
    got = b[idx]
    want = expected_at(idx)
    changed = got == (want ^ 0xFF)
    # Each byte sampled is the original or A's change of it (every byte sampled is one A
    # changes); which it is, is the other answer.
    bad = (got != want) & ~changed
    why = None
    if bad.any():
        at = int(idx[np.argmax(bad)])
        why = f"byte {at} is neither the original nor A's change of it"
    return why is None, bool(changed.any()), why


def cpu_ns():
    return time.process_time_ns()


def peak_rss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# ---------------------------------------------------------------------------------------------
# B: the receiving process (a multiprocessing child of A).


def two_cpus():
    """The first two CPUs this process may run on, or None where it may run on one."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[:2] if len(cpus) >= 2 else None


def pin(cpu):
    """This process on `cpu` alone (nothing where there is none to choose)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def b_main(contender, n, ctl, data, cpu=None):
    """B: make its end, say ready, receive, report its time, wait for A's change, check."""
    try:
        import numpy as np

        pin(cpu)
        recv = b_setup(contender, n, ctl, data)
        for _ in range(TRANSFERS):
            ctl.send(("ready", None))
            c0 = cpu_ns()
            arr = recv()
            t_b = time.monotonic_ns()
            c1 = cpu_ns()
            ctl.send(("got", t_b))
            assert ctl.recv() == "changed"
            ok, saw, why = check(arr, n)
            # B's array is its own: it may write it.
            arr.view(np.uint8)[0] ^= 0
            del arr
            ctl.send(
                (
                    "done",
                    {
                        "cpu_ns": c1 - c0,
                        "rss_kib": peak_rss_kib(),
                        "verified": ok,
                        "saw_later_change": saw,
                        "why": why,
                    },
                )
            )
    except BaseException as e:  # reported to A, which records it
        try:
            ctl.send(("error", f"B: {type(e).__name__}: {e}"))
        except Exception:
            traceback.print_exc()


def b_setup(contender, n, ctl, data):
    """B's end of `contender`, made before the clock; the receive, as a function."""
    import numpy as np

    if contender in ZCIO:
        import zcio

        name = data
        # A window of the message (256 MiB at most), so that the send need not wait for B.
        lst = zcio.listen(name, window=min(max(n, 16 << 20), 256 << 20))
        ctl.send(("listening", None))
        ch = lst.accept(timeout=TIMEOUT)
        ch.set_volatile_loans(contender == "zcio-volatile")
        lst.close()
        return lambda: np.frombuffer(ch.recv(timeout=TIMEOUT), dtype=np.uint8)
    if contender == "pipe":
        return lambda: data.recv()
    if contender == "queue":
        return lambda: data.get(timeout=TIMEOUT)
    if contender == "shared_memory":
        conn, name = data
        shm = open_shm(name)
        view = np.ndarray((n,), dtype=np.uint8, buffer=shm.buf)

        def recv():
            conn.recv()
            out = np.empty(n, dtype=np.uint8)
            out[:] = view
            return out

        recv.keep = shm  # the block stays mapped while B runs
        return recv
    if contender == "iceoryx2":
        iox = import_iceoryx2()
        node = iox.NodeBuilder.new().create(iox.ServiceType.Ipc)
        svc = iceoryx_service(iox, node, data)
        sub = svc.subscriber_builder().create()
        ctl.send(("listening", None))

        def recv():
            deadline = time.monotonic() + TIMEOUT
            while True:
                s = sub.receive()
                if s is not None:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError("no iceoryx2 sample")
                time.sleep(0.00005)
            p = s.payload()
            out = np.empty(p.len(), dtype=np.uint8)
            ctypes.memmove(out.ctypes.data, p.as_ptr(), p.len())
            s.delete()
            return out

        recv.keep = (node, svc, sub)
        return recv
    raise ValueError(f"unknown contender {contender}")


def open_shm(name):
    """Open the block `name` without the resource tracker taking it over (B must not unlink
    A's block when it ends)."""
    from multiprocessing import shared_memory

    try:
        return shared_memory.SharedMemory(name=name, track=False)  # Python 3.13 on
    except TypeError:
        shm = shared_memory.SharedMemory(name=name)
        try:
            from multiprocessing import resource_tracker

            resource_tracker.unregister(shm._name, "shared_memory")
        except Exception:
            pass
        return shm


def import_iceoryx2():
    import iceoryx2 as iox

    iox.set_log_level_from_env_or(iox.LogLevel.Error)
    return iox


def iceoryx_service(iox, node, name):
    return (
        node.service_builder(iox.ServiceName.new(name))
        .publish_subscribe(iox.Slice[ctypes.c_uint8])
        .subscriber_max_buffer_size(1)
        .history_size(0)
        .subscriber_max_borrowed_samples(1)
        .open_or_create()
    )


# ---------------------------------------------------------------------------------------------
# A: the sending process, one run.


def a_run(contender, n):
    """One run: B started, the array made, the clock from the send's start to B's receipt."""
    import numpy as np

    ctx = mp.get_context("spawn")
    ctl, ctl_b = ctx.Pipe()
    cleanup = []
    if contender in ZCIO:
        data_b = f"zcio-bench-py-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    elif contender == "pipe":
        data_a, data_b = ctx.Pipe()
    elif contender == "queue":
        data_a = data_b = ctx.Queue()
    elif contender == "shared_memory":
        from multiprocessing import shared_memory

        shm = shared_memory.SharedMemory(create=True, size=n)
        cleanup.append(lambda: (shm.close(), shm.unlink()))
        sview = np.ndarray((n,), dtype=np.uint8, buffer=shm.buf)
        sview[::4096] = 1  # touched, as a block that is reused
        note_a, note_b = ctx.Pipe()
        data_b = (note_b, shm.name)
    elif contender == "iceoryx2":
        iox = import_iceoryx2()
        data_b = f"zcio-bench-py/{os.getpid()}-{uuid.uuid4().hex[:8]}"
    else:
        raise ValueError(f"unknown contender {contender}")
    cpus = two_cpus()
    b = ctx.Process(target=b_main, args=(contender, n, ctl_b, data_b, cpus and cpus[1]))
    b.start()
    pin(cpus and cpus[0])
    try:
        return a_with(contender, n, ctl, b, data_b, locals())
    finally:
        for f in cleanup:
            try:
                f()
            except Exception:
                pass
        b.join(10)
        if b.is_alive():
            b.kill()


def expect(ctl, what, b):
    if not ctl.poll(TIMEOUT):
        raise TimeoutError(f"B did not say {what}")
    tag, v = ctl.recv()
    if tag == "error":
        raise RuntimeError(v)
    if tag != what:
        raise RuntimeError(f"B said {tag}, not {what}")
    return v


def a_with(contender, n, ctl, b, data_b, env):
    import numpy as np

    arrays = [made(contender, n) for _ in range(TRANSFERS)]
    send = None
    if contender in ZCIO:
        import zcio

        expect(ctl, "listening", b)
        ch = zcio.connect(data_b, timeout=TIMEOUT)
        ch.set_volatile_loans(contender == "zcio-volatile")

        def send(a):
            ch.send(a)

    elif contender == "pipe":
        conn = env["data_a"]

        def send(a):
            conn.send(a)

    elif contender == "queue":
        q = env["data_a"]

        def send(a):
            q.put(a)

    elif contender == "shared_memory":
        sview, note = env["sview"], env["note_a"]

        def send(a):
            sview[:] = a
            note.send(None)

    elif contender == "iceoryx2":
        iox = env["iox"]
        expect(ctl, "listening", b)
        node = iox.NodeBuilder.new().create(iox.ServiceType.Ipc)
        svc = iceoryx_service(iox, node, data_b)
        pub = (
            svc.publisher_builder()
            .initial_max_slice_len(n)
            .max_loaned_samples(1)
            .create()
        )

        def send(a):
            s = pub.loan_slice_uninit(n)
            ctypes.memmove(s.payload_ptr, a.ctypes.data, n)
            s.assume_init().send()

    runs = []
    for a in arrays:
        expect(ctl, "ready", b)
        c0 = cpu_ns()
        t0 = time.monotonic_ns()
        send(a)
        t1 = time.monotonic_ns()
        change(a)
        c1 = cpu_ns()
        t_b = expect(ctl, "got", b)
        ctl.send("changed")
        done = expect(ctl, "done", b)
        runs.append((t_b - t0, t1 - t0, (c1 - c0) + done["cpu_ns"], done))
    if contender in ZCIO:
        ch.close()
    # The last transfer is the one measured; the first's times are kept beside it.
    latency, send_t, cpu, done = runs[-1]
    return {
        "latency_ns": latency,
        "send_ns": send_t,
        "cpu_ns": cpu,
        "first_latency_ns": runs[0][0],
        "first_send_ns": runs[0][1],
        "rss_a_kib": peak_rss_kib(),
        "rss_b_kib": done["rss_kib"],
        "verified": all(r[3]["verified"] for r in runs),
        "saw_later_change": any(r[3]["saw_later_change"] for r in runs),
        "why": next((r[3]["why"] for r in runs if r[3]["why"]), None),
    }


def made(contender, n):
    """One of A's arrays, made and filled before the clock: numpy's own memory, or zcio's
    (`zcio.alloc`, or numpy's allocations routed to zcio by `zcio.numpy_memory()`)."""
    import numpy as np

    if contender == "zcio-alloc":
        import zcio

        mem = np.frombuffer(zcio.alloc(n), dtype=np.uint8)
        mem[:] = pattern(n)
        return mem
    if contender == "zcio-numpy":
        import zcio

        with zcio.numpy_memory():
            return pattern(n)
    return pattern(n)


# ---------------------------------------------------------------------------------------------
# The orchestrator: each run in a fresh A, rows of medians.


def available(contender):
    """None, or why `contender` cannot run here."""
    if contender in RUST:
        exe = os.environ.get("ZCIO_BENCH_PEER")
        if not exe or not os.access(exe, os.X_OK):
            return "unavailable: no zcio executable in $ZCIO_BENCH_PEER to run it"
        return None
    mod = {"iceoryx2": "iceoryx2", **{c: "zcio" for c in ZCIO}}.get(contender)
    if mod is None:
        return None
    try:
        __import__(mod)
    except Exception as e:
        return f"unavailable: {mod} is not importable here ({e})"
    return None


def one_run(contender, n):
    """A fresh A process for one run; its result, or an error."""
    if contender in RUST:
        argv = [os.environ["ZCIO_BENCH_PEER"], "bench", "python", "--peer", "a",
                "--contenders", contender, "--bytes", str(n)]
    else:
        argv = [sys.executable, os.path.abspath(__file__), "--role", "a", "--contender",
                contender, "--bytes", str(n)]
    p = subprocess.run(
        argv,
        env={**os.environ, **QUIET_BLAS},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=TIMEOUT * 3,
    )
    if p.returncode != 0:
        tail = p.stderr.decode(errors="replace").strip().splitlines()[-3:]
        return {"error": f"A exited with {p.returncode}: {' | '.join(tail)}"}
    return json.loads(p.stdout)


def row(contender, n, runs, error):
    ok = [r for r in runs if "error" not in r]
    med = lambda k: statistics.median(r[k] for r in ok) if ok else None  # noqa: E731
    lat = [r["latency_ns"] for r in ok]
    first = [r["first_latency_ns"] for r in ok]
    errs = [r["error"] for r in runs if "error" in r]
    why = [r["why"] for r in ok if r.get("why")]
    if error is None and errs:
        error = errs[0]
    if error is None and why:
        error = f"not verified: {why[0]}"
    return {
        "contender": contender,
        "bytes": n,
        "latency_ns": med("latency_ns"),
        "latency_spread_ns": [min(lat), max(lat)] if lat else None,
        "send_ns": med("send_ns"),
        "first_latency_ns": med("first_latency_ns"),
        "first_latency_spread_ns": [min(first), max(first)] if first else None,
        "first_send_ns": med("first_send_ns"),
        "cpu_ns": med("cpu_ns"),
        "rss_a_kib": med("rss_a_kib"),
        "rss_b_kib": med("rss_b_kib"),
        "verified": bool(ok) and not errs and all(r["verified"] for r in ok),
        "saw_later_change": any(r["saw_later_change"] for r in ok),
        "rounds": len(ok),
        "error": error,
    }


def orchestrate(sizes, contenders, rounds):
    rows = []
    for n in sizes:
        runs = {c: [] for c in contenders}
        why = {c: available(c) for c in contenders}
        for k in range(rounds):
            # Contenders in an order that rotates from round to round.
            for j in range(len(contenders)):
                c = contenders[(j + k) % len(contenders)]
                if why[c] is None:
                    try:
                        runs[c].append(one_run(c, n))
                    except Exception as e:
                        runs[c].append({"error": f"{type(e).__name__}: {e}"})
                print(f"progress: {c} {n} B round {k + 1}", file=sys.stderr, flush=True)
        for c in contenders:
            rows.append(row(c, n, runs[c], why[c]))
    return {"rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", choices=["orchestrator", "a"], default="orchestrator")
    ap.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--contender")
    ap.add_argument("--bytes", type=int)
    o = ap.parse_args()
    if o.role == "a":
        r = a_run(o.contender, o.bytes)
        print(json.dumps(r))
        return
    sizes = [int(s) for s in o.sizes.split(",") if s]
    for n in sizes:
        if n <= 0 or n % 8:
            sys.exit(f"--sizes: {n}: a positive multiple of 8 bytes")
    contenders = [c for c in o.contenders.split(",") if c]
    for c in contenders:
        if c not in CONTENDERS:
            sys.exit(f"--contenders: unknown `{c}` (one of: {', '.join(CONTENDERS)})")
    if o.rounds < 1:
        sys.exit("--rounds: at least 1")
    print(json.dumps(orchestrate(sizes, contenders, o.rounds)))


if __name__ == "__main__":
    main()
