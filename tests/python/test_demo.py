"""trickle.DeMo (a torch.optim.Optimizer over trickle::demo_engine) on several processes (gloo, CPU).

    torchrun --standalone --nproc_per_node 4 tests/python/test_demo.py

or build/pyenv/bin/python tests/python/launch.py --nproc 4 tests/python/test_demo.py.
The optimizer's arithmetic is tested against the paper's equations in C++
(tests/algorithm/test_demo.cpp); here: that the binding feeds the engine the gradients,
shapes and hyperparameters it should (a case where DeMo is exactly sign-SGD of the mean
gradient), that replicas stay bit-identical, that a checkpoint resumes bit for bit, the
accounts, and that bad input raises on every rank and changes nothing.
Exits non-zero when a test fails on any rank.
"""

from __future__ import annotations

import datetime
import io
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import bits, expect_raises, flat, gather, rank, world  # noqa: E402

import trickle  # noqa: E402


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 20), nn.Tanh(), nn.Linear(20, 6))


def local_batch(step: int):
    g = torch.Generator().manual_seed(1000 * rank() + step)
    x = torch.randn(16, 12, generator=g)
    return x, torch.sin(x[:, :6]) + 0.1 * torch.randn(16, 6, generator=g)


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, first: int = 0) -> float:
    loss = torch.tensor(0.0)
    for s in range(first, first + steps):
        x, y = local_batch(s)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return float(loss)


def same_on_every_rank(t: torch.Tensor) -> bool:
    b = bits(t)
    return all(torch.equal(b, bits(o)) for o in gather(t))


def test_is_sign_sgd_of_the_mean_gradient_when_everything_is_kept():
    # With compression_decay 0 and k = every coefficient of a chunk, DeMo sends the whole
    # gradient: Q is the mean gradient and p <- p - lr (sign(mean g) + wd p). Gradients of
    # magnitude >= 0.5 keep the sign of the mean away from rounding.
    torch.manual_seed(3)
    vec = nn.Parameter(torch.randn(70))           # a vector: chunks of 8, a partial one
    mat = nn.Parameter(torch.randn(10, 13))       # a matrix: 8 x 8 tiles, partial ones
    cube = nn.Parameter(torch.randn(3, 4, 5))     # dim 0 x the rest: 3 x 20
    params = [vec, mat, cube]
    opt = trickle.DeMo(params, lr=0.01, compression_decay=0.0, weight_decay=0.1, chunk=8, k=64)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)
    before = [p.detach().clone() for p in params]
    g = torch.Generator().manual_seed(11 * rank() + 5)
    grads = []
    for p in params:
        sign = torch.where(torch.rand(p.shape, generator=torch.Generator().manual_seed(9)) < 0.5, -1.0, 1.0)
        grads.append(sign * (0.5 + torch.rand(p.shape, generator=g)))  # same sign on every rank
        p.grad = grads[-1].clone()
    opt.step()
    for p, b, gr in zip(params, before, grads):
        mean = torch.stack(gather(gr)).mean(0)
        want = b - 0.01 * (torch.sign(mean) + 0.1 * b)
        assert torch.allclose(p.detach(), want, atol=1e-5, rtol=0), (p.shape, (p.detach() - want).abs().max())
    # A scheduler's lr reaches the engine: the next step moves by 0.001.
    sched.step()
    before = [p.detach().clone() for p in params]
    for p, gr in zip(params, grads):
        p.grad = gr.clone()
    opt.step()
    for p, b, gr in zip(params, before, grads):
        mean = torch.stack(gather(gr)).mean(0)
        want = b - 0.001 * (torch.sign(mean) + 0.1 * b)
        assert torch.allclose(p.detach(), want, atol=1e-6, rtol=0), (p.detach() - want).abs().max()


def test_replicas_stay_identical_and_the_loss_falls():
    for selection, values in (("top_k", "fp32"), ("shared", "fp32"), ("top_k", "sign2"), ("shared", "bf16")):
        model = make_model()
        opt = trickle.DeMo(model.parameters(), lr=3e-3, chunk=8, k=4, selection=selection, values=values, seed=5)
        first = train(model, opt, 1)
        last = train(model, opt, 40, first=1)
        assert same_on_every_rank(flat(model.parameters())), (selection, values)
        assert last < first, (selection, values, first, last)
        s = opt.stats
        assert s.steps == 41 and s.exchanges == 41
        assert s.bytes_sent > 0 and s.dense_bytes > 0


