#!/usr/bin/env bash
# scripts/wan_lab.sh: trickle's network lab. Real worker processes, each in its own network
# namespace behind a bridge, every access link rate-limited in both directions with tc's
# token bucket (tbf), training examples/python/train_gpt.py through the Python package over
# Gloo, one strategy after another. It records each step's compute and communication time
# and bytes (the trainer's --metrics), the interfaces' own byte counters and the queues'
# drops, and writes a summary and the figures (scripts/plot_lab.py).
#
#   sudo scripts/wan_lab.sh [options] [-- trainer options]
#
#   --workers N        worker processes (default 4)
#   --rate R           every worker's link, both directions, as tc writes rates (default
#                      10mbit); "none" leaves the links unshaped
#   --up R0,R1,...     per-worker upload rates (worker -> bridge), overriding --rate
#   --down R0,R1,...   per-worker download rates (bridge -> worker), overriding --rate
#   --burst BYTES      the bucket's size (default: 5 ms at the link's rate, at least 3028:
#                      two full frames; a small burst, so the rate holds over short spans)
#   --queue-ms MS      how long a packet may wait in the queue before tbf drops it (default 100)
#   --algos "A B ..."  strategies, in order (default "ddp sparta diloco"): any of
#                      train_gpt.py's --algo values, each with variants after '+':
#                      +overlap (SPARTA's overlapped exchange), +tauN (DiLoCo's outer
#                      step applied N inner steps after it starts: --overlap-steps N),
#                      +fragN (Streaming DiLoCo's fragments); e.g. "sparta+overlap
#                      diloco+tau30 diloco+frag4+tau5"; +carry (--carry-local: a late
#                      average lands plus the progress made meanwhile) and +bf16 (the
#                      outer gradient in bf16) for diloco. "dense" is trickle.DDP; "demo" is
#                      trickle.DeMo in place of AdamW, +shared its shared-index selection.
#   --steps N          optimizer steps per run (default 100)
#   --unshaped         also run every strategy once without shaping, for the ratio of
#                      mean step times (the issue's targets are ratios to that)
#   --out DIR          where the results go (default build/wan_lab/<date-time>)
#   --python PY        the Python with torch and trickle (default: tests/python/run.sh's
#                      build/pyenv, else python3)
#   --short            the CI mode: 2 workers, sparta then ddp, 12 steps at 50mbit; checks
#                      that the run finished, the counters moved and the report was written
#   --join D           instead of the trainer, an elastic join (docs/elastic.md): workers
#                      0..N-2 start a DiLoCo of D parameters (examples/07_elastic_processes'
#                      elastic_worker over comm::elastic_group, Gloo on each worker's eth0),
#                      worker N-1 joins at their next outer step and receives the state
#                      (8 D bytes) over the shaped links; join.md reports the welcome's
#                      seconds against the state's bytes over the link's rate, the rate
#                      measured through the same links in the same run
#   --build DIR        where elastic_worker and trickle-store are built (default:
#                      build/host-release, else build/host)
#   everything after -- goes to train_gpt.py (e.g. -- --d-model 128 --layers 4)
#
# Needs root, iproute2 (ip netns, veth, bridge) and tc with the tbf qdisc. netem is not
# available on these kernels, so no delay, jitter or loss is added: the lab measures the
# cost of bandwidth (and the queueing tbf adds), not of latency. Exit status 77 (skipped),
# with a message, where namespaces cannot be made. Every namespace it made is deleted on
# every exit (the interfaces and the bridge go with them); it gives addresses only to
# interfaces inside its own namespaces (10.213.0.0/24), never to the host's.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

