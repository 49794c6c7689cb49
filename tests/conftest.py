import contextlib
import dataclasses
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
import torch

from attnmt.configfile import config_from_dict
from attnmt.corpus.dates import generate_dates
from attnmt.fast.int8 import int8_products_exact
from attnmt.modelfile import read_model, save_model
from attnmt.training.train import train

# int8 decoding refuses to run where torch._int_mm is not exact (oneDNN without VNNI kernels).
needs_exact_int8 = pytest.mark.skipif(not int8_products_exact(), reason="this CPU's oneDNN int8 products are not "
                                      "exact (no VNNI kernels, e.g. under ONEDNN_MAX_CPU_ISA=AVX2)")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Prepared corpora, compiled steps and downloads of the tests' runs (subprocesses too) go to a
# folder of their own, removed at the end, not to the user's cache, unless ATTNMT_CACHE says where.
OWN_CACHE = None if os.environ.get("ATTNMT_CACHE") else tempfile.mkdtemp(prefix="attnmt-tests-cache-")
if OWN_CACHE:
    os.environ["ATTNMT_CACHE"] = OWN_CACHE


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if OWN_CACHE:
        shutil.rmtree(OWN_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def keep_torch_threads() -> Iterator[None]:
    """The commands a test runs in this process set torch's threads (--threads, train.threads auto);
    the next test starts with the count the suite started with."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


RNN_SIZES = {"enc_hidden": 32, "dec_hidden": 48, "attn_dim": 24}


def tiny_dates_config(out_dir: Path, **model) -> dict:
    """A model that trains on 1,500 generated dates in a few seconds (not to accuracy)."""
    return {
        "data": {"format": "dates", "num_pairs": 1500, "valid_size": 100, "test_size": 100},
        "tokenizer": {"level": "char"},
        "model": {"emb_dim": 16, "dropout": 0.0, **RNN_SIZES, **model} if model.get("arch", "rnn") == "rnn"
        else {"emb_dim": 16, "dropout": 0.0, **model},
        "train": {"out_dir": str(out_dir), "epochs": 2, "batch_size": 64, "lr": 0.005},
    }


@pytest.fixture(scope="session")
def dates_model(tmp_path_factory) -> Path:
    """Path of a small trained model file (char level, Bahdanau attention)."""
    out = tmp_path_factory.mktemp("dates_model")
    result = train(config_from_dict(tiny_dates_config(out)), log=lambda _: None)
    return result.model_path


@pytest.fixture(scope="session")
def no_attention_model(tmp_path_factory) -> Path:
    """The same small model without attention (model.attention=none)."""
    out = tmp_path_factory.mktemp("dates_none")
    return train(config_from_dict(tiny_dates_config(out, attention="none")), log=lambda _: None).model_path


@pytest.fixture(scope="session")
def transformer_dates_model(tmp_path_factory) -> Path:
    """A small Transformer trained on the same dates (2 + 2 layers, d 32, 4 heads)."""
    values = tiny_dates_config(tmp_path_factory.mktemp("transformer"), arch="transformer", emb_dim=32, heads=4,
                               ff_dim=64, enc_layers=2, dec_layers=2)
    values["train"].update(epochs=3, lr=0.003, scheduler="warmup", warmup_steps=40)
    return train(config_from_dict(values), log=lambda _: None).model_path


def relabelled(model: Path, folder: Path, source: str, target: str) -> Path:
    """A copy of `model` in `folder` (served under the folder's name) that says it translates `source`
    into `target`: models of several language pairs for a server, from one trained model."""
    description, weights, _ = read_model(model)
    data = dataclasses.replace(description.config.data, src_lang=source, source_languages="", tgt_lang=target)
    description = dataclasses.replace(description, config=dataclasses.replace(description.config, data=data))
    folder.mkdir(parents=True)
    save_model(folder / "model.safetensors", description, weights)
    return folder / "model.safetensors"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside the repository")
    return SHARED_DATA


def write_line_aligned(directory: Path, splits: dict[str, list[tuple[str, str]]], gz: bool = False) -> None:
    """Each split's pairs as two line-aligned files, Multi30k's way: `PREFIX.de` the sources,
    `PREFIX.en` the targets (`.gz` if `gz`)."""
    directory.mkdir(parents=True, exist_ok=True)
    for prefix, pairs in splits.items():
        for side, lang in ((0, "de"), (1, "en")):
            text = "".join(pair[side] + "\n" for pair in pairs).encode()
            name = directory / f"{prefix}.{lang}{'.gz' if gz else ''}"
            name.write_bytes(gzip.compress(text, mtime=0) if gz else text)


def write_dates_files(directory: Path, sizes: dict[str, int], gz: bool = False, seed: int = 1) -> None:
    """The dates corpus as line-aligned files (write_line_aligned): `PREFIX.de` the written dates,
    `PREFIX.en` their ISO dates, `sizes[PREFIX]` pairs each, no pair in two splits."""
    pairs, start, splits = generate_dates(sum(sizes.values()), seed), 0, {}
    for prefix, count in sizes.items():
        splits[prefix], start = pairs[start:start + count], start + count
    write_line_aligned(directory, splits, gz)


def write_dates_tsv(path: Path, count: int, seed: int = 1) -> list[tuple[str, str]]:
    """The dates corpus as a manythings file, Tatoeba's way (`English<TAB>Other<TAB>attribution`,
    gzip if the name ends in .gz): the ISO date first, the written date second, so that
    src_lang=de reads the written date as the source. Returns the (written, ISO) pairs."""
    pairs = generate_dates(count, seed)
    text = "".join(f"{iso}\t{written}\tCC-BY 2.0 (France) #{i}\n" for i, (written, iso) in enumerate(pairs)).encode()
    path.write_bytes(gzip.compress(text, mtime=0) if path.name.endswith(".gz") else text)
    return pairs


@contextlib.contextmanager
def server_process(model: Path, *flags: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`attnmt serve MODEL FLAGS --port 0` (FLAGS may name more models); yields the URL it prints and the process, whose stdout
    (the log) and stderr stay readable after it is stopped."""
    process = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", str(model), *flags, "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    try:
        # The models' lines come first, as each loads; then the address.
        while (line := process.stdout.readline()).startswith("attnmt serve: ") and " on http://" not in line:
            pass
        url = re.search(r"http://\S+:\d+/", line)
        if not url:  # stop it first: reading a running server's stderr would wait for ever
            process.terminate()
            raise AssertionError(f"no address in the log: {line!r}; stderr: {process.communicate(timeout=30)[1]}")
        yield url.group(), process
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def serving(model: Path, *flags: str) -> Iterator[str]:
    """`attnmt serve MODEL` on a free port of 127.0.0.1; yields its URL."""
    with server_process(model, *flags) as (url, _):
        yield url
