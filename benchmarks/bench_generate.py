"""Per-token decode latency of TaLK / DynamicConv models against Transformers of the same size.

For every decoding setting, model and position P the script fills the model's cache with a
P-token prefix (one row, repeated to the batch), then times single-token decoding steps from
position P on.  ``--rounds`` rounds visit every (model, position) pair in turn, so that load from
other processes hits all measurements alike.  Beam settings reorder the cache after every step,
as beam search does.  The script reports the median and the fastest wall-clock step and the
median CPU time per step; the ratios use the CPU time on the CPU (load from other processes on a
shared machine does not inflate it) and the fastest step on a GPU.

    python benchmarks/bench_generate.py                  # CPU, default sizes, writes JSON
    python benchmarks/bench_generate.py --device cuda    # on a GPU

Models: TaLKForCausalLM and DynamicConvForCausalLM vs GPT-2 (SDPA, its own KV cache);
TaLKForConditionalGeneration and DynamicConvForConditionalGeneration vs Marian (SDPA), all with
the same width, depth, heads and FFN size.  Reported per setting: step time at each position,
the ratio step(2048) / step(16) (goal: <= 1.2 for ours), ours / baseline at each position (goal:
< 1 at 2048), and the decoder state's bytes (self-attention/conv part; the cross-attention
keys/values of seq2seq models are the same for every model and reported apart).
"""

from __future__ import annotations

import argparse

import torch
from _device import add_cpu_options, add_device_option, check_device_runs, parse_cpu_args, run_metadata, write_report
from _models import ModelShape, add_shape_options, baseline_of, build_model, causal_lm_models, seq2seq_models
from _timing import Stopwatch, Timing, interleaved

from talk_hf.transformers_internals import CACHE_NAME  # the cache's argument name (renamed in transformers 5.24)

SETTINGS = {"greedy-b1": (1, 1), "beam5-b8": (8, 5)}  # name: (batch, beams)


def build_models(args) -> dict[str, tuple[torch.nn.Module, bool]]:
    """name -> (model in eval mode on the device, is_seq2seq), every model of `_models`."""
    max_positions = max(max(args.positions) + args.steps * args.rounds + args.warmup, args.source_length) + 8
    shape = ModelShape.from_args(args)
    return {
        name: (build_model(name, shape, max_positions).to(args.device).eval(), name in seq2seq_models())
        for name in causal_lm_models() + seq2seq_models()
    }


def state_bytes(cache) -> tuple[int, int]:
    """(decoder self/conv state bytes, cross-attention bytes) of a transformers Cache."""

    def layer_bytes(cache_part):
        total = 0
        for layer in cache_part.layers:
            for name in ("window", "keys", "values"):
                tensor = getattr(layer, name, None)
                total += tensor.nbytes if isinstance(tensor, torch.Tensor) else 0
        return total

    if hasattr(cache, "self_attention_cache"):
        return layer_bytes(cache.self_attention_cache), layer_bytes(cache.cross_attention_cache)
    return layer_bytes(cache), 0


class Decoder:
    """One model decoding ``rows`` sequences from position ``position`` on, one token per step."""

    @torch.no_grad()
    def __init__(self, model, *, is_seq2seq: bool, rows: int, beams: int, position: int, steps: int, args):
        """Prefill one row of ``position`` tokens, then repeat the state to ``rows`` rows (the
        step time depends on the state's size, not on its values; this keeps prefill cheap).
        ``rows`` holds ``beams`` beams of each sequence; ``steps``: the decoding steps it will run
        (their tokens and masks are made here, outside the timed steps); ``args``: the command
        line's sizes."""
        self.model, self.is_seq2seq, self.rows, self.position = model, is_seq2seq, rows, position
        self.device = args.device
        self.generator = torch.Generator().manual_seed(0)
        self.vocab = args.vocab
        self.inputs, self.key = {}, "input_ids"
        if is_seq2seq:
            encoder_outputs = model.get_encoder()(input_ids=self.tokens(args.source_length, 1), return_dict=True)
            encoder_outputs.last_hidden_state = encoder_outputs.last_hidden_state.repeat_interleave(rows, dim=0)
            self.inputs["encoder_outputs"] = encoder_outputs
            self.key = "decoder_input_ids"
            prefix = {"encoder_outputs": (encoder_outputs.last_hidden_state[:1],)}
        else:
            prefix = {}
        self.cache = getattr(model(**prefix, **{self.key: self.tokens(position, 1)}, use_cache=True), CACHE_NAME)
        self.cache.batch_repeat_interleave(rows)
        self.beam_idx = (
            torch.arange(rows, device=self.device).view(-1, beams).roll(1, dims=1).flatten() if beams > 1 else None
        )
        self.step_tokens = [self.tokens(1) for _ in range(steps)]  # (rows, 1) each
        # (rows, position + steps) ones: a step's attention mask is its first columns (LMs only)
        self.mask = None if is_seq2seq else torch.ones(rows, position + steps, dtype=torch.long, device=self.device)
        self.steps_run = 0

    def tokens(self, length: int, rows: int | None = None) -> torch.Tensor:
        rows = self.rows if rows is None else rows
        return torch.randint(3, self.vocab, (rows, length), generator=self.generator).to(self.device)

    @torch.no_grad()
    def step(self, number: int) -> None:
        """One decoding step (``number``: `_timing.interleaved`'s call number, unused): forward of one
        token per row, argmax, beam reordering."""
        self.position += 1
        mask = {} if self.mask is None else {"attention_mask": self.mask[:, : self.position]}
        token = self.step_tokens[self.steps_run]
        self.steps_run += 1
        outputs = self.model(**self.inputs, **mask, **{self.key: token, CACHE_NAME: self.cache}, use_cache=True)
        outputs.logits[:, -1].argmax(-1)
        if self.beam_idx is not None:
            getattr(outputs, CACHE_NAME).reorder_cache(self.beam_idx)
        self.cache = getattr(outputs, CACHE_NAME)

    def result(self, timing: Timing) -> dict:
        """The report's entry: ``timing`` of this decoder's timed steps, and its state's bytes."""
        self_bytes, cross_bytes = state_bytes(self.cache)
        return {
            "step_s": timing.median_s,
            "step_min_s": timing.best_s,
            "step_cpu_s": timing.cpu_median_s,
            "steps": len(timing.wall_s),
            "state_bytes": self_bytes,
            "cross_attention_bytes": cross_bytes,
        }


