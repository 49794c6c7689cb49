"""On a CUDA GPU: both families train (fp32, and bf16 where the GPU computes it natively), resume
exactly, decode as on the CPU, refuse the CPU-only paths (int8, --compile) in one line, and train
on two GPUs through torchrun and NCCL as one process does. Every test here is marked `gpu` and
skips with a reason on a machine without CUDA (`python -m pytest -m gpu` runs only these;
bench/gpu_check.sh runs them first)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_dates_config
from test_distributed import RECORDER, launch
from test_resume import TRANSFORMER, weights

from attnmt import AttnmtError, Translator
from attnmt.configfile import config_from_dict
from attnmt.corpus.dates import generate_dates
from attnmt.precision import native_bf16
from attnmt.training.metrics import read_metrics
from attnmt.training.train import train

REPO = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not CUDA, reason="no CUDA GPU that torch can use (torch.cuda.is_available() is "
                                                  "False: no GPU, or a CPU build of torch)")]
two_gpus = pytest.mark.skipif(not CUDA or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")

# The Transformer of tests/test_resume.py without dropout, and its learning-rate schedule.
TRANSFORMER_MODEL = {**TRANSFORMER, "emb_dim": 32, "attn_dropout": 0.0, "act_dropout": 0.0}
TRANSFORMER_TRAIN = {"lr": 0.003, "scheduler": "warmup", "warmup_steps": 40}
FAMILIES = {"rnn": ({}, {}), "transformer": (TRANSFORMER_MODEL, TRANSFORMER_TRAIN)}

# Deterministic CUDA kernels where PyTorch has them: cuBLAS needs a fixed workspace (set before
# its first use, hence a process of its own), cuDNN its deterministic algorithms. warn_only: an
# op without a deterministic kernel warns instead of failing; the test then says which.
DETERMINISTIC_TRAIN = """
import sys, torch
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cudnn.benchmark = False
from attnmt.cli import main
sys.exit(main(sys.argv[1:]))
"""
NOT_DETERMINISTIC = "does not have a deterministic implementation"


def gpu_config(out_dir: Path, family: str, device: str = "cuda", **train_settings) -> dict:
    """tiny_dates_config for one family on `device`."""
    model, schedule = FAMILIES[family]
    values = tiny_dates_config(out_dir, **model)
    values["train"].update(device=device, **schedule, **train_settings)
    return values


def bf16_or_skip(device: str = "cuda") -> None:
    if not native_bf16(torch.device(device)):
        pytest.skip(f"{torch.cuda.get_device_name(device)} computes bf16 only by emulation (before Ampere)")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_both_families_train_on_the_gpu(tmp_path, family, precision):
    if precision == "bf16":
        bf16_or_skip()
    lines: list[str] = []
    values = gpu_config(tmp_path, family, precision=precision)
    result = train(config_from_dict(values), log=lines.append)
    assert any(line.startswith("model: ") and " on cuda" in line for line in lines), lines
    records = read_metrics(tmp_path)
    assert len(records) == 2 and all(torch.isfinite(torch.tensor(r["valid_loss"])) for r in records)
    assert records[1]["valid_loss"] < records[0]["valid_loss"], records  # it learns, not only runs
    # The file is device-free: it loads and translates on the CPU.
    assert Translator.load(result.model_path, device="cpu").translate(["3. Oktober 1990"])[0].tokens


def train_process(config: Path, *args: str) -> str:
    """`attnmt train CONFIG ARGS` with deterministic CUDA kernels, in a process of its own; its stderr."""
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    process = subprocess.run([sys.executable, "-c", DETERMINISTIC_TRAIN, "train", str(config), *args], cwd=REPO,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900)
    assert process.returncode == 0, process.stderr
    return process.stderr


def resume_runs(tmp_path: Path, family: str, device: str = "cuda") -> tuple[dict, dict, str]:
    """The checkpoint weights of 2 epochs straight and of 1 epoch + --resume, and the runs' stderr."""
    stderr = ""
    out = {}
    for name in ("straight", "resumed"):
        values = gpu_config(tmp_path / name, family, device, checkpoint_every=7)
        # Dropout and scheduled sampling draw random numbers on the GPU: resume must redraw them alike.
        values["model"].update(dropout=0.2)
        if family == "rnn":
            values["train"].update(teacher_forcing=0.7)
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(values), encoding="utf-8")
        if name == "resumed":
            stderr += train_process(config, "train.epochs=1")
            stderr += train_process(config, "--resume")
        else:
            stderr += train_process(config)
        out[name] = weights(tmp_path / name / "checkpoint.safetensors")
    return out["straight"], out["resumed"], stderr


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path, family):
    straight, resumed, stderr = resume_runs(tmp_path, family)
    assert straight.keys() == resumed.keys()
    difference = max((straight[k] - resumed[k]).abs().max().item() for k in straight)
    if NOT_DETERMINISTIC not in stderr:
        # Every kernel ran deterministically: the same computation, bit for bit, as on a CPU.
        assert difference == 0.0
    else:
        # Some op has no deterministic CUDA kernel (its name is in the warning): its sums vary in
        # the last bits from run to run, and Adam can magnify those in weights whose gradient is
        # near zero, so only the validation losses are compared, within 1 %.
        ours = [r["valid_loss"] for r in read_metrics(tmp_path / "resumed")]
        theirs = [r["valid_loss"] for r in read_metrics(tmp_path / "straight")]
        assert ours == pytest.approx(theirs, rel=1e-2), stderr


