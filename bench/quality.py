"""Train on Multi30k de->en within a wall-clock budget, then score test2016, greedy and beam 5.

    python bench/quality.py --data ../shared/data/multi30k --budget-min 60 --out runs/quality
    python bench/quality.py --data ... --out runs/baseline model.attention=none   # the no-attention baseline
    python bench/quality.py --data ... --out runs/quality --skip-training --alpha 1.0  # that model, decoded otherwise
    python bench/quality.py --data ... --out runs/quality120 --budget-min 120 --resume  # a copy of runs/quality, on to 120 min
    python bench/quality.py --data ... --out ... --also-test newstest2014 \
        ../shared/data/wmt_newstest_deen/newstest2014-deen-src.de.sgm.gz \
        ../shared/data/wmt_newstest_deen/newstest2014-deen-ref.en.sgm.gz

Prints one `metric=<name> value=<number>` line per figure; `bleu_lc_tok` is BLEU on lowercased
word tokens (the PyTorch seq2seq tutorials' recipe), `sacrebleu` the detokenized cased BLEU whose
signature is printed too. `--moses-bleu` adds `bleu_moses_lc`: BLEU over lowercased text put
through the Moses punctuation normalizer and tokenizer (sacremoses, `pip install sacremoses`;
hyphenated words stay whole), the preprocessing of the Multi30k release and so the measure of
papers that report fairseq's or multi-bleu's BLEU on it, with `reference_tokens_moses` to check
against their reference length. Figures without a suffix are for beam 5, with the config's length
penalty (decode.alpha) unless `--alpha` says otherwise. `--also-test NAME SOURCE REFERENCE` scores
the same model on another test set too (beam 5; plain text, or WMT's .sgm, either maybe gzipped),
its figures suffixed `_NAME`.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from collections.abc import Callable
from pathlib import Path

import sacrebleu
import torch

from attnmt.configfile import load_config
from attnmt.corpus.readers import find_split_file, read_lines, read_parallel
from attnmt.errors import AttnmtError
from attnmt.evaluate import evaluate, score_translations
from attnmt.fast.process import set_up_training_process
from attnmt.files import MODEL_FILE
from attnmt.training.train import train
from attnmt.translate import Translator

REPO = Path(__file__).resolve().parents[1]
SEGMENT = re.compile(r"<seg[^>]*>(.*)</seg>")


def read_segments(path: str) -> list[str]:
    """The sentences of a test file: its lines, or in a WMT .sgm file the text of each <seg>."""
    lines = list(read_lines(path))
    if ".sgm" not in Path(path).name:
        return lines
    return [html.unescape(match[1].strip()) for match in map(SEGMENT.search, lines) if match]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="directory with the Multi30k files (train/val/test_2016_flickr)")
    parser.add_argument("--budget-min", type=float, default=60.0, help="training wall-clock budget in minutes")
    parser.add_argument("--out", required=True, help="output directory for the model")
    parser.add_argument("--config", default=str(REPO / "configs" / "multi30k_de_en.yaml"))
    parser.add_argument("--alpha", type=float, help="length penalty for beam 5 (default: the config's decode.alpha)")
    parser.add_argument("--skip-training", action="store_true",
                        help="score the model an earlier run left in --out instead of training one (other decoding)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out (its checkpoint) until --budget-min minutes of training in all")
    parser.add_argument("--also-test", nargs=3, action="append", default=[], metavar=("NAME", "SOURCE", "REFERENCE"),
                        help="another test set to score the model on, with beam 5 (e.g. newstest2014)")
    parser.add_argument("--moses-bleu", action="store_true",
                        help="also BLEU over Moses-tokenized lowercased text (needs sacremoses)")
    parser.add_argument("overrides", nargs="*", help="config key=value overrides")
    args = parser.parse_args()
    moses_bleu = load_moses_bleu() if args.moses_bleu else None  # before training: a missing package costs none

    config = load_config(args.config, [f"data.path={args.data}", f"train.out_dir={args.out}",
                                       f"train.max_minutes={args.budget_min}", *args.overrides])
    also_tests = {name: read_test_set(name, source, reference) for name, source, reference in args.also_test}
    alpha = config.decode.alpha if args.alpha is None else args.alpha
    model_path = Path(args.out) / MODEL_FILE
    if args.skip_training and args.resume:
        sys.exit("quality: --skip-training and --resume exclude each other: one scores a run, the other continues it")
    if args.skip_training:
        if not model_path.exists():
            sys.exit(f"quality: --skip-training: {model_path} does not exist; train it first (without --skip-training)")
    else:
        if config.train.fast_paths:  # as attnmt train does: without it, each step paid page faults (fast/process.py)
            set_up_training_process()
        result = train(config, resume=args.resume, overwrite=not args.resume,
                       log=lambda line: print(line, file=sys.stderr, flush=True))
        print(f"metric=train_minutes value={result.minutes:.1f}")  # the training clock, resumed or not
        print(f"metric=epochs value={result.epochs}")

    translator = Translator.load(model_path)
    d = config.data
    test = read_parallel(find_split_file(d.path, d.test_prefix, d.src_lang), find_split_file(d.path, d.test_prefix, d.tgt_lang))
    params = sum(p.numel() for p in translator.model.parameters())
    print(f"metric=params value={params}")
    print(f"metric=threads value={torch.get_num_threads()}")
    print(f"metric=alpha value={alpha}")
    for beam, suffix in ((1, "_greedy"), (5, "")):
        evaluation = evaluate(translator, test, beam, alpha if beam > 1 else 0.0, lc_tok=True)
        scores = evaluation.scores
        print_scores(scores, suffix)
        if moses_bleu:
            bleu, reference_tokens = moses_bleu(evaluation.hypotheses, [r for _, r in test], config.data.tgt_lang)
            print(f"metric=bleu_moses_lc{suffix} value={bleu}")
    if moses_bleu:
        print(f"metric=reference_tokens_moses value={reference_tokens}")
    print(f"signature sacrebleu={scores['bleu_signature']} chrf={scores['chrf_signature']}")
    for name, pairs in also_tests.items():
        print(f"metric=sentences_{name} value={len(pairs)}")
        print_scores(score_translations(translator, pairs, beam_size=5, alpha=alpha, lc_tok=True), f"_{name}")


def print_scores(scores: dict, suffix: str) -> None:
    print(f"metric=bleu_lc_tok{suffix} value={scores['bleu_lc_tok']}")
    print(f"metric=sacrebleu{suffix} value={scores['bleu']}")
    print(f"metric=chrf{suffix} value={scores['chrf']}")


def moses_tokenizer(lang: str) -> Callable[[str], str]:
    """The Multi30k release's preprocessing of a sentence in `lang`: lowercase, the Moses punctuation
    normalizer, the Moses tokenizer (no escapes). Needs sacremoses (load_moses_bleu checks for it)."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer
    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return lambda text: tokenizer.tokenize(normalizer.normalize(text.lower()), escape=False, return_str=True)


