"""Training on several processes (torchrun, gloo on CPU) follows the one-process run with the same
global batch; only rank 0 writes; a killed run resumes exactly; a rank that dies or hangs ends the job."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import write_dates_files

from attnmt import AttnmtError
from attnmt.modelfile import load_file
from attnmt.training.data import split
from attnmt.training.distributed import rank_parts, start_ranks

REPO = Path(__file__).resolve().parents[1]

# Runs train() as `attnmt train` does and records each update's loss (the whole batch's, summed
# over the ranks) on rank 0. On the other ranks an audit hook records every file opened for
# writing: they must write nothing.
RECORDER = """
import json, os, sys
import attnmt.training.train as training
from attnmt.configfile import load_config
from attnmt.training.distributed import start_ranks

config = load_config(sys.argv[1], sys.argv[3:])
ranks = start_ranks(config.train)
written = []
if not ranks.is_main:
    sys.addaudithook(lambda event, args: written.append(str(args[0])) if event == "open" and isinstance(args[1], str)
                     and any(c in args[1] for c in "wax+") else None)
losses = []
step = ranks.train_step
ranks.train_step = lambda *args, **kwargs: losses.append(step(*args, **kwargs)) or losses[-1]
if ranks.is_main and os.environ.get("STOP_AT_FIRST_VALIDATION"):  # a decision only rank 0 takes
    keep = training.Run.after_validation
    training.Run.after_validation = lambda *args: keep(*args) or "stopped by the test"
training.train(config, overwrite=True, log=lambda line: None, ranks=ranks)
if ranks.is_main:
    open(sys.argv[2], "w").write(json.dumps(losses))
else:
    print("\\n".join(written), file=sys.stderr)
