"""torch 2.15's Gloo aborting at process exit, without trickle: a reproduction.

    for i in $(seq 20); do torchrun --standalone --nproc_per_node 4 benchmarks/pytorch/gloo_exit_abort.py 2>&1 |
        grep -c "terminate called"; done

Four ranks run the collectives of bench_sparta_step.py's baselines (AdamW, an EXO Gym-style
masked step: a uint8 mask broadcast per tensor and an all-reduce of the masked values, two
plain all-reduces), call destroy_process_group() and exit. trickle is not imported. On this
project's 2-core machine with PyPI's torch 2.15.0 (2026-12-02), 4 of 20 runs had one rank
abort after destroy_process_group() with "terminate called without an active exception"
(exit -6), the abort seen before in runs of bench_sparta_step.py. So that abort is torch's,
not trickle's. A plain loop of broadcasts and all-reduces did not abort in 15 runs.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sparta_step import masked_sparta_step, timed  # noqa: E402  (this file's baselines)

assert "trickle" not in sys.modules

dist.init_process_group("gloo")
world = dist.get_world_size()
torch.manual_seed(0)
layers = []
for _ in range(3):
    layers += [torch.nn.Linear(192, 192), torch.nn.GELU()]
model = torch.nn.Sequential(*layers)
params = list(model.parameters())
opt = torch.optim.AdamW(params, lr=1e-4)
model(torch.randn(16, 192)).square().mean().backward()
gen = torch.Generator().manual_seed(1234)
timed(opt.step, 10)
timed(lambda: masked_sparta_step(params, 0.005, world, gen), 10)
same = torch.randn(556)
timed(lambda: dist.all_reduce(same), 10)
grads = torch.randn(sum(p.numel() for p in params))
timed(lambda: dist.all_reduce(grads), 10)
dist.destroy_process_group()
