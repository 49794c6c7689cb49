"""train.threads and --threads: auto takes the cores other programs leave free, a run keeps and
records its count, and a resumed run takes over the count it was trained with."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import tiny_dates_config

from attnmt import cli, threads
from attnmt.modelfile import read_metadata
from attnmt.threads import choose_threads


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


@pytest.mark.parametrize("load, count", [(0.0, 2), (0.3, 2), (0.8, 1), (1.0, 1), (2.0, 1), (3.5, 1)])
def test_auto_leaves_the_busy_cores_to_the_other_programs(two_cpus, load, count):
    chosen = choose_threads(None, default=2, load=load)
    assert chosen.count == count
    assert ("busy" in chosen.reason) == (count < 2), chosen.reason


def test_what_auto_defers_to(two_cpus, monkeypatch):
    assert choose_threads(3, default=2, load=2.0).count == 3                  # a number is taken as it is
    assert choose_threads(None, default=2, load=2.0, recorded=2).count == 2   # a resumed run's count
    assert choose_threads(None, default=2, device_type="cuda", load=0.0).count == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert choose_threads(None, default=2, load=2.0).count == 2               # the user's own setting


def test_others_load_sees_a_busy_program():
    busy = subprocess.Popen([sys.executable, "-c", "print('go', flush=True)\nwhile True: pass"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout.readline() == "go\n"
        load = threads.others_load(0.5)
    finally:
        busy.kill()
        busy.wait()
    assert load is not None, "Linux says how busy its CPUs are"
    assert load > 0.6, load


def test_others_load_leaves_out_this_process(monkeypatch):
    """Over a look of 1 s, the CPUs were busy for 1.5 s, 1 s of which this process's: others 0.5."""
    tick = os.sysconf("SC_CLK_TCK")
    busy_ticks = iter([10 * tick, 11.5 * tick])
    own_seconds = iter([(3.0, 1.0, 0, 0, 0), (3.5, 1.5, 0, 0, 0)])
    clock = iter([100.0, 101.0])
    monkeypatch.setattr(threads, "_cpu_ticks", lambda cpus: next(busy_ticks))
    monkeypatch.setattr(threads.os, "times", lambda: next(own_seconds))
    monkeypatch.setattr(threads.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(threads.time, "sleep", lambda seconds: None)
    assert threads.others_load(1.0) == pytest.approx(0.5)


def test_a_run_records_its_threads_and_its_resumption_takes_them_over(tmp_path, capsys):
    values = tiny_dates_config(tmp_path / "run")
    values["train"].update(epochs=1, threads=1)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(values), encoding="utf-8")
    assert cli.main(["train", str(config)]) == 0
    assert "threads: 1 (train.threads)" in capsys.readouterr().out
    assert read_metadata(tmp_path / "run" / "checkpoint.safetensors")["progress"]["threads"] == 1
    assert read_metadata(tmp_path / "run" / "model.safetensors")["training"]["threads"] == 1
    assert json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])["threads"] == 1

    torch.set_num_threads(2)
    assert cli.main(["train", str(config), "--resume", "train.epochs=2", "train.threads=auto"]) == 0
    out = capsys.readouterr().out
    assert "threads: 1 (train.threads auto: the count the resumed run trained with" in out, out
    assert "warning" not in out
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("argv, named", [(["train", "{config}", "train.threads=0"], "train.threads"),
                                         (["train", "{config}", "train.threads=many"], "train.threads"),
                                         (["translate", "m.safetensors", "--threads", "0"], "--threads"),
                                         (["translate", "m.safetensors", "--threads", "some"], "--threads")])
def test_a_wrong_thread_count_is_one_line(tmp_path, capsys, argv, named):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_dates_config(tmp_path / "run")), encoding="utf-8")
    try:
        code = cli.main([a.format(config=config) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and named in err, err
    assert not (tmp_path / "run").exists()
