"""Where decoding's time goes: milliseconds in each part of `Translator.translate` over a test set.

    python bench/decode_profile.py MODEL SOURCES [--precision int8] [--beam 1] [--batch-size 64] [--rounds 3]
    python bench/decode_profile.py MODEL SOURCES --ops [--beam 5]       # any family: PyTorch's operators

e.g. on the model and data that bench/speed.py leaves in its --out directory:
    python bench/decode_profile.py runs/speed/model.safetensors runs/speed/data/test.de --precision int8

A clock around each call of the encoder, the decoder step, the search and each of the step's
layers: for the RNN its decoder RNN, attention, combine layer and output layer; for the
Transformer the products of its decoder layers (every projection and the feed-forward pair) and
the output layer. "step, other" is the step less those layers (the RNN's embedding and
concatenations; the Transformer's attention arithmetic, norms, residual sums and cache writes),
"search, other" the search less encoder and steps (log-softmax, top-k, histories, refills),
"outside the search" tokenizing and detokenizing. The clocks cost about a microsecond a call.
Prints one line per part and round.

With --ops (the RNN or the Transformer), one round runs under PyTorch's profiler instead and the
operators that took the most time are printed (self CPU time, calls), with the time spent in each
family's state operations (select, put) and the decoder step as a whole.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any, Callable

import torch
from torch import nn

import attnmt.translate
from attnmt.corpus.readers import read_lines
from attnmt.fast.int8 import Int8Linear
from attnmt.fast.process import set_up_decoding_process
from attnmt.translate import Translator


def timed(function: Callable, part: str, totals: Counter) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = function(*args, **kwargs)
        totals[part] += time.perf_counter() - started
        return result
    return wrapper


def operators(translator: Translator, sources: list[str], beam: int, batch_size: int) -> None:
    """One round under torch.profiler: the operators by self CPU time, and the labelled parts."""
    model, _ = translator._decoding()
    state_class = type(model.encode(torch.tensor([[4]]), torch.tensor([1]))[1])
    for name in ("select", "reorder", "put"):
        setattr(state_class, name, labelled(getattr(state_class, name), f"state.{name}"))
    model.step = labelled(model.step, "decoder step")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        started = time.perf_counter()
        translator.translate(sources, beam_size=beam, batch_size=batch_size)
        total = time.perf_counter() - started
    print(f"{len(sources)} sentences in {total * 1000:.0f} ms under the profiler ({len(sources) / total:.0f} sent/s)")
    print(profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def labelled(function: Callable, label: str) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with torch.profiler.record_function(label):
            return function(*args, **kwargs)
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="model file (model.safetensors)")
    parser.add_argument("sources", help="source sentences, one per line")
    parser.add_argument("--precision", default=None, choices=["fp32", "bf16", "int8"])
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ops", action="store_true", help="PyTorch's operators instead of the parts")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not args.ops:
        # As attnmt translate does. Not under the profiler: its own allocations, with freed blocks
        # held, made the Transformer's beam search three times slower there, not faster.
        set_up_decoding_process()
    translator = Translator.load(args.model, device="cpu", precision=args.precision)
    sources = list(read_lines(args.sources))
    translator.translate(sources[: args.batch_size], beam_size=args.beam, batch_size=args.batch_size)  # warm-up
    if args.ops:
        operators(translator, sources, args.beam, args.batch_size)
        return

    totals: Counter = Counter()
    model, _ = translator._decoding()  # the copy translate() decodes with (bf16 or int8), made once
    model.encode = timed(model.encode, "encoder", totals)
    model.step = timed(model.step, "step", totals)
    layers = step_layers(model)
    for part, modules in layers.items():
        for module in modules:
            module.forward = timed(module.forward, part, totals)
    search = "greedy" if args.beam == 1 else "beam_search"
    setattr(attnmt.translate, search, timed(getattr(attnmt.translate, search), "search", totals))

    for round_ in range(1, args.rounds + 1):
        totals.clear()
        started = time.perf_counter()
        translator.translate(sources, beam_size=args.beam, batch_size=args.batch_size)
        total = time.perf_counter() - started
        in_layers = sum(totals[part] for part in layers)
        parts = {
            "encoder": totals["encoder"],
            **{part: totals[part] for part in layers},
            "step, other": totals["step"] - in_layers,
            "search, other": totals["search"] - totals["encoder"] - totals["step"],
            "outside the search": total - totals["search"],
        }
        print(f"round {round_}: {len(sources)} sentences in {total * 1000:.0f} ms, {len(sources) / total:.0f} sent/s")
        for part, seconds in parts.items():
            print(f"  {part:<26} {seconds * 1000:7.0f} ms {100 * seconds / total:5.1f} %")


def step_layers(model: nn.Module) -> dict[str, list[nn.Module]]:
    """The layers of a decoding step that get a clock, by part: the RNN's by attribute, the
    Transformer's products (float32, bfloat16 or int8 linear layers) inside its decoder layers."""
    decoder = getattr(model, "decoder", None)
    if decoder is not None:
        return {"decoder rnn": [decoder.rnn], "attention": [decoder.attention], "combine layer": [decoder.combine],
                "output layer": [decoder.classifier]}
    products = [m for m in model.decoder_layers.modules() if isinstance(m, (nn.Linear, Int8Linear))]
    return {"decoder layers' products": products, "output layer": [model.classifier]}


if __name__ == "__main__":
    main()
