"""Compare the anchor's preprocessed Multi30k en-de with ours put through the anchor's measure.

    python bench/anchor_data.py ANCHOR_DIR --data ../shared/data/multi30k

ANCHOR_DIR holds the text Wu et al. (2021) trained and tested on, as their repository ships it
(github.com/LividWo/Revisit-MMT, data/multi30k-en-de: train, valid, test.2016, each .en and .de;
lowercased, Moses-tokenized with HTML escapes, BPE pieces joined by "@@ "). Each of their lines,
its BPE joins and escapes undone, is set beside the same line of ours put through the preprocessing
that bench/quality.py's `--moses-bleu` scores with. Prints one `metric=<name> value=<number>` line
per figure: lines that differ per split and language, and the anchor's joint vocabulary and mean
pieces per sentence, then the first differing lines of each file.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

from quality import moses_tokenizer

from attnmt.corpus.readers import find_split_file, read_lines
from attnmt.errors import AttnmtError

SPLITS = {"train": "train", "valid": "val", "test.2016": "test_2016_flickr"}  # theirs -> ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("anchor", type=Path, help="the anchor's data/multi30k-en-de directory")
    parser.add_argument("--data", required=True, help="our Multi30k directory (train/val/test_2016_flickr)")
    parser.add_argument("--show", type=int, default=3, help="differing lines to print per file")
    args = parser.parse_args()
    examples = []
    for lang in ("en", "de"):
        tokens = moses_tokenizer(lang)
        pieces = [line.split() for line in read_lines(args.anchor / f"train.{lang}")]
        print(f"metric=anchor_pieces_per_sentence_train_{lang} value={sum(map(len, pieces)) / len(pieces):.2f}")
        for theirs_name, ours_name in SPLITS.items():
            theirs = [html.unescape(line.replace("@@ ", "")) for line in read_lines(args.anchor / f"{theirs_name}.{lang}")]
            ours = [tokens(line) for line in read_lines(find_split_file(args.data, ours_name, lang))]
            if len(theirs) != len(ours):
                sys.exit(f"anchor_data: {theirs_name}.{lang} has {len(theirs)} lines, ours {len(ours)}")
            differ = [(a, b) for a, b in zip(ours, theirs) if a != b]
            print(f"metric=lines_{ours_name}_{lang} value={len(ours)}")
            print(f"metric=lines_differing_{ours_name}_{lang} value={len(differ)}")
            examples += [f"{ours_name}.{lang}\n  ours:   {a}\n  anchor: {b}" for a, b in differ[:args.show]]
    vocabulary = {piece for lang in ("en", "de") for line in read_lines(args.anchor / f"train.{lang}")
                  for piece in line.split()}
    print(f"metric=anchor_joint_vocabulary value={len(vocabulary)}")
    print("\n".join(examples))


if __name__ == "__main__":
    try:
        main()
    except AttnmtError as err:  # a missing or unreadable file: one line
        sys.exit(f"anchor_data: {err}")
