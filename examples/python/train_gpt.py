"""A small GPT (character level, causal self-attention, plain PyTorch) trained on several
workers with trickle: SPARTA, DiLoCo or both, or the DeMo optimizer, chosen by --algo.

    torchrun --standalone --nproc_per_node 4 --redirects 2 --tee 2 examples/python/train_gpt.py --algo sparta
    torchrun --standalone --nproc_per_node 4 --redirects 2 --tee 2 examples/python/train_gpt.py --algo diloco
    torchrun --standalone --nproc_per_node 4 --redirects 2 --tee 2 examples/python/train_gpt.py --algo sparta-diloco
    torchrun --standalone --nproc_per_node 4 --redirects 2 --tee 2 examples/python/train_gpt.py --algo demo

(`torchrun` is `python -m torch.distributed.run` of the Python where trickle is installed;
`--redirects 2 --tee 2` is only needed by Debian 12's torch 1.13 under Python 3.11, whose
torchrun fails in its default output handling, and changes nothing visible elsewhere.
`python tests/python/launch.py --nproc 4 examples/python/train_gpt.py ...` starts the
workers the same way without torchrun.)

Each worker trains its own replica on its own shard of a text file (by default the
repository's LICENSE, 11 KB; the simulator's corpus is bigger: `cat
/usr/share/common-licenses/* > /tmp/licenses.txt` and `--data /tmp/licenses.txt`). The last
10% of the text is held out for the final evaluation. After every optimizer step the
worker calls trickle's step(): SPARTA averages a small random fraction of the parameters
(the same positions on every worker, from a shared seed), DiLoCo applies an outer Nesterov
step to the averaged change every H steps, and SPARTA + DiLoCo does both (at a step that
ends a round only the outer step runs). A progress line every --log-every steps shows the
loss (averaged over the workers), trickle's bytes sent so far and the reduction against a
dense fp32 all-reduce of every parameter at every step; the end shows the held-out loss of
every replica. Everything is deterministic given --seed (same text, same options, same
number of workers).

--algo ddp is the dense baseline: no trickle, every gradient averaged by one
torch.distributed all-reduce of a flat fp32 bucket before each optimizer step (what DDP
does, without its bucketing and overlap); its bytes are counted with the ring's cost, 2 (N - 1)
/ N of the bucket per worker and step. --algo dense is trickle's dense baseline, trickle.DDP:
every parameter averaged after each optimizer step through trickle's deterministic sum, with
trickle's stats (one line changed against --algo sparta).

--algo demo replaces AdamW by trickle.DeMo (docs/demo.md): no gradient is averaged; every
step sends the --demo-k largest DCT coefficients of each --demo-chunk chunk of each worker's
momentum (--demo-selection shared: k shared-seed ones, summed without indices) and every
worker applies the sign of the same decoded mean, so the replicas stay identical. Its
optimizer step holds the exchange, so --metrics counts the whole step as communication.
CPU only (trickle.DeMo takes CPU float32 parameters in this version).

--metrics FILE writes one JSON line per step and worker (FILE's "{rank}" replaced by the
rank): the step, the seconds since the start, the step's compute (forward, backward,
optimizer) and communication (trickle's step(), or ddp's all-reduce) in seconds, the loss,
and the bytes this worker sent so far. scripts/wan_lab.sh reads them, beside the network
interfaces' own counters, to draw loss against wall time and each step's timeline.

--device cuda puts each worker on cuda:LOCAL_RANK (modulo the GPUs there are) over NCCL,
or over Gloo with --backend gloo (several workers sharing one GPU: NCCL needs one GPU per
worker). It needs a CUDA build of the trickle package (trickle.build_info()['cuda']); a
CPU-only build refuses CUDA tensors with a ValueError that says how to rebuild, and the
example then stops.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import trickle

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO / "LICENSE"


# ---- The model: a GPT in a few lines (pre-norm blocks, learned positions, tied head) ----

class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, context: int):
        super().__init__()
        assert d_model % heads == 0, "--d-model must be a multiple of --heads"
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        # The causal mask, a buffer (not a parameter: trickle never sees it).
        self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [batch, time, d_model]
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        # Written out rather than F.scaled_dot_product_attention, which torch 1.13 lacks.
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, context: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, context)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, d_model: int, layers: int, heads: int):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, heads, context) for _ in range(layers)])
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied: one tensor, listed once by named_parameters()
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # idx: [batch, time] -> logits [batch, time, vocab]
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))


# ---- Data ----

def load_text(path: Path) -> str:
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        raise SystemExit(f"train_gpt.py: cannot read --data {path}: {e.strerror}")
    if len(text) < 2000:
        raise SystemExit(f"train_gpt.py: --data {path} has {len(text)} characters; it needs at least 2000")
    return text


def batches(ids: torch.Tensor, context: int, batch: int, gen: torch.Generator):
    """Random windows of this worker's shard: inputs [batch, context] and the next characters."""
    while True:
        start = torch.randint(0, ids.numel() - context - 1, (batch,), generator=gen)
        idx = start[:, None] + torch.arange(context + 1)[None, :]
        w = ids[idx]
        yield w[:, :-1], w[:, 1:]