workers=4 rate=10mbit up="" down="" burst="" queue_ms=100 algos="ddp sparta diloco" steps=100
unshaped=0 out="" py="" short=0 trainer_args=() join_dim="" build=""
die() { echo "wan_lab: $*" >&2; exit 2; }
while (( $# )); do
    case "$1" in
        --workers) workers=${2:?}; shift 2 ;;
        --rate) rate=${2:?}; shift 2 ;;
        --up) up=${2:?}; shift 2 ;;
        --down) down=${2:?}; shift 2 ;;
        --burst) burst=${2:?}; shift 2 ;;
        --queue-ms) queue_ms=${2:?}; shift 2 ;;
        --algos) algos=${2:?}; shift 2 ;;
        --steps) steps=${2:?}; shift 2 ;;
        --unshaped) unshaped=1; shift ;;
        --out) out=${2:?}; shift 2 ;;
        --python) py=${2:?}; shift 2 ;;
        --short) short=1; shift ;;
        --join) join_dim=${2:?}; shift 2 ;;
        --build) build=${2:?}; shift 2 ;;
        --) shift; trainer_args=("$@"); break ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
if (( short )); then
    workers=2 rate=50mbit algos="sparta ddp" steps=12 up="" down=""
    trainer_args+=(--log-every 6)
fi
if [[ -n "$join_dim" ]]; then
    [[ "$join_dim" =~ ^[0-9]+$ ]] && (( join_dim >= 1 )) || die "--join needs a parameter count >= 1, got '$join_dim'"
    (( workers >= 2 )) || die "--join needs at least 2 workers (members, then the joiner)"
    algos=join
    for b in ${build:+"$build"} "$root/build/host-release" "$root/build/host"; do
        for store_bin in "$b"/examples/07_elastic_processes/trickle-store "$b"/tests/torch/trickle-store; do
            [[ -x "$store_bin" ]] && break
        done
        for worker_bin in "$b"/examples/07_elastic_processes/elastic_worker "$b"/tests/torch/elastic_worker; do
            [[ -x "$worker_bin" ]] && break
        done
        [[ -x "$worker_bin" && -x "$store_bin" ]] && break
    done
    [[ -x "$worker_bin" && -x "$store_bin" ]] || die "--join needs elastic_worker and trickle-store built (cmake --build --preset host-release --target elastic_worker trickle_store), or --build DIR"
fi
[[ "$workers" =~ ^[0-9]+$ ]] && (( workers >= 1 && workers <= 64 )) || die "--workers must be 1 to 64, got '$workers'"
[[ "$steps" =~ ^[0-9]+$ ]] && (( steps >= 1 )) || die "--steps must be >= 1, got '$steps'"
[[ "$queue_ms" =~ ^[0-9]+$ ]] && (( queue_ms >= 1 )) || die "--queue-ms must be >= 1, got '$queue_ms'"
[[ -z "$burst" || "$burst" =~ ^[0-9]+$ ]] || die "--burst is a number of bytes, got '$burst'"
# A strategy's trainer flags: "diloco+frag4+tau5" -> --algo diloco --fragments 4 --overlap-steps 5.
strategy_args() {
    local spec=$1 base part
    base=${spec%%+*}
    case $base in ddp|dense|sparta|diloco|sparta-diloco|demo) ;; *) return 1 ;; esac
    echo "--algo $base"
    [[ "$spec" == *+* ]] || return 0
    local rest=${spec#*+}
    IFS=+ read -ra parts <<< "$rest"
    for part in "${parts[@]}"; do
        case $part in
            overlap) [[ $base == sparta* ]] || return 1; echo "--overlap" ;;
            tau[0-9]*) [[ ${part#tau} =~ ^[0-9]+$ && $base == *diloco ]] || return 1; echo "--overlap-steps ${part#tau}" ;;
            frag[0-9]*) [[ ${part#frag} =~ ^[0-9]+$ && $base == *diloco ]] || return 1; echo "--fragments ${part#frag}" ;;
            carry) [[ $base == *diloco ]] || return 1; echo "--carry-local" ;;
            bf16) [[ $base == *diloco ]] || return 1; echo "--outer-codec bf16" ;;
            shared) [[ $base == demo ]] || return 1; echo "--demo-selection shared" ;;
            *) return 1 ;;
        esac
    done
}
for a in $algos; do
    [[ $a == join && -n "$join_dim" ]] && continue
    strategy_args "$a" > /dev/null || die "unknown strategy '$a' in --algos (ddp, dense, sparta, diloco, sparta-diloco, demo; variants +overlap for sparta, +tauN, +fragN, +carry and +bf16 for diloco, +shared for demo)"
done

