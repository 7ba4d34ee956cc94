#!/usr/bin/env bash
# tests/support/wan_lab_args.sh: scripts/wan_lab.sh refuses bad input before it makes
# anything (ctest wan_lab_args): each case must exit 2 with a message naming the problem,
# and leave no network namespace of the lab behind. Needs no root: the checks come first.
#
#   wan_lab_args.sh SOURCE_DIR
set -uo pipefail
lab=$1/scripts/wan_lab.sh
before=$(ip netns list 2> /dev/null | grep -c '^tlab' || true)
fail() { echo "wan_lab_args: FAILED: $*"; exit 1; }
expect() { # message, arguments...
    local want=$1 out rc
    shift
    out=$(bash "$lab" "$@" 2>&1)
    rc=$?
    [[ $rc == 2 ]] || fail "wan_lab.sh $* exited $rc, not 2: $out"
    grep -qF -- "$want" <<< "$out" || fail "wan_lab.sh $* said '$out', not '$want'"
}
expect "unknown option '--bogus'" --bogus
expect "--workers must be 1 to 64, got '0'" --workers 0
expect "--workers must be 1 to 64, got 'x'" --workers x
expect "--steps must be >= 1, got '0'" --steps 0
expect "--queue-ms must be >= 1, got '-5'" --queue-ms -5
expect "--burst is a number of bytes, got '4kb'" --burst 4kb
expect "unknown strategy 'fast'" --algos "sparta fast"
expect "unknown strategy 'sparta+carry'" --algos "sparta+carry"
expect "unknown strategy 'diloco+overlap'" --algos "diloco+overlap"
expect "unknown strategy 'sparta+tau5'" --algos "sparta+tau5"
expect "unknown strategy 'diloco+taux'" --algos "diloco+taux"
expect "unknown strategy 'diloco+frag4+slow'" --algos "diloco+frag4+slow"
expect "'fast' is not a rate tc understands" --rate fast
expect "a per-worker list needs 4 entries, got '10mbit,5mbit'" --up 10mbit,5mbit
after=$(ip netns list 2> /dev/null | grep -c '^tlab' || true)
[[ "$before" == "$after" ]] || fail "namespaces of the lab were left behind ($before before, $after after)"
echo "wan_lab_args: passed"
