"""Training recipe features: schedules, early stopping, selection, tied embeddings, averaging."""

from pathlib import Path

import pytest
import torch
from conftest import tiny_dates_config

import attnmt.train as train_module
from attnmt import Translator
from attnmt.average import average_weights
from attnmt.config import config_from_dict
from attnmt.modelfile import load_file
from attnmt.train import train


def progress_of(out_dir) -> dict:
    _, meta = load_file(out_dir / "checkpoint.safetensors")
    return meta["progress"]


def test_warmup_schedule(tmp_path):
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=1, scheduler="warmup", warmup_steps=100, lr=0.004)
    train(config_from_dict(values), log=lambda _: None)
    progress = progress_of(tmp_path)
    step = progress["step"]
    assert step < 100
    assert progress["lr"] == pytest.approx(0.004 * step / 100)  # still warming up: linear


def test_plateau_halves_lr_and_patience_stops(tmp_path, monkeypatch):
    def flat_validation(run):
        return {"epoch": run.progress.epoch, "step": run.progress.step, "valid_loss": 1.0, "valid_bleu": 0.0}

    monkeypatch.setattr(train_module.Run, "validate", flat_validation)
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=6, scheduler="plateau", plateau_patience=1, plateau_factor=0.5, patience=2,
                           lr=0.004)
    lines = []
    train(config_from_dict(values), log=lines.append)
    progress = progress_of(tmp_path)
    assert len(progress["history"]) == 3  # best at epoch 1, then two validations without improvement
    assert progress["lr"] == pytest.approx(0.001)
    assert any("no better validation loss for 2 validations" in line for line in lines)


def test_select_by_bleu_keeps_the_best_bleu(tmp_path, monkeypatch):
    bleus = iter([10.0, 30.0, 20.0])
    real = train_module.Run.validate

    def scripted(run):
        record = real(run)
        record["valid_bleu"] = next(bleus)
        return record

    monkeypatch.setattr(train_module.Run, "validate", scripted)
    saved = []
    real_save = Translator.save

    def recording_save(self, path, training=None):
        saved.append(str(path))
        real_save(self, path, training)

    monkeypatch.setattr(Translator, "save", recording_save)
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=3, select_by="bleu")
    train(config_from_dict(values), log=lambda _: None)
    assert sum(p.endswith("model.safetensors") for p in saved) == 2  # epochs 1 and 2 improved BLEU, 3 did not
    assert progress_of(tmp_path)["best_metric"] == 30.0


def test_tied_embeddings(tmp_path):
    values = tiny_dates_config(tmp_path, tie_embeddings=True, decoder="luong", input_feeding=True)
    values["train"].update(epochs=1)
    result = train(config_from_dict(values), log=lambda _: None)
    translator = Translator.load(result.model_path)
    decoder = translator.model.decoder
    assert decoder.classifier.weight is decoder.embedding.weight
    assert decoder.output_size == values["model"]["emb_dim"]
    untied = tiny_dates_config(tmp_path, decoder="luong", input_feeding=True)
    n_tied = sum(p.numel() for p in translator.model.parameters())
    from attnmt.families.rnn.network import RNNEncoderDecoder

    text = translator.tokenization
    n_untied = sum(p.numel() for p in RNNEncoderDecoder(config_from_dict(untied).model, len(text.src_vocab),
                                                        len(text.tgt_vocab)).parameters())
    assert n_tied < n_untied
    assert translator.translate(["March 3, 2021"])[0].text == Translator.load(result.model_path).translate(
        ["March 3, 2021"])[0].text


def test_checkpoint_averaging(tmp_path):
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=3, average_last=2)
    lines = []
    train(config_from_dict(values), log=lines.append)
    assert sorted(p.name for p in tmp_path.glob("epoch*.safetensors")) == ["epoch2.safetensors", "epoch3.safetensors"]
    assert any("average of the last 2 epochs" in line for line in lines)
    epochs = [tmp_path / "epoch2.safetensors", tmp_path / "epoch3.safetensors"]
    e2, e3 = (Translator.load(path).model.state_dict() for path in epochs)
    averaged = average_weights(epochs, torch.device("cpu"))
    assert averaged.keys() == e2.keys()
    for name in e2:  # every weight, against the mean computed here
        assert torch.equal(averaged[name], ((e2[name].float() + e3[name].float()) / 2).to(e2[name].dtype)), name
    assert not torch.equal(averaged["encoder.embedding.weight"], e3["encoder.embedding.weight"])
    best = Translator.load(tmp_path / "model.safetensors").model.state_dict()
    kept_average = any("is now the average" in line for line in lines)
    assert all(torch.equal(best[name], averaged[name]) for name in best) == kept_average


def test_init_uniform_bounds_every_weight_and_keeps_padding_zero():
    from attnmt.families.rnn.network import RNNEncoderDecoder
    from attnmt.vocab import PAD_ID

    config = config_from_dict({**tiny_dates_config(Path("unused")), "model": {"init_uniform": 0.05}})
    model = RNNEncoderDecoder(config.model, 30, 20)
    for name, parameter in model.named_parameters():
        assert parameter.abs().max() <= 0.05, name
        assert parameter.std() > 0.01, name  # spread over the range, not left at zero
    assert not model.encoder.embedding.weight[PAD_ID].any() and not model.decoder.embedding.weight[PAD_ID].any()