# Rates: "10mbit" -> bits per second (tc's units), for the burst and the report.
bits_per_second() {
    local r=${1,,}
    [[ "$r" =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$ ]] || return 1
    awk -v v="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" 'BEGIN {
        m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9
        m["bps"] = 8; m["kbps"] = 8e3; m["mbps"] = 8e6; m["gbps"] = 8e9
        printf "%.0f\n", v * m[u] }'
}
# Per-worker rates: a comma list of one entry per worker, or --rate for every worker.
ups=() downs=()
for ((i = 0; i < workers; i++)); do ups+=("$rate"); downs+=("$rate"); done
[[ -n "$up" ]] && IFS=, read -r -a ups <<< "$up"
[[ -n "$down" ]] && IFS=, read -r -a downs <<< "$down"
for list in "$up" "$down"; do
    [[ -z "$list" ]] && continue
    IFS=, read -r -a xs <<< "$list"
    (( ${#xs[@]} == workers )) || die "a per-worker list needs $workers entries, got '$list'"
done
for r in "${ups[@]}" "${downs[@]}"; do
    [[ "$r" == none ]] || bits_per_second "$r" > /dev/null || die "'$r' is not a rate tc understands (e.g. 10mbit, 500kbit)"
done

if [[ -z "$py" ]]; then
    if [[ -x "$root/build/pyenv/bin/python" ]]; then py=$root/build/pyenv/bin/python; else py=python3; fi
fi
skip() { echo "wan_lab: skipped: $*"; exit 77; }
(( EUID == 0 )) || skip "needs root (network namespaces and tc)"
command -v ip > /dev/null && command -v tc > /dev/null || skip "needs iproute2's ip and tc"
[[ -n "$join_dim" ]] || "$py" -c 'import torch, trickle' 2> /dev/null || skip "$py cannot import torch and trickle (tests/python/run.sh --build-only makes build/pyenv)"

id=$$
ns_hub="tlab${id}h"
ns() { echo "tlab${id}w$1"; }
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2> /dev/null; done
    for ((i = 0; i < workers; i++)); do ip netns del "$(ns $i)" 2> /dev/null; done
    ip netns del "$ns_hub" 2> /dev/null
    true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$ns_hub" 2> /dev/null || skip "cannot make a network namespace here (ip netns add failed)"
ip -n "$ns_hub" link set lo up
ip -n "$ns_hub" link add br0 type bridge || die "cannot make a bridge"
ip -n "$ns_hub" link set br0 up
for ((i = 0; i < workers; i++)); do
    w=$(ns $i)
    ip netns add "$w" || die "cannot make namespace $w"
    ip -n "$w" link set lo up
    ip link add eth0 netns "$w" type veth peer name "h$i" netns "$ns_hub" || die "cannot make a veth pair for worker $i"
    ip -n "$w" addr add "10.213.0.$((i + 1))/24" dev eth0
    ip -n "$w" link set eth0 up
    ip -n "$ns_hub" link set "h$i" master br0
    ip -n "$ns_hub" link set "h$i" up
done

# Shapes (or unshapes) every link: upload on the worker's eth0, download on the bridge's port.
shape() { # shaped: 1 or 0
    for ((i = 0; i < workers; i++)); do
        ip netns exec "$(ns $i)" tc qdisc del dev eth0 root 2> /dev/null
        ip netns exec "$ns_hub" tc qdisc del dev "h$i" root 2> /dev/null
        (( $1 )) || continue
        for side in up down; do
            if [[ $side == up ]]; then r=${ups[i]} where=("$(ns $i)" eth0); else r=${downs[i]} where=("$ns_hub" "h$i"); fi
            [[ "$r" == none ]] && continue
            b=$burst
            if [[ -z "$b" ]]; then
                b=$(( $(bits_per_second "$r") / 8 / 200 ))
                (( b < 3028 )) && b=3028
            fi
            ip netns exec "${where[0]}" tc qdisc add dev "${where[1]}" root tbf rate "$r" burst "$b" latency "${queue_ms}ms" ||
                die "tc could not shape ${where[1]} in ${where[0]} (rate $r, burst $b)"
        done
    done
}
# Bytes sent and received on each worker's interface, and the queues' drops, as JSON.
counters() {
    local first=1
    printf '['
    for ((i = 0; i < workers; i++)); do
        local link qup qdown
        link=$(ip -n "$(ns $i)" -s -j link show eth0)
        qup=$(ip netns exec "$(ns $i)" tc -s -j qdisc show dev eth0)
        qdown=$(ip netns exec "$ns_hub" tc -s -j qdisc show dev "h$i")
        (( first )) || printf ','
        first=0
        printf '{"worker": %d, "link": %s, "qdisc_up": %s, "qdisc_down": %s}' "$i" "$link" "$qup" "$qdown"
    done
    printf ']\n'
}

[[ -n "$out" ]] || out=$root/build/wan_lab/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out" || die "cannot make $out"
out=$(cd "$out" && pwd)
{
    echo "{\"workers\": $workers, \"steps\": $steps, \"queue_ms\": $queue_ms, \"burst\": \"${burst:-auto}\","
    echo " \"up\": \"$(IFS=,; echo "${ups[*]}")\", \"down\": \"$(IFS=,; echo "${downs[*]}")\","
    echo " \"trainer_args\": \"${trainer_args[*]}\", \"python\": \"$py\", \"kernel\": \"$(uname -r)\","
    echo " \"cores\": $(nproc), \"date\": \"$(date -u +%FT%TZ)\", \"commit\": \"$(git -C "$root" rev-parse --short HEAD 2> /dev/null)\"}"
} > "$out/lab.json"
echo "wan_lab: $workers workers, up ${ups[*]}, down ${downs[*]}; results in $out"

status=0
port=29500
# What one TCP stream moves from the first worker to the last through the links as they
# are shaped now, in bytes per second (3 s of sending): the rate a join is measured against.
rate_server='
import socket, sys, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1]))); srv.listen(1)
c, _ = srv.accept(); got = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    if t0 is None: t0 = time.time()
    got += len(b)
