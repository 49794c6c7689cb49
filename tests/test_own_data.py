"""Own data: configs/own_data.yaml trains a user's parallel files with only data.path changed."""

import random
from pathlib import Path

from attnmt import Translator
from attnmt.configfile import load_config
from attnmt.training.metrics import read_metrics
from attnmt.training.train import train

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "configs" / "own_data.yaml"

DE = ["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
EN = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def write_corpus(folder: Path, sizes: dict[str, int]) -> None:
    """Digit words, German -> English, as the template's file names want them: train, val, test."""
    rng = random.Random(4)
    folder.mkdir()
    for prefix, size in sizes.items():
        digits = [[rng.randrange(10) for _ in range(rng.randint(2, 6))] for _ in range(size)]
        for lang, words in [("de", DE), ("en", EN)]:
            text = "".join(" ".join(words[d] for d in line).capitalize() + ".\n" for line in digits)
            (folder / f"{prefix}.{lang}").write_text(text, encoding="utf-8")


def test_the_template_trains_own_files_with_only_data_path_set(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNMT_CACHE", str(tmp_path / "cache"))  # the prepared corpus goes there
    write_corpus(tmp_path / "mine", {"train": 400, "val": 40, "test": 30})
    config = load_config(TEMPLATE, [f"data.path={tmp_path / 'mine'}",
                                    # kept short: one epoch into the test's folder
                                    f"train.out_dir={tmp_path / 'run'}", "train.epochs=1"])
    result = train(config, log=lambda _: None)

    assert result.model_path == tmp_path / "run" / "model.safetensors"
    assert [record["epoch"] for record in read_metrics(tmp_path / "run")] == [1]
    assert set(result.test_scores) >= {"exact", "bleu", "chrf"}  # the test files were found and scored
    translator = Translator.load(result.model_path)
    (translation,) = translator.translate(["Drei eins vier."])
    # The subword model learned from the files reads the sentence whole: its pieces give it back.
    assert translator.src_tokenizer.detokenize(translation.source_tokens) == "Drei eins vier."


def test_the_template_names_the_files_it_needs_and_what_to_change_first():
    text = TEMPLATE.read_text(encoding="utf-8")
    config = load_config(TEMPLATE)
    data = config.data
    assert data.format == "parallel" and config.train.max_minutes == 0
    for prefix in (data.train_prefix, data.valid_prefix, data.test_prefix):
        for lang in (data.src_lang, data.tgt_lang):
            assert f"{prefix}.{lang}" in text, f"the template's comments should name {prefix}.{lang}"
    for first in ["Model size for data size", "batch_size", "max_minutes", "vocab_size"]:
        assert first in text, first
