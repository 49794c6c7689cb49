"""Training recipe features: schedules, early stopping, selection, tied embeddings, averaging."""

from pathlib import Path

import pytest
import torch
from conftest import tiny_dates_config

import attnmt.training.train as train_module
from attnmt import Translator
from attnmt.configfile import config_from_dict
from attnmt.modelfile import load_file, read_model
from attnmt.training.train import learning_rate, train


def progress_of(out_dir) -> dict:
    _, meta = load_file(out_dir / "checkpoint.safetensors")
    return meta["progress"]


def test_the_schedule_at_its_edges(tmp_path):
    """learning_rate(step), the first update being step 1: warmup rises linearly to train.lr, reached at
    update warmup_steps exactly, then falls as 1/√step to min_lr; linear falls from train.lr at warmup_steps
    to min_lr at decay_steps and stays there; without a schedule by steps, the rate now (train.lr before the
    first update). A step off by one moves every edge. It reads its arguments and writes none."""
    def train_config(**settings):
        values = tiny_dates_config(tmp_path)
        values["train"].update(lr=0.004, min_lr=1e-4, **settings)
        return config_from_dict(values).train

    warmup = train_config(scheduler="warmup", warmup_steps=4)
    before = repr(warmup)
    assert [learning_rate(step, warmup) for step in (1, 3, 4)] == pytest.approx([0.001, 0.003, 0.004])
    assert learning_rate(4, warmup) == 0.004   # the peak, exactly
    assert learning_rate(5, warmup) == pytest.approx(0.004 * (4 / 5) ** 0.5)
    assert learning_rate(16, warmup) == pytest.approx(0.002)
    assert learning_rate(10**6, warmup) == 1e-4  # the floor
    assert repr(warmup) == before

    linear = train_config(scheduler="linear", warmup_steps=2, decay_steps=10)
    assert [learning_rate(step, linear) for step in (1, 2, 3, 6, 9)] == pytest.approx([0.002, 0.004, 0.0035, 0.002,
                                                                                       0.0005])
    assert learning_rate(10, linear) == learning_rate(11, linear) == 1e-4  # the floor at decay_steps, and after

    for scheduler in ("none", "plateau"):
        constant = train_config(scheduler=scheduler)
        assert learning_rate(1, constant) == learning_rate(500, constant) == 0.004
        assert learning_rate(500, constant, current=0.001) == 0.001  # as a plateau left it


def test_warmup_schedule(tmp_path):
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=1, scheduler="warmup", warmup_steps=100, lr=0.004)
    train(config_from_dict(values), log=lambda _: None)
    progress = progress_of(tmp_path)
    step = progress["step"]
    assert step < 100
    assert progress["lr"] == pytest.approx(0.004 * step / 100)  # still warming up: linear


@pytest.mark.parametrize("decay_steps", [1000, 3])
def test_linear_schedule_decays_to_the_floor(tmp_path, decay_steps):
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=1, scheduler="linear", warmup_steps=2, decay_steps=decay_steps, lr=0.004,
                           min_lr=1e-4)
    train(config_from_dict(values), log=lambda _: None)
    progress = progress_of(tmp_path)
    step = progress["step"]
    assert step > 3
    # past the warmup: on the line from lr at step 2 down to min_lr at decay_steps, never below min_lr
    assert progress["lr"] == pytest.approx(max(0.004 * (decay_steps - step) / (decay_steps - 2), 1e-4))


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
    stored = read_model(result.model_path)[1]  # the one weight under both names, as trained
    assert torch.equal(decoder.embedding.weight, stored["decoder.embedding.weight"])
    assert torch.equal(decoder.embedding.weight, stored["decoder.classifier.weight"])


def differing(ours: dict, theirs: dict) -> list[str]:
    """The names of the weights that differ between two state dicts (all of them if the names do)."""
    if ours.keys() != theirs.keys():
        return sorted(ours.keys() | theirs.keys())
    return [name for name in ours if not torch.equal(ours[name], theirs[name])]


@pytest.mark.parametrize("keep, average_loss, kept", [("better", 0.5, "mean"), ("better", 5.0, "epoch 2"),
                                                     ("always", 5.0, "mean")])
def test_checkpoint_averaging_keeps_the_mean_of_the_last_epochs(tmp_path, monkeypatch, keep, average_loss, kept):
    """train.average_last=2 keeps epochs 2 and 3 in their files, validates their element-wise mean
    and keeps it as the model where it validates better (scripted here) or train.average_keep is
    always; else the best epoch stays. Checked against the weights each epoch validated, whatever
    the run logs."""
    real = train_module.Run.validate
    validated = []                   # the weights of each validation: epochs 1, 2 and 3, then the average
    losses = iter([3.0, 1.0, 2.0, average_loss])  # epoch 2 the best single epoch, so that no file stands in for another

    def scripted(run):
        record = real(run)
        validated.append({name: w.clone() for name, w in run.translator.model.state_dict().items()})
        record["valid_loss"] = next(losses)
        return record

    monkeypatch.setattr(train_module.Run, "validate", scripted)
    values = tiny_dates_config(tmp_path)
    values["data"]["num_pairs"] = 600
    values["train"].update(epochs=3, average_last=2, average_keep=keep)
    train(config_from_dict(values), log=lambda _: None)
    _, epoch2, epoch3, average = validated
    assert sorted(p.name for p in tmp_path.glob("epoch*.safetensors")) == ["epoch2.safetensors", "epoch3.safetensors"]
    assert differing(read_model(tmp_path / "epoch2.safetensors")[1], epoch2) == []
    assert differing(read_model(tmp_path / "epoch3.safetensors")[1], epoch3) == []
    mean = {name: ((epoch2[name].float() + epoch3[name].float()) / 2).to(w.dtype) for name, w in epoch3.items()}
    assert differing(mean, epoch2) and differing(mean, epoch3)  # the epochs differ: a wrong average would show
    assert differing(average, mean) == []
    assert differing(read_model(tmp_path / "model.safetensors")[1], mean if kept == "mean" else epoch2) == []


def test_init_uniform_bounds_every_weight_and_keeps_padding_zero():
    from attnmt.families.rnn.network import RNNEncoderDecoder
    from attnmt.vocab import PAD_ID

    config = config_from_dict({**tiny_dates_config(Path("unused")), "model": {"init_uniform": 0.05}})
    model = RNNEncoderDecoder(config.model, 30, 20)
    for name, parameter in model.named_parameters():
        assert parameter.abs().max() <= 0.05, name
        assert parameter.std() > 0.01, name  # spread over the range, not left at zero
    assert not model.encoder.embedding.weight[PAD_ID].any() and not model.decoder.embedding.weight[PAD_ID].any()
