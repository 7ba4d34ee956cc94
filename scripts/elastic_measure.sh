#!/usr/bin/env bash
# Measures comm::elastic_group across processes on this machine (docs/elastic.md,
# "Across processes: measured"): how long the survivors lose to a worker killed with
# SIGKILL inside an outer all-reduce, against the timeout; how long a joiner takes to
# receive a DiLoCo state of 100M parameters over loopback, against the state's bytes
# divided by the loopback bandwidth measured in the same run; and what a renewal plus a
# commit vote cost per round when nothing changes; and how long the workers lose to a store
# killed and started again on its port (store_recovery).
#   scripts/elastic_measure.sh [BUILD_DIR=build/host] [PARTS=failure,round,join,store]
#   (needs the elastic_worker example built; PARTS picks the experiments, comma-separated)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/host}
parts=${2:-failure,round,join,store}
want() { [[ ",$parts," == *",$1,"* ]]; }
worker=
for w in "$dir"/examples/07_elastic_processes/elastic_worker "$dir"/tests/torch/elastic_worker; do
    [ -x "$w" ] && { worker=$w; break; }
done
store=
for s in "$dir"/examples/07_elastic_processes/trickle-store "$dir"/tests/torch/trickle-store; do
    [ -x "$s" ] && { store=$s; break; }
