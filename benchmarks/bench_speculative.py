"""Prompt-lookup decoding vs plain greedy decoding on a repetitive input, our LMs and GPT-2.

Prompt lookup (``generate(prompt_lookup_num_tokens=N)``) drafts the next N tokens by finding the
last n-gram earlier in the sequence and copying what followed it; the model then checks all
drafts in one forward and keeps the longest correct prefix (the cache rolls the rest back).  It
pays off where the output repeats the input (editing, extraction, code, periodic text).

The models are trained here, briefly and with a fixed seed, on a text whose continuation repeats
what came before: the vocabulary is cut into cycles of ``--period`` tokens (a fixed random
permutation), and every sequence walks around one cycle from a random token.  Any model learns
that from the previous token alone (an attention-free model too; copying a phrase at a distance is
a different skill, which small convolution models do not learn in a few hundred steps).  Each
model then continues a prompt of ``--prompt-repeats`` turns of a cycle by ``--new-tokens``
tokens, greedy and with prompt lookup (the tokens must be identical).  This is the best case
for prompt lookup: the measured speed-up is an upper bound for real text.  ``--rounds`` rounds alternate the
two and the script reports the median wall time, the median CPU time of this process, the number
of model forwards, and the speed-up (greedy / prompt lookup, CPU time on the CPU, wall time on a
GPU), one run for all models.

    python benchmarks/bench_speculative.py            # CPU, writes results/bench_speculative_cpu.json
"""

from __future__ import annotations

import argparse

import torch
from _device import add_cpu_options, add_device_option, check_device_runs, parse_cpu_args, run_metadata, write_report
from _models import ModelShape, add_shape_options, build_model, causal_lm_models
from _timing import Stopwatch, interleaved


def build_models(args) -> dict[str, torch.nn.Module]:
    """Our LMs (every registered family's) and GPT-2 (SDPA) of `_models`, without dropout."""
    max_positions = args.block + args.new_tokens + args.period * args.prompt_repeats
    return {
        name: build_model(name, ModelShape.from_args(args), max_positions, dropout=0.0) for name in causal_lm_models()
    }


def next_token_table(args) -> torch.Tensor:
    """(vocab,) the token that follows each token: ids 3.. cut into cycles of ``args.period``
    (a fixed random order); the special ids 0..2 and a short remainder map to themselves."""
    order = torch.randperm(args.vocab - 3, generator=torch.Generator().manual_seed(0)) + 3
    following = torch.arange(args.vocab)
    for start in range(0, len(order) - args.period + 1, args.period):
        cycle = order[start : start + args.period]
        following[cycle] = cycle.roll(-1)
    return following