def load_moses_bleu() -> Callable[[list[str], list[str], str], tuple[float, int]]:
    """moses_bleu below, once sacremoses is known to be there (else one line and a non-zero exit)."""
    try:
        import sacremoses  # noqa: F401
    except ImportError:
        sys.exit("quality: --moses-bleu needs sacremoses, which attnmt does not install: pip install sacremoses")

    def moses_bleu(outputs: list[str], references: list[str], lang: str) -> tuple[float, int]:
        """BLEU over the Multi30k release's preprocessing of outputs and references (moses_tokenizer),
        and the references' token count."""
        tokens = moses_tokenizer(lang)
        score = sacrebleu.metrics.BLEU(tokenize="none", force=True).corpus_score(
            [tokens(o) for o in outputs], [[tokens(r) for r in references]])
        return round(score.score, 2), score.ref_len

    return moses_bleu


def read_test_set(name: str, source: str, reference: str) -> list[tuple[str, str]]:
    """The (source, reference) pairs of an --also-test set, read before training so that a bad one
    costs no training."""
    try:
        sources, references = read_segments(source), read_segments(reference)
    except AttnmtError as err:
        sys.exit(f"quality: --also-test {name}: {err}")
    if not sources or len(sources) != len(references):
        sys.exit(f"quality: --also-test {name}: {len(sources)} source sentences but {len(references)} references")
    return list(zip(sources, references))


if __name__ == "__main__":
    try:
        main()
    except AttnmtError as err:  # bad config, data or --out (e.g. --resume without a checkpoint): one line
        sys.exit(f"quality: {err}")