@torch.no_grad()
def evaluate(model: GPT, ids: torch.Tensor, device: torch.device) -> float:
    """The mean next-character loss over the held-out text, in non-overlapping windows."""
    c = model.context
    n = (ids.numel() - 1) // c
    x = ids[: n * c].view(n, c).to(device)
    y = ids[1 : n * c + 1].view(n, c).to(device)
    model.eval()
    loss = sum(F.cross_entropy(model(x[i : i + 64]).flatten(0, 1), y[i : i + 64].flatten(), reduction="sum")
               for i in range(0, n, 64)) / (n * c)
    model.train()
    return float(loss)


class DenseAllReduce:
    """--algo ddp: every gradient averaged over the workers by one all-reduce of a flat fp32
    bucket, before the optimizer step. `stats` mimics the fields of trickle's that this
    example prints; the bytes are the ring all-reduce's cost, 2 (N - 1) / N of the bucket."""

    class _Stats:
        def __init__(self):
            self.steps = self.exchanges = self.bytes_sent = self.dense_bytes = self.initial_bytes_sent = 0

        @property
        def reduction(self) -> float:
            return self.dense_bytes / self.bytes_sent if self.bytes_sent else 0.0

    def __init__(self, model: nn.Module):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.world = dist.get_world_size()
        self.stats = self._Stats()
        n = sum(p.numel() for p in self.params)
        self.bucket = torch.zeros(n, device=self.params[0].device)
        self.per_step = int(round(2 * (self.world - 1) / self.world * n * 4))
        for p in self.params:  # the same start everywhere, as trickle's constructors give
            dist.broadcast(p.data, src=0)

    def reduce_gradients(self) -> None:
        offset = 0
        for p in self.params:
            k = p.numel()
            self.bucket[offset:offset + k].copy_(p.grad.reshape(-1))
            offset += k
        dist.all_reduce(self.bucket)
        self.bucket.div_(self.world)
        offset = 0
        for p in self.params:
            k = p.numel()
            p.grad.copy_(self.bucket[offset:offset + k].view_as(p.grad))
            offset += k
        self.stats.exchanges += 1
        self.stats.bytes_sent += self.per_step
        self.stats.dense_bytes += self.per_step

    def step(self) -> None:
        self.stats.steps += 1


def mib(b: int) -> str:
    return f"{b / 2**20:.3f} MiB"


