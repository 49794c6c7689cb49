"""Training survives a kill and resumes exactly; same seed, same weights; NaN stops cleanly."""

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
import torch
import yaml
from conftest import tiny_dates_config

from attnmt import AttnmtError
from attnmt.configfile import config_from_dict
from attnmt.modelfile import load_file
from attnmt.training.metrics import METRICS_FILE, read_metrics
from attnmt.training.resume import Progress, Start, check_continuation, settled_precision
from attnmt.training.train import train

REPO = Path(__file__).resolve().parents[1]


TRANSFORMER = {"arch": "transformer", "heads": 2, "ff_dim": 64, "enc_layers": 2, "dec_layers": 2,
               "attn_dropout": 0.1, "act_dropout": 0.1}


def write_config(path: Path, out_dir: Path, arch: str = "rnn") -> Path:
    values = tiny_dates_config(out_dir, arch=arch)
    values["data"].update(num_pairs=700, valid_size=50, test_size=50)
    # Dropout and teacher forcing below 1 draw random numbers: resume must restore the generator.
    values["model"].update(dropout=0.2)
    # A log line after each update (the test kills the run at updates it reports), a checkpoint every second.
    values["train"].update(epochs=3, batch_size=32, checkpoint_every=2, teacher_forcing=0.7, log_every=1)
    # One thread, whatever the load: another count rounds differently. The resumed runs ask for auto
    # (train.threads=auto) and must take over the checkpoint's count to end bit-identical.
    values["train"].update(threads=1)
    if arch == "transformer":  # trains on the gold prefix, with its warmup schedule
        values["model"].update(TRANSFORMER)
        values["train"].update(teacher_forcing=1.0, scheduler="warmup", warmup_steps=20)
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def run(config: Path, *extra: str) -> subprocess.Popen:
    """`attnmt train`, its log (stdout and stderr) readable line by line as it is written."""
    return subprocess.Popen([sys.executable, "-m", "attnmt", "train", str(config), *extra], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def finish(process: subprocess.Popen) -> None:
    log, _ = process.communicate(timeout=600)
    assert process.returncode == 0, log


# The line logged after each update (without a terminal), as "epoch 2 step 25 (6/19) | ...".
UPDATE = re.compile(r"epoch \d+ step (\d+) \(\d+/(\d+)\)")


def updates(log: list[str]) -> list[tuple[int, int]]:
    """(step, updates per epoch) of each update the log reports."""
    return [(int(update[1]), int(update[2])) for update in map(UPDATE.match, log) if update]


def kill_when(process: subprocess.Popen, moment: Callable[[list[str]], bool]) -> None:
    """Kill the run (SIGKILL) as soon as `moment(its log so far)` is true; fails if the run ends first."""
    log: list[str] = []

    def read() -> None:
        for line in process.stdout:
            log.append(line)

    reader = threading.Thread(target=read)
    reader.start()
    while process.poll() is None and not moment(log):
        time.sleep(0.002)
    process.kill()
    reader.join(timeout=600)
    assert process.wait(timeout=600) == -signal.SIGKILL, "the run ended before it was killed:\n" + "".join(log)
    process.stdout.close()


def weights(path: Path) -> dict[str, torch.Tensor]:
    tensors, _ = load_file(path)
    return {k: v for k, v in tensors.items() if k.startswith("model.")}


def assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("kill_seed,arch", [(7, "rnn"), (8, "transformer")])
def test_killed_and_resumed_run_ends_bit_identical(tmp_path, kill_seed, arch):
    reference = tmp_path / "reference"
    finish(run(write_config(tmp_path / "ref.yaml", reference, arch)))

    # Killed three times at moments the run reports, so on a machine of any speed: at a random update
    # of epoch 1 after the checkpoint of step 2; once epoch 1's record is in metrics.jsonl (appended
    # before curves.png is drawn and the epoch's checkpoint saved); at a random update of epoch 2 or 3.
    interrupted = tmp_path / "interrupted"
    config = write_config(tmp_path / "int.yaml", interrupted, arch)
    rng = random.Random(kill_seed)
    share = rng.random()
    kill_when(run(config, "--overwrite"),
              lambda log: any(step >= 3 + round(share * (per_epoch - 4)) for step, per_epoch in updates(log)))
    metrics = interrupted / METRICS_FILE
    kill_when(run(config, "--resume", "train.threads=auto"),
              lambda _: metrics.exists() and metrics.read_text().endswith("\n"))
    share = rng.random()
    kill_when(run(config, "--resume", "train.threads=auto"),
              lambda log: any(step >= per_epoch + 2 + round(share * (3 * per_epoch // 2 - 2))
                              for step, per_epoch in updates(log)))
    finish(run(config, "--resume", "train.threads=auto"))
    assert_bit_identical(weights(reference / "checkpoint.safetensors"), weights(interrupted / "checkpoint.safetensors"))
    assert_bit_identical(weights(reference / "model.safetensors"), weights(interrupted / "model.safetensors"))
    _, ref_meta = load_file(reference / "checkpoint.safetensors")
    _, int_meta = load_file(interrupted / "checkpoint.safetensors")
    for key in ("step", "epoch", "best_metric", "lr"):
        assert ref_meta["progress"][key] == int_meta["progress"][key]
    # metrics.jsonl goes on where the checkpoint stopped: every validation once, with the same figures.
    figures = ("epoch", "step", "train_loss", "valid_loss", "valid_bleu", "lr")
    assert ([[r[k] for k in figures] for r in read_metrics(interrupted)]
            == [[r[k] for k in figures] for r in read_metrics(reference)])
    assert not list(interrupted.glob(".*.tmp")), "a killed save left its temporary file behind"


def test_same_seed_same_weights(tmp_path):
    runs = []
    for name in ("a", "b"):
        values = tiny_dates_config(tmp_path / name)
        values["model"].update(dropout=0.3)
        values["train"].update(teacher_forcing=0.5, epochs=1)
        runs.append(train(config_from_dict(values), log=lambda _: None).model_path)
    assert_bit_identical(weights(runs[0]), weights(runs[1]))


def test_nan_loss_stops_and_keeps_the_last_good_model(tmp_path, monkeypatch):
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=1)
    train(config_from_dict(values), log=lambda _: None)
    model_path = tmp_path / "model.safetensors"
    checkpoint_path = tmp_path / "checkpoint.safetensors"
    before = model_path.read_bytes(), checkpoint_path.read_bytes()

    import attnmt.training.step as step_module

    real_loss = step_module.sequence_loss
    calls = {"n": 0}

    def poisoned(logits, targets, label_smoothing=0.0):
        calls["n"] += 1
        loss = real_loss(logits, targets, label_smoothing)
        return loss * float("nan") if calls["n"] == 5 else loss

    monkeypatch.setattr(step_module, "sequence_loss", poisoned)
    values["train"].update(epochs=2)
    with pytest.raises(AttnmtError, match="loss became nan at step"):
        train(config_from_dict(values), resume=True, log=lambda _: None)
    assert (model_path.read_bytes(), checkpoint_path.read_bytes()) == before


def test_resume_without_checkpoint_is_an_error(tmp_path):
    with pytest.raises(AttnmtError, match="no checkpoint to resume from"):
        train(config_from_dict(tiny_dates_config(tmp_path)), resume=True, log=lambda _: None)


def test_resume_with_other_data_is_refused(tmp_path):
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=1)
    train(config_from_dict(values), log=lambda _: None)
    values["data"].update(seed=2)
    with pytest.raises(AttnmtError, match="training data differ"):
        train(config_from_dict(values), resume=True, log=lambda _: None)


def test_resume_with_other_model_settings_is_refused(tmp_path):
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=1)
    train(config_from_dict(values), log=lambda _: None)
    values["model"].update(dec_hidden=40)
    with pytest.raises(AttnmtError, match="model.dec_hidden"):
        train(config_from_dict(values), resume=True, log=lambda _: None)


