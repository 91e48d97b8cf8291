"""Which socket hears first: the caller of a script that PUBLISHes, or the subscriber?

BENCHMARKS.md ("Where the fair handoff's time goes") cites this test. It
uses raw sockets, with no client library and no async runtime. A subscriber
listens on `ch`. Another connection sends `EVAL "redis.call('publish','ch','x')
return 1" 0`, 300 times, 5 ms apart. The script prints the arrival time of
the subscriber's message minus the arrival time of the EVAL reply
(percentiles, µs; negative means the message came first).

    redis-server --port 36999 --save '' --daemonize yes
    python3 compare/write_order.py 36999          # EVAL alone
    python3 compare/write_order.py 36999 ping     # PING pipelined ahead of it
    redis-cli -p 36999 shutdown nosave
"""
import select
import socket
import sys
import time


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def main():
    port = int(sys.argv[1])
    ping_first = len(sys.argv) > 2 and sys.argv[2] == "ping"
    sub, cmd = connect(port), connect(port)
    sub.sendall(resp(b"SUBSCRIBE", b"ch"))
    time.sleep(0.1)
    sub.recv(1000)
    script = b"redis.call('publish','ch','x') return 1"
    request = (resp(b"PING") if ping_first else b"") + resp(b"EVAL", script, b"0")
    deltas = []
    for _ in range(300):
        time.sleep(0.005)
        cmd.sendall(request)
        heard = {}
        while len(heard) < 2:
            ready, _, _ = select.select([sub, cmd], [], [])
            now = time.perf_counter()
            for s in ready:
                s.recv(1000)
                heard[s] = now
        deltas.append((heard[sub] - heard[cmd]) * 1e6)
    deltas.sort()
    print("subscriber message - EVAL reply, µs: p10 %.1f p50 %.1f p90 %.1f"
          % (deltas[30], deltas[150], deltas[270]))


if __name__ == "__main__":
    main()
