"""python-redis-lock as a peer in leasehold's comparison report.

The report (`cargo run --release -p leasehold-compare`) runs this file with
the interpreter of `compare/.venv`, which it creates when it is missing
(`python3 -m venv`, then `pip install -r compare/peers/requirements.txt`:
python-redis-lock and redis-py, pinned). The report starts the
redis-server and passes its URL; this driver only talks to that server.

Commands
--------

``python python_redis_lock.py version``
    Prints ``{"library": ..., "version": ..., "redis_py": ..., "python": ...}``.

``python python_redis_lock.py hot --url URL --name NAME --counter KEY
--contenders 32 --seconds 3``
    The hot-lock scenario: ``--contenders`` OS processes (fork), each with
    its own two Redis connections, loop on one lock for ``--seconds``:
    ``acquire()`` -> critical section -> ``release()``. Prints one JSON
    object (see ``hot`` below) on stdout; diagnostics go to stderr.

What python-redis-lock does (4.0, its documented defaults)
----------------------------------------------------------

``redis_lock.Lock(conn, name, expire=30)`` (``expire`` has no default: without
it the lock never expires; 30 s is the lease the report's other baselines
use; ``auto_renewal=False``, ``signal_expire=1000`` ms, ``strict=True``).

* ``acquire(blocking=True)``: ``GET lock:<name>`` (is the lock already held
  by this instance?), then ``SET lock:<name> <id> NX EX 30``. When the lock
  is busy it waits with ``BLPOP lock-signal:<name> 30`` and tries the
  ``SET`` again.
* ``release()``: one ``EVALSHA`` of its unlock script: if the id matches,
  ``DEL`` the signal list, ``LPUSH`` one element onto it, ``PEXPIRE`` it
  (1000 ms) and ``DEL`` the lock. One element wakes exactly one ``BLPOP``
  waiter; the releaser itself may take the lock back first (no fairness).

Why processes
-------------

redis-py and python-redis-lock are synchronous. 32 threads in one
interpreter would take turns on the GIL and measure the interpreter rather
than the lock; a Python service contends for a lock from several worker
processes. Each contender is therefore one OS process with its own lock
connection and its own second connection for the critical section.

The critical section (exact-counter check)
------------------------------------------

Under the lock, through the process's *second* connection: ``GET counter``
then ``SET counter <value + 1>`` (non-atomic: two processes in the critical
section at once lose an increment). The report compares the counter with
the number of critical sections run.

Counting
--------

An acquisition is counted if ``acquire()`` returned before the deadline; a
"handoff" if the holder changed since the previous counted acquisition (a
shared-memory slot written only under the lock, so it is exact while mutual
exclusion holds). Processes that are waiting at the deadline still finish
their acquisition (every one runs the critical section and is released),
so the lock is left free. Acquire requests are counted by the report from
``INFO commandstats`` (``set`` calls minus the critical section's ``SET``).
"""

import argparse
import ctypes
import json
import multiprocessing
import platform
import sys
import time
import traceback

# Upper bound on how long the processes may take after the deadline (a
# waiter blocked in BLPOP is woken by the next release).
GRACE_SECONDS = 60
LEASE_SECONDS = 30


def versions():
    import redis
    import redis_lock

    return {
        "library": "python-redis-lock",
        "version": redis_lock.__version__,
        "redis_py": redis.__version__,
        "python": platform.python_version(),
    }


def contender(i, url, name, counter, ready, go, deadline, last, counts, handoffs, done):
    """One contender process: its own lock connection and critical-section
    connection, looping until the shared deadline."""
    try:
        import redis
        import redis_lock

        conn = redis.Redis.from_url(url)
        checker = redis.Redis.from_url(url)
        conn.ping()
        checker.ping()
        lock = redis_lock.Lock(conn, name, expire=LEASE_SECONDS)
        ready.wait()
        go.wait()
        end = deadline.value
        while time.monotonic() < end:
            lock.acquire(blocking=True)
            if time.monotonic() < end:
                counts[i] += 1
                # under the lock: the previous holder is exact
                if last.value != i:
                    last.value = i
                    handoffs[i] += 1
            value = int(checker.get(counter) or 0)
            checker.set(counter, value + 1)
            done[i] += 1
            lock.release()
        conn.close()
        checker.close()
    except BaseException:  # report, and let the parent see a failed exit code
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        raise SystemExit(1)


def hot(args):
    import redis
    import redis_lock

    n = args.contenders
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Barrier(n + 1)
    go = ctx.Event()
    deadline = ctx.RawValue(ctypes.c_double, 0.0)
    last = ctx.RawValue(ctypes.c_long, -1)
    counts = ctx.RawArray(ctypes.c_long, n)
    handoffs = ctx.RawArray(ctypes.c_long, n)
    done = ctx.RawArray(ctypes.c_long, n)

    # Load the unlock script before the window, so the first release of each
    # process does not pay a NOSCRIPT round trip inside it.
    setup = redis.Redis.from_url(args.url)
    setup.script_load(redis_lock.UNLOCK_SCRIPT)

    procs = [
        ctx.Process(
            target=contender,
            args=(i, args.url, args.name, args.counter, ready, go, deadline, last, counts, handoffs, done),
            daemon=True,
        )
        for i in range(n)
    ]
    for p in procs:
        p.start()
    error = None
    try:
        ready.wait(timeout=GRACE_SECONDS)
    except Exception:
        error = "contender processes did not start in time"
    start = time.monotonic()
    deadline.value = start + args.seconds
    go.set()
    limit = start + args.seconds + GRACE_SECONDS
    for p in procs:
        p.join(max(0.0, limit - time.monotonic()))
    window = args.seconds
    for p in procs:
        if p.is_alive():
            error = error or "contenders still running %d s after the deadline" % GRACE_SECONDS
            p.kill()
            p.join()
        elif p.exitcode != 0 and error is None:
            error = "a contender process failed (exit code %s; see stderr)" % p.exitcode
    counter_value = int(setup.get(args.counter) or 0)
    setup.close()
    out = {
        "scenario": "hot",
        "contenders": n,
        "seconds": window,
        "acquisitions": list(counts),
        "handoffs": sum(handoffs),
        "critical_sections": sum(done),
        "counter": counter_value,
        "error": error,
    }
    out.update(versions())
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version")
    h = sub.add_parser("hot")
    h.add_argument("--url", required=True)
    h.add_argument("--name", required=True)
    h.add_argument("--counter", required=True)
    h.add_argument("--contenders", type=int, default=32)
    h.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if args.command == "version":
        out = versions()
    else:
        out = hot(args)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