def test_out_of_memory_says_what_to_lower_and_keeps_the_checkpoint(tmp_path, monkeypatch):
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=1)
    train(config_from_dict(values), log=lambda _: None)
    checkpoint = (tmp_path / "checkpoint.safetensors").read_bytes()

    from attnmt.families.rnn.network import RNNEncoderDecoder

    def no_memory(self, *args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 123456789 bytes")

    monkeypatch.setattr(RNNEncoderDecoder, "features", no_memory)
    values["train"].update(epochs=2)
    with pytest.raises(AttnmtError, match="out of memory at step .* lower train.batch_size"):
        train(config_from_dict(values), resume=True, log=lambda _: None)
    assert (tmp_path / "checkpoint.safetensors").read_bytes() == checkpoint


def test_a_time_budget_spent_in_the_first_epoch_still_keeps_a_model(tmp_path, monkeypatch):
    """On a slow CPU a budget can end before the first validation: the model validated then is kept."""
    clock = iter(range(0, 10**6, 60))  # each look at the clock: a minute later
    monkeypatch.setattr("attnmt.training.train.time.monotonic", lambda: next(clock))
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=3, max_minutes=1.5)
    lines = []
    result = train(config_from_dict(values), log=lines.append)
    assert result.model_path.is_file() and result.epochs == 1
    assert any("time budget of 1.5 minutes used up" in line for line in lines)


