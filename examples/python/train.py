"""A character-level language model trained on 4 workers with trickle (SPARTA, DiLoCo, or both).

    torchrun --standalone --nproc_per_node 4 --redirects 2 --tee 2 examples/python/train.py --steps 200 --algo sparta
    torchrun --standalone --nproc_per_node 4 --redirects 2 --tee 2 examples/python/train.py --steps 200 --algo diloco
    torchrun --standalone --nproc_per_node 4 --redirects 2 --tee 2 examples/python/train.py --steps 200 --algo sparta-diloco

(`--nproc_per_node`, and `--redirects 2 --tee 2`, which Debian 12's torch 1.13 needs under
Python 3.11, work on torch 2.x as well.) Without torchrun, the repository's launcher starts
the 4 workers the same way:

    python tests/python/launch.py --nproc 4 examples/python/train.py --steps 200 --algo sparta

Each worker trains its own replica (embedding + MLP over the previous 8 characters) on its
own shard of a built-in text (a paragraph, then sentences of a small grammar; the last 10%
is held out), with AdamW (or --optimizer sgd). After every optimizer step
it calls trickle's step(), which averages 0.5% of the parameters (SPARTA), or every H
steps applies an outer Nesterov step to the averaged change (DiLoCo), or both. At the end
it prints the loss, the bytes trickle sent and how many times fewer that is than a dense
all-reduce of every parameter at every step; with DiLoCo it checks that the replicas
hold the same bits right after each outer step.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import trickle

TEXT = """\
Data parallel training keeps every replica of a model identical by averaging all of the
gradients after every step. Inside one machine room that is cheap, but between machines
that only share a slow link it is not: the whole model crosses the wire at every step, and
the workers spend most of their time waiting for it. There are two old ways out. The first
is to train the replicas alone and average them once in a while; the replicas drift apart
between averages, and if they drift too far their average is worse than any of them. The
second is to send less at every step, for instance a small random part of the parameters,
so that the replicas never drift far and the link carries a trickle instead of a flood.
Sparse parameter averaging picks the same random positions on every worker from a shared
seed, so that only the values travel and never the indices. A fraction of one half of one
percent per step is often enough to keep the replicas close. The outer optimizer of the
second method treats the change of the averaged parameters over a round as a gradient and
takes a step with momentum, which lets the workers go a long way alone and still agree at
the end of each round. Both methods can be combined: averaging a few values every step
keeps the replicas together inside a round, and the outer step pulls them onto the same
point at its end. The quality of a model trained like this is close to the quality of the
same model trained with full synchronization, for a small part of the traffic.
The quick brown fox jumps over the lazy dog, and the lazy dog does not mind at all.
A small model that reads a few characters and guesses the next one learns the shape of
words first, then the common pairs of letters, then the short words that follow each other.
"""


SUBJECTS = ["the worker", "a replica", "the model", "every node", "the optimizer", "a small network", "the link"]
VERBS = ["averages", "sends", "reads", "learns", "keeps", "moves", "checks", "guesses"]
OBJECTS = ["a few values", "the parameters", "its gradient", "the same bits", "one percent", "the outer step",
           "a short word", "the next letter"]
ENDINGS = [".", " again.", " at every step.", " in order.", " with care.", " before the others."]


def corpus(chars: int = 24000) -> str:
    """TEXT, then sentences drawn from a small grammar (the same on every worker): enough
    text with structure for the model to learn something it can be tested on."""
    g = torch.Generator().manual_seed(0)

    def pick(xs):
        return xs[int(torch.randint(len(xs), (1,), generator=g))]

    parts, n = [TEXT], len(TEXT)
    while n < chars:
        s = f"{pick(SUBJECTS)} {pick(VERBS)} {pick(OBJECTS)}{pick(ENDINGS)}"
        s = s[0].upper() + s[1:] + ("\n" if int(torch.randint(6, (1,), generator=g)) == 0 else " ")
        parts.append(s)
        n += len(s)
    return "".join(parts)


class CharMLP(nn.Module):
    def __init__(self, vocab: int, context: int = 8, embed: int = 16, hidden: int = 128):
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(vocab, embed)
        self.hidden = nn.Linear(context * embed, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [batch, context] of character ids
        h = self.embed(x).flatten(1)
        return self.out(torch.tanh(self.hidden(h)))


def batches(ids: torch.Tensor, context: int, batch: int, gen: torch.Generator):
    while True:
        start = torch.randint(0, ids.numel() - context - 1, (batch,), generator=gen)
        idx = start[:, None] + torch.arange(context + 1)[None, :]
        window = ids[idx]
        yield window[:, :-1], window[:, -1]


@torch.no_grad()
def evaluate(model: nn.Module, ids: torch.Tensor, context: int) -> float:
    idx = torch.arange(ids.numel() - context)[:, None] + torch.arange(context + 1)[None, :]
    window = ids[idx]
    return F.cross_entropy(model(window[:, :-1]), window[:, -1]).item()


def replicas_identical(model: nn.Module) -> tuple[bool, int, float]:
    """(identical bits everywhere, positions that differ somewhere, largest difference)."""
    mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    all_ = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(all_, mine)
    same = torch.ones_like(mine, dtype=torch.bool)
    diff = torch.zeros_like(mine)
    for other in all_[1:]:
        same &= other.view(torch.int32) == all_[0].view(torch.int32)
        diff = torch.maximum(diff, (other - all_[0]).abs())
    return bool(same.all()), int((~same).sum()), float(diff.max())


def mib(b: int) -> str:
    return f"{b / 2**20:.3f} MiB"


def main() -> int:
    ap = argparse.ArgumentParser(description="trickle: a char-level model on several workers")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--algo", choices=["sparta", "diloco", "sparta-diloco"], default="sparta")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--lr", type=float, default=None, help="inner learning rate (adamw 3e-3, sgd 0.3)")
    ap.add_argument("--fraction", type=float, default=0.005, help="SPARTA: fraction averaged per step")
    ap.add_argument("--sampler", choices=list(trickle.SAMPLERS), default="permutation")
    ap.add_argument("--interval", type=int, default=50, help="DiLoCo: inner steps per outer step (H)")
    ap.add_argument("--outer-lr", type=float, default=0.7)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    if "RANK" not in os.environ:
        print(
            "start the workers with torchrun (torchrun --standalone --nproc_per_node 4 examples/python/train.py ...) "
            "or python tests/python/launch.py --nproc 4 examples/python/train.py ...",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t0 = time.time()

    text = corpus()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    split = int(0.9 * ids.numel())
    train_ids, val_ids = ids[:split], ids[split:]
    shard = train_ids.numel() // world  # each worker reads its own part of the text
    mine = train_ids[rank * shard : (rank + 1) * shard + 8]

    torch.manual_seed(args.seed + rank)  # different initial replicas: trickle starts them from rank 0's
    model = CharMLP(len(chars))
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr or 3e-3, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr or 0.3)

    if args.algo == "sparta":
        algo = trickle.SPARTA(model, fraction=args.fraction, sampler=args.sampler, seed=args.seed)
    elif args.algo == "diloco":
        algo = trickle.DiLoCo(model, interval=args.interval, outer="nesterov", outer_lr=args.outer_lr, momentum=0.9)
    else:
        algo = trickle.SPARTADiLoCo(
            model, fraction=args.fraction, sampler=args.sampler, seed=args.seed, interval=args.interval,
            outer="nesterov", outer_lr=args.outer_lr, momentum=0.9,
        )
    has_outer = args.algo != "sparta"
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"{args.algo}: {world} workers, {n_params} parameters, vocabulary {len(chars)}, "
              f"{args.optimizer}, {args.steps} steps", flush=True)

    gen = torch.Generator().manual_seed(1000 + rank)
    data = batches(mine, model.context, args.batch, gen)
    outer_steps_checked = 0
    report = max(1, args.steps // 8)
    for step in range(1, args.steps + 1):
        x, y = next(data)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        algo.step()  # after optimizer.step(), before the next forward pass

        if has_outer and step % args.interval == 0:
            # Right after an outer step every replica holds the same bits.
            same, ndiff, _ = replicas_identical(model)
            assert same, f"step {step}: {ndiff} parameters differ between replicas after the outer step"
            outer_steps_checked += 1
        if rank == 0 and (step % report == 0 or step == 1):
            print(f"  step {step:4d}  loss {loss.item():.3f}", flush=True)

    val = evaluate(model, val_ids, model.context)
    vals = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(vals, torch.tensor([val]))
    same, ndiff, maxdiff = replicas_identical(model)
    st = algo.stats
    if rank == 0:
        print(f"validation loss per replica: {', '.join(f'{v.item():.3f}' for v in vals)}")
        if has_outer:
            print(f"replicas identical after each of the {outer_steps_checked} outer steps: yes")
        print(f"replicas now: {'identical' if same else f'{ndiff} of {n_params} parameters differ (max {maxdiff:.2e})'}")
        print(f"trickle stats (rank 0): {st.exchanges} exchanges over {st.steps} steps, {st.values} values, "
              f"sent {mib(st.bytes_sent)}, received {mib(st.bytes_received)}")
        print(f"  a dense fp32 all-reduce every step would have sent {mib(st.dense_bytes)}: "
              f"{st.reduction:.1f}x less traffic (initial broadcast: {mib(st.initial_bytes_sent)}, not counted)")
        if args.algo == "sparta-diloco":
            sp, ou = algo.sparse_stats, algo.outer_stats
            print(f"  SPARTA part: {sp.exchanges} exchanges, {mib(sp.bytes_sent)}; "
                  f"DiLoCo part: {ou.exchanges} outer steps, {mib(ou.bytes_sent)}")
        print(f"done in {time.time() - t0:.1f} s", flush=True)
    if has_outer and args.steps >= args.interval:
        assert outer_steps_checked == args.steps // args.interval
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