def measure_setting(models: dict, *, rows: int, beams: int, args) -> dict:
    """Step times of every model at every position, in interleaved rounds over all (model,
    position) pairs (`_timing.interleaved`: ``--warmup`` untimed steps each, then ``--rounds``
    rounds of ``--steps`` timed steps each), so that load from other processes hits every
    measurement alike."""
    steps = args.warmup + args.rounds * args.steps
    decoders = {
        (name, position): Decoder(
            model, is_seq2seq=is_seq2seq, rows=rows, beams=beams, position=position, steps=steps, args=args
        )
        for name, (model, is_seq2seq) in models.items()
        for position in args.positions
    }
    timings = interleaved(
        {pair: decoder.step for pair, decoder in decoders.items()},
        rounds=args.rounds,
        calls=args.steps,
        warmup=args.warmup,
        stopwatch=Stopwatch(args.device),
    )
    results = {name: {} for name in models}
    for (name, position), decoder in decoders.items():
        results[name][str(position)] = decoder.result(timings[name, position])
    return results


def summarise(results: dict, positions: list[int], statistic: str) -> dict:
    """Ratios of ``statistic`` (a per-step time of the results): each model's step(last) /
    step(first), and ours / the baseline of its kind at each position."""
    first, last = str(positions[0]), str(positions[-1])
    summary = {}
    for setting, per_model in results.items():
        rows = {}
        for name, per_position in per_model.items():
            baseline = baseline_of(name)
            rows[name] = {
                f"step_{last}_over_step_{first}": per_position[last][statistic] / per_position[first][statistic],
                **{
                    f"over_baseline_at_{p}": per_position[str(p)][statistic] / per_model[baseline][str(p)][statistic]
                    for p in positions
                },
                f"state_bytes_at_{last}": per_position[last]["state_bytes"],
            }
        summary[setting] = rows
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_option(parser)
    parser.add_argument("--positions", type=int, nargs="+", default=[16, 256, 2048])
    add_shape_options(parser)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per (model, position) and round")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds over the (model, position) pairs")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--settings",
        nargs="+",
        choices=list(SETTINGS),
        default=list(SETTINGS),
        help="decoding settings to measure (batch x beams)",
    )
    add_cpu_options(parser)
    args = parse_cpu_args(parser)
    check_device_runs(args.device)

    models = build_models(args)
    results = {}
    for setting in args.settings:
        batch, beams = SETTINGS[setting]
        results[setting] = measure_setting(models, rows=batch * beams, beams=beams, args=args)
        for name, per_position in results[setting].items():
            for position, measured in per_position.items():
                print(
                    f"{setting:10s} {name:38s} P={position:>5s} step {measured['step_s'] * 1e3:8.2f} ms "
                    f"(min {measured['step_min_s'] * 1e3:7.2f}, cpu {measured['step_cpu_s'] * 1e3:7.2f}) "
                    f"state {measured['state_bytes'] / 2**20:9.2f} MiB",
                    flush=True,
                )

    statistic = "step_min_s" if args.device.startswith("cuda") else "step_cpu_s"
    report = {
        "benchmark": "bench_generate",
        **run_metadata(args.device),
        "shapes": {
            key: getattr(args, key)
            for key in ("d_model", "layers", "heads", "ffn", "vocab", "source_length", "positions")
        },
        "settings": {name: {"batch": SETTINGS[name][0], "beams": SETTINGS[name][1]} for name in args.settings},
        "results": results,
        # On the CPU the ratios use the process's CPU time per step (other processes on a shared
        # machine do not inflate it); on a GPU the fastest wall-clock step.
        "ratio_statistic": statistic,
        "summary": summarise(results, args.positions, statistic),
    }
    write_report(report, args.out, f"bench_generate_{args.device.split(':')[0]}.json")


if __name__ == "__main__":
    main()
