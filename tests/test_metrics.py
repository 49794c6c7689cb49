"""What a training run leaves to look at: metrics.jsonl, curves.png, TensorBoard, plot-curves."""

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from conftest import tiny_dates_config

from attnmt import plot
from attnmt.cli import main
from attnmt.configfile import config_from_dict
from attnmt.errors import AttnmtError
from attnmt.modelfile import read_model, save_model
from attnmt.training.metrics import read_metrics
from attnmt.training.train import train
from attnmt.translate import Translator

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    values = tiny_dates_config(tmp_path_factory.mktemp("run"))
    values["train"].update(epochs=3, average_last=2, label_smoothing=0.1)
    logged = []
    train(config_from_dict(values), log=logged.append)
    return values["train"]["out_dir"], logged


def test_each_validation_appends_one_record(run_dir):
    out_dir, logged = run_dir
    records = read_metrics(out_dir)
    epochs = [r for r in records if "average_of_last" not in r]
    assert [r["epoch"] for r in epochs] == [1, 2, 3]
    assert [r["step"] for r in epochs] == sorted({r["step"] for r in epochs})  # increasing, none twice
    for record in epochs:
        for key in ("train_loss", "valid_loss", "valid_ppl", "valid_bleu", "valid_exact", "lr",
                    "target_tokens_per_s", "elapsed_min"):
            assert isinstance(record[key], (int, float)), key
        assert record["label_smoothing"] == 0.1  # what train_loss includes, for curves.png to say
        assert record["lr"] == pytest.approx(0.005) and record["target_tokens_per_s"] > 0
        # The same figures as the log line of that validation.
        assert any(line.startswith(f"epoch {record['epoch']} | step {record['step']} | train_loss {record['train_loss']}")
                   for line in logged)
    assert records[-1]["average_of_last"] == 2 and records[-1]["step"] == epochs[-1]["step"]
    assert "train_loss" not in records[-1]  # nothing was trained for the average


def test_curves_are_drawn(run_dir, tmp_path):
    out_dir, _ = run_dir
    assert (Path(out_dir) / "curves.png").read_bytes().startswith(PNG)
    chart = tmp_path / "both.png"
    assert main(["plot-curves", out_dir, str(Path(out_dir) / "metrics.jsonl"), "--out", str(chart)]) == 0
    assert chart.read_bytes().startswith(PNG)


def test_curves_say_which_training_loss_is_label_smoothed_and_keep_bleu_within_100(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plot, "write_png", lambda fig, path: drawn.append(fig))
    smoothed = [{"step": s, "train_loss": 2.0 / s, "valid_loss": 1.5 / s, "valid_bleu": b, "label_smoothing": 0.1}
                for s, b in [(1, 0.0), (2, 71.5), (3, 99.6)]]
    plain = [{"step": 3, "train_loss": 0.2, "valid_loss": 0.3, "valid_bleu": 98.0}]  # a record of before it was kept
    plot.plot_curves({"a": smoothed, "b": plain}, tmp_path / "curves.png")
    loss_ax, bleu_ax = drawn[0].axes
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()] == [
        "a: training (label smoothing 0.1)", "a: validation", "b: training", "b: validation"]
    low, high = bleu_ax.get_ylim()
    assert low == 0 and 99.6 < high <= 100


def test_plot_curves_refuses_what_is_not_a_run_in_one_line(tmp_path, capsys):
    assert main(["plot-curves", str(tmp_path), "--out", str(tmp_path / "c.png")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    bad = tmp_path / "metrics.jsonl"
    bad.write_text(json.dumps({"step": 1}) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(AttnmtError, match=r"metrics.jsonl, line 2: not a JSON record"):
        read_metrics(bad)
    assert not (tmp_path / "c.png").exists()


def test_a_fresh_run_starts_a_fresh_file(run_dir, tmp_path):
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=1)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 999}) + "\n", encoding="utf-8")
    train(config_from_dict(values), overwrite=True, log=lambda _: None)
    assert [r["epoch"] for r in read_metrics(tmp_path)] == [1]


