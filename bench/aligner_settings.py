"""Choosing the aligner's settings on a gold standard's dev pairs: an aligner trained with the batch,
width, rate and jump range given, its AER on the dev pairs printed after every epoch.

    python bench/aligner_settings.py MODEL --text runs/align_text/seen --gold ../shared/data/rwth_deen_gold \
        --dev 0:100 --batch-tokens 16384 --hidden 128 --lr 0.01 --max-jump 15 --epochs 3

MODEL is the model the aligner is trained for (its tokenizer and embeddings); --text a folder with
train.SRC and train.TGT (--langs). Each epoch prints a line `epoch=E cpu_s=... aer_average=...
aer_grow_diag_final=... aer_intersect=...` on the dev pairs only (--dev, a Python slice of the gold
pairs): the rest of the gold set stays unseen until bench/alignment.py scores what was chosen. CPU
seconds are this process's, model loading and tokenizing included; run one trial at a time to
compare them, or give each --threads 1 and compare AER only.
"""

from __future__ import annotations

import argparse
import time

import torch
from alignment import GoldSet, links_by_method

from attnmt.analysis.align import aligner_posteriors
from attnmt.analysis.aligner import Aligner, AlignerConfig, train_aligner
from attnmt.corpus.readers import find_split_file, read_lines
from attnmt.translate import Translator

RULES = ("average", "grow-diag-final", "intersect")      # the links printed (bench/alignment.py has them all)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="the model file the aligner is trained for")
    parser.add_argument("--text", required=True, help="folder with train.SRC and train.TGT")
    parser.add_argument("--gold", required=True, help="folder with test.SRC, test.TGT and test.talp (from 1)")
    parser.add_argument("--langs", default="de,en", metavar="SRC,TGT", help="default: %(default)s")
    parser.add_argument("--dev", default="0:100", metavar="FROM:TO", help="the gold pairs scored (default: %(default)s)")
    parser.add_argument("--batch-tokens", type=int, default=16384)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--max-jump", type=int, default=AlignerConfig.max_jump,
                        help="jumps further than this many pieces share one score (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.process_time()
    src_lang, tgt_lang = args.langs.split(",")
    translator = Translator.load(args.model, "cpu")
    sources = list(read_lines(find_split_file(args.text, "train", src_lang)))
    targets = list(read_lines(find_split_file(args.text, "train", tgt_lang)))
    gold = GoldSet.read(args.gold, args.langs, args.dev)
    text = translator.tokenization
    aligner = Aligner.for_model(translator.model, len(text.src_vocab), len(text.tgt_vocab), hidden=args.hidden,
                                max_jump=args.max_jump)
    print(f"# {args.model}: {len(sources):,} pairs; batch {args.batch_tokens} target pieces, hidden {args.hidden}, "
          f"lr {args.lr}, max jump {args.max_jump}; dev pairs {args.dev}: {len(gold.links[gold.scored])}")

    def scored(line: str) -> None:
        print(f"# {line}")
        links = dict(links_by_method(aligner_posteriors(translator, aligner.eval(), gold.pairs)))
        print(f"epoch={aligner.epochs} cpu_s={time.process_time() - started:.0f} "
              + " ".join(f"aer_{rule.replace('-', '_')}={gold.score(links[rule]).aer:.4f}" for rule in RULES), flush=True)

    train_aligner(translator, sources, targets, args.epochs, lr=args.lr, batch_tokens=args.batch_tokens, log=scored,
                  aligner=aligner)


if __name__ == "__main__":
    main()
