"""Fine-tuning (train.init_from): a run that starts from a model file takes its architecture, tokenizers,
vocabularies and the decode keys of the model from it, so that its config needs only data and train; it
may set dropouts, and a key it sets to another value than the file's is refused in one line."""

from __future__ import annotations

import dataclasses
import math
import random
import re
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_dates_config, write_dates_files
from test_model_settings import permuted
from test_resume import assert_bit_identical, finish, kill_when, run, updates, weights

from attnmt import AttnmtError, cli
from attnmt.config import MODEL_DECODE_KEYS, Config, DecodeConfig
from attnmt.configfile import config_from_dict, fine_tuning_config, load_config
from attnmt.corpus.prepare import REUSED
from attnmt.modelfile import load_file, read_metadata, read_model, save_model
from attnmt.training.metrics import read_metrics
from attnmt.training.train import train
from attnmt.translate import Translator

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "configs" / "finetune.yaml"
TRANSFORMER = {"arch": "transformer", "emb_dim": 32, "heads": 4, "ff_dim": 64, "enc_layers": 2, "dec_layers": 2}
# The dates again, other sentences than the models of conftest learnt from.
OTHER_DATES = {"format": "dates", "num_pairs": 1500, "valid_size": 100, "test_size": 100, "seed": 2}
SAVED_DECODE = {"beam_size": 4, "alpha": 1.0, "beam_scoring": "length_power", "never_generate": ["<unk>"],
                "max_len_ratio": 0.0, "max_len_extra": 12, "max_src_len": 40, "batch_size": 8, "precision": "bf16"}


def saved_config(**model) -> Config:
    """The config a model file holds: a small Transformer of the dates, decoded its own way."""
    return config_from_dict({**tiny_dates_config(Path("base"), **{**TRANSFORMER, **model}), "decode": SAVED_DECODE})


def fine_tuning(saved: Config, **sections: dict) -> Config:
    """The config of a run from a model file whose config is `saved`, given `sections` besides data and train."""
    values = {"data": OTHER_DATES, "train": {"init_from": "base.safetensors", "lr": 1e-4}, **sections}
    return fine_tuning_config(config_from_dict(values), saved, "base.safetensors")


def test_a_fine_tuning_runs_model_tokenizer_vocab_and_decode_keys_of_the_model_are_the_files():
    saved = saved_config()
    fine = fine_tuning(saved, decode={"beam_size": 2})
    assert (fine.model, fine.tokenizer, fine.vocab) == (saved.model, saved.tokenizer, saved.vocab)
    assert set(MODEL_DECODE_KEYS) < {f.name for f in dataclasses.fields(DecodeConfig)}
    # the model's decode keys the config leaves out are the file's; the machine's (batch, precision) the run's
    assert {key: getattr(fine.decode, key) for key in MODEL_DECODE_KEYS} == {
        **{key: getattr(saved.decode, key) for key in MODEL_DECODE_KEYS}, "beam_size": 2}
    assert (fine.decode.batch_size, fine.decode.precision) == (DecodeConfig().batch_size, DecodeConfig().precision)
    assert (fine.data.seed, fine.train.lr) == (2, 1e-4)
    # a key set to the file's own value is no difference
    assert fine_tuning(saved, model={"arch": "transformer", "emb_dim": 32}, tokenizer={"level": "char"}).model == saved.model


def test_dropouts_are_the_runs_choice_and_the_files_where_the_config_leaves_them():
    saved = saved_config(dropout=0.1, attn_dropout=0.2)
    # attn_dropout is a Transformer's key: the section, without model.arch, is read as the Transformer's
    fine = fine_tuning(saved, model={"dropout": 0.3, "act_dropout": 0.05})
    assert fine.model == dataclasses.replace(saved.model, dropout=0.3, act_dropout=0.05)
    assert fine.model.attn_dropout == 0.2