ranks.close()
"""

TRANSFORMER = {"arch": "transformer", "heads": 2, "ff_dim": 64, "enc_layers": 2, "dec_layers": 2, "attn_dropout": 0.1}


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    """600 training pairs, 100 validation and 50 test pairs of generated dates in line-aligned files (what
    the ranks do does not depend on the corpus: each rank reads the same prepared store)."""
    out = tmp_path_factory.mktemp("dates")
    write_dates_files(out, {"train": 600, "val": 100, "test_2016_flickr": 50})
    return out


def write_config(path: Path, data: Path, out_dir: Path, **model) -> Path:
    values = {"data": {"format": "parallel", "path": str(data)},
              "tokenizer": {"level": "word", "lowercase": True}, "vocab": {"min_freq": 2},
              "model": {"emb_dim": 32, "dropout": 0.0, **model} if model.get("arch") == "transformer"
              else {"emb_dim": 32, "enc_hidden": 32, "dec_hidden": 48, "attn_dim": 24, "dropout": 0.0, **model},
              "train": {"out_dir": str(out_dir), "epochs": 2, "batch_size": 40, "lr": 0.003, "checkpoint_every": 4}}
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def launch(ranks: int, *args: str, script: str = "-m attnmt train", **env_vars: str) -> subprocess.Popen:
    """`attnmt train` (or a script) in `ranks` processes under torchrun, or in this one process; its
    stdout (rank 0's log) is readable line by line as it is written."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **env_vars}
    env.pop("WORLD_SIZE", None)
    start = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] if ranks > 1 \
        else [sys.executable]
    return subprocess.Popen([*start, *script.split(), *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return err


def recorded_run(tmp_path: Path, name: str, ranks: int, data: Path, *overrides: str, env: dict | None = None,
                 **model) -> tuple[list, dict, str]:
    """Each update's loss, the final weights and rank 1's stderr of one recorded run."""
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER, encoding="utf-8")
    config = write_config(tmp_path / f"{name}.yaml", data, tmp_path / name, **model)
    err = finish(launch(ranks, str(config), str(tmp_path / f"{name}.json"), *overrides, script=str(script),
                        **(env or {})))
    losses = json.loads((tmp_path / f"{name}.json").read_text())
    return losses, weights(tmp_path / name / "checkpoint.safetensors"), err


def weights(path: Path) -> dict[str, torch.Tensor]:
    tensors, _ = load_file(path)
    return {k: v for k, v in tensors.items() if k.startswith("model.")}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_ranks_deal_each_batch_into_disjoint_parts_cut_alike_for_the_same_ranks_x_accumulate():
    ids = list(range(100, 111))
    assert split(ids, 3) == [[100, 103, 106, 109], [101, 104, 107, 110], [102, 105, 108]]

    def parts(world_size: int, accumulate: int) -> list[tuple[int, list[int]]]:
        return [part for rank in range(world_size) for part in rank_parts(ids, rank, world_size, accumulate)]

    for world_size, accumulate in ((1, 1), (2, 1), (1, 4), (2, 2), (4, 1), (3, 5)):
        dealt = parts(world_size, accumulate)
        assert sorted(i for _, part in dealt for i in part) == ids  # every sentence once
        assert all(part for _, part in dealt)  # no empty part
    assert parts(2, 2) == parts(1, 4) == parts(4, 1)
    assert len(parts(3, 5)) == 11  # 15 parts of 11 sentences: the 4 empty ones left out


def test_world_size_without_torchrun_is_one_clear_line(monkeypatch):
    from attnmt.config import TrainConfig

    monkeypatch.setenv("WORLD_SIZE", "2")
    for name in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(AttnmtError, match="WORLD_SIZE is set but RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT not"):
        start_ranks(TrainConfig())
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert start_ranks(TrainConfig()).world_size == 1


@pytest.mark.slow
def test_two_ranks_follow_one_process_step_by_step_and_rank_1_writes_nothing(small_corpus, tmp_path):
    one, one_weights, _ = recorded_run(tmp_path, "one", 1, small_corpus)
    two, two_weights, rank1_writes = recorded_run(tmp_path, "two", 2, small_corpus)
    accumulated, accumulated_weights, _ = recorded_run(tmp_path, "acc", 1, small_corpus, "train.accumulate=2")
    assert len(one) == len(two) == 30  # 15 batches of 40 sentences, 2 epochs
    # Two ranks sum the loss of two halves of each batch, one process the whole batch at once: the
    # same sums in another order (products of other shapes), so equal up to float32 rounding.
    assert max(abs(a - b) / abs(a) for a, b in zip(one, two)) < 1e-5
    assert max_difference(one_weights, two_weights) < 2e-5
    # Accumulating the same two parts on one rank is the same computation as two ranks: bit for bit.
    assert accumulated == two
    assert max_difference(accumulated_weights, two_weights) == 0.0
    assert rank1_writes.strip() == "", f"rank 1 wrote files: {rank1_writes}"
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())


@pytest.mark.slow
def test_random_draws_do_not_depend_on_which_rank_runs_a_part(small_corpus, tmp_path):
    """With dropout, a Transformer on two ranks equals one process accumulating the same two parts:
    each part's draws are seeded by the step and the part, not by the process."""
    settings = {**TRANSFORMER, "dropout": 0.3}
    two, two_weights, _ = recorded_run(tmp_path, "two", 2, small_corpus, **settings)
    accumulated, accumulated_weights, _ = recorded_run(tmp_path, "acc", 1, small_corpus, "train.accumulate=2",
                                                       **settings)
    assert accumulated == two
    assert max_difference(accumulated_weights, two_weights) == 0.0