def test_initial_broadcast():
    model = make_model(seed=100 + rank())  # a different replica on every rank
    assert not same_on_every_rank(flat(model.parameters()))
    kept = flat(model.parameters())
    trickle.DeMo(model.parameters(), broadcast_initial=False)
    assert torch.equal(flat(model.parameters()), kept)
    trickle.DeMo(model.parameters())  # rank 0's parameters everywhere
    assert same_on_every_rank(flat(model.parameters()))
    assert torch.equal(flat(model.parameters()), gather(kept)[0])


def test_accounts():
    model = make_model()
    top = trickle.DeMo(model.parameters(), lr=1e-3, chunk=8, k=4)
    train(model, top, 3)
    model2 = make_model()
    shared = trickle.DeMo(model2.parameters(), lr=1e-3, chunk=8, k=4, selection="shared")
    train(model2, shared, 3)
    a, b = top.stats, shared.stats
    assert a.steps == 3 and b.steps == 3
    assert a.index_bytes_sent > 0, a       # the top-k indices travel
    assert b.index_bytes_sent == 0, b      # the shared positions do not
    for s in (a, b):
        parts = s.code_bytes_sent + s.scale_bytes_sent + s.index_bytes_sent + s.padding_bytes_sent
        assert parts == s.bytes_sent, s
    n = sum(p.numel() for p in model.parameters())
    assert a.dense_bytes == b.dense_bytes and a.dense_bytes > 3 * n  # three fp32 all-reduces' worth
    assert len(top.group_stats()) == 1 and top.group_stats()[0] == a
    assert top.momentum().numel() >= n and top.momentum().dtype == torch.float32


def test_checkpoint_resumes_bit_for_bit():
    for selection in trickle._demo.SELECTIONS:
        model = make_model(1)
        opt = trickle.DeMo(model.parameters(), lr=2e-3, chunk=8, k=3, selection=selection, seed=9)
        train(model, opt, 5)
        buf = io.BytesIO()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
        train(model, opt, 6, first=5)
        want = flat(model.parameters())

        buf.seek(0)
        ckpt = torch.load(buf)
        model2 = make_model(2)
        model2.load_state_dict(ckpt["model"])
        opt2 = trickle.DeMo(model2.parameters(), lr=2e-3, chunk=8, k=3, selection=selection, seed=9)
        opt2.load_state_dict(ckpt["opt"])
        assert opt2.stats.steps == 5
        train(model2, opt2, 6, first=5)
        assert torch.equal(bits(flat(model2.parameters())), bits(want)), selection


def test_two_parameter_groups_and_no_gradient():
    model = make_model()
    first, last = list(model[0].parameters()), list(model[2].parameters())
    opt = trickle.DeMo([{"params": first}, {"params": last, "lr": 1e-2, "k": 2}], lr=1e-3, chunk=8, k=4)
    assert len(opt.group_stats()) == 2
    before = flat(last)
    x, y = local_batch(0)
    nn.functional.mse_loss(model(x), y).backward()
    for p in last:
        p.grad = None  # a parameter without a gradient steps with a zero one
    opt.step()
    assert same_on_every_rank(flat(model.parameters()))
    assert torch.equal(flat(last), before)  # zero gradient, zero momentum: sign(0) = 0, no decay
    # The closure's loss comes back.
    loss = opt.step(lambda: nn.functional.mse_loss(model(x), y))
    assert isinstance(loss, torch.Tensor)


