"""Every kind of bad input a user can give: one clear line on stderr, exit status 2, nothing lost."""

import errno
import gzip
import os
from pathlib import Path

from attnmt import cli, files

TSV_OK = "".join(f"Sentence {i}.\tSatz {i}.\n" for i in range(40))


def run_cli(capsys, *args: str) -> str:
    """Run the CLI in-process; assert the one-line error contract and return that line."""
    code = cli.main(list(args))
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnmt: error: "), err
    return lines[0]


def tsv_config(tmp_path, data_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(
        f"data:\n  format: tsv\n  path: {data_path}\n  src_lang: de\n  tgt_lang: en\n  valid_size: 5\n  test_size: 5\n"
        f"model:\n  emb_dim: 8\n  enc_hidden: 8\n  dec_hidden: 16\n  attn_dim: 8\n"
        f"train:\n  out_dir: {tmp_path / 'out'}\n  epochs: 1\n", encoding="utf-8")
    return path


# --- data files -----------------------------------------------------------------------------

def test_missing_data_file(tmp_path, capsys):
    line = run_cli(capsys, "train", str(tsv_config(tmp_path, tmp_path / "nope.tsv")))
    assert "nope.tsv: file not found" in line


def test_empty_data_file(tmp_path, capsys):
    data = tmp_path / "empty.tsv"
    data.write_text("")
    assert "no sentence pairs" in run_cli(capsys, "train", str(tsv_config(tmp_path, data)))


def test_directory_instead_of_data_file(tmp_path, capsys):
    assert "not a regular file" in run_cli(capsys, "train", str(tsv_config(tmp_path, tmp_path)))


def test_binary_data_file(tmp_path, capsys):
    data = tmp_path / "binary.tsv"
    data.write_bytes(TSV_OK.encode() + b"\x00\x01\x02\tabc\n")
    line = run_cli(capsys, "train", str(tsv_config(tmp_path, data)))
    assert f"{data}:41" in line and "binary" in line


def test_non_utf8_data_file(tmp_path, capsys):
    data = tmp_path / "latin1.tsv"
    data.write_bytes(TSV_OK.encode() + "Grüße\tGreetings\n".encode("latin-1"))
    line = run_cli(capsys, "train", str(tsv_config(tmp_path, data)))
    assert f"{data}:41" in line and "UTF-8" in line


def test_corrupt_gzip_data_file(tmp_path, capsys):
    data = tmp_path / "cut.tsv.gz"
    data.write_bytes(gzip.compress(TSV_OK.encode() * 50)[:200])
    assert "cannot read" in run_cli(capsys, "train", str(tsv_config(tmp_path, data)))


def test_tsv_with_too_few_columns(tmp_path, capsys):
    data = tmp_path / "one.tsv"
    data.write_text(TSV_OK + "only one column\n", encoding="utf-8")
    line = run_cli(capsys, "train", str(tsv_config(tmp_path, data)))
    assert f"{data}:41" in line and "found 1" in line


def test_only_empty_pairs(tmp_path, capsys):
    data = tmp_path / "blank.tsv"
    data.write_text("\u200b\t\u00ad\n" * 40, encoding="utf-8")  # invisible characters only
    assert "no usable training pairs" in run_cli(capsys, "train", str(tsv_config(tmp_path, data)))


# --- configs -------------------------------------------------------------------------------

def test_missing_config(tmp_path, capsys):
    assert "config file not found" in run_cli(capsys, "train", str(tmp_path / "none.yaml"))


def test_config_unknown_key_lists_valid_ones(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  hidden: 5\n", encoding="utf-8")
    line = run_cli(capsys, "train", str(path))
    assert "model.hidden" in line and "enc_hidden" in line and "dec_hidden" in line


def test_config_wrong_type(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  epochs: many\n", encoding="utf-8")
    line = run_cli(capsys, "train", str(path))
    assert "train.epochs" in line and "integer" in line


def test_config_invalid_yaml(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  rnn: [gru\n", encoding="utf-8")
    assert "not valid YAML" in run_cli(capsys, "train", str(path))


def test_bad_override(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  format: dates\n", encoding="utf-8")
    assert "model.attention" in run_cli(capsys, "train", str(path), "model.attention=magic")


# --- model files ---------------------------------------------------------------------------

def test_model_truncated(dates_model, tmp_path, capsys):
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(dates_model.read_bytes()[:-50])
    assert str(cut) in run_cli(capsys, "translate", str(cut))


def test_model_bit_flip_is_detected(dates_model, tmp_path, capsys):
    data = bytearray(dates_model.read_bytes())
    data[-100] ^= 0x40  # inside the weights, past the header
    flipped = tmp_path / "flipped.safetensors"
    flipped.write_bytes(bytes(data))
    assert "corrupted" in run_cli(capsys, "translate", str(flipped))


def test_model_from_another_program(tmp_path, capsys):
    other = tmp_path / "model.bin"
    other.write_bytes(os.urandom(4096))
    assert "not an attnmt model file" in run_cli(capsys, "translate", str(other))


def test_model_empty_file(tmp_path, capsys):
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    assert "not an attnmt model file" in run_cli(capsys, "plot", str(empty), "x", "--out", str(tmp_path / "p.png"))


# --- inputs and outputs ---------------------------------------------------------------------

def test_demo_into_a_folder_with_a_model_names_the_demo_flags(tmp_path, capsys):
    model = tmp_path / "model.safetensors"
    model.write_bytes(b"an earlier demo's model")
    line = run_cli(capsys, "demo", "--out", str(tmp_path))
    assert "already holds a model" in line and "--overwrite" in line and "--out" in line
    assert "--resume" not in line and "train.out_dir" not in line  # train's flags, which the demo does not take
    assert model.read_bytes() == b"an earlier demo's model"


def test_translate_missing_input(dates_model, tmp_path, capsys):
    assert "file not found" in run_cli(capsys, "translate", str(dates_model), "-i", str(tmp_path / "none.txt"))


def test_plot_output_in_missing_directory(dates_model, tmp_path, capsys):
    out = tmp_path / "missing" / "p.png"
    assert "does not exist" in run_cli(capsys, "plot", str(dates_model), "March 3, 2021", "--out", str(out))
    assert not out.parent.exists()


def test_plot_empty_sentence(dates_model, tmp_path, capsys):
    assert "nothing to plot" in run_cli(capsys, "plot", str(dates_model), "   ", "--out", str(tmp_path / "p.png"))


def test_evaluate_mismatched_files(dates_model, tmp_path, capsys):
    src, ref = tmp_path / "s.txt", tmp_path / "r.txt"
    src.write_text("a\nb\n", encoding="utf-8")
    ref.write_text("a\n", encoding="utf-8")
    line = run_cli(capsys, "evaluate", str(dates_model), "--src", str(src), "--ref", str(ref))
    assert line == f"attnmt: error: --src {src} has 2 lines but --ref {ref} has 1: they pair line by line"


def test_full_disk_keeps_the_old_file(dates_model, tmp_path, capsys, monkeypatch):
    target = tmp_path / "out.txt"
    target.write_text("previous output\n", encoding="utf-8")
    src = tmp_path / "in.txt"
    src.write_text("March 3, 2021\n", encoding="utf-8")

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", no_space)
    line = run_cli(capsys, "translate", str(dates_model), "-i", str(src), "-o", str(target))
    assert "No space left on device" in line
    assert target.read_text(encoding="utf-8") == "previous output\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# --- empty, tiny and odd inputs ------------------------------------------------------------

def test_evaluate_empty_files(dates_model, tmp_path, capsys):
    src, ref = tmp_path / "s.txt", tmp_path / "r.txt"
    src.write_bytes(b"")
    ref.write_bytes(b"")
    line = run_cli(capsys, "evaluate", str(dates_model), "--src", str(src), "--ref", str(ref))
    assert "nothing to score" in line and str(src) in line


def test_plot_of_a_very_long_sentence(dates_model, tmp_path, capsys):
    out = tmp_path / "long.png"
    sentence = "Saturday, March 14, 2026 " * 20  # 500 characters: cut to decode.max_src_len tokens
    assert cli.main(["plot", str(dates_model), sentence, "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(out.read_bytes()) < 5_000_000  # the figure's size is capped, labels thinned


def test_train_on_a_corpus_smaller_than_a_batch(tmp_path, capsys):
    data = tmp_path / "tiny.tsv"
    data.write_text(TSV_OK[: TSV_OK.index("Sentence 12.")], encoding="utf-8")  # 12 pairs
    config = tsv_config(tmp_path, data)
    assert cli.main(["train", str(config), "data.valid_size=2", "data.test_size=2", "train.batch_size=64"]) == 0
    out = capsys.readouterr().out
    assert "8 training pairs" in out
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_every_pair_filtered_out_by_max_len(tmp_path, capsys):
    data = tmp_path / "long.tsv"
    data.write_text(TSV_OK, encoding="utf-8")  # every sentence has 3 word tokens
    line = run_cli(capsys, "train", str(tsv_config(tmp_path, data)), "data.max_len=2")
    assert "no usable training pairs" in line and "data.max_len=2" in line
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_every_validation_pair_filtered_out_by_max_len(tmp_path, capsys):
    # Parallel files: the validation split is given, not drawn by the seeded shuffle.
    train_de, train_en = tmp_path / "train.de", tmp_path / "train.en"
    train_de.write_text("ein Satz\n" * 20, encoding="utf-8")
    train_en.write_text("a sentence\n" * 20, encoding="utf-8")
    for split in ("val", "test"):
        (tmp_path / f"{split}.de").write_text("ein viel zu langer Satz für max_len\n", encoding="utf-8")
        (tmp_path / f"{split}.en").write_text("a sentence far too long for max_len\n", encoding="utf-8")
    config = tmp_path / "p.yaml"
    config.write_text(f"data:\n  format: parallel\n  path: {tmp_path}\n  test_prefix: test\n  max_len: 3\n"
                      f"model:\n  emb_dim: 8\n  enc_hidden: 8\n  dec_hidden: 16\n  attn_dim: 8\n"
                      f"train:\n  out_dir: {tmp_path / 'out'}\n  epochs: 1\n", encoding="utf-8")
    line = run_cli(capsys, "train", str(config))
    assert "no usable validation pairs" in line and "data.max_len=3" in line
