"""Does starting from a trained model pay? A Transformer trained on Tatoeba de->en for --pretrain-min
minutes, scored on Multi30k test2016 ("before"), fine-tuned on Multi30k for --minutes with
configs/finetune.yaml's schedule ("after"), beside the same architecture trained from scratch on
Multi30k for the same minutes ("scratch"). One table, written with the command, date and CPU.

    python bench/finetune.py --tatoeba ../shared/data/tatoeba_deu_eng/deu.txt.gz \\
        --multi30k ../shared/data/multi30k --out runs/finetune_bench --pretrain-min 60 --minutes 10

The architecture is configs/multi30k_de_en_transformer.yaml's (4 + 4 pre-norm layers, d 128); the
pretraining trains it with that recipe's settings on Tatoeba with a joint BPE model of its own (so
that Multi30k's words are pieces it knows), leaving out every Tatoeba pair whose German side is a
test2016 sentence (compared lowercased, punctuation and spacing aside), so that "before" has not
seen the test. From scratch trains the recipe itself: Multi30k's own BPE and vocabulary. Each model
is scored as the recipes are: beam 5 with its decode.alpha, BLEU on lowercased word tokens
(bleu_lc_tok), sacreBLEU and chrF. `--tatoeba-pairs` and `--test-sentences` shrink the run to check
the script itself, not to measure.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import platform
import re
import shlex
import sys
from pathlib import Path

import torch

from attnmt.config import Config
from attnmt.configfile import load_config
from attnmt.corpus.readers import find_split_file, read_lines, read_parallel
from attnmt.errors import AttnmtError
from attnmt.evaluate import evaluate
from attnmt.fast.process import set_up_training_process
from attnmt.modelfile import read_metadata
from attnmt.training.resume import CHECKPOINT_FILE
from attnmt.training.train import TrainResult, train
from attnmt.translate import Translator

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "configs" / "multi30k_de_en_transformer.yaml"
FINETUNE = REPO / "configs" / "finetune.yaml"
TEST_PREFIX = "test_2016_flickr"
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def words(text: str) -> str:
    """A sentence as compared against the test set: lowercased, its punctuation and spacing aside."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def tatoeba_without_test(tatoeba: str, test_sources: list[str], out: Path) -> tuple[Path, int, int]:
    """The manythings file (English, German, attribution) without the pairs whose German side is a test
    sentence, gzipped in `out`; with the pairs kept and left out."""
    test = {words(sentence) for sentence in test_sources}
    kept, left_out = [], 0
    for line in read_lines(tatoeba):
        columns = line.split("\t")
        if len(columns) > 1 and words(columns[1]) in test:
            left_out += 1
        else:
            kept.append(line)
    path = out / "tatoeba_deu_eng_without_test2016.txt.gz"
    path.write_bytes(gzip.compress("".join(line + "\n" for line in kept).encode("utf-8"), mtime=0))
    return path, len(kept), left_out


def configs(args: argparse.Namespace, tatoeba: Path, out: Path) -> dict[str, Config]:
    """The three runs' configs: pretraining on Tatoeba, fine-tuning on Multi30k, Multi30k from scratch."""
    budget = [f"train.max_minutes={args.minutes}"]
    return {
        "pretrain": load_config(RECIPE, [
            "data.format=tsv", f"data.path={tatoeba}", "data.valid_size=2000", "data.test_size=2000",
            f"data.max_pairs={args.tatoeba_pairs}", f"train.out_dir={out / 'pretrain'}",
            f"train.max_minutes={args.pretrain_min}"]),
        "finetune": load_config(FINETUNE, [
            f"data.path={args.multi30k}", "data.test_prefix=" + TEST_PREFIX, f"train.out_dir={out / 'finetune'}",
            f"train.init_from={out / 'pretrain' / 'model.safetensors'}", *budget]),
        "scratch": load_config(RECIPE, [f"data.path={args.multi30k}", f"train.out_dir={out / 'scratch'}", *budget]),
    }


def trained(result: TrainResult) -> tuple[int, float]:
    """The updates a run made and the minutes of its training clock, as its checkpoint counts them (the kept
    model may be an earlier update's): the clock train.max_minutes counts, validations between epochs
    included, the last validation and the test translations after the budget not."""
    progress = read_metadata(result.model_path.parent / CHECKPOINT_FILE)["progress"]
    return progress["step"], progress["elapsed_s"] / 60


