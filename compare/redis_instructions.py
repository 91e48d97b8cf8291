#!/usr/bin/env python3
"""Redis's own instructions per uncontended lock + unlock, counted by
callgrind (valgrind) on redis-server: leasehold's two lock scripts as it
sends them uncontended (the twins sent without the request record, with a
request id) against their bare bodies (the raw-fred baseline of
`compare/`'s throughput rows).

For each side, a redis-server runs under callgrind and gets N, then (a
fresh server) 2N, pairs on distinct names from `redis-cli --pipe`; the
difference / N is Redis's cost of one pair (start-up, loading the scripts
and shutdown cancel out). The count does not move with the machine's load,
where `INFO cpu` readings in the throughput rows do.

    python3 compare/redis_instructions.py [N [SIDE...]]   (default N = 5000;
                                                          SIDEs: twin bare)

The sources come from `leasehold-compare --lock-script` (built here in
release mode; CARGO_TARGET_DIR is honoured). The arguments are the ones
`compare/src/contender.rs` (`raw_args`) sends. Needs valgrind, redis-server
and redis-cli; about a minute per side.
"""

import os
import re
import socket
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
BIN = os.path.join(TARGET, "release", "leasehold-compare")
# An owner field as leasehold writes it: "<client uuid>:<owner id>".
FIELD = "0a1b2c3d-4e5f-4789-abcd-ef0123456789:1234"
LEASE_MS = "30000"


def script(side, which):
    return subprocess.run(
        [BIN, "--lock-script", side, which], check=True, capture_output=True, text=True
    ).stdout


def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def instructions(side, n):
    """Instructions redis-server ran for n pairs of `side` (start-up included)."""
    port = free_port()
    out = "/tmp/leasehold-redis-cg.%d.%d" % (os.getpid(), port)
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
         "redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def cli(*args, data=None):
        return subprocess.run(["redis-cli", "-p", str(port), *args], input=data,
                              capture_output=True).stdout

    for _ in range(200):
        if cli("PING").strip() == b"PONG":
            break
        time.sleep(0.2)
    else:
        server.kill()
        sys.exit("redis-server under valgrind did not start")
    acquire = cli("SCRIPT", "LOAD", script(side, "acquire").encode()).decode().strip()
    release = cli("SCRIPT", "LOAD", script(side, "release").encode()).decode().strip()
    twin = side == "twin"
    pipe = []
    for i in range(n):
        name = "instructions:%d" % i
        rid = [str(2 * i + 1)] if twin else []
        pipe.append(resp(["EVALSHA", acquire, "1", name, LEASE_MS, FIELD, "0", ""] + rid))
        rid = [str(2 * i + 2)] if twin else []
        channel = "redisson_lock__channel:{%s}" % name
        pipe.append(resp(["EVALSHA", release, "2", name, channel, LEASE_MS, FIELD,
                          "1", "publish", "1"] + rid))
    piped = cli("--pipe", data=b"".join(pipe))
    if b"errors: 0" not in piped:
        server.kill()
        sys.exit("redis-cli --pipe: %r" % piped)
    left = cli("DBSIZE").strip()
    cli("SHUTDOWN", "NOSAVE")
    _, err = server.communicate()
    os.unlink(out)
    if left != b"0":
        sys.exit("%s left %s keys" % (side, left.decode()))
    return int(re.search(r"Collected : (\d+)", err).group(1))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    sides = sys.argv[2:] or ["twin", "bare"]
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "leasehold-compare"],
                   cwd=ROOT, check=True)
    for side in sides:
        one, two = instructions(side, n), instructions(side, 2 * n)
        print("%s: %d Redis instructions per lock + unlock (%d: %d, %d: %d)"
              % (side, (two - one) // n, n, one, 2 * n, two))


if __name__ == "__main__":
    main()
