"""Overhead of trickle.SPARTA.step() next to the optimizer step, against a SPARTA step in
the style of EXO Gym (a Bernoulli mask drawn on rank 0 and broadcast, then an all-reduce
of the masked values), against one dist.all_reduce of as many values as trickle averages
(the latency floor of the exchange: a DDP bucket of those bytes) and against a DDP step's
gradient all-reduce of the whole model, in the same run over the same process group.

    torchrun --standalone --nproc_per_node 2 --redirects 2 --tee 2 benchmarks/pytorch/bench_sparta_step.py \
        [--hidden 2048] [--layers 3] [--fraction 0.005] [--iters 20] [--diloco] [--json out.json]

On a GPU (a CUDA build of trickle), the model and every method on CUDA tensors:

    torchrun --standalone --nproc_per_node 1 benchmarks/pytorch/bench_sparta_step.py --device cuda \
        --backend nccl --hidden 2048 --layers 30 --diloco     # 126M parameters, GPT-2 small's size

(--backend gloo with several ranks on one GPU stages every collective through host memory.)
Each timed call is followed by torch.cuda.synchronize(), so a time includes the kernels it
queued.

(--redirects 2 --tee 2: torch 1.13's torchrun fails under Python 3.11 without them; torch
2.x accepts them too.)

--profile (CUDA only) also runs each trickle method a few more times under torch.profiler
and reports, per call: the kernels that ran on the GPU (trickle's, NCCL's, others'), the
host synchronizations (cuda*Synchronize, blocking cudaMemcpy), the device allocations
(cudaMalloc*, cudaFree) and the memory copies it queued. The targets: a SPARTA step is two
trickle kernels and one collective, with no host synchronization and no allocation.

Every rank times the same loop; rank 0 prints a table (milliseconds per call, median of
--iters after 3 warm-up calls) and the bytes each method puts on the wire per step.
trickle's bytes are its own counters; the masked method's are computed with the same
cost model (a broadcast of n one-byte mask entries from rank 0, and a ring all-reduce of
the p·n selected fp32 values: 2 (N-1)/N of them per rank).
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist



def masked_sparta_step(params, fraction, world, gen):
    """EXO Gym-style SPARTA: rank 0 draws a mask per tensor and broadcasts it; the masked
    values are all-reduced and written back as their mean."""
    for p in params:
        with torch.no_grad():
            # One byte per entry (Gloo cannot broadcast bool tensors).
            if dist.get_rank() == 0:
                mask = (torch.rand(p.shape, generator=gen, device=p.device) < fraction).to(torch.uint8)
            else:
                mask = torch.empty(p.shape, dtype=torch.uint8, device=p.device)
            dist.broadcast(mask, src=0)
            mask = mask.bool()
            values = p[mask]
            dist.all_reduce(values)
            p[mask] = values / world


def masked_bytes(n, fraction, world, rank):
    mask = (world - 1) * n if rank == 0 else 0  # one byte per entry, from the root
    values = 2 * (world - 1) / world * fraction * n * 4
    return mask + values


SYNC = lambda: None  # noqa: E731  (torch.cuda.synchronize on a GPU)


def timed(fn, iters):
    for _ in range(3):
        fn()
    SYNC()
    out = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        SYNC()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def profile_calls(fn, baseline, steps=5):
    """Per call of fn: GPU kernels by origin, host synchronizations, allocations and copies,
    counted by torch.profiler over `steps` calls, less `baseline`: the counts of the same
    profile of a call that does nothing (profile_calls(lambda: None, {})): the synchronization
    this function adds to drain the queue, and whatever the profiler does itself."""
    from torch.profiler import ProfilerActivity, profile

    fn()  # anything done once (a first-call set-up) stays out of the count
    SYNC()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        SYNC()
    counts = {"kernels_trickle": 0, "kernels_nccl": 0, "kernels_other": 0, "host_syncs": 0,
              "allocations": 0, "copies": 0}
    other = {}
    for e in prof.events():
        name = e.name
        on_gpu = str(getattr(e, "device_type", "")).endswith("CUDA")
        if on_gpu:
            if name.startswith("Memcpy") or name.startswith("Memset"):
                counts["copies"] += 1
            elif "nccl" in name.lower():
                counts["kernels_nccl"] += 1
            elif "trickle" in name:
                counts["kernels_trickle"] += 1
            else:
                counts["kernels_other"] += 1
                other[name[:80]] = other.get(name[:80], 0) + 1
        elif name.startswith(("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")) or \
                name in ("cudaMemcpy", "cuMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2"):
            counts["host_syncs"] += 1
        elif name.startswith(("cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree")):
            counts["allocations"] += 1
    out = {k: max(0.0, v / steps - baseline.get(k, 0.0)) for k, v in counts.items()}
    out["other_kernels"] = {k: v / steps for k, v in sorted(other.items())}
    return out


def main():
    import trickle  # here, so that gloo_exit_abort.py can use this file's baselines without trickle

    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.005)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--diloco", action="store_true",
                    help="also time a DiLoCo outer step (interval=1: every step is one), fp32 and int8")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    ap.add_argument("--profile", action="store_true",
                    help="(CUDA) count kernels, host synchronizations and allocations per trickle call")
    args = ap.parse_args()

    global SYNC
    if args.device == "cuda":
        import os

        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
        SYNC = lambda: torch.cuda.synchronize(device)  # noqa: E731
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to(device)
    params = [p for p in model.parameters()]
    n = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-4)
    x = torch.randn(16, args.hidden, device=device)
    model(x).square().mean().backward()  # gradients for the optimizer steps

    sparta = trickle.SPARTA(model, fraction=args.fraction, sampler="uniform", seed=1)
    sparta_block = trickle.SPARTA(model, fraction=args.fraction, sampler="block", block_size=256, seed=1)
    gen = torch.Generator(device=device).manual_seed(1234)

    before = sparta.stats.bytes_sent
    calls_before = getattr(sparta, "collectives", 0)  # (builds before the count existed: 0)
    t_opt = timed(opt.step, args.iters)
    t_trickle = timed(sparta.step, args.iters)
    trickle_bytes = (sparta.stats.bytes_sent - before) / (args.iters + 3)
    collectives = (getattr(sparta, "collectives", 0) - calls_before) / (args.iters + 3)
    t_block = timed(sparta_block.step, args.iters)
    t_masked = timed(lambda: masked_sparta_step(params, args.fraction, world, gen), args.iters)
    # One all-reduce of the values one exchange averages, and a DDP step's all-reduce of
    # every gradient (one flat bucket, the fastest DDP could do it).
    same = torch.randn(sparta.stats.last_values, device=device)
    t_same = timed(lambda: dist.all_reduce(same), args.iters)
    grads = torch.randn(n, device=device)
    t_dense = timed(lambda: dist.all_reduce(grads), args.iters)

    profiled = {}
    baseline = profile_calls(lambda: None, {}) if args.profile and args.device == "cuda" else None
    if baseline is not None:
        profiled["SPARTA uniform"] = profile_calls(sparta.step, baseline)
        profiled["SPARTA block-256"] = profile_calls(sparta_block.step, baseline)
        profiled["AdamW optimizer.step()"] = profile_calls(opt.step, baseline)
    t_outer = {}
    if args.diloco:
        for codec in ("fp32", "int8"):
            d = trickle.DiLoCo(model, interval=1, outer_codec=codec, seed=1, broadcast_initial=False)
            t_outer[codec] = timed(d.step, args.iters)
            if baseline is not None:
                profiled[f"DiLoCo outer step, {codec}"] = profile_calls(d.step, baseline)
            del d

    result = {
        "ranks": world,
        "parameters": n,
        "fraction": args.fraction,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if args.device == "cuda" else "cpu",
        "backend": args.backend,
        "threads": torch.get_num_threads(),
        "optimizer_step_ms": t_opt,
        "trickle_uniform_step_ms": t_trickle,
        "trickle_block256_step_ms": t_block,
        "masked_step_ms": t_masked,
        "all_reduce_same_values_ms": t_same,
        "ddp_all_reduce_ms": t_dense,
        "values_per_exchange": sparta.stats.last_values,
        "trickle_collectives_per_step": collectives,
        "diloco_outer_step_ms": t_outer,
        "profile_per_call": profiled,
        "trickle_bytes_per_step": trickle_bytes,
        "masked_bytes_per_step": masked_bytes(n, args.fraction, world, rank),
    }
    if rank == 0:
        where = result["device"] if args.device == "cuda" else "CPU"
        print(f"{n / 1e6:.1f}M parameters, p = {args.fraction}, {world} ranks ({args.backend}, {where}), "
              f"torch {torch.__version__}")
        print(f"{'step':<40}{'ms':>10}{'x AdamW':>10}{'bytes sent':>14}")
        rows = [
            ("AdamW optimizer.step()", t_opt, None),
            ("trickle.SPARTA uniform .step()", t_trickle, trickle_bytes),
            ("trickle.SPARTA block-256 .step()", t_block, trickle_bytes),
            ("masked (EXO Gym-style) step", t_masked, result["masked_bytes_per_step"]),
            (f"dist.all_reduce of {sparta.stats.last_values} values", t_same, None),
            (f"DDP all-reduce of all {n} grads", t_dense, None),
        ]
        rows += [(f"trickle.DiLoCo outer step, {c}", ms, None) for c, ms in t_outer.items()]
        for name, ms, b in rows:
            print(f"{name:<40}{ms:>10.2f}{ms / t_opt:>10.3f}{'' if b is None else f'{b:>14,.0f}'}")
        print(f"trickle collectives per SPARTA step: {collectives:g}")
        if profiled:
            print(f"per call (torch.profiler): {'call':<32}{'trickle':>8}{'nccl':>6}{'other':>6}"
                  f"{'syncs':>7}{'allocs':>7}{'copies':>7}")
            for what, c in profiled.items():
                print(f"per call (torch.profiler): {what:<32}{c['kernels_trickle']:>8g}{c['kernels_nccl']:>6g}"
                      f"{c['kernels_other']:>6g}{c['host_syncs']:>7g}{c['allocations']:>7g}{c['copies']:>7g}")
                for k, v in c["other_kernels"].items():
                    print(f"per call (torch.profiler):     other kernel {v:g} x {k}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
