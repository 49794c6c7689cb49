"""The compiled decoding step (`--compile`) against the eager one, alternating in one process.

    python bench/compiled.py MODEL SOURCES REFERENCES [--precision int8] [--rounds 5] [--batch-size 64]

e.g. on the model and tokenized test set that bench/speed.py leaves in its --out directory:
    python bench/compiled.py runs/speed/model.safetensors runs/speed/data/test.{de,en}

Loads the model twice, plain and with compile=True (compiling into $ATTNMT_CACHE if needed),
then (after a warm-up batch) translates the whole file greedy and with beam 5, eager and compiled in turn, `--rounds`
times each: alternating evens out a neighbour's load, where consecutive runs in compare_peers.sh
can each catch a different one. Prints each round's sentences per second, the medians and their
ratio, BLEU (scored as bench/speed.py scores it) and how many outputs differ.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from attnmt.corpus.readers import read_lines
from attnmt.fast.process import set_up_decoding_process
from attnmt.translate import Translator

from speed import tokens_bleu


def decoding_arguments(description: str, rounds: int,
                       more: Callable[[argparse.ArgumentParser], None] = lambda parser: None
                       ) -> tuple[argparse.Namespace, list[str], list[str]]:
    """The arguments of a bench that decodes a test set in alternating rounds (MODEL SOURCES
    REFERENCES, --rounds, --batch-size, --threads; `more` adds its own), the threads set, the
    sentences read."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="model file (model.safetensors)")
    parser.add_argument("sources", help="source sentences, one per line")
    parser.add_argument("references", help="reference translations, line-aligned")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    more(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    set_up_decoding_process()  # as attnmt translate does
    return args, list(read_lines(args.sources)), list(read_lines(args.references))


def main() -> None:
    args, sources, references = decoding_arguments(__doc__, rounds=5, more=lambda parser: parser.add_argument(
        "--precision", default="int8", choices=["fp32", "bf16", "int8"]))
    translators = {"eager": Translator.load(args.model, "cpu", args.precision),
                   "compiled": Translator.load(args.model, "cpu", args.precision, compile=True)}
    for translator in translators.values():  # warm-up: the decoding copy, oneDNN's kernels
        translator.translate(sources[: args.batch_size], batch_size=args.batch_size)
    for name, beam in (("greedy", 1), ("beam5", 5)):
        speeds: dict[str, list[float]] = {kind: [] for kind in translators}
        outputs: dict[str, list[str]] = {}
        for round_ in range(1, args.rounds + 1):
            for kind, translator in translators.items():
                started = time.perf_counter()
                texts = [t.text for t in translator.translate(sources, beam_size=beam, batch_size=args.batch_size)]
                speeds[kind].append(len(sources) / (time.perf_counter() - started))
                outputs[kind] = texts
            print(f"{name} round {round_}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in speeds.items()) + " sent/s")
        medians = {kind: statistics.median(values) for kind, values in speeds.items()}
        differ = sum(a != b for a, b in zip(outputs["eager"], outputs["compiled"]))
        print(f"{name} {args.precision}: median eager {medians['eager']:.0f}, compiled {medians['compiled']:.0f} sent/s "
              f"({medians['compiled'] / medians['eager']:.2f}x); BLEU eager {tokens_bleu(outputs['eager'], references):.2f}, "
              f"compiled {tokens_bleu(outputs['compiled'], references):.2f}; {differ} of {len(sources)} outputs differ")


if __name__ == "__main__":
    main()