SOURCES = [text for text, _ in generate_dates(24, seed=41)]


def compare_decoding(model_path: Path, beam_size: int, device: str = "cuda") -> None:
    """The same texts on `device` as on the CPU, log-probabilities within 1e-3, greedy and beam, fp32."""
    on_cpu = Translator.load(model_path, device="cpu", precision="fp32")
    on_device = Translator.load(model_path, device=device, precision="fp32")
    assert on_device.device.type == torch.device(device).type
    cpu_nbest = on_cpu.translate_nbest(SOURCES, n_best=beam_size, beam_size=beam_size)
    device_nbest = on_device.translate_nbest(SOURCES, n_best=beam_size, beam_size=beam_size)
    for source, ours, theirs in zip(SOURCES, device_nbest, cpu_nbest):
        best_ours, best_theirs = ours[0], theirs[0]
        # Texts may differ only where two hypotheses tie within rounding (then either is right).
        if best_ours.text != best_theirs.text:
            assert abs(best_ours.log_prob - best_theirs.log_prob) < 1e-4, (source, best_ours, best_theirs)
        else:
            assert best_ours.log_prob == pytest.approx(best_theirs.log_prob, abs=1e-3), source
            if best_theirs.attention is not None:
                assert np.abs(best_ours.attention - best_theirs.attention).max(initial=0.0) < 1e-3, source
        # The n-best lists hold the same hypotheses with the same scores, up to such ties.
        assert [h.log_prob for h in ours] == pytest.approx([h.log_prob for h in theirs], abs=1e-3), source


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_rnn_decodes_on_the_gpu_as_on_the_cpu(dates_model, beam_size):
    compare_decoding(dates_model, beam_size)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_transformer_decodes_on_the_gpu_as_on_the_cpu(transformer_dates_model, beam_size):
    compare_decoding(transformer_dates_model, beam_size)


def test_bf16_decoding_on_the_gpu_stays_close_to_fp32(transformer_dates_model):
    bf16_or_skip()
    fp32 = Translator.load(transformer_dates_model, device="cuda", precision="fp32").translate(SOURCES)
    bf16 = Translator.load(transformer_dates_model, device="cuda", precision="bf16").translate(SOURCES)
    # bf16 keeps 8 bits of mantissa: most outputs agree, and their log-probabilities (about -6 for
    # this half-trained model) are close. On this project's CPU (AVX512-BF16): 22 of 24 agree, the
    # largest difference 0.06.
    same = [(a, b) for a, b in zip(fp32, bf16) if a.text == b.text]
    assert len(same) >= 0.75 * len(SOURCES)
    assert max(abs(a.log_prob - b.log_prob) for a, b in same) < 0.25


def test_int8_and_compile_are_refused_on_the_gpu_in_one_line(dates_model):
    with pytest.raises(AttnmtError, match="int8 runs on CPUs only; use bf16 on cuda"):
        Translator.load(dates_model, device="cuda", precision="int8").translate(SOURCES[:1])
    with pytest.raises(AttnmtError, match="--compile compiles the decoding step for CPUs"):
        Translator.load(dates_model, device="cuda", compile=True)


def recorded(tmp_path: Path, name: str, ranks: int, *overrides: str) -> tuple[list[float], dict, str]:
    """Each update's loss, the final weights and the other ranks' stderr of a run of the tiny
    Transformer under torchrun on `ranks` GPUs (tests/test_distributed.py's recorder)."""
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER, encoding="utf-8")
    values = gpu_config(tmp_path / name, "transformer")
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(values), encoding="utf-8")
    process = launch(ranks, str(config), str(tmp_path / f"{name}.json"), *overrides, script=str(script))
    _, err = process.communicate(timeout=900)
    assert process.returncode == 0, err
    return json.loads((tmp_path / f"{name}.json").read_text()), weights(tmp_path / name / "checkpoint.safetensors"), err


@two_gpus
def test_two_gpus_train_as_one_process_accumulating_the_same_two_parts(tmp_path):
    two, two_weights, rank1_writes = recorded(tmp_path, "two", 2)
    one, one_weights, _ = recorded(tmp_path, "acc", 1, "train.accumulate=2")
    assert len(two) == len(one) > 0
    # On CPUs (gloo) the two are bit-identical; NCCL's all-reduce of two gradients is one addition
    # too, but cuBLAS promises the same bits only within one process and stream, so allow rounding.
    assert max(abs(a - b) / abs(a) for a, b in zip(one, two)) < 1e-5
    assert max((one_weights[k] - two_weights[k]).abs().max().item() for k in one_weights) < 2e-5
    # The recorder prints the files rank 1 opened for writing; NCCL may print its own lines beside them.
    assert str(tmp_path) not in rank1_writes, f"rank 1 wrote files: {rank1_writes}"