print(f"{got / (time.time() - t0):.0f}")'
rate_client='
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
chunk = bytes(1 << 20); t0 = time.time()
while time.time() - t0 < 3.0: s.sendall(chunk)
s.close()'
link_rate() {
    local lp=$((port + 500)) f=$out/.rate sp
    ip netns exec "$(ns $((workers - 1)))" python3 -c "$rate_server" "$lp" > "$f" &
    sp=$!
    pids+=("$sp")
    sleep 0.5
    ip netns exec "$(ns 0)" python3 -c "$rate_client" "10.213.0.$workers" "$lp"
    wait "$sp"
    cat "$f"
    rm -f "$f"
}
# --join: members 0..N-2, then worker N-1 joins; the welcome's time against bytes / rate.
run_join() { # dir
    local dir=$1 sport="" w=$((workers - 1)) rate
    rate=$(link_rate)
    [[ -n "$rate" ]] || { echo "wan_lab: the rate could not be measured" >&2; return 1; }
    ip netns exec "$(ns 0)" "$store_bin" --port 0 > "$dir/store.log" 2>&1 &
    pids=($!)
    for _ in $(seq 200); do
        sport=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$dir/store.log" 2> /dev/null)
        [[ -n "$sport" ]] && break
        sleep 0.05
    done
    [[ -n "$sport" ]] || { echo "wan_lab: the store did not start" >&2; return 1; }
    local common=(--store "10.213.0.1:$sport" --initial "$w" --steps 8 --interval 4 --dim "$join_dim" --inner tiny
                  --timeout-ms 600000)
    local members=()
    for ((i = 0; i < w; i++)); do
        ip netns exec "$(ns $i)" "$worker_bin" "${common[@]}" --id $i --hostname "10.213.0.$((i + 1))" --hold-at 2 \
            > "$dir/worker_$i.log" 2>&1 &
        members+=($!)
    done
    pids+=("${members[@]}")
    sleep 2
    ip netns exec "$(ns $w)" "$worker_bin" "${common[@]}" --id $w --hostname "10.213.0.$workers" > "$dir/worker_$w.log" 2>&1
    local rc=$?
    for p in "${members[@]}"; do wait "$p" || rc=1; done
    kill "${pids[0]}" 2> /dev/null; wait "${pids[0]}" 2> /dev/null
    pids=()
    local bytes secs built
    bytes=$(sed -n 's/.*, \([0-9]*\) B of state moved.*/\1/p' "$dir/worker_$w.log")
    secs=$(sed -n 's/.* B of state moved in \([0-9.]*\) s.*/\1/p' "$dir/worker_$w.log")
    built=$(sed -n 's/.*constructed in \([0-9.]*\) s.*(joined.*/\1/p' "$dir/worker_$w.log")
    [[ $rc == 0 && -n "$bytes" && -n "$secs" ]] || return 1
    python3 - "$rate" "$bytes" "$secs" "$built" "${ups[0]}" "${downs[$w]}" >> "$out/join.md" <<'PY'
import sys
rate, b, s, built = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
print(f"| {sys.argv[5]} up / {sys.argv[6]} down | {rate * 8 / 1e6:.0f} Mb/s | {b / 1e6:.0f} MB | {s:.2f} s | "
      f"{b / rate:.2f} s | **{s / (b / rate):.2f}x** | {built:.2f} s |")
PY
}
run_one() { # strategy, shaped (1/0)
    local algo=$1 shaped=$2 dir
    dir=$out/$algo$( (( shaped )) || echo -unshaped)
    mkdir -p "$dir"
    shape "$shaped"
    counters > "$dir/counters_before.json"
    port=$((port + 1))
    pids=()
    local t0=$SECONDS
    if [[ $algo == join ]]; then
        local rc=0
        run_join "$dir" || rc=1
        counters > "$dir/counters_after.json"
        echo "wan_lab: join ($( (( shaped )) && echo shaped || echo unshaped)): $(( SECONDS - t0 )) s, exit $rc"
        (( rc == 0 )) || { status=1; tail -5 "$dir"/*.log >&2; }
        return
    fi
    for ((i = 0; i < workers; i++)); do
        ip netns exec "$(ns $i)" env RANK=$i WORLD_SIZE=$workers LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
            MASTER_ADDR=10.213.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 \
            "$py" "$root/examples/python/train_gpt.py" $(strategy_args "$algo") --steps "$steps" \
            --metrics "$dir/metrics_{rank}.jsonl" "${trainer_args[@]}" > "$dir/worker_$i.log" 2>&1 &
        pids+=($!)
    done
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    pids=()
    counters > "$dir/counters_after.json"
    echo "wan_lab: $algo ($( (( shaped )) && echo shaped || echo unshaped)): $(( SECONDS - t0 )) s, exit $rc"
    if (( rc != 0 )); then
        status=1
        tail -5 "$dir"/worker_*.log >&2
    fi
}
if [[ -n "$join_dim" ]]; then
    {
        echo "# An elastic join over the lab's links: $((workers - 1)) members, one joiner, DiLoCo of $join_dim parameters"
        echo
        echo "The welcome: the state's transfer from the donor (worker 0) to the joiner, its checks and the hash"
        echo "vote (membership_stats::transfer_seconds). The rate: one TCP stream from worker 0 to the joiner"
        echo "through the same links, measured just before. The joiner's constructor also allocates its state and"
        echo "waits for the members' next outer step."
        echo
        echo "| links | measured rate | state | welcome | bytes / rate | ratio | joiner constructed in |"
        echo "|---|---|---|---|---|---|---|"
    } > "$out/join.md"
fi
for a in $algos; do
    run_one "$a" 1
    (( unshaped )) && run_one "$a" 0
done
shape 0
if [[ -n "$join_dim" ]]; then
    cat "$out/join.md"
    exit $status
fi

"$py" "$root/scripts/plot_lab.py" "$out" || { echo "wan_lab: the report failed" >&2; status=1; }
if (( short && status == 0 )); then
    for a in $algos; do
        [[ -s "$out/$a/metrics_0.jsonl" ]] || { echo "wan_lab: short mode: no metrics for $a" >&2; status=1; }
    done
    grep -q "| sparta |" "$out/summary.md" || { echo "wan_lab: short mode: summary.md lacks sparta" >&2; status=1; }
    (( status == 0 )) && echo "wan_lab: short mode passed"
fi
exit $status