def test_a_run_cut_by_its_budget_and_resumed_counts_each_epoch_once_and_says_why_it_stops(tmp_path, monkeypatch):
    """The cut epoch is validated twice (at the cut and at its end) but trained once; a run that ends
    with its epochs, not its budget, says so (a budget that seems unspent is otherwise a puzzle)."""
    clock = iter(range(0, 10**6, 60))  # each look at the clock: a minute later
    monkeypatch.setattr("attnmt.training.train.time.monotonic", lambda: next(clock))
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=2, max_minutes=1.5)
    assert train(config_from_dict(values), log=lambda _: None).epochs == 1  # cut in epoch 1
    # The budget counts the whole run: resumed with the same budget, it refuses before any update.
    checkpoint = (tmp_path / "checkpoint.safetensors").read_bytes()
    with pytest.raises(AttnmtError, match=r"train.max_minutes: the run being resumed has trained \d+\.\d minutes "
                                          r"already, .* raise train.max_minutes above"):
        train(config_from_dict(values), resume=True, log=lambda _: None)
    assert (tmp_path / "checkpoint.safetensors").read_bytes() == checkpoint
    values["train"].update(max_minutes=0)  # no budget
    lines: list[str] = []
    result = train(config_from_dict(values), resume=True, log=lines.append)
    assert [record["epoch"] for record in read_metrics(tmp_path)] == [1, 1, 2]
    assert result.epochs == 2
    assert any(line == "all 2 epochs trained (train.epochs); stopping" for line in lines)


@pytest.mark.slow  # a whole run or several processes; the module's other tests stay in the quick tier
def test_fine_tuning_starts_from_the_model_files_weights_tokenizers_and_vocabularies(tmp_path):
    base = tiny_dates_config(tmp_path / "base")
    base["train"].update(epochs=3)
    base_model = train(config_from_dict(base), log=lambda _: None).model_path
    losses = {}
    for name, init_from in (("scratch", ""), ("fine_tuned", str(base_model))):
        values = tiny_dates_config(tmp_path / name, dropout=0.1)  # dropout may differ from the file's
        values["data"].update(seed=2)                             # other sentences
        values["train"].update(epochs=1, init_from=init_from)
        lines: list[str] = []
        train(config_from_dict(values), log=lines.append)
        losses[name] = read_metrics(tmp_path / name)[0]["valid_loss"]
        assert any(line.startswith("starting from") for line in lines) == bool(init_from)
    assert losses["fine_tuned"] < 0.5 * losses["scratch"]  # one epoch on top of three
    saved = {name: load_file(tmp_path / name / "model.safetensors")[1] for name in ("base", "fine_tuned")}
    for key in ("src_vocab", "tgt_vocab", "src_tokenizer", "tgt_tokenizer"):
        assert saved["fine_tuned"][key] == saved["base"][key]


def test_fine_tuning_from_another_architecture_is_refused(tmp_path):
    values = tiny_dates_config(tmp_path / "base")
    values["train"].update(epochs=1)
    base_model = train(config_from_dict(values), log=lambda _: None).model_path
    other = tiny_dates_config(tmp_path / "other", dec_hidden=40)
    other["train"].update(init_from=str(base_model))
    with pytest.raises(AttnmtError, match=r"train.init_from .*: model.dec_hidden is 40 in this config, 48 in the model "
                                          r"file; a fine-tuning run keeps the file's architecture"):
        train(config_from_dict(other), log=lambda _: None)