done
[ -x "$worker" ] && [ -x "$store" ] || { echo "elastic_measure: build elastic_worker and trickle_store in $dir first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
port=0
store_pid=

serve() { # a fresh store per experiment, on a free port
    [ -n "$store_pid" ] && kill "$store_pid" 2>/dev/null && wait "$store_pid" 2>/dev/null || true
    "$store" --port 0 > "$tmp/store.log" 2>&1 &
    store_pid=$!
    for _ in $(seq 200); do
        port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$tmp/store.log" 2>/dev/null)
        [ -n "$port" ] && return
        sleep 0.05
    done
    echo "elastic_measure: the store did not start:" >&2; cat "$tmp/store.log" >&2; exit 1
}
field() { sed -n "s/.* \([0-9.]*\) s $1.*/\1/p" "$2" | head -1; }

if want failure; then
echo "## Failure: worker 2 of 4 killed inside the 2nd outer step's all-reduce (DiLoCo, H = 10)"
echo
echo "| timeout (ms) | liveness (ms) | survivors' time lost (s), min / max of 3 | rounds retried |"
echo "|---|---|---|---|"
for TL in 1000:0 2000:0 4000:0 8000:0 8000:500 8000:1000 8000:2000; do
    T=${TL%%:*}; L=${TL##*:}
    lost=()
    pids=()
    serve
    for i in 0 1 2 3; do
        f=(); [ "$i" = 2 ] && f=(--fault allreduce:3)
        "$worker" --store 127.0.0.1:$port --id $i --initial 4 --steps 40 --interval 10 --timeout-ms "$T" \
            --liveness-ms "$L" "${f[@]}" > "$tmp/w$i.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}" 2>/dev/null || true
    for i in 0 1 3; do
        v=$(field waiting "$tmp/w$i.log")
        [ -n "$v" ] || { echo "elastic_measure: worker $i failed:" >&2; cat "$tmp/w$i.log" >&2; exit 1; }
        lost+=("$v")
    done
    retried=$(sed -n 's/.*, \([0-9]*\) rounds retried.*/\1/p' "$tmp/w0.log")
    mn=$(printf '%s\n' "${lost[@]}" | sort -g | head -1); mx=$(printf '%s\n' "${lost[@]}" | sort -g | tail -1)
    echo "| $T | $L | $mn / $mx | $retried |"
done
echo

fi

if want round; then
echo "## Nothing changes: SPARTA (a renewal and a commit vote every step), 4 workers, 64 parameters"
echo "## renew_every K: the store renewal at every K-th exchange only (elastic_group_options::renew_every)"
echo
for K in 1 4 16; do
    serve
    for i in 0 1 2 3; do
        "$worker" --store 127.0.0.1:$port --id $i --initial 4 --steps 400 --algorithm sparta --timeout-ms 5000 \
            --renew-every $K > "$tmp/s$i.log" 2>&1 &
    done
    wait $(jobs -p | grep -v "^$store_pid\$") 2>/dev/null || true
    for i in 0 1 2 3; do
        total=$(sed -n 's/.* \([0-9.]*\) s in all.*/\1/p' "$tmp/s$i.log")
        wait_s=$(field waiting "$tmp/s$i.log")
        python3 -c "print(f'renew_every $K, worker $i: {1000*$total/400:.2f} ms per step in all, of which {1000*$wait_s/400:.2f} ms in renewals (arrival skew included)')"
    done
done
echo

fi

if want join; then
echo "## A joiner receives a DiLoCo state of 100M parameters (2 members, loopback)"
echo
bw=$(python3 - <<'PY'
import socket, threading, time
n = 1 << 30
chunk = b"\0" * (1 << 20)
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
def sink():
    c, _ = srv.accept()
    got = 0
    while got < n:
        b = c.recv(1 << 20)
        if not b: break
        got += len(b)
    c.close()
t = threading.Thread(target=sink); t.start()
s = socket.create_connection(("127.0.0.1", port))
t0 = time.time()
for _ in range(n // len(chunk)): s.sendall(chunk)
s.close(); t.join()
print(f"{n / (time.time() - t0):.0f}")
PY
)
serve
for i in 0 1; do
    "$worker" --store 127.0.0.1:$port --id $i --initial 2 --steps 8 --interval 4 --dim 100000000 --inner tiny \
        --hold-at 2 --timeout-ms 120000 > "$tmp/j$i.log" 2>&1 &
done
sleep 2
"$worker" --store 127.0.0.1:$port --id 2 --initial 2 --steps 8 --interval 4 --dim 100000000 --inner tiny \
    --timeout-ms 120000 > "$tmp/j2.log" 2>&1
wait $(jobs -p | grep -v "^$store_pid\$") 2>/dev/null || true
join_s=$(sed -n 's/.*constructed in \([0-9.]*\) s.*(joined.*/\1/p' "$tmp/j2.log")
bytes=$(sed -n 's/.*, \([0-9]*\) B of state moved.*/\1/p' "$tmp/j2.log")
moved_s=$(sed -n 's/.* B of state moved in \([0-9.]*\) s.*/\1/p' "$tmp/j2.log")
python3 -c "
bw=$bw; b=$bytes; s=$join_s; m=$moved_s
print(f'loopback bandwidth (one TCP stream, measured now): {bw/1e9:.2f} GB/s')
print(f'state moved: {b/1e6:.0f} MB in {m:.2f} s (the welcome: transfer, checks, hash vote), {m/(b/bw):.1f}x bytes / bandwidth ({b/bw:.2f} s)')
print(f'joiner constructed (its own buffers, admission at the members\' next round, the welcome, that round) in {s:.2f} s')"
cat "$tmp"/j*.log | grep -v "^$" | sed 's/^/    /'
fi

if want store; then
echo "## The store killed and started again on its port (store_recovery), 4 workers, H = 10, 400 steps of 4 ms"
echo "## outage: from the kill until the new store accepts connections (the pause chosen, plus the store"
echo "## process's own start); recovery: each worker's time from its failed store operation to the store"
echo "## given back the view (store_recovery_seconds); beyond: recovery minus the outage"
echo
echo "| algorithm | pause (ms) | outage (s) | recovery per worker (s), min / max | beyond the outage (s), max | rounds done |"
echo "|---|---|---|---|---|---|"
for alg in diloco sparta; do
    for D in 0 500 2000; do
        serve
        for i in 0 1 2 3; do
            "$worker" --store 127.0.0.1:$port --id $i --initial 4 --steps 400 --interval 10 --step-ms 4 \
                --timeout-ms 5000 --store-recovery-ms 30000 --algorithm $alg > "$tmp/r$i.log" 2>&1 &
        done
        until grep -q "constructed in" "$tmp"/r3.log 2>/dev/null; do sleep 0.01; done
        sleep 0.5
        # The kill, the pause, the new store, and the moment its port accepts (a probe every 2 ms).
        t0=$(python3 -c 'import time; print(time.time())')
        kill -9 "$store_pid"; wait "$store_pid" 2>/dev/null || true
        python3 -c "import time; time.sleep($D / 1000)"
        "$store" --port "$port" > "$tmp/store.log" 2>&1 &
        store_pid=$!
        outage=$(python3 - "$port" "$t0" <<'PY'
import socket, sys, time
port, t0 = int(sys.argv[1]), float(sys.argv[2])
while True:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
        break
    except OSError:
        time.sleep(0.002)
print(f"{time.time() - t0:.3f}")
PY
)
        wait $(jobs -p | grep -v "^$store_pid\$") 2>/dev/null || true
        python3 - "$tmp" "$alg" "$D" "$outage" <<'PY'
import re, sys
tmp, alg, d, outage = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
rec, rounds = [], set()
for i in range(4):
    t = open(f"{tmp}/r{i}.log").read()
    m = re.search(r", ([0-9]+) rounds, ([0-9]+) store recoveries \(([0-9.]+) s\)", t)
    if not m or m[2] != "1": sys.exit(f"elastic_measure: worker {i} did not recover once:\n{t}")
    rec.append(float(m[3])); rounds.add(m[1])
expected = "400" if alg == "sparta" else "40"
print(f"| {alg} | {d} | {outage:.3f} | {min(rec):.3f} / {max(rec):.3f} | {max(rec) - outage:.3f} | "
      f"{'/'.join(sorted(rounds))} of {expected} |")
PY
    done
done
echo
fi
