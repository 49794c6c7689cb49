"""Train on Multi30k de->en within a wall-clock budget, then score test2016, greedy and beam 5.

    python bench/quality.py --data ../shared/data/multi30k --budget-min 60 --out runs/quality
    python bench/quality.py --data ... --out runs/baseline model.attention=none   # the no-attention baseline

Prints one `metric=<name> value=<number>` line per figure; `bleu_lc_tok` is BLEU on lowercased
word tokens (the PyTorch seq2seq tutorials' recipe), `sacrebleu` the detokenized cased BLEU whose
signature is printed too. Figures without a suffix are for beam 5.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from attnmt.config import load_config
from attnmt.data import find_split_file, read_parallel
from attnmt.evaluate import score_translations
from attnmt.train import train
from attnmt.translate import Translator

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="directory with the Multi30k files (train/val/test_2016_flickr)")
    parser.add_argument("--budget-min", type=float, default=60.0, help="training wall-clock budget in minutes")
    parser.add_argument("--out", required=True, help="output directory for the model")
    parser.add_argument("--config", default=str(REPO / "configs" / "multi30k_de_en.yaml"))
    parser.add_argument("--alpha", type=float, default=0.0, help="length penalty for beam 5")
    parser.add_argument("overrides", nargs="*", help="config key=value overrides")
    args = parser.parse_args()

    config = load_config(args.config, [f"data.path={args.data}", f"train.out_dir={args.out}",
                                       f"train.max_minutes={args.budget_min}", *args.overrides])
    started = time.monotonic()
    result = train(config, overwrite=True, log=lambda line: print(line, file=sys.stderr, flush=True))
    train_minutes = (time.monotonic() - started) / 60

    translator = Translator.load(result.model_path)
    d = config.data
    test = read_parallel(find_split_file(d.path, d.test_prefix, d.src_lang), find_split_file(d.path, d.test_prefix, d.tgt_lang))
    params = sum(p.numel() for p in translator.model.parameters())
    print(f"metric=params value={params}")
    print(f"metric=train_minutes value={train_minutes:.1f}")
    print(f"metric=epochs value={result.epochs}")
    print(f"metric=threads value={torch.get_num_threads()}")
    for beam, suffix in ((1, "_greedy"), (5, "")):
        scores = score_translations(translator, test, beam_size=beam, alpha=args.alpha if beam > 1 else 0.0,
                                    lc_tok=True)
        print(f"metric=bleu_lc_tok{suffix} value={scores['bleu_lc_tok']}")
        print(f"metric=sacrebleu{suffix} value={scores['bleu']}")
        print(f"metric=chrf{suffix} value={scores['chrf']}")
    print(f"signature sacrebleu={scores['bleu_signature']} chrf={scores['chrf_signature']}")


if __name__ == "__main__":
    main()