def test_a_continued_run_says_what_differs_from_the_run_it_continues_and_refuses_a_spent_budget(tmp_path):
    """check_continuation's lines, word for word as users read them: where a run starts from a model file,
    where a resumed one computes with another thread count or cuts its batches otherwise; and its
    refusal of a budget spent, at the budget exactly, not a second before."""
    def continuing(start: Start, progress: Progress, parts_per_batch: int = 1, **settings) -> list[str]:
        values = tiny_dates_config(tmp_path)
        values["train"].update(settings)
        lines: list[str] = []
        check_continuation(start, progress, config_from_dict(values).train, parts_per_batch, lines.append)
        return lines

    threads = torch.get_num_threads()
    config = config_from_dict(tiny_dates_config(tmp_path))
    fresh = Progress()
    assert continuing(Start(config, tmp_path), fresh) == [] and fresh.threads == threads
    assert continuing(Start(config, tmp_path, {}), Progress(), init_from="base.safetensors") == [
        "starting from base.safetensors: its architecture, weights, tokenizers and vocabularies"]
    resumed = Progress(threads=threads + 1, elapsed_s=60.0)
    assert continuing(Start(config, tmp_path, {}, {}, resumed, 1), resumed, parts_per_batch=2, max_minutes=2) == [
        f"warning: the run being resumed trained with {threads + 1} threads, this process has {threads}: the sums "
        f"round differently, so it continues up to float rounding, not bit-exactly (train.threads={threads + 1} "
        f"resumes it exactly)",
        "the checkpoint's batches were cut into 1 parts (ranks x train.accumulate), these into 2: the same batches "
        "and gradients up to float rounding, but other dropout draws than an uninterrupted run's"]
    assert resumed.threads == threads  # this process's, recorded
    alike = Progress(threads=threads, elapsed_s=89.0)
    assert continuing(Start(config, tmp_path, {}, {}, alike, 2), alike, parts_per_batch=2, max_minutes=1.5) == []
    spent = Progress(threads=threads, elapsed_s=90.0)
    with pytest.raises(AttnmtError, match="^" + re.escape(
            "train.max_minutes: the run being resumed has trained 1.5 minutes already, and the budget counts the "
            "whole run, its earlier sessions too; raise train.max_minutes above 1.5 to train on") + "$"):
        continuing(Start(config, tmp_path, {}, {}, spent, 1), spent, max_minutes=1.5)


def test_a_resumed_run_keeps_its_format_under_auto_and_warns_of_another_one_set(tmp_path):
    """settled_precision: the setting, or auto's resumed format, each said as users read it; None: auto
    for a fresh run, left to training to choose."""
    def settled(setting: str, recorded: str) -> tuple[object, list[str]]:
        values = tiny_dates_config(tmp_path)
        values["train"].update(precision=setting)
        lines: list[str] = []
        return settled_precision(config_from_dict(values).train, Progress(precision=recorded), lines.append), lines

    assert settled("auto", "") == (None, [])
    assert settled("bf16", "") == ("bf16", [])
    assert settled("fp32", "fp32") == ("fp32", [])
    assert settled("auto", "bf16") == ("bf16", ["precision: train bf16 (train.precision auto: the resumed run's format)"])
    assert settled("fp32", "bf16") == ("fp32", [
        "warning: the run being resumed trained in bf16, this one in fp32: it continues in another format, not "
        "bit-exactly (train.precision=auto or bf16 resumes it exactly)"])


def test_ctrl_c_says_what_was_kept_and_the_command_that_continues(tmp_path, monkeypatch, capsys):
    """Ctrl-C after the first checkpoint: one line naming the checkpoint (its epoch and step), the best
    model so far and the exact command with --resume, which then runs; before any checkpoint: nothing kept."""
    from attnmt import cli
    from attnmt.training.train import Run

    config = write_config(tmp_path / "run.yaml", tmp_path / "run")
    saved, calls = Run.save_checkpoint, []

    def interrupted_after(count: int):
        def save_checkpoint(run) -> None:
            calls.append(1)
            if len(calls) > count:
                raise KeyboardInterrupt
            saved(run)
        return save_checkpoint

    overrides = ["train.epochs=2", "train.checkpoint_every=0"]     # a checkpoint after each epoch's validation
    monkeypatch.setattr(Run, "save_checkpoint", interrupted_after(0))
    assert cli.main(["train", str(config), *overrides]) == 130
    assert f"attnmt: training stopped before its first checkpoint: nothing is kept in {tmp_path / 'run'}" \
        in capsys.readouterr().err
    calls.clear()
    monkeypatch.setattr(Run, "save_checkpoint", interrupted_after(1))
    assert cli.main(["train", str(config), *overrides, "--overwrite"]) == 130
    err = capsys.readouterr().err
    checkpoint = tmp_path / "run" / "checkpoint.safetensors"
    progress = load_file(checkpoint)[1]["progress"]
    assert progress["epoch"] == 2 and progress["step"] > 0
    assert f"attnmt: training stopped; kept: {checkpoint}, after step {progress['step']} (epoch 2 next); the best " \
           f"model so far is {tmp_path / 'run' / 'model.safetensors'}. `attnmt train {config} {' '.join(overrides)} " \
           f"--resume` continues" in err
    assert err.endswith("attnmt: interrupted\n")
    monkeypatch.setattr(Run, "save_checkpoint", saved)
    assert cli.main(["train", str(config), *overrides, "--resume"]) == 0
