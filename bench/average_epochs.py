"""Score averages of a run's saved epochs on validation: how many of the last epochs to average,
and the beam search's length penalty.

    python bench/average_epochs.py runs/tune60/recipe_full_budget --data ../shared/data/multi30k --last 1 5 10 15 20
    python bench/average_epochs.py runs/tune60/recipe_full_budget --data ../shared/data/multi30k --last 20 \
        --alpha 0 0.6 1.0 --beam 5 8

Training keeps the last `train.average_last` epochs' models (epochN.safetensors) and, at its end,
keeps their average only if it validates better. This reads those files and scores the average of
the last k, for each k asked, on the validation split, in issue 45's measure: lowercased-token
BLEU with beam 5 (then greedy, sacreBLEU and chrF), so a search can choose `average_last` on
validation after a single run. k = 1 is the last epoch alone. With `--alpha` and `--beam`, one
row for each average, length penalty α and beam size asked (decode.alpha, decode.beam_size).
test2016 is never read.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tune import validation_pairs, validation_scores

from attnmt.modelfile import load_file
from attnmt.training.average import average_weights
from attnmt.translate import Translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a training run's out_dir, with its epochN.safetensors")
    parser.add_argument("--data", required=True, help="the corpus directory (data.path)")
    parser.add_argument("--last", type=int, nargs="+", required=True, help="how many of the last epochs to average")
    parser.add_argument("--alpha", type=float, nargs="+", default=[0.0], help="length penalties α of beam search")
    parser.add_argument("--beam", type=int, nargs="+", default=[5], help="beam sizes (above 1)")
    args = parser.parse_args()
    epochs = sorted((int(m[1]), path) for path in args.run.glob("epoch*.safetensors")
                    if (m := re.fullmatch(r"epoch(\d+)\.safetensors", path.name)))
    if any(b < 2 for b in args.beam):
        sys.exit(f"average_epochs: --beam {min(args.beam)}: a beam size must be 2 or more (greedy is scored too)")
    too_many = [k for k in args.last if not 1 <= k <= len(epochs)]
    if too_many:
        sys.exit(f"average_epochs: --last {too_many[0]}: {args.run} holds {len(epochs)} saved epochs "
                 f"(allowed: 1 to {len(epochs)})")
    data = load_file(args.run / "checkpoint.safetensors")[1]["config"]["data"]
    valid = validation_pairs(args.data, data["valid_prefix"], data["src_lang"], data["tgt_lang"])
    translator = Translator.load(epochs[-1][1])
    print("| last k epochs averaged | epochs | beam | α | val lc-tok BLEU | greedy | val sacreBLEU | val chrF "
          "| length ratio |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for k in args.last:
        chosen = epochs[-k:]
        translator.model.load_state_dict(average_weights([path for _, path in chosen], translator.device))
        greedy = validation_scores(translator, valid, beam_size=1)
        for beam_size in args.beam:
            for alpha in args.alpha:
                beam = validation_scores(translator, valid, beam_size, alpha)
                print(f"| {k} | {chosen[0][0]}-{chosen[-1][0]} | {beam_size} | {alpha:g} | {beam['bleu_lc_tok']:.2f} "
                      f"| {greedy['bleu_lc_tok']:.2f} | {beam['bleu']:.2f} | {beam['chrf']:.2f} | {beam['length_ratio']:.3f} |",
                      flush=True)


if __name__ == "__main__":
    main()