def cycle_walks(batch: int, length: int, following: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(batch, length) ids: each row starts at a random token of a cycle and follows it."""
    cycled = torch.nonzero(following != torch.arange(len(following))).flatten()
    tokens = [cycled[torch.randint(len(cycled), (batch,), generator=generator)]]
    for _ in range(length - 1):
        tokens.append(following[tokens[-1]])
    return torch.stack(tokens, dim=1)


def train(model: torch.nn.Module, following: torch.Tensor, args) -> float:
    """``args.train_steps`` AdamW steps on cycle walks; returns the last loss."""
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model.train()
    for _ in range(args.train_steps):
        ids = cycle_walks(args.batch, args.block, following, generator).to(args.device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return loss.item()


class ForwardCounter:
    """Counts the forwards of a model (one per decoding step, or per verification of drafts)."""

    def __init__(self, model: torch.nn.Module):
        self.calls = 0
        model.register_forward_pre_hook(self._count)

    def _count(self, module, inputs) -> None:
        self.calls += 1


@torch.no_grad()
def greedy_generate(model, prompt: torch.Tensor, counter: ForwardCounter, args, **settings) -> dict:
    """One greedy generate() call: its tokens and the model forwards it ran."""
    counter.calls = 0
    tokens = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        pad_token_id=0,
        **settings,
    )
    return {"tokens": tokens, "forwards": counter.calls}


def measure(model, following: torch.Tensor, args) -> dict:
    """Greedy vs prompt lookup on a prompt that walks a cycle: one warm-up call each, then
    ``args.rounds`` alternating rounds (`_timing.interleaved`)."""
    model.eval()
    counter = ForwardCounter(model)
    prompt = cycle_walks(1, args.period * args.prompt_repeats, following, torch.Generator().manual_seed(1))
    prompt = prompt.to(args.device)
    lookup = dict(prompt_lookup_num_tokens=args.lookup_tokens, max_matching_ngram_size=args.ngram)
    modes = {
        "greedy": lambda number: greedy_generate(model, prompt, counter, args),
        "prompt_lookup": lambda number: greedy_generate(model, prompt, counter, args, **lookup),
    }
    timings = interleaved(modes, rounds=args.rounds, stopwatch=Stopwatch(args.device))
    runs = {mode: timing.values for mode, timing in timings.items()}
    greedy_tokens = runs["greedy"][0]["tokens"]
    if not all(torch.equal(run["tokens"], greedy_tokens) for mode in runs.values() for run in mode):
        raise AssertionError("prompt lookup changed the greedy tokens")
    sequence = greedy_tokens[0].cpu()
    follows = following[sequence[prompt.shape[1] - 1 : -1]] == sequence[prompt.shape[1] :]
    result = {"continuation_follows_the_cycle": follows.float().mean().item()}
    for mode, timing in timings.items():
        result[mode] = {"wall_s": timing.median_s, "cpu_s": timing.cpu_median_s, "forwards": runs[mode][0]["forwards"]}
    statistic = "wall_s" if args.device.startswith("cuda") else "cpu_s"
    result["speedup"] = result["greedy"][statistic] / result["prompt_lookup"][statistic]
    result["new_tokens_per_forward"] = args.new_tokens / result["prompt_lookup"]["forwards"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_option(parser)
    add_shape_options(parser, ModelShape(d_model=256, layers=4, heads=4, ffn=1024, vocab=100))
    parser.add_argument("--period", type=int, default=8, help="length of the token cycles")
    parser.add_argument("--block", type=int, default=64, help="training sequence length")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--train-steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--prompt-repeats", type=int, default=4, help="turns of its cycle the prompt makes")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--lookup-tokens", type=int, default=10, help="prompt_lookup_num_tokens")
    parser.add_argument("--ngram", type=int, default=2, help="max_matching_ngram_size")
    parser.add_argument("--rounds", type=int, default=5)
    add_cpu_options(parser)
    args = parse_cpu_args(parser)
    check_device_runs(args.device)

    following = next_token_table(args)
    results = {}
    for name, model in build_models(args).items():
        model.to(args.device)
        loss = train(model, following, args)
        results[name] = {"final_train_loss": loss, **measure(model, following, args)}
        measured = results[name]
        print(
            f"{name:24s} loss {loss:6.3f}  follows cycle {measured['continuation_follows_the_cycle']:5.1%}  "
            f"greedy {measured['greedy']['cpu_s'] * 1e3:7.1f} ms cpu ({measured['greedy']['forwards']} forwards)  "
            f"lookup {measured['prompt_lookup']['cpu_s'] * 1e3:7.1f} ms cpu "
            f"({measured['prompt_lookup']['forwards']} forwards)  speed-up {measured['speedup']:.2f}x",
            flush=True,
        )

    report = {
        "benchmark": "bench_speculative",
        **run_metadata(args.device),
        "settings": {key: value for key, value in vars(args).items() if key not in ("out",)},
        "speedup_statistic": "wall_s" if args.device.startswith("cuda") else "cpu_s",
        "results": results,
    }
    write_report(report, args.out, f"bench_speculative_{args.device.split(':')[0]}.json")


if __name__ == "__main__":
    main()