@pytest.mark.parametrize("sections,refusal", [
    ({"model": {"emb_dim": 64}}, "model.emb_dim is 64 in this config, 32 in the model file; a fine-tuning run keeps "
     "the file's architecture, tokenizers and vocabularies, so leave model.emb_dim out (dropouts may differ)"),
    ({"model": {"arch": "rnn"}}, "model.arch is 'rnn' in this config, 'transformer' in the model file;"),
    ({"vocab": {"joint": True}}, "vocab.joint is True in this config, False in the model file;"),
    ({"model": {"rnn": "lstm", "dropout": 0.1}}, "model.rnn is a key of model.arch rnn, and the model file's is "
     "transformer; a fine-tuning run keeps the file's architecture, so leave model.rnn out"),
])
def test_a_key_the_config_sets_to_another_value_than_the_files_is_refused_naming_it(sections, refusal):
    with pytest.raises(AttnmtError, match="^" + re.escape(f"train.init_from base.safetensors: {refusal}")):
        fine_tuning(saved_config(), **sections)


def test_a_key_set_on_the_command_line_or_in_python_counts_as_set(tmp_path):
    path = tmp_path / "fine.yaml"
    path.write_text(yaml.safe_dump({"data": OTHER_DATES, "train": {"init_from": "base.safetensors"}}), encoding="utf-8")
    saved = saved_config()
    assert fine_tuning_config(load_config(path), saved, "base.safetensors").tokenizer.level == "char"
    with pytest.raises(AttnmtError, match=r": tokenizer.level is 'word' in this config, 'char' in the model file;"):
        fine_tuning_config(load_config(path, ["tokenizer.level=word"]), saved, "base.safetensors")
    # a config built in Python sets every key: its default tokenizer is not the file's
    built = Config(model=saved.model, data=saved.data, train=dataclasses.replace(saved.train, init_from="base"))
    with pytest.raises(AttnmtError, match=r": tokenizer.level is 'word' in this config, 'char' in the model file;"):
        fine_tuning_config(built, saved, "base.safetensors")
    from_rnn = config_from_dict(tiny_dates_config(Path("base")))
    with pytest.raises(AttnmtError, match=r": model.attn_dropout is a key of model.arch transformer, and the model "
                                          r"file's is rnn;"):
        fine_tuning(from_rnn, model={"attn_dropout": 0.1})


def test_a_config_of_data_and_train_fine_tunes_a_trained_transformer(tmp_path, transformer_dates_model, capsys):
    description, base_weights, _ = read_model(transformer_dates_model)
    description.config.decode = config_from_dict({"data": {"format": "dates"}, "decode": SAVED_DECODE}).decode
    base = tmp_path / "base.safetensors"
    save_model(base, description, base_weights)
    config = tmp_path / "fine.yaml"
    config.write_text(yaml.safe_dump({"data": OTHER_DATES, "train": {
        "out_dir": str(tmp_path / "fine"), "init_from": str(base), "epochs": 1, "lr": 5e-5}}), encoding="utf-8")
    # attnmt prepare prepares the corpus training reads: with the model file's tokenizers and vocabularies
    assert cli.main(["prepare", str(config)]) == 0
    lines: list[str] = []
    result = train(load_config(config), log=lines.append)
    assert any(line.startswith("prepared corpus: ") and REUSED in line for line in lines), lines
    assert f"starting from {base}: its architecture, weights, tokenizers and vocabularies" in lines
    fine, fine_weights, meta = read_model(result.model_path)
    assert fine.config.model == description.config.model and fine.config.tokenizer == description.config.tokenizer
    assert fine.config.decode == dataclasses.replace(description.config.decode, batch_size=DecodeConfig().batch_size,
                                                     precision=DecodeConfig().precision)
    assert fine.tokenization.to_dict() == description.tokenization.to_dict()
    # it started from the file's weights: Adam moves a weight by about lr an update, 3.2 lr at most, so that
    # 21 updates at 5e-5 move none by 0.004, while a model's own random start differs from them by tenths
    assert fine_weights.keys() == base_weights.keys()
    assert max((fine_weights[k] - base_weights[k]).abs().max().item() for k in base_weights) < 0.004
    assert not all(torch.equal(fine_weights[k], base_weights[k]) for k in base_weights)
    # the file says where it started: attnmt info names the file and its weights' digest
    assert meta["training"]["init_from"] == {"file": str(base.resolve()), "weights_sha256": read_metadata(base)["sha256"]}
    assert cli.main(["info", str(result.model_path)]) == 0
    assert f"fine-tuned from: {base.resolve()} (weights sha256 {read_metadata(base)['sha256']})" in capsys.readouterr().out


