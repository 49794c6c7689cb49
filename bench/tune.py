"""A recipe's trials on the validation set only, within a total budget of wall-clock minutes.

    python bench/tune.py --config configs/multi30k_de_en_transformer.yaml --trials bench/tune_transformer.yaml \\
        --data ../shared/data/multi30k --minutes 30 --budget-min 120 --out runs/tune [--only NAME]... [key=value ...]

Each trial is the config with the trial's overrides, then the command line's (e.g.
`train.precision=fp32`). It trains for `--minutes` in a process of its own, `attnmt train` as a
user runs it, with `data.test_prefix` pointed at the validation split, so test2016 is never read
(bench/quality.py scores it once, for the chosen recipe). Then the model that training kept (the
best epoch, or the average of the last ones where that validated better) translates the
validation set with beam 5 (with the trial's length penalty, decode.alpha) and with greedy
search. The scores are lowercased-token BLEU, the target's measure, then sacreBLEU and chrF.

One row per trial is appended to OUT/trials.md as each trial ends. A trial whose name is already
there is skipped, so a search that was stopped goes on where it was. The trials file (YAML) holds
a list `trials` of {name, why, overrides}. Trials run in its order while the budget has room
for another. Nothing else should run on the machine meanwhile: the budget is wall-clock, and a
busy neighbour costs a trial updates.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import yaml

from attnmt.configfile import load_config
from attnmt.corpus.readers import find_split_file, read_parallel
from attnmt.evaluate import score_translations
from attnmt.training.metrics import read_metrics
from attnmt.translate import Translator, model_info

REPO = Path(__file__).resolve().parents[1]
COLUMNS = ["trial", "overrides", "minutes", "updates", "epochs", "best epoch: val BLEU (training's)", "kept",
           "val lc-tok BLEU beam 5", "greedy", "val sacreBLEU beam 5", "val chrF beam 5", "why"]


def done_trials(table: Path) -> set[str]:
    if not table.exists():
        return set()
    rows = [line.split("|") for line in table.read_text(encoding="utf-8").splitlines()[2:] if line.startswith("|")]
    return {row[1].strip() for row in rows}


def validation_pairs(corpus: str, prefix: str, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
    return read_parallel(find_split_file(corpus, prefix, src_lang), find_split_file(corpus, prefix, tgt_lang))


def validation_scores(translator: Translator, valid: list[tuple[str, str]], beam_size: int = 5, alpha: float = 0.0
                      ) -> dict:
    """The target's scores (lowercased-token BLEU, sacreBLEU, chrF), with beam 5 and no length penalty
    unless told."""
    return score_translations(translator, valid, beam_size=beam_size, alpha=alpha, lc_tok=True)


def run_trial(args: argparse.Namespace, trial: dict) -> list[str]:
    """Train one trial, score its kept model on validation; the table row's cells."""
    out = Path(args.out) / trial["name"]
    overrides = [f"data.path={args.data}", f"train.out_dir={out}", f"train.max_minutes={args.minutes}",
                 *trial.get("overrides", []), *args.overrides]
    config = load_config(args.config, overrides)
    overrides.append(f"data.test_prefix={config.data.valid_prefix}")  # test2016 stays unread
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(out / "train.log", "w", encoding="utf-8") as log:
        status = subprocess.run([sys.executable, "-m", "attnmt", "train", args.config, "--overwrite", *overrides],
                                stdout=log, stderr=subprocess.STDOUT, cwd=REPO).returncode
    minutes = (time.monotonic() - started) / 60
    if status != 0:
        sys.exit(f"tune: trial {trial['name']} failed (exit {status}); see {out / 'train.log'}")
    records = read_metrics(out)
    epochs = [r for r in records if "average_of_last" not in r]
    best = max(epochs, key=lambda r: r.get("valid_bleu", 0.0))
    facts = model_info(out / "model.safetensors").get("training") or {}
    kept = (f"average of the last {facts['average_of_last']}" if "average_of_last" in facts
            else f"epoch {facts.get('epoch')}")
    valid = validation_pairs(config.data.path, config.data.valid_prefix, config.data.src_lang, config.data.tgt_lang)
    translator = Translator.load(out / "model.safetensors")
    beam5 = validation_scores(translator, valid, alpha=config.decode.alpha)
    greedy = validation_scores(translator, valid, beam_size=1)
    shown = " ".join(trial.get("overrides", [])) or "(the config as it is)"
    return [trial["name"], f"`{shown}`", f"{minutes:.1f}", str(epochs[-1].get("step", "")), str(len(epochs)),
            f"{best['epoch']}: {best.get('valid_bleu', float('nan')):.2f}", kept, f"{beam5['bleu_lc_tok']:.2f}",
            f"{greedy['bleu_lc_tok']:.2f}", f"{beam5['bleu']:.2f}", f"{beam5['chrf']:.2f}", trial.get("why", "")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="the recipe the trials change")
    parser.add_argument("--trials", required=True, help="YAML file: trials: [{name, why, overrides: [key=value ...]}]")
    parser.add_argument("--data", required=True, help="the corpus directory (data.path)")
    parser.add_argument("--minutes", type=float, required=True, help="training minutes of each trial")
    parser.add_argument("--budget-min", type=float, required=True, help="wall-clock minutes for the whole search")
    parser.add_argument("--out", default="runs/tune", help="one folder per trial, and trials.md")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only this trial of the file (repeat for more; e.g. the leaders, at more minutes)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every trial, after the trial's own")
    args = parser.parse_args()
    trials = (yaml.safe_load(Path(args.trials).read_text(encoding="utf-8")) or {}).get("trials") or []
    names = [t.get("name") for t in trials]
    if not trials or not all(isinstance(n, str) and n.isidentifier() for n in names) or len(set(names)) != len(names):
        sys.exit(f"tune: {args.trials}: expected a list `trials` of {{name, why, overrides}} with distinct names "
                 "made of letters, digits and _")
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        sys.exit(f"tune: --only {' '.join(unknown)}: no such trial in {args.trials} (it has {', '.join(names)})")
    trials = [t for t in trials if args.only is None or t["name"] in args.only]
    table = Path(args.out) / "trials.md"
    table.parent.mkdir(parents=True, exist_ok=True)
    if not table.exists():
        table.write_text("| " + " | ".join(COLUMNS) + " |\n" + "|---" * len(COLUMNS) + "|\n", encoding="utf-8")
    done = done_trials(table)
    started = time.monotonic()
    for trial in trials:
        if trial["name"] in done:
            print(f"tune: {trial['name']}: already in {table}, skipped", file=sys.stderr)
            continue
        spent = (time.monotonic() - started) / 60
        if spent + args.minutes > args.budget_min:
            left = [t["name"] for t in trials if t["name"] not in done_trials(table)]
            print(f"tune: budget of {args.budget_min:g} minutes reached after {spent:.1f}; not run: {', '.join(left)}",
                  file=sys.stderr)
            break
        print(f"tune: {trial['name']} ({args.minutes:g} minutes) ...", file=sys.stderr, flush=True)
        row = run_trial(args, trial)
        with open(table, "a", encoding="utf-8") as handle:
            handle.write("| " + " | ".join(row) + " |\n")
        print("| " + " | ".join(row) + " |", flush=True)
    print(table.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
