"""Server time per lease of the lock's renewal scripts: declared keys
(`renew.lua`) against one packed argument (`renew_packed.lua`).

BENCHMARKS.md ("Next session: the watchdog cycle") cites this test. It
needs redis-py (the venv `compare/` makes for python-redis-lock). It makes
N lock hashes with a 30 s TTL, then renews all of them in batches of 1,000
with each script in turn, 4 interleaved rounds, and prints
`cmdstat_evalsha` usec per lease for each round.

    redis-server --port 36998 --save '' --daemonize yes
    compare/.venv/bin/python compare/renew_server_time.py 36998 100000
    redis-cli -p 36998 shutdown nosave
"""
import os
import struct
import sys

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "src", "lock", "scripts")
# The watchdog's batch helpers, which Script::renewal puts first.
BATCH_HELPERS = os.path.join(HERE, "..", "src", "core", "scripts", "renew_batch.lua")


def renewal(name):
    """A renewal script as the client sends it: the batch helpers first."""
    with open(BATCH_HELPERS) as helpers, open(os.path.join(SCRIPTS, name)) as body:
        return helpers.read() + body.read()
FIELD = "0a1b2c3d-0000-1111-2222-333344445555:{}"
BATCH = 1000


def pack(strings):
    """A MessagePack array of strings, as src/core/pack.rs writes it."""
    out = [b"\xdd" + struct.pack(">I", len(strings))]
    for s in strings:
        s = s.encode()
        head = bytes([0xA0 | len(s)]) if len(s) < 32 else b"\xda" + struct.pack(">H", len(s))
        out.append(head + s)
    return b"".join(out)


def usec(r):
    return r.info("commandstats").get("cmdstat_evalsha", {"usec": 0})["usec"]


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    r = redis.Redis(port=port)
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.hset(f"wd:{i}", FIELD.format(i % 64), 1)
        pipe.pexpire(f"wd:{i}", 30000)
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    declared = r.script_load(renewal("renew.lua"))
    packed = r.script_load(renewal("renew_packed.lua"))

    def run(packed_call):
        before = usec(r)
        for b in range(0, n, BATCH):
            keys = [f"wd:{i}" for i in range(b, min(b + BATCH, n))]
            fields = [FIELD.format(i % 64) for i in range(b, min(b + BATCH, n))]
            if packed_call:
                entries = [x for pair in zip(keys, fields) for x in pair]
                reply = r.evalsha(packed, 0, 7, 30000, pack(entries))
            else:
                reply = r.evalsha(declared, len(keys), *keys, 7, 30000, *fields)
            assert reply == [7], reply[:5]
        return (usec(r) - before) / n * 1000

    rounds = {"declared keys": [], "packed": []}
    for _ in range(4):
        rounds["declared keys"].append(run(False))
        rounds["packed"].append(run(True))
    for name, ns in rounds.items():
        print(f"{name}: " + " / ".join(f"{x:.0f}" for x in ns) + " ns per lease")


if __name__ == "__main__":
    main()
