"""Issue 60: a data.path that data.format cannot read, or held-out files that are missing, answer
with one line that says what to set: the same line from the in-memory reader (load_corpus), from
preparing (CorpusSource) and from the check `attnmt train` makes before torch loads (check_source),
before anything is read or written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_dates_tsv, write_line_aligned

from attnmt import cli
from attnmt.config import DataConfig
from attnmt.corpus import readers as data_module
from attnmt.corpus.prepare import CorpusSource
from attnmt.corpus.readers import CorpusFiles, check_source, load_corpus
from attnmt.errors import AttnmtError

PAIRS = [(f"Satz {i}", f"sentence {i}") for i in range(40)]


def refusal(data: DataConfig) -> str:
    """The one line the readers and the check give."""
    messages = []
    for read in (load_corpus, CorpusSource, check_source):
        with pytest.raises(AttnmtError) as info:
            read(data)
        messages.append(str(info.value))
    assert messages[0] == messages[1] == messages[2] and "\n" not in messages[0]
    return messages[0]


def test_a_tsv_file_given_to_the_parallel_format_says_to_set_data_format_tsv(tmp_path):
    tatoeba = tmp_path / "deu.txt.gz"
    write_dates_tsv(tatoeba, 50)
    message = refusal(DataConfig(format="parallel", path=str(tatoeba)))
    assert message.startswith(f"data.path: {tatoeba}: a file, not a folder; data.format=parallel reads a folder of "
                              "line-aligned files PREFIX.de and PREFIX.en")
    assert "TAB-separated pairs" in message and message.count("set data.format=tsv") == 1
    assert "train.de: file not found" not in message  # the old answer, which named a file inside a file


def test_a_folder_given_to_the_tsv_format_says_to_set_data_format_parallel(tmp_path):
    write_line_aligned(tmp_path / "corpus", {"train": PAIRS})
    message = refusal(DataConfig(format="tsv", path=str(tmp_path / "corpus")))
    assert message.startswith(f"data.path: {tmp_path / 'corpus'}: a folder, not a regular file; data.format=tsv reads "
                              "a file of TAB-separated pairs")
    assert "line-aligned files PREFIX.de and PREFIX.en" in message and message.endswith("set data.format=parallel")


def test_one_of_the_line_aligned_files_as_data_path_says_to_name_their_folder(tmp_path):
    write_line_aligned(tmp_path, {"train": PAIRS}, gz=True)
    message = refusal(DataConfig(format="parallel", path=str(tmp_path / "train.en.gz")))
    assert message.endswith(f"for line-aligned files like this one, set data.path to their folder, {tmp_path}")
    assert "data.format=tsv" not in message


@pytest.mark.parametrize("form, what", [("tsv", "file not found"), ("parallel", "folder not found")])
def test_a_missing_data_path_names_the_key_and_what_the_format_reads(tmp_path, form, what):
    message = refusal(DataConfig(format=form, path=str(tmp_path / "nope")))
    assert message.startswith(f"data.path: {tmp_path / 'nope'}: {what}; data.format={form} reads ")


def test_a_missing_relative_data_path_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = refusal(DataConfig(format="tsv", path="en-fr.tsv"))
    assert message.startswith(f"data.path: en-fr.tsv: file not found (a relative path, read from the current "
                              f"folder, {tmp_path}); data.format=tsv reads ")


def test_missing_validation_files_name_the_setting_that_cuts_them_from_the_training_pairs(tmp_path):
    write_line_aligned(tmp_path, {"train": PAIRS, "dev": PAIRS[:5], "test": PAIRS[5:10]})
    message = refusal(DataConfig(format="parallel", path=str(tmp_path), test_prefix="test"))
    assert message.startswith(f"{tmp_path / 'val.de'}: file not found (nor val.de.gz); data.valid_prefix=val names "
                              'the validation files, and data.valid_prefix="" cuts data.valid_size=1000 validation '
                              "pairs from the training pairs instead")
    assert message.endswith("(the folder holds PREFIX.de and PREFIX.en for the prefixes dev, test, train)")


def test_missing_test_and_training_files_name_their_settings(tmp_path):
    write_line_aligned(tmp_path, {"train": PAIRS, "val": PAIRS[:5]})
    assert 'data.test_prefix="" cuts data.test_size=1000 test pairs' in refusal(
        DataConfig(format="parallel", path=str(tmp_path)))
    message = refusal(DataConfig(format="parallel", path=str(tmp_path), train_prefix="europarl"))
    assert message.startswith(f"{tmp_path / 'europarl.de'}: file not found (nor europarl.de.gz); data.train_prefix "
                              "names the training files (the folder holds PREFIX.de and PREFIX.en for the prefixes "
                              "train, val)")


@pytest.mark.parametrize("command", ["prepare", "train"])
def test_the_commands_answer_in_one_line_before_preparing_anything(tmp_path, capsys, command):
    tatoeba = tmp_path / "deu.txt.gz"
    write_dates_tsv(tatoeba, 50)
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"data": {"format": "parallel", "path": str(tatoeba),
                                           "prepared_dir": str(tmp_path / "prepared")},
                                  "train": {"out_dir": str(tmp_path / "run")}}))
    assert cli.main([command, str(config)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"attnmt: error: data.path: {tatoeba}: a file, not a folder")
    assert "set data.format=tsv" in lines[0]
    assert not Path(tmp_path / "prepared").exists()


def test_checking_the_dates_generates_nothing(monkeypatch):
    """check_source, and so `attnmt train`'s check before torch loads, does not make the corpus;
    a CorpusSource makes it when first read."""
    def refuse(*args, **kwargs):
        raise AssertionError("generated")

    monkeypatch.setattr(data_module, "generate_dates", refuse)
    data = DataConfig(format="dates", path="")
    assert check_source(data) == CorpusFiles()
    source = CorpusSource(data)
    with pytest.raises(AssertionError, match="generated"):
        source.heldout()


def test_a_model_trained_from_a_relative_path_is_evaluated_from_another_folder(tmp_path, monkeypatch, capsys):
    """The model file keeps data.path absolute: `attnmt evaluate MODEL --split test` reads the test pairs
    from any folder, not only from the one training ran in."""
    from conftest import tiny_dates_config, write_dates_files

    from attnmt.configfile import config_from_dict
    from attnmt.training.train import train
    from attnmt.translate import Translator

    write_dates_files(tmp_path / "corpus", {"train": 300, "val": 20, "test": 20})
    values = tiny_dates_config(tmp_path / "run")
    values["data"] = {"format": "parallel", "path": "corpus", "src_lang": "de", "tgt_lang": "en", "valid_prefix": "val",
                      "test_prefix": "test"}
    values["train"].update(epochs=1)
    monkeypatch.chdir(tmp_path)
    result = train(config_from_dict(values), log=lambda _: None)
    assert Translator.load(result.model_path, "cpu").config.data.path == str(tmp_path / "corpus")
    monkeypatch.chdir(tmp_path / "run")
    assert cli.main(["evaluate", str(result.model_path), "--split", "test", "--device", "cpu"]) == 0
    assert "bleu: " in capsys.readouterr().out
