"""The second gold standard of bench/alignment.py: English-French Hansards (HLT-NAACL 2003 shared task).

    python bench/hansards_text.py --release HANSARDS --out runs/align_fr_en
    python bench/alignment.py --gold runs/align_fr_en/gold --langs fr,en --pairs 37: ...

HANSARDS is the shared task's release as it was distributed (README.test, test/, trial/, training/,
FilePairs.training): 447 test and 37 trial sentence pairs hand-aligned by Och and Ney (sure and
possible links, words numbered from 1, English first), and ISI's Aligned Hansards of the 36th
Parliament of Canada as training text (1,130,104 pairs, tokenized, French contractions split).
No licence text comes with it; ISI's README says the Canadian Parliament makes the Hansards
available free of charge and without restrictions that would hamper research. attnmt neither ships
nor downloads it: one public copy is the folder datasets/en-fr/Hansards of
github.com/loganbrenningmeyer/multi-binaryalign at commit 2a4e9a47 (removed in later commits).

Writes, for French -> English (the source first, as the RWTH set's German):
    OUT/gold/test.fr, test.en, test.talp     the 37 trial pairs, then the 447 test pairs: `--pairs 0:37`
                                             chooses settings, `--pairs 37:` reports (i-j sure, ipj
                                             possible, French word i, English word j, from 1)
    OUT/unseen/train.fr, train.en            the first --pairs training pairs (FilePairs.training's
                                             order) with 1 to --max-words words on each side, and
                                             val / test: the next --held and --held such pairs, for
                                             training a model on the text
    OUT/seen/...                             the same, with the 484 gold pairs' text appended
                                             (never their links), as statistical aligners are run
Deterministic: the same release gives the same files.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

TAGGED = re.compile(r"<s snum=(\d+)>(.*)</s>\s*$")


def tagged_lines(path: Path) -> dict[str, str]:
    """The sentences of a gold file (`<s snum=N> words </s>` per line) by their number."""
    found = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = TAGGED.match(line)
        if not match:
            sys.exit(f"{path}, line {number}: not of the form '<s snum=N> words </s>'")
        found[match.group(1).lstrip("0")] = " ".join(match.group(2).split())
    return found


def gold_links(path: Path) -> dict[str, list[str]]:
    """Each sentence's links as `french-english` (sure) or `frenchpenglish` (possible), words from 1."""
    links: dict[str, list[str]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if len(fields) != 4 or fields[3] not in ("S", "P"):
            sys.exit(f"{path}, line {number}: expected 'sentence english_word french_word S|P'")
        sentence, english, french, kind = fields
        links.setdefault(sentence.lstrip("0"), []).append(f"{french}{'-' if kind == 'S' else 'p'}{english}")
    return links


def training_pairs(release: Path, wanted: int, max_words: int) -> list[tuple[str, str]]:
    """The first `wanted` training pairs with 1 to max_words words on each side (French, English)."""
    pairs: list[tuple[str, str]] = []
    for line in (release / "FilePairs.training").read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        english_file, french_file = line.split()
        english = (release / "training" / english_file).read_text(encoding="utf-8").splitlines()
        french = (release / "training" / french_file).read_text(encoding="utf-8").splitlines()
        if len(english) != len(french):
            sys.exit(f"{english_file} has {len(english)} lines but {french_file} has {len(french)}")
        for f, e in zip(french, english):
            f, e = " ".join(f.split()), " ".join(e.split())
            if 1 <= len(f.split()) <= max_words and 1 <= len(e.split()) <= max_words:
                pairs.append((f, e))
                if len(pairs) == wanted:
                    return pairs
    sys.exit(f"{release}: only {len(pairs):,} training pairs of 1 to {max_words} words, {wanted:,} asked for")


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", required=True, help="the shared task's Hansards folder (README.test, test/, ...)")
    parser.add_argument("--out", required=True, help="where gold/, unseen/ and seen/ go")
    parser.add_argument("--pairs", type=int, default=200_000, help="training pairs (default: %(default)s)")
    parser.add_argument("--max-words", type=int, default=80, help="longest training sentence kept, in words")
    parser.add_argument("--held", type=int, default=1000, help="pairs for the model's val split, and as many for test")
    args = parser.parse_args()
    release, out = Path(args.release), Path(args.out)

    french, english, links = [], [], []
    for folder, name, alignment in (("trial", "trial", "trial.wa"), ("test", "test", "test.wa.nonullalign")):
        f_text, e_text = tagged_lines(release / folder / f"{name}.f"), tagged_lines(release / folder / f"{name}.e")
        by_sentence = gold_links(release / folder / alignment)
        if f_text.keys() != e_text.keys() or not by_sentence.keys() <= f_text.keys():
            sys.exit(f"{release / folder}: the French, English and link files number different sentences")
        for sentence in sorted(f_text, key=int):
            french.append(f_text[sentence])
            english.append(e_text[sentence])
            links.append(" ".join(by_sentence.get(sentence, [])))
    write_lines(out / "gold" / "test.fr", french)
    write_lines(out / "gold" / "test.en", english)
    write_lines(out / "gold" / "test.talp", links)
    print(f"{out / 'gold'}: {len(links)} pairs (37 trial, then the test set)", file=sys.stderr)

    pairs = training_pairs(release, args.pairs + 2 * args.held, args.max_words)
    train, val, test = pairs[: args.pairs], pairs[args.pairs : args.pairs + args.held], pairs[args.pairs + args.held :]
    for name, extra in (("unseen", []), ("seen", list(zip(french, english)))):
        for split, rows in (("train", train + extra), ("val", val), ("test", test)):
            write_lines(out / name / f"{split}.fr", [f for f, _ in rows])
            write_lines(out / name / f"{split}.en", [e for _, e in rows])
        print(f"{out / name}: {len(train) + len(extra):,} training pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