@pytest.mark.slow  # a whole run or several processes; the module's other tests stay in the quick tier
def test_a_model_file_whose_vocabularies_have_their_own_special_ids_fine_tunes_as_attnmts_order(tmp_path,
                                                                                                  transformer_dates_model):
    """Every token at another id (the unknown, start and end tokens among them, as in an imported model): the
    corpus prepared with those ids, batches framed with them, the same model fine-tunes to the same losses."""
    theirs = permuted(Translator.load(transformer_dates_model, device="cpu"), seed=3)
    files = {"ours": transformer_dates_model, "theirs": tmp_path / "theirs.safetensors"}
    save_model(files["theirs"], theirs.description, theirs.model.state_dict())
    records = {}
    for name, path in files.items():
        values = {"data": OTHER_DATES, "train": {"out_dir": str(tmp_path / name), "init_from": str(path), "epochs": 2,
                                                 "lr": 0.001}}
        train(config_from_dict(values), log=lambda _: None)
        records[name] = read_metrics(tmp_path / name)
    train_losses = [record["train_loss"] for record in records["theirs"]]
    assert all(map(math.isfinite, train_losses)) and train_losses[1] < train_losses[0]
    assert ([record["valid_loss"] for record in records["theirs"]]
            == pytest.approx([record["valid_loss"] for record in records["ours"]], rel=1e-3))
    _, meta = load_file(tmp_path / "theirs" / "model.safetensors")
    assert meta["tgt_special_ids"] == theirs.tokenization.tgt_vocab.special_ids() != {"unk": 1, "sos": 2, "eos": 3}
    assert meta["src_vocab"] == theirs.tokenization.src_vocab.itos


def test_the_template_fine_tunes_with_only_the_data_and_the_model_file_set(tmp_path, transformer_dates_model):
    """configs/finetune.yaml: no model, tokenizer or vocab section; a fine-tuning schedule: a small constant
    rate, few epochs, each validated by BLEU, the best kept, early stopping."""
    text = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    assert {"model", "tokenizer", "vocab"}.isdisjoint(text) and text["decode"] == {"precision": "auto"}
    schedule = load_config(TEMPLATE).train
    assert (schedule.scheduler, schedule.select_by, schedule.average_last) == ("none", "bleu", 0)
    assert schedule.lr <= 1e-4 and schedule.epochs <= 10 and schedule.patience > 0 and schedule.max_minutes == 0
    write_dates_files(tmp_path / "mine", {"train": 600, "val": 40, "test": 30}, seed=2)
    config = load_config(TEMPLATE, [f"data.path={tmp_path / 'mine'}", f"train.init_from={transformer_dates_model}",
                                    f"train.out_dir={tmp_path / 'run'}", "train.epochs=1"])  # one epoch: kept short
    result = train(config, log=lambda _: None)
    assert set(result.test_scores) >= {"exact", "bleu", "chrf"}  # the test files were found and scored
    base, fine = (read_model(path)[0] for path in (transformer_dates_model, result.model_path))
    assert (fine.config.model, fine.config.tokenizer, fine.config.vocab) == (
        base.config.model, base.config.tokenizer, base.config.vocab)


@pytest.mark.slow
def test_a_killed_and_resumed_fine_tuning_run_ends_bit_identical(tmp_path, transformer_dates_model):
    def config(name: str) -> Path:
        values = {"data": {**OTHER_DATES, "num_pairs": 700, "valid_size": 50, "test_size": 50},
                  # dropout draws random numbers, which the resumed run must draw alike
                  "model": {"dropout": 0.2, "attn_dropout": 0.1, "act_dropout": 0.1},
                  "train": {"out_dir": str(tmp_path / name), "init_from": str(transformer_dates_model), "epochs": 2,
                            "batch_size": 32, "lr": 0.0005, "checkpoint_every": 2, "log_every": 1, "threads": 1}}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values), encoding="utf-8")
        return path

    finish(run(config("reference")))
    interrupted = config("interrupted")
    share = random.Random(9).random()
    kill_when(run(interrupted), lambda log: any(step >= 3 + round(share * (2 * per_epoch - 5))
                                                for step, per_epoch in updates(log)))
    finish(run(interrupted, "--resume", "train.threads=auto"))
    for name in ("checkpoint.safetensors", "model.safetensors"):
        assert_bit_identical(weights(tmp_path / "reference" / name), weights(tmp_path / "interrupted" / name))