def scores(model: Path, test: list[tuple[str, str]]) -> dict:
    """test2016 as the recipes score it: beam 5 with the model's own length penalty."""
    translator = Translator.load(model)
    return evaluate(translator, test, 5, translator.config.decode.alpha, lc_tok=True).scores


def cpu() -> str:
    """The CPU's name and the flags bench/results name (`grep -o -E '...' /proc/cpuinfo | sort -u`)."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or "unknown CPU"
    name = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    flags = sorted({flag for flag in FLAGS if re.search(rf"\b{flag}\b", info)})
    return f"{name[1] if name else 'unknown CPU'}; flags: {' '.join(flags) or 'none of ' + ', '.join(FLAGS)}"


def table(rows: dict[str, tuple[dict, TrainResult]]) -> list[str]:
    """One line per model: BLEU (lowercased tokens, beam 5), sacreBLEU, chrF, its run's updates and minutes."""
    lines = ["| model | BLEU lc-tok beam 5 | sacreBLEU | chrF | updates of its run | minutes of its run |",
             "|---|---|---|---|---|---|"]
    for name, (figures, result) in rows.items():
        steps, minutes = trained(result)
        lines.append(f"| {name} | {figures['bleu_lc_tok']:.2f} | {figures['bleu']:.2f} | {figures['chrf']:.2f} | "
                     f"{steps:,} | {minutes:.1f} |")
    return lines


def say(line: str) -> None:
    """Training's log, on stderr: stdout has the table."""
    print(line, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tatoeba", required=True, help="manythings deu.txt(.gz): English, German, attribution")
    parser.add_argument("--multi30k", required=True, help="directory with Multi30k's train/val/test_2016_flickr files")
    parser.add_argument("--out", required=True, help="directory for the three runs (replaced)")
    parser.add_argument("--pretrain-min", type=float, default=60.0, help="pretraining budget on Tatoeba, minutes")
    parser.add_argument("--minutes", type=float, default=10.0, help="fine-tuning and from-scratch budget, minutes")
    parser.add_argument("--results", help="the table's file (default: bench/results/finetune_tatoeba_multi30k_DATE.txt)")
    parser.add_argument("--tatoeba-pairs", type=int, default=0, help="read only the first N Tatoeba pairs (0: all)")
    parser.add_argument("--test-sentences", type=int, default=0, help="score only the first N of test2016 (0: all)")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    test = read_parallel(find_split_file(args.multi30k, TEST_PREFIX, "de"), find_split_file(args.multi30k, TEST_PREFIX, "en"),
                         args.test_sentences or None)
    tatoeba, kept, left_out = tatoeba_without_test(args.tatoeba, [source for source, _ in test], out)
    say(f"tatoeba: {kept:,} pairs kept, {left_out} left out (German side a test2016 sentence)")
    runs = configs(args, tatoeba, out)
    if runs["pretrain"].train.fast_paths:  # as attnmt train does
        set_up_training_process()
    results = {name: train(config, overwrite=True, log=say) for name, config in runs.items()}
    names = {"pretrain": "before: Tatoeba only", "finetune": "after: Tatoeba, then fine-tuned on Multi30k",
             "scratch": "scratch: Multi30k only"}
    rows = {names[run]: (scores(result.model_path, test), result) for run, result in results.items()}
    read = f"the first {args.tatoeba_pairs:,} of " if args.tatoeba_pairs else ""
    lines = [f"# {shlex.join([Path(sys.executable).name, *sys.argv])}",
             f"# {started:%Y-%m-%d %H:%M} UTC; {cpu()}; torch {torch.__version__}, {torch.get_num_threads()} threads",
             f"# Multi30k test2016 de->en, {len(test):,} sentences; pretraining read {read}Tatoeba's {kept:,} pairs "
             f"({left_out} left out as test2016 sentences); architecture: {RECIPE.relative_to(REPO)}; fine-tuning: "
             f"{FINETUNE.relative_to(REPO)}; budgets {args.pretrain_min:g} and {args.minutes:g} minutes of the training "
             f"clock (validations between epochs included); each row's updates and minutes are its own run's", "",
             *table(rows)]
    print("\n".join(lines))
    path = Path(args.results or REPO / "bench" / "results" / f"finetune_tatoeba_multi30k_{started:%Y%m%d}.txt")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    say(f"written: {path}")


if __name__ == "__main__":
    try:
        main()
    except AttnmtError as err:
        sys.exit(f"finetune: {err}")