def test_inside_diloco_and_with_sparta():
    # Composition, no new engine: DeMo over a group of one worker is the inner optimizer (its
    # momentum, its own top-k DCT coefficients, their sign: nothing sent), and DiLoCo's
    # outer steps (or SPARTA's averaging) keep the replicas together.
    solo = [dist.new_group([r]) for r in range(world())][rank()]
    for make in (lambda m: trickle.DiLoCo(m, interval=4, outer="nesterov", outer_lr=0.7),
                 lambda m: trickle.SPARTA(m, fraction=0.1, seed=3)):
        model = make_model(7 + rank())
        algo = make(model)  # rank 0's replica everywhere
        opt = trickle.DeMo(model.parameters(), lr=2e-3, chunk=8, k=3, group=solo, broadcast_initial=False)
        xe, ye = local_batch(999)
        with torch.no_grad():
            before = float(nn.functional.mse_loss(model(xe), ye))
        for s in range(24):
            x, y = local_batch(s)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            algo.step()
        assert opt.stats.bytes_sent == 0 and opt.stats.steps == 24
        assert algo.stats.bytes_sent > 0
        with torch.no_grad():
            assert float(nn.functional.mse_loss(model(xe), ye)) < before
        if isinstance(algo, trickle.DiLoCo):  # step 24 ended a round: the replicas are equal
            assert same_on_every_rank(flat(model.parameters()))


def test_bad_input_raises_on_every_rank_and_changes_nothing():
    model = make_model()
    params = list(model.parameters())
    expect_raises(ValueError, lambda: trickle.DeMo(params, lr=0.0), "lr must be finite and > 0")
    expect_raises(ValueError, lambda: trickle.DeMo(params, chunk=300), "chunk must be in [1, 256]")
    expect_raises(ValueError, lambda: trickle.DeMo(params, chunk=4, k=17), "k must be in [1, chunk * chunk = 16]")
    expect_raises(ValueError, lambda: trickle.DeMo(params, compression_decay=1.5), "compression_decay")
    expect_raises(ValueError, lambda: trickle.DeMo(params, selection="random"), "selection must be one of")
    expect_raises(ValueError, lambda: trickle.DeMo(params, values="fp64"), "values must be one of")
    expect_raises(TypeError, lambda: trickle.DeMo(params, chunk=8.0), "chunk must be an int")
    # One rank's bad tensor: every rank raises.
    odd = [torch.zeros(4, dtype=torch.float64, requires_grad=True)] if rank() == 1 else [torch.zeros(4, requires_grad=True)]
    expect_raises(ValueError, lambda: trickle.DeMo(odd), "cpu float32")
    # Ranks that disagree: MismatchError on every rank.
    expect_raises(trickle.MismatchError, lambda: trickle.DeMo(params, k=4 + (rank() == 2), chunk=8), "k")

    opt = trickle.DeMo(params, lr=1e-3, chunk=8, k=4)
    train(model, opt, 2)
    want = flat(model.parameters())
    state = opt.state_dict()
    momentum = opt.momentum().clone()
    # Not a DeMo state, on one rank: every rank raises, nothing changes.
    bad = dict(state)
    if rank() == 0:
        bad.pop("trickle_demo")
    expect_raises(ValueError, lambda: opt.load_state_dict(bad), "trickle_demo")
    # Another configuration's state: refused on every rank.
    other = trickle.DeMo(make_model().parameters(), lr=1e-3, chunk=8, k=5)
    expect_raises(ValueError, lambda: opt.load_state_dict(other.state_dict()))
    assert torch.equal(bits(opt.momentum()), bits(momentum)) and opt.stats.steps == 2
    assert torch.equal(flat(model.parameters()), want)
    # Only lr may change after construction.
    opt.param_groups[0]["k"] = 5
    expect_raises(ValueError, lambda: opt.step(), "k of group 0 changed")


TESTS = [
    test_is_sign_sgd_of_the_mean_gradient_when_everything_is_kept,
    test_replicas_stay_identical_and_the_loss_falls,
    test_initial_broadcast,
    test_accounts,
    test_checkpoint_resumes_bit_for_bit,
    test_two_parameter_groups_and_no_gradient,
    test_inside_diloco_and_with_sparta,
    test_bad_input_raises_on_every_rank_and_changes_nothing,
]


def main() -> int:
    if "RANK" not in os.environ:
        print("run under torchrun (torchrun --standalone --nproc_per_node 4 " + __file__ + ")", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    status = harness.run(TESTS, "test_demo")
    dist.barrier()
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
