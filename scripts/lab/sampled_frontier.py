"""What the asd-sampled rule buys on synthetic distributions: accepted draft tokens per block and
nats spent, by floor, power and cap; then per request, accept length against the budget B.

``python scripts/lab/sampled_frontier.py [--blocks 20000] [--K 4] [--V 64] [--seed 0]``

Synthetic chains (no model): at each draft position the target's logits are Gaussian with scale
``--sharpness`` (a temperature-processed p), the drafter proposes the argmax of those logits plus
Gaussian noise of scale ``--noise`` (an imperfect EAGLE-style drafter, topk 1). Positions are
independent, so this measures the rule's exchange rate, not a model's. Part 1 runs every block
with an ample budget (64 nats) and reports, per setting, mean accepted draft tokens per block,
mean nats booked per block, and the gain over exact sampling per nat. Part 2 runs requests of
``--tokens`` output tokens round by round with the ledger carried over, and reports the mean
accept length (accepted + 1 per round) by budget.
"""

from __future__ import annotations

import argparse

import torch

from sglang_asd.verify.sampled_verify import asd_sampled_verify


def make_blocks(bs: int, K: int, V: int, sharpness: float, noise: float, gen: torch.Generator):
    logits = torch.randn(bs, K + 1, V, generator=gen) * sharpness
    probs = torch.softmax(logits, dim=-1)  # [bs, W, V]
    draft = (logits + torch.randn(bs, K + 1, V, generator=gen) * noise).argmax(dim=-1)  # node n's child token
    candidates = torch.cat([torch.zeros(bs, 1, dtype=torch.long), draft[:, :K]], dim=1)  # [bs, W]
    next_token = torch.cat([torch.arange(1, K + 1), torch.tensor([-1])]).expand(bs, K + 1).contiguous()
    return candidates, next_token, probs


def run(candidates, next_token, probs, remaining, floor, cap, power, gen):
    bs, W = candidates.shape
    predicts = torch.zeros(bs * W, dtype=torch.int32)
    accept_index = torch.full((bs, W), -1, dtype=torch.int32)
    num = torch.empty(bs, dtype=torch.int32)
    out = asd_sampled_verify(
        predicts, accept_index, num, candidates, torch.arange(bs * W).view(bs, W), next_token,
        torch.full((bs, W), -1, dtype=torch.long), torch.rand(bs, W, generator=gen), torch.rand(bs, generator=gen),
        probs, remaining, torch.full((bs,), floor), torch.full((bs,), cap, dtype=torch.int32),
        torch.full((bs,), power))
    return num, out.spent


def exchange_rate(args, gen) -> None:
    blocks = make_blocks(args.blocks, args.K, args.V, args.sharpness, args.noise, gen)
    bs = args.blocks
    zero = torch.zeros(bs)
    exact, _ = run(*blocks, zero, 0.3, 2, 0.0, gen)
    base = exact.float().mean().item()
    print(f"exact sampling: {base:.3f} accepted draft tokens per block (K={args.K}, V={args.V})")
    print("floor power cap  accepted  nats/block  gain/nat")
    for floor in (0.1, 0.3, 0.5):
        for power in (0.0, 0.5, 0.8):
            for cap in (1, 2, args.K):
                num, spent = run(*blocks, torch.full((bs,), 64.0), floor, cap, power, gen)
                acc, nats = num.float().mean().item(), spent.double().mean().item()
                rate = (acc - base) / nats if nats > 0 else float("nan")
                print(f"{floor:5.1f} {power:5.1f} {cap:3d}  {acc:8.3f}  {nats:10.3f}  {rate:8.3f}")


def per_request(args, gen) -> None:
    print(f"\nper request of {args.tokens} output tokens ({args.requests} requests): mean accept length")
    print("budget  " + "  ".join(f"f{f}/p{p}/m{m}" for f, p, m in SETTINGS))
    for budget in (0.0, 2.0, 8.0, 32.0):
        cells = []
        for floor, power, cap in SETTINGS:
            remaining = torch.full((args.requests,), budget)
            produced = torch.zeros(args.requests)
            rounds = torch.zeros(args.requests)
            while (produced < args.tokens).any():
                live = produced < args.tokens
                blocks = make_blocks(args.requests, args.K, args.V, args.sharpness, args.noise, gen)
                num, spent = run(*blocks, remaining, floor, cap, power, gen)
                produced += torch.where(live, num.float() + 1, 0.0)
                rounds += live.float()
                remaining = torch.where(live, (remaining - spent).clamp(min=0), remaining)
            cells.append(f"{(produced / rounds).mean().item():14.3f}")
        print(f"{budget:6.1f}  " + "  ".join(cells))


SETTINGS = [(0.3, 0.0, 2), (0.3, 0.0, 4), (0.5, 0.0, 2), (0.3, 0.5, 2), (0.3, 0.5, 4), (0.1, 0.5, 4)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=20000)
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--K", type=int, default=4)
    p.add_argument("--V", type=int, default=64)
    p.add_argument("--sharpness", type=float, default=2.5)
    p.add_argument("--noise", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(args.seed)
    exchange_rate(args, gen)
    per_request(args, gen)


if __name__ == "__main__":
    main()