def main() -> int:
    ap = argparse.ArgumentParser(
        description="trickle: a small character-level GPT trained on several workers with SPARTA, DiLoCo or both. "
        "Start it with torchrun (torchrun --standalone --nproc_per_node 4 --redirects 2 --tee 2 "
        "examples/python/train_gpt.py) or tests/python/launch.py --nproc 4.",
        epilog="--device cuda: each worker on cuda:LOCAL_RANK over NCCL (--backend gloo: several workers on one "
        "GPU); it needs a CUDA build of trickle (trickle.build_info()['cuda']).",
    )
    ap.add_argument("--algo", choices=["sparta", "diloco", "sparta-diloco", "ddp", "dense", "demo"], default="sparta",
                    help="SPARTA, DiLoCo, SPARTA inside DiLoCo's rounds, ddp: the dense baseline, every "
                    "gradient all-reduced, dense: trickle.DDP, every parameter averaged, or demo: the trickle.DeMo "
                    "optimizer instead of AdamW (default sparta)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu: Gloo; cuda: cuda:LOCAL_RANK, NCCL unless --backend gloo")
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None,
                    help="the torch.distributed backend (default: gloo on cpu, nccl on cuda)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"a text file (default {DEFAULT_DATA})")
    ap.add_argument("--steps", type=int, default=100, help="optimizer steps per worker (default 100)")
    ap.add_argument("--log-every", type=int, default=20, help="a progress line every N steps (default 20)")
    ap.add_argument("--seed", type=int, default=42, help="initialisation, data order and trickle's selection")
    ap.add_argument("--context", type=int, default=32, help="characters per window (default 32)")
    ap.add_argument("--d-model", type=int, default=48, help="embedding width (default 48)")
    ap.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    ap.add_argument("--batch", type=int, default=16, help="windows per step and worker (default 16)")
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW's learning rate, or DeMo's sign step (default 3e-3)")
    ap.add_argument("--fraction", type=float, default=0.005, help="SPARTA: fraction averaged per exchange (0.005)")
    ap.add_argument("--sampler", choices=list(trickle.SAMPLERS), default="permutation", help="SPARTA's sampler")
    ap.add_argument("--interval", type=int, default=20, help="DiLoCo: inner steps per outer step, H (default 20)")
    ap.add_argument("--outer-lr", type=float, default=0.7, help="DiLoCo: the outer Nesterov learning rate (0.7)")
    ap.add_argument("--outer-codec", choices=list(trickle.CODECS), default="fp32",
                    help="DiLoCo: the outer gradient on the wire (default fp32)")
    ap.add_argument("--overlap", action="store_true",
                    help="SPARTA / SPARTA + DiLoCo: overlap each exchange with the next step (applied one step late)")
    ap.add_argument("--overlap-steps", type=int, default=0,
                    help="DiLoCo / SPARTA + DiLoCo: tau, the inner steps an outer step's exchange travels before it is "
                    "applied (0: at once; with --fragments 1 the eager, delayed outer step)")
    ap.add_argument("--fragments", type=int, default=1, help="DiLoCo: Streaming DiLoCo's fragments (default 1)")
    ap.add_argument("--carry-local", action="store_true",
                    help="DiLoCo with --overlap-steps: a late average lands plus the progress made while it travelled")
    ap.add_argument("--demo-chunk", type=int, default=32, help="DeMo: the DCT chunk side (default 32)")
    ap.add_argument("--demo-k", type=int, default=8, help="DeMo: coefficients sent per chunk (default 8)")
    ap.add_argument("--demo-selection", choices=["top_k", "shared"], default="top_k",
                    help="DeMo: each worker's top-k per chunk, or k shared-seed positions (default top_k)")
    ap.add_argument("--metrics", default="",
                    help="a JSON line per step to this file ({rank} is replaced by the worker's rank): compute and "
                    "communication seconds, loss, bytes sent")
    args = ap.parse_args()
    if min(args.steps, args.log_every, args.interval, args.batch, args.context) < 1:
        ap.error("--steps, --log-every, --interval, --batch and --context must be >= 1")

    if "RANK" not in os.environ:
        print("train_gpt.py: start the workers with torchrun (torchrun --standalone --nproc_per_node 4 "
              "--redirects 2 --tee 2 examples/python/train_gpt.py ...) or "
              "python tests/python/launch.py --nproc 4 examples/python/train_gpt.py ...", file=sys.stderr)
        return 2
    if args.algo == "demo" and args.device != "cpu":
        ap.error("--algo demo runs on --device cpu (trickle.DeMo takes CPU float32 parameters in this version)")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("train_gpt.py: --device cuda, but this torch sees no GPU", file=sys.stderr)
            return 2
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        dist.init_process_group(args.backend or "nccl")
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # several workers share the machine's cores
        if args.backend == "nccl":
            ap.error("--backend nccl needs --device cuda")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t0 = time.time()

    # The same text and vocabulary on every worker; each trains on its own shard.
    text = load_text(args.data)
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    split = int(0.9 * ids.numel())
    train_ids, val_ids = ids[:split], ids[split:]
    shard = train_ids.numel() // world
    mine = train_ids[rank * shard : (rank + 1) * shard + args.context + 1]
    if mine.numel() < args.context + 2:
        raise SystemExit(f"train_gpt.py: {args.data} is too short for {world} shards of context {args.context}")

    torch.manual_seed(args.seed + rank)  # different initial replicas: trickle starts them all from rank 0's
    model = GPT(len(chars), args.context, args.d_model, args.layers, args.heads).to(device)
    if args.algo == "demo":
        opt = trickle.DeMo(model.parameters(), lr=args.lr, weight_decay=0.01, chunk=args.demo_chunk,
                           k=args.demo_k, selection=args.demo_selection, seed=args.seed)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    common = dict(seed=args.seed)
    outer = dict(interval=args.interval, outer="nesterov", outer_lr=args.outer_lr, momentum=0.9,
                 outer_codec=args.outer_codec, overlap_steps=args.overlap_steps, fragments=args.fragments,
                 carry_local=args.carry_local)
    sparse = dict(fraction=args.fraction, sampler=args.sampler, overlap=args.overlap)
    try:
        if args.algo == "ddp":
            algo = DenseAllReduce(model)
        elif args.algo == "dense":
            algo = trickle.DDP(model)
        elif args.algo == "demo":
            algo = opt  # the optimizer communicates: nothing to call after it
        elif args.algo == "sparta":
            algo = trickle.SPARTA(model, **sparse, **common)
        elif args.algo == "diloco":
            algo = trickle.DiLoCo(model, **outer, **common)
        else:
            algo = trickle.SPARTADiLoCo(model, **sparse, **outer, **common)
    except ValueError as e:  # raised on every worker together
        if device.type != "cuda" or trickle.build_info()["cuda"]:
            raise
        # A CPU-only build of the package refuses CUDA tensors, saying how to rebuild.
        print(f"train_gpt.py (rank {rank}): trickle refused the model on {device}: {e}", file=sys.stderr)
        return 1
    has_outer = args.algo in ("diloco", "sparta-diloco")
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"train_gpt {args.algo}: {world} workers on {device.type} ({dist.get_backend()}), GPT of "
              f"{args.layers} layers, d_model {args.d_model}, {args.heads} heads, context {args.context}: "
              f"{n_params} parameters; {args.data.name}: {len(text)} characters, vocabulary {len(chars)}", flush=True)

    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    data = batches(mine, args.context, args.batch, gen)
    loss_sum = torch.zeros(1, device=device)
    seen = 0
    metrics = open(args.metrics.replace("{rank}", str(rank)), "w") if args.metrics else None
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    t_start = time.perf_counter()
    for step in range(1, args.steps + 1):
        t_a = time.perf_counter()
        x, y = next(data)
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t_comm = 0.0
        if args.algo == "ddp":
            sync()
            t_c = time.perf_counter()
            algo.reduce_gradients()
            sync()
            t_comm = time.perf_counter() - t_c
        if args.algo == "demo":
            t_b = time.perf_counter()
            opt.step()  # DeMo: the exchange is inside the optimizer step
        else:
            opt.step()
            sync()
            t_b = time.perf_counter()
            algo.step()  # after optimizer.step(), before the next forward pass
        sync()
        t_end = time.perf_counter()
        t_comm += t_end - t_b
        loss_sum += loss.detach()
        seen += 1
        if metrics is not None:
            metrics.write(json.dumps({"step": step, "rank": rank, "t": round(t_end - t_start, 6),
                                      "compute_s": round(t_end - t_a - t_comm, 6), "comm_s": round(t_comm, 6),
                                      "loss": round(loss.item(), 5), "bytes_sent": algo.stats.bytes_sent,
                                      "algo": args.algo, "world": world}) + "\n")
        if step % args.log_every == 0 or step == args.steps:
            # The workers' mean loss over the last steps: the trainer's own all-reduce of one
            # float (not trickle's, so not in its bytes).
            dist.all_reduce(loss_sum)
            mean = loss_sum.item() / (seen * world)
            loss_sum.zero_()
            seen = 0
            st = algo.stats
            if rank == 0:
                red = f"{st.reduction:.0f}x less" if st.bytes_sent else "nothing sent yet"
                print(f"  step {step:5d}  loss {mean:.3f}  sent {mib(st.bytes_sent)}  dense {mib(st.dense_bytes)}  "
                      f"{red}  ({time.time() - t0:.1f} s)", flush=True)

    if metrics is not None:
        metrics.close()
    identical = None
    # (Streaming or a delayed outer step applies its last averages after the run's end.)
    streams = args.overlap_steps > 0 or args.fragments > 1
    if (has_outer and not streams and args.steps % args.interval == 0) or args.algo in ("ddp", "dense", "demo"):
        # The last step was an outer step (or every step averaged the gradients): every
        # replica now holds the same bits.
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        every = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(every, flat)
        identical = all(torch.equal(e.view(torch.int32), every[0].view(torch.int32)) for e in every[1:])
    val = torch.tensor([evaluate(model, val_ids, device)], device=device)
    vals = [torch.zeros_like(val) for _ in range(world)]
    dist.all_gather(vals, val)
    st = algo.stats
    if rank == 0:
        per = ", ".join(f"{v.item():.3f}" for v in vals)
        print(f"eval loss (held-out {val_ids.numel()} characters): mean {sum(v.item() for v in vals) / world:.3f}, "
              f"per replica {per}")
        who = "ddp (rank 0, a ring's cost)" if args.algo == "ddp" else "trickle (rank 0)"
        print(f"{who}: {st.steps} steps, {st.exchanges} exchanges, sent {st.bytes_sent} bytes "
              f"({mib(st.bytes_sent)}); a dense fp32 all-reduce every step: {st.dense_bytes} bytes "
              f"({mib(st.dense_bytes)}): {st.reduction:.1f}x less (initial broadcast {st.initial_bytes_sent} bytes, "
              f"not counted)")
        if args.algo == "sparta-diloco":
            sp, ou = algo.sparse_stats, algo.outer_stats
            print(f"  SPARTA part: {sp.exchanges} exchanges, {sp.bytes_sent} bytes; DiLoCo part: {ou.exchanges} "
                  f"outer steps, {ou.bytes_sent} bytes (no sparse exchange at the {ou.exchanges} steps that end a round)")
        if identical is not None:
            print(f"replicas after the last {'step' if args.algo in ('ddp', 'dense', 'demo') else 'outer step'}: "
                  f"{'identical' if identical else 'DIFFERENT'}")
        print(f"done in {time.time() - t0:.1f} s", flush=True)
    assert identical is not False, "the replicas differ right after an outer step"
    if has_outer and not streams:
        outer_steps = algo.outer_stats.exchanges if args.algo == "sparta-diloco" else st.exchanges
        assert outer_steps == args.steps // args.interval, (outer_steps, args.steps // args.interval)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
