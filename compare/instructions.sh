#!/bin/sh
# Instructions per uncontended lock + unlock, one task, leasehold against
# the bare fred baseline, counted by callgrind (valgrind): each side runs N
# and 2N pairs, and the difference / N is the cost of one pair (start-up
# and shutdown cancel out). The client process only: redis-server runs
# outside valgrind (`leasehold-compare --pairs`, see `pairs` in
# compare/src/main.rs). Needs valgrind; about 15 s after the build.
#
#   sh compare/instructions.sh [N]     (default N = 2000)
set -eu
n=${1:-2000}
cd "$(dirname "$0")/.."
cargo build --release -q -p leasehold-compare
bin=${CARGO_TARGET_DIR:-target}/release/leasehold-compare
out=$(mktemp -d)
count() {
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" "$bin" --pairs "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : *//p'
}
for side in leasehold rawfred; do
    one=$(count "$side" "$n")
    two=$(count "$side" $((2 * n)))
    echo "$side: $(( (two - one) / n )) instructions per lock + unlock ($n pairs: $one, $((2 * n)): $two)"
done
rm -rf "$out"
