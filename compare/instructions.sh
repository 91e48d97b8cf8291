#!/bin/sh
# Instructions per uncontended lock + unlock, one task, leasehold against
# the bare fred baseline, counted by callgrind (valgrind): each side runs N
# and 2N pairs, and the difference / N is the cost of one pair (start-up
# and shutdown cancel out). The client process only: redis-server runs
# outside valgrind (`leasehold-compare --pairs`, see `pairs` in
# compare/src/main.rs). Needs valgrind; about 15 s after the build.
#
#   sh compare/instructions.sh [N [SIDE...]]   (default N = 2000;
#                                               SIDEs: leasehold rawfred)
#
# A SIDE is a contender's short name (`Kind::short` in
# compare/src/contender.rs): e.g. `sh compare/instructions.sh 2000 norecord
# leasehold` compares a client built with `client_record(false)` against
# the default one (issue 33's A/B). With WHAT=handoffs (leasehold's lock
# only: norecord, leasehold), instructions per handoff of one lock between
# two clients instead (`leasehold-compare --handoffs`, see
# compare/src/operators.rs): each is a wait that starts and ends; the
# holder keeps the lock 30 ms after the waiter found it busy, so use a
# smaller N (e.g. 200: about a minute per side). With WHAT=hot,
# instructions per acquisition of one lock by 64 tasks on 4 clients
# (`leasehold-compare --hot`; the count moves with the race).
set -eu
what=${WHAT:-pairs}
unit="lock + unlock"
[ "$what" = handoffs ] && unit=handoff
[ "$what" = hot ] && unit="contended acquisition"
n=${1:-2000}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- leasehold rawfred
cd "$(dirname "$0")/.."
cargo build --release -q -p leasehold-compare
bin=${CARGO_TARGET_DIR:-target}/release/leasehold-compare
out=$(mktemp -d)
count() {
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" "$bin" "--$what" "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : *//p'
}
for side in "$@"; do
    one=$(count "$side" "$n")
    two=$(count "$side" $((2 * n)))
    echo "$side: $(( (two - one) / n )) instructions per $unit ($n: $one, $((2 * n)): $two)"
done
rm -rf "$out"
