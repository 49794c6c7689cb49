"""Two models decoding at once or in turn: why `attnmt serve` with several models runs their calls
on one thread (serve/batching.model_thread).

    python bench/model_threads.py [--device cpu|cuda] [--rounds 3]

Loads two of the test fixtures' models (tests/fixtures/models: an RNN and a Transformer, tiny, of
the dates task) on the device, and translates 160 sentences with each, greedy and beam 5: first one
model after the other (what one shared thread does), then both from two threads at once (a thread
per model). Prints sentences per second of each way, their ratio, and whether the outputs of the
threads are those of each model alone. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from attnmt.fast.process import set_up_decoding_process
from attnmt.translate import Translator

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"
MODELS = ("gru_bahdanau", "transformer_pre_bpe_shared")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3, help="translations of the batch per model and way")
    args = parser.parse_args()
    set_up_decoding_process()
    sentences = [s for s in json.loads((FIXTURES / "expected.json").read_text())["sentences"] if s.strip()] * 40
    models = {name: Translator.load(FIXTURES / f"{name}.safetensors", args.device) for name in MODELS}
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else f"cpu, {torch.get_num_threads()} threads"
    print(f"device: {where}; torch {torch.__version__}; {len(sentences)} sentences per translation, {args.rounds} rounds")

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    for beam in (1, 5):
        def run(name: str) -> list[str]:
            return [t.text for t in models[name].translate(sentences, beam_size=beam)]

        alone = {name: run(name) for name in models}             # the reference, and a warm-up
        order = [name for _ in range(args.rounds) for name in models]
        sync()
        start = time.perf_counter()
        for name in order:
            run(name)
        sync()
        in_turn = time.perf_counter() - start
        with ThreadPoolExecutor(len(models)) as pool:
            start = time.perf_counter()
            results = [future.result() for future in [pool.submit(run, name) for name in order]]
            sync()
            at_once = time.perf_counter() - start
        same = all(result == alone[name] for result, name in zip(results, order, strict=True))
        total = len(order) * len(sentences)
        print(f"beam {beam}: in turn {total / in_turn:.0f} sent/s, two threads at once {total / at_once:.0f} sent/s "
              f"(at once / in turn {in_turn / at_once:.2f}x); outputs as each alone: {same}")
        print(f"metric=at_once_over_in_turn_beam_{beam} value={in_turn / at_once:.3f}")


if __name__ == "__main__":
    main()
