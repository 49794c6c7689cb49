"""Every config value and every numeric or choice CLI flag is checked at the door: a wrong-typed or
out-of-range value gets exit status 2, exactly one line on stderr, no traceback, nothing written."""

from __future__ import annotations

import argparse
import dataclasses
import typing

import pytest

from attnmt import cli
from attnmt.config import SECTIONS, Config, Range

# A valid config that never trains here: each case breaks one key on the command line.
BASE_CONFIG = "data:\n  format: dates\ntrain:\n  out_dir: {out}\n"
# What each command needs besides the flag under test (argparse checks flags before running it).
POSITIONALS = {"demo": [], "train": ["{config}"], "prepare": ["{config}"], "translate": ["m.safetensors"],
               "evaluate": ["m.safetensors"],
               "plot": ["m.safetensors", "a sentence", "--out", "p.png"], "serve": ["m.safetensors"],
               "explain": ["m.safetensors", "a sentence"], "export": ["m.safetensors", "out", "--to", "ctranslate2"],
               "import": ["folder", "--out", "m.safetensors"],
               "average": ["a.safetensors", "b.safetensors", "--out", "m.safetensors"],
               "info": ["m.safetensors"], "plot-curves": ["run", "--out", "c.png"],
               "align": ["m.safetensors", "--src", "s.txt", "--tgt", "t.txt"],
               "train-aligner": ["m.safetensors", "--src", "s.txt", "--tgt", "t.txt", "--out", "a.safetensors"]}


