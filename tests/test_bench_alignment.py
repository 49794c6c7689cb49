"""bench/hansards_text.py (the second gold standard's files) and bench/alignment.py's aligner rows,
on small stand-ins: the figures they print are those of the gold pairs asked for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from attnmt import Translator
from attnmt.analysis.align import align_by_aligner, read_gold, score
from attnmt.analysis.aligner import train_aligner, write_aligner
from attnmt.corpus.dates import generate_dates

REPO = Path(__file__).resolve().parents[1]


def run(script: str, *argv: object) -> str:
    done = subprocess.run([sys.executable, str(REPO / "bench" / script), *map(str, argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def test_the_hansards_release_becomes_a_french_first_gold_set_and_training_text(tmp_path):
    release = tmp_path / "Hansards"
    write(release / "trial" / "trial.e", ["<s snum=1001> the house rose .  </s>"])
    write(release / "trial" / "trial.f", ["<s snum=1001> la chambre se lève .  </s>"])
    write(release / "trial" / "trial.wa", ["1001 1 1 S", "1001 2 2 S", "1001 3 3 P", "1001 3 4 P", "1001 4 5 S"])
    write(release / "test" / "test.e", ["<s snum=0002> hear ,  hear !  </s>", "<s snum=0001> yes .  </s>"])
    write(release / "test" / "test.f", ["<s snum=0002> bravo !  </s>", "<s snum=0001> oui .  </s>"])
    write(release / "test" / "test.wa.nonullalign", ["0001 1 1 S", "0001 2 2 S", "0002 1 1 P", "0002 3 1 P",
                                                     "0002 4 2 S"])
    english = ["one", "two words", "", "far too many words here", "three", "four", "five", "six"]
    french = ["un", "deux mots", "vide", "beaucoup trop de mots ici", "trois", "quatre", "cinq", "six"]
    write(release / "training" / "a.e", english[:4])
    write(release / "training" / "a.f", french[:4])
    write(release / "training" / "b.e", english[4:])
    write(release / "training" / "b.f", french[4:])
    write(release / "FilePairs.training", ["a.e a.f", "b.e b.f"])
    out = tmp_path / "out"
    run("hansards_text.py", "--release", release, "--out", out, "--pairs", "3", "--max-words", "3", "--held", "1")

    def lines(name: str) -> list[str]:
        return (out / name).read_text(encoding="utf-8").splitlines()
    # The trial pair first, then the test pairs by number; links French word first, p for possible.
    assert lines("gold/test.fr") == ["la chambre se lève .", "oui .", "bravo !"]
    assert lines("gold/test.en") == ["the house rose .", "yes .", "hear , hear !"]
    assert lines("gold/test.talp") == ["1-1 2-2 3p3 4p3 5-4", "1-1 2-2", "1p1 1p3 2-4"]
    # Pairs with an empty side or more than --max-words words are left out; then train, val, test in order.
    assert lines("unseen/train.fr") == ["un", "deux mots", "trois"] and lines("unseen/train.en")[2] == "three"
    assert lines("unseen/val.fr") == ["quatre"] and lines("unseen/test.en") == ["five"]
    assert lines("seen/train.fr") == lines("unseen/train.fr") + lines("gold/test.fr")
    assert lines("seen/train.en") == lines("unseen/train.en") + lines("gold/test.en")
    assert lines("seen/val.en") == lines("unseen/val.en")


def test_the_alignment_bench_scores_the_aligner_on_the_pairs_asked_for_after_reading_all(dates_model, tmp_path):
    translator = Translator.load(dates_model, "cpu")
    pairs = list(generate_dates(200, seed=11))
    aligner = train_aligner(translator, [s for s, _ in pairs], [t for _, t in pairs], epochs=1, batch_tokens=512,
                            log=lambda _: None)
    model = tmp_path / "with_aligner.safetensors"
    write_aligner(dates_model, model, aligner, {"pairs": len(pairs), "minutes": 0.1})
    gold_pairs = list(generate_dates(12, seed=12))
    write(tmp_path / "gold" / "test.xx", [s for s, _ in gold_pairs])
    write(tmp_path / "gold" / "test.yy", [t for _, t in gold_pairs])
    # Gold links of the diagonal, with a possible link beside each sure one.
    write(tmp_path / "gold" / "test.talp", [" ".join(f"{i + 1}-{min(i, len(t.split()) - 1) + 1}" + (f" {i + 1}p1" if i else "")
                                                     for i in range(len(s.split()))) for s, t in gold_pairs])
    out = run("alignment.py", "--gold", tmp_path / "gold", "--langs", "xx,yy", "--model", f"m={model}",
              "--aligner-only", "--adapt", "0", "1", "--pairs", "4:")
    metrics = dict(re.findall(r"^metric=(\S+) value=(\S+)$", out, re.M))
    gold = read_gold(tmp_path / "gold" / "test.talp", 1)
    expected = score([set(a.links) for a in align_by_aligner(Translator.load(model, "cpu"), [s for s, _ in gold_pairs],
                                                             [t for _, t in gold_pairs])][4:], gold[4:])
    assert float(metrics["aer_m_aligner_average"]) == round(expected.aer, 4)
    assert "aer_m_aligner_adapt1_average" in metrics and "aer_m_argmax" not in " ".join(metrics)
    assert "then --adapt 1 on the 12 gold pairs' text" in out