@pytest.mark.slow
def test_rank_0s_decision_to_stop_and_the_time_budget_reach_every_rank(small_corpus, tmp_path):
    losses, _, _ = recorded_run(tmp_path, "stop", 2, small_corpus, "train.epochs=5", "train.rank_timeout_min=0.5",
                                env={"STOP_AT_FIRST_VALIDATION": "1"})
    assert len(losses) == 15  # one epoch of 15 batches: rank 1 stopped with rank 0, instead of waiting for it
    losses, _, _ = recorded_run(tmp_path, "budget", 2, small_corpus, "train.epochs=5",
                                "train.max_minutes=0.000000001", "train.rank_timeout_min=0.5")
    assert len(losses) == 1  # every rank's clock is past the budget (60 ns) after the first update


def rank_pid(launcher: subprocess.Popen, rank: int) -> int | None:
    """The process of one rank among torchrun's children (None while it is not started)."""
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
    for pid in children:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    return None


@pytest.mark.slow
def test_two_rank_run_killed_resumes_exactly_on_two_ranks_and_on_one_accumulating(small_corpus, tmp_path):
    overrides = ("train.epochs=3", "model.dropout=0.2")
    reference = write_config(tmp_path / "ref.yaml", small_corpus, tmp_path / "ref")
    finish(launch(2, str(reference), *overrides))
    expected = weights(tmp_path / "ref" / "checkpoint.safetensors")

    # Rank 1 killed at a random update after the run's second checkpoint (step 8), as rank 0 logs it,
    # so on a machine of any speed: torchrun ends the job.
    config = write_config(tmp_path / "killed.yaml", small_corpus, tmp_path / "killed")
    checkpoint = tmp_path / "killed" / "checkpoint.safetensors"
    process = launch(2, str(config), *overrides, "train.log_every=1")
    kill_at = random.Random(5).randint(9, 30)  # of 45
    for line in process.stdout:
        if re.match(rf"epoch \d+ step {kill_at} ", line):
            break
    else:
        pytest.fail(f"the run ended before step {kill_at}: {process.communicate()[1]}")
    pid = rank_pid(process, 1)
    assert pid and process.poll() is None, "the run finished before rank 1 could be killed"
    os.kill(pid, signal.SIGKILL)
    _, err = process.communicate(timeout=120)
    assert process.returncode != 0 and "rank      : 1" in err  # torchrun names the rank that failed first
    finish(launch(2, str(config), "--resume", *overrides))
    assert max_difference(weights(checkpoint), expected) == 0.0

    # Two ranks for the first epoch, then one process cutting each batch into the same two parts.
    config = write_config(tmp_path / "switched.yaml", small_corpus, tmp_path / "switched")
    finish(launch(2, str(config), "train.epochs=1", "model.dropout=0.2"))
    finish(launch(1, str(config), "--resume", *overrides, "train.accumulate=2"))
    assert max_difference(weights(tmp_path / "switched" / "checkpoint.safetensors"), expected) == 0.0


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_rank_that_hangs_ends_the_job_with_a_line_naming_it(small_corpus, tmp_path):
    config = write_config(tmp_path / "hang.yaml", small_corpus, tmp_path / "hang")
    process = launch(2, str(config), "train.epochs=50", "train.rank_timeout_min=0.1")
    while process.poll() is None and not (tmp_path / "hang" / "checkpoint.safetensors").exists():
        time.sleep(0.05)
    main, silent = rank_pid(process, 0), rank_pid(process, 1)
    assert main and silent, "the run ended before rank 1 could be stopped"
    os.kill(silent, signal.SIGSTOP)  # alive but silent, as a rank stuck in a kernel or a deadlock
    try:
        deadline = time.monotonic() + 60  # 6 s of timeout, 3 s to find the silent rank
        while alive(main) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        os.kill(silent, signal.SIGKILL)  # torchrun's SIGTERM waits while it is stopped
    _, err = process.communicate(timeout=60)
    assert process.returncode != 0
    lines = [line for line in err.splitlines() if line.startswith("attnmt: error:")]
    assert len(lines) == 1 and lines[0].startswith("attnmt: error: rank 0 of 2: rank 1 stopped answering; the job "
                                                   "ends (Timed out waiting 6000ms"), err