def run(capsys, argv: list[str]) -> tuple[int, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse exits by itself
        code = exit_.code
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, *named: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("attnmt: error: "), err
    assert "Traceback" not in err
    for name in named:
        assert name in lines[0], (name, lines[0])


def out_of_range(kind: type, allowed: Range) -> list:
    """Values just outside `allowed` at each finite end, and a non-finite one for floats."""
    low, high, low_in, high_in = allowed.bounds
    step = 1 if kind is int else 1e-3
    values = []
    if low != float("-inf"):
        values.append(kind(low - step) if low_in else kind(low))
    if high != float("inf"):
        values.append(kind(high + step) if high_in else kind(high))
    return values + ([float("nan")] if kind is float else [])


def config_cases() -> list[tuple[str, str]]:
    """(dotted key, bad value as the command line writes it) for every field of every section."""
    cases = []
    for section in SECTIONS:
        cls = typing.get_type_hints(Config)[section]
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key, hint = f"{section}.{f.name}", hints[f.name]
            if typing.get_origin(hint) is typing.Literal:
                cases += [(key, "not-a-choice"), (key, "[1, 2]")]
            elif hint is bool:
                cases += [(key, "maybe"), (key, "3")]
            elif hint is str:
                cases += [(key, "[1, 2]"), (key, "{a: 1}")]
            elif typing.get_origin(hint) is list:
                cases += [(key, "not-a-list"), (key, "[[1, 2]]")]
            else:
                assert hint in (int, float) and "range" in f.metadata, f"{key}: a number without a range"
                cases += [(key, "abc"), (key, "[1]")] + [(key, repr(v)) for v in out_of_range(hint, f.metadata["range"])]
                cases += [(key, "1.5")] if hint is int else []
    return cases


CONFIG_CASES = config_cases()


def test_the_walk_covers_every_section():
    sections = {key.split(".")[0] for key, _ in CONFIG_CASES}
    assert sections == set(SECTIONS) == {f.name for f in dataclasses.fields(Config)} - {"given"}
    every_field = [f"{s}.{f.name}" for s in SECTIONS for f in dataclasses.fields(typing.get_type_hints(Config)[s])]
    assert {key for key, _ in CONFIG_CASES} == set(every_field) and len(every_field) >= 60


@pytest.mark.parametrize("key,value", CONFIG_CASES, ids=[f"{k}={v}" for k, v in CONFIG_CASES])
def test_every_config_value_is_checked(tmp_path, capsys, key, value):
    config = tmp_path / "c.yaml"
    config.write_text(BASE_CONFIG.format(out=tmp_path / "out"), encoding="utf-8")
    before = set(tmp_path.iterdir())
    code, err = run(capsys, ["train", str(config), f"{key}={value}"])
    # A string key such as data.path takes any scalar; a wrong one for it fails later, still in one line.
    assert_refused(code, err, key)
    assert set(tmp_path.iterdir()) == before  # nothing written


def flag_cases() -> list[tuple[str, str, str]]:
    """(command, flag, bad value) for every flag that takes a number or a choice."""
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == set(POSITIONALS)
    cases = []
    for name, sub in commands.items():
        for action in sub._actions:
            if not action.option_strings:
                continue
            flag = action.option_strings[0]
            if isinstance(action.type, cli.Number):
                cases += [(name, flag, "abc")] + [(name, flag, repr(v)) for v in out_of_range(action.type.kind,
                                                                                             action.type.range)]
            elif action.choices:
                cases.append((name, flag, "not-a-choice"))
            elif action.type in (int, float):
                raise AssertionError(f"{name} {flag}: a number flag without a range")
    return cases


FLAG_CASES = flag_cases()


@pytest.mark.parametrize("typed, named", [("trian", " (did you mean train?)"), ("plot-curve", " (did you mean plot-curves?)"),
                                          ("xyz", "; the commands are demo, train, prepare, translate")])
def test_a_mistyped_command_gets_the_nearest_named(capsys, typed, named):
    code, err = run(capsys, [typed, "c.yaml"])
    assert_refused(code, err, f"unknown command {typed!r}{named}")
    assert "invalid choice" not in err


def test_the_walk_covers_the_number_flags():
    flags = {(command, flag) for command, flag, _ in FLAG_CASES}
    assert {("translate", "--beam"), ("translate", "--n-best"), ("translate", "--batch-size"),
            ("evaluate", "--alpha"), ("serve", "--port"), ("serve", "--max-chars"), ("serve", "--timeout-s"),
            ("plot", "--precision"), ("evaluate", "--split")} <= flags


@pytest.mark.parametrize("command,flag,value", FLAG_CASES, ids=[" ".join(c) for c in FLAG_CASES])
def test_every_cli_flag_is_checked(tmp_path, capsys, monkeypatch, command, flag, value):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text(BASE_CONFIG.format(out=tmp_path / "out"), encoding="utf-8")
    before = set(tmp_path.iterdir())
    positionals = [p.format(config=config) for p in POSITIONALS[command]]
    code, err = run(capsys, [command, *positionals, flag, value])
    assert_refused(code, err, flag)
    assert set(tmp_path.iterdir()) == before


def test_n_best_above_the_beam_names_both_flags(dates_model, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("March 3, 2021\n", encoding="utf-8")
    code, err = run(capsys, ["translate", str(dates_model), "-i", str(src), "--n-best", "3", "--beam", "2",
                             "-o", str(tmp_path / "out.txt")])
    assert_refused(code, err, "--n-best: 3 is more than the beam (2)", "ask for --beam 3 or more")
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("device", ["tpu", "nonsense", "cuda:99"])
def test_bad_device_is_one_line(dates_model, capsys, device):
    code, err = run(capsys, ["plot", str(dates_model), "March 3, 2021", "--out", "unused.png", "--device", device])
    assert_refused(code, err, repr(device))


def test_a_mistyped_flag_gets_one_prefix_and_the_nearest_flag(capsys):
    code, err = run(capsys, ["translate", "m.safetensors", "--beam-size", "5"])
    assert_refused(code, err, "unrecognized arguments: --beam-size 5 (did you mean --beam?)", "attnmt translate --help")
    assert not err.startswith("attnmt: error: attnmt")


def test_a_mistyped_command_is_said_with_one_prefix(capsys):
    code, err = run(capsys, ["import-model"])
    assert_refused(code, err, "unknown command 'import-model' (did you mean import?)")
    assert not err.startswith("attnmt: error: attnmt")
