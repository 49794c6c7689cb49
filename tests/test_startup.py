"""Commands that answer at once: `attnmt --help`, each command's --help, --version, a wrong flag and a
config's mistakes answer without importing torch (issue 58). Each runs `attnmt.cli.main` in a fresh
interpreter and checks what it imported, never how long it took (bench/startup.py measures that)."""

import argparse
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import attnmt
from attnmt.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
# main's exit status, then whether torch was imported on the way.
PROBE = """
import sys
from attnmt.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit:
    status = exit.code
print(f"torch imported: {'torch' in sys.modules}", file=sys.stderr)
sys.exit(status)
"""
COMMANDS = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
ARGUMENT_ERRORS = [["--bogus"], ["translate", "model.safetensors", "--beam", "0"], ["translate", "--wat"],
                   ["explain", "m", "s", "--attribution", "nope"], ["export", "m", "out", "--to", "ctranslate2",
                                                                   "--quantization", "nope"], ["align", "m"]]
TATOEBA, TRANSFORMER = "configs/tatoeba_de_en.yaml", "configs/multi30k_de_en_transformer.yaml"
CONFIG_ERRORS = [
    (["train", "missing.yaml"], "config file not found"),
    (["train", "BAD_YAML"], "is not valid YAML"),
    (["train", TATOEBA, "model.atention=dot"], "unknown config key 'model.atention'"),
    (["train", TATOEBA, "train.epochs=0"], "train.epochs: 0 is out of range"),
    (["train", TATOEBA, "model.attention=foo"], "model.attention: 'foo' is not one of"),
    (["train", TATOEBA, "model.arch=nope"], "model.arch: 'nope' is not one of rnn, transformer"),
    (["train", TRANSFORMER, "model.heads=7"], "must be a multiple of model.heads"),
    (["prepare", TATOEBA, "vocab.min_freq=0"], "vocab.min_freq: 0 is out of range"),
    (["prepare", TATOEBA, "model.share_embeddings=true"], "model.share_embeddings needs vocab.joint"),
]


def run_main(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=REPO, timeout=600)


def assert_no_torch(result: subprocess.CompletedProcess) -> None:
    assert result.stderr.strip().splitlines()[-1] == "torch imported: False", result.stderr


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_answers_without_torch(command):
    result = run_main(*([command] if command else []), "--help")
    assert result.returncode == 0 and result.stdout.startswith(f"usage: attnmt {command or ''}".rstrip()), result.stderr
    assert_no_torch(result)


def test_version_answers_without_torch():
    result = run_main("--version")
    assert result.returncode == 0 and result.stdout == f"attnmt {attnmt.__version__}\n", result.stderr
    assert attnmt.__version__ == importlib.metadata.version("attnmt")    # pyproject.toml reads it from there
    assert_no_torch(result)


@pytest.mark.parametrize("args", ARGUMENT_ERRORS, ids=" ".join)
def test_an_argument_error_answers_without_torch(args):
    result = run_main(*args)
    assert result.returncode == 2 and "attnmt: error: " in result.stderr, result.stderr
    assert_no_torch(result)


@pytest.mark.parametrize("args,error", CONFIG_ERRORS, ids=[" ".join(args) for args, _ in CONFIG_ERRORS])
def test_a_config_error_answers_without_torch(args, error, tmp_path):
    (tmp_path / "bad.yaml").write_text("data: [\n", encoding="utf-8")
    result = run_main(*[str(tmp_path / "bad.yaml") if a == "BAD_YAML" else a for a in args])
    first = result.stderr.splitlines()[0]
    assert result.returncode == 2 and first.startswith("attnmt: error: ") and error in first, result.stderr
    assert_no_torch(result)


def test_the_package_loads_without_torch():
    """`import attnmt` loads neither torch nor the families (tests/test_house.py checks the config and the
    registry); Translator loads torch when first asked for."""
    probe = ("import sys; import attnmt; assert 'torch' not in sys.modules and 'attnmt.families' not in sys.modules; "
             "from attnmt import Translator; assert 'torch' in sys.modules and Translator.__module__ == 'attnmt.translate'")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr
