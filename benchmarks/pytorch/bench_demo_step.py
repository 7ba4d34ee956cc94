"""trickle.DeMo's optimizer step against torch.optim.AdamW's, and against AdamW after a dense
gradient all-reduce (a DDP step's communication), in the same run over the same Gloo group.

    torchrun --standalone --nproc_per_node 2 --redirects 2 --tee 2 benchmarks/pytorch/bench_demo_step.py \
        [--hidden 1024] [--layers 4] [--chunk 64] [--k 32] [--iters 20] [--json out.json]

The model is a stack of --layers square linear layers of width --hidden (weights as
matrices: DeMo's chunk x chunk tiles; biases as vectors: 1-D chunks). Every rank writes
gradients of its own (fixed, random) before each timed call, then times: AdamW.step(); a
flat fp32 all-reduce of every gradient followed by AdamW.step() (DDP's work per step,
without its overlap); DeMo.step() with each selection (top_k as published, shared). DeMo's
step holds the DCT of the momentum, its exchange and the sign update. Rank 0 prints the
median milliseconds per call over --iters (after 3 warm-up calls), the ratio to AdamW's step
and the bytes each method sent per step (trickle's counters; the all-reduce at a ring's
2 (N - 1) / N of its bytes). One thread per rank (torch.set_num_threads(1)).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import trickle


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if "RANK" not in os.environ:
        print("bench_demo_step.py: start it with torchrun (see the docstring)", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Linear(args.hidden, args.hidden) for _ in range(args.layers)])

    g = torch.Generator().manual_seed(100 + rank)
    grads = [torch.randn(p.shape, generator=g) * 1e-2 for p in model().parameters()]
    n = sum(t.numel() for t in grads)

    def timed(params, step) -> float:
        times = []
        for i in range(3 + args.iters):
            for p, gr in zip(params, grads):
                p.grad = gr.clone()
            dist.barrier()
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        return statistics.median(times[3:]) * 1e3

    rows = []
    m = model()
    adam = torch.optim.AdamW(m.parameters(), lr=1e-4)
    rows.append(("AdamW.step()", timed(list(m.parameters()), adam.step), 0))

    m = model()
    params = list(m.parameters())
    adam = torch.optim.AdamW(params, lr=1e-4)
    flat = torch.empty(n)

    def dense_step():
        off = 0
        for p in params:
            flat[off : off + p.numel()].copy_(p.grad.reshape(-1))
            off += p.numel()
        dist.all_reduce(flat)
        flat.div_(world)
        off = 0
        for p in params:
            p.grad.copy_(flat[off : off + p.numel()].view_as(p))
            off += p.numel()
        adam.step()

    rows.append(("all-reduce + AdamW.step()", timed(params, dense_step), 2 * (world - 1) * n * 4 // world))

    for selection in ("top_k", "shared"):
        m = model()
        opt = trickle.DeMo(m.parameters(), lr=1e-4, chunk=args.chunk, k=args.k, selection=selection)
        ms = timed(list(m.parameters()), opt.step)
        st = opt.stats
        rows.append((f"DeMo({selection}).step()", ms, st.bytes_sent // max(st.steps, 1)))

    if rank == 0:
        base = rows[0][1]
        print(f"{world} ranks (gloo, 1 thread each), {args.layers} x Linear({args.hidden}, {args.hidden}): {n} "
              f"parameters; DeMo chunk {args.chunk}, k {args.k}; median of {args.iters} calls")
        print(f"{'method':30s} {'ms':>9s} {'/ AdamW':>8s} {'bytes sent / step':>18s}")
        for name, ms, b in rows:
            print(f"{name:30s} {ms:9.2f} {ms / base:8.2f} {b:18d}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"world": world, "parameters": n, "chunk": args.chunk, "k": args.k,
                           "rows": [{"method": a, "ms": b, "bytes": c} for a, b, c in rows]}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