def test_tensorboard_gets_every_figure(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=2, tensorboard=True)
    train(config_from_dict(values), log=lambda _: None)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    records = read_metrics(tmp_path)
    for key in ("valid_loss", "valid_bleu", "lr"):
        assert [(e.step, pytest.approx(e.value)) for e in events.Scalars(key)] == [(r["step"], r[key]) for r in records]


def test_tensorboard_missing_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if not installed
    values = tiny_dates_config(tmp_path)
    values["train"].update(tensorboard=True)
    with pytest.raises(AttnmtError, match="train.tensorboard is true but the tensorboard package is not installed"):
        train(config_from_dict(values), log=lambda _: None)


def test_info_says_what_the_file_holds_and_how_it_was_trained(run_dir, capsys):
    out_dir, _ = run_dir
    model = str(Path(out_dir) / "model.safetensors")
    assert main(["info", model, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["arch"] == "rnn" and info["architecture"]["attention"] == "bahdanau"
    assert info["parameters"] == sum(p.numel() for p in Translator.load(model).model.parameters())
    assert info["tokenizer"]["level"] == "char" and info["src_vocab_size"] > 10
    training = info["training"]
    records = read_metrics(out_dir)
    assert len(training["data_sha256"]) == 64 and training["training_pairs"] > 1000
    # The kept model is the one of the record with the best validation loss (select_by: loss).
    best = min(records, key=lambda r: r["valid_loss"])
    assert training["step"] == best["step"] and training["validation"]["valid_loss"] == best["valid_loss"]
    assert ("average_of_last" in training) == ("average_of_last" in best)
    assert main(["info", model]) == 0
    text = capsys.readouterr().out
    assert f"step {training['step']}" in text and f"parameters: {info['parameters']:,}" in text


def test_info_of_an_older_file_says_training_was_not_recorded(capsys):
    fixture = Path(__file__).parent / "fixtures" / "models" / "gru_bahdanau.safetensors"
    assert main(["info", str(fixture)]) == 0
    text = capsys.readouterr().out
    assert "training: not recorded" in text
    assert "translates: de -> en;" in text  # written before source_languages: its src_lang


def test_info_names_every_source_language(tmp_path, capsys):
    fixture = Path(__file__).parent / "fixtures" / "models" / "gru_bahdanau.safetensors"
    description, weights, _ = read_model(fixture)
    data = dataclasses.replace(description.config.data, source_languages="en de", tgt_lang="iso")
    save_model(tmp_path / "m.safetensors", dataclasses.replace(
        description, config=dataclasses.replace(description.config, data=data)), weights)
    assert main(["info", str(tmp_path / "m.safetensors"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source_languages"] == ["en", "de"]
    assert main(["info", str(tmp_path / "m.safetensors")]) == 0
    assert "translates: en de -> iso;" in capsys.readouterr().out


def test_info_names_the_averaged_epochs_and_counts_in_the_singular(tmp_path, capsys):
    from attnmt.training.average import epochs_of, keep_epoch_model

    fixture = Path(__file__).parent / "fixtures" / "models" / "gru_bahdanau.safetensors"
    translator = Translator.load(fixture)
    kept: list[str] = []
    for epoch in range(1, 12):  # at epoch 12 the averaged files are the last three kept: 9, 10 and 11
        kept = keep_epoch_model(translator, epoch, kept, tmp_path, 3)
    training = {"data_sha256": "0" * 64, "training_pairs": 1000, "epoch": 12, "step": 600, "threads": 1,
                "average_of_last": len(kept), "averaged_epochs": epochs_of(kept), "validation": {"valid_loss": 1.0}}
    translator.save(tmp_path / "m.safetensors", training)
    assert main(["info", str(tmp_path / "m.safetensors")]) == 0
    text = capsys.readouterr().out
    assert "the average of epochs 9–11" in text and "; 1 thread" in text and "1 threads" not in text
    assert "last 3" not in text
