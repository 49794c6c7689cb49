"""The `attnmt` command end to end, on generated dates and on real Tatoeba and Multi30k pairs from ../shared/data."""

import gzip
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from conftest import SHARED_DATA, write_dates_files, write_dates_tsv

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = ["model.emb_dim=32", "model.enc_hidden=32", "model.dec_hidden=64", "model.attn_dim=32",
              "model.dropout=0.0", "vocab.min_freq=1"]


def attnmt(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable, "-m", "attnmt", *args], input=stdin, capture_output=True,
                          text=True, cwd=cwd or REPO, env=env, timeout=600)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnmt: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


class RecipeModel(NamedTuple):
    """A model `attnmt train` made with the Tatoeba recipe, and two (source, reference) pairs of its languages."""
    path: Path
    pairs: list[tuple[str, str]]


@pytest.fixture(scope="module", params=["dates", pytest.param("tatoeba", marks=pytest.mark.slow)])  # real data: slow
def recipe_model(request, tmp_path_factory) -> RecipeModel:
    """The recipe trained on 1,000 generated dates written as a manythings file, or on the first 4,000
    pairs of the real Tatoeba deu-eng (which skips without ../shared/data)."""
    out = tmp_path_factory.mktemp(request.param)
    if request.param == "dates":
        data = out / "dates.txt.gz"
        write_dates_tsv(data, 1000)
        held_out = ["data.valid_size=100", "data.test_size=100"]
        pairs = [("3. Oktober 1990", "1990-10-03"), ("March 4, 2021", "2021-03-04")]
    else:
        data = SHARED_DATA / "tatoeba_deu_eng" / "deu.txt.gz"
        if not data.exists():
            pytest.skip("../shared/data is not beside the repository")
        held_out = ["data.max_pairs=4000", "data.valid_size=300", "data.test_size=300"]
        pairs = [("Ich bin müde.", "I'm tired."), ("Tom ist hier.", "Tom is here.")]
    result = attnmt("train", "configs/tatoeba_de_en.yaml", f"data.path={data}", *held_out, "train.epochs=3",
                    "train.batch_size=64", "train.batch_type=sentences", f"train.out_dir={out}", *TINY_MODEL)
    assert result.returncode == 0, result.stderr
    epochs = [line for line in result.stdout.splitlines() if "valid_ppl" in line]
    assert len(epochs) == 3
    first, last = (float(e.split("valid_ppl ")[1].split()[0]) for e in (epochs[0], epochs[-1]))
    assert last < first, result.stdout  # it learned something
    assert "test: exact" in result.stdout
    assert f"saved: {out / 'model.safetensors'}, the model kept by validation loss" in result.stdout  # where it went
    return RecipeModel(out / "model.safetensors", pairs)


def test_train_writes_model_and_checkpoint(recipe_model):
    from attnmt.modelfile import read_checkpoint, read_model

    progress = read_checkpoint(recipe_model.path.parent / "checkpoint.safetensors").progress
    assert (progress["epoch"], progress["batch_in_epoch"]) == (4, 0)  # at the end of its 3 epochs
    best = min(progress["history"], key=lambda record: record["valid_loss"])  # train.select_by: loss
    assert read_model(recipe_model.path)[2]["training"]["epoch"] == best["epoch"]


def test_translate_stdin_to_stdout(recipe_model):
    (first, _), (second, _) = recipe_model.pairs
    lines = [first, "", second]
    result = attnmt("translate", str(recipe_model.path), stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout.split("\n")
    assert len(out) == len(lines) + 1 and out[-1] == ""  # one line out per line in
    assert out[1] == "" and out[0] and out[2]
    assert result.stderr == ""  # the recipe decodes with precision auto, which only --verbose reports
    # A training run's folder stands for its model; sentences may come as arguments; --verbose says
    # the threads and the precision chosen, on stderr, after the work.
    given = attnmt("translate", str(recipe_model.path.parent), first, second, "--verbose")
    assert given.returncode == 0, given.stderr
    assert given.stdout.splitlines() == [out[0], out[2]]
    said = given.stderr.splitlines()
    assert len(said) == 2 and said[0].startswith("attnmt: threads: "), given.stderr
    assert said[1].startswith("attnmt: precision: decode.precision "), given.stderr


def test_sentences_as_arguments_and_input_file_are_refused_together(recipe_model, tmp_path):
    source = tmp_path / "in.de"
    source.write_text("Hallo.\n", encoding="utf-8")
    result = attnmt("translate", str(recipe_model.path), "Hallo.", "--input", str(source))
    assert_one_line_error(result, "sentences as arguments or --input FILE, not both")


def test_more_translations_than_the_beam_keeps_are_refused_in_one_line(dates_model, tmp_path, capsys):
    """The same check for the CLI (in its flags' names, before the input is read) and the Python API."""
    from attnmt.cli import main
    from attnmt.errors import AttnmtError
    from attnmt.translate import Translator

    assert main(["translate", str(dates_model), "--input", str(tmp_path / "missing.txt"), "--beam", "2",
                 "--n-best", "3", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err == "attnmt: error: --n-best: 3 is more than the beam (2); ask for --beam 3 or more\n"
    translator = Translator.load(dates_model, "cpu")
    with pytest.raises(AttnmtError, match=r"^n_best: 3 is more than the beam \(2\); ask for beam_size 3 or more$"):
        translator.translate_nbest(["1 May 2000"], 3, beam_size=2)
    with pytest.raises(AttnmtError, match=r"^n_best: 0; ask for 1 or more$"):
        translator.translate_nbest(["1 May 2000"], 0)


def test_a_folder_without_a_model_is_one_line(tmp_path):
    for command in (["translate"], ["info"], ["explain"]):
        result = attnmt(*command, str(tmp_path), *(["a sentence"] if command == ["explain"] else []))
        assert_one_line_error(result, f"{tmp_path}: a folder without model.safetensors",
                              "train.out_dir/model.safetensors")


def test_translate_files(recipe_model, tmp_path):
    src = tmp_path / "in.de"
    src.write_text("".join(source + "\n" for source, _ in recipe_model.pairs), encoding="utf-8")
    dst = tmp_path / "out.en"
    result = attnmt("translate", str(recipe_model.path), "--input", str(src), "--output", str(dst))
    assert result.returncode == 0, result.stderr
    assert len(dst.read_text(encoding="utf-8").splitlines()) == 2


def test_translate_output_into_missing_directory(recipe_model, tmp_path):
    src = tmp_path / "in.de"
    src.write_text("Hallo!\n", encoding="utf-8")
    result = attnmt("translate", str(recipe_model.path), "-i", str(src), "-o", str(tmp_path / "no" / "out.txt"))
    assert_one_line_error(result, "does not exist")


def test_translate_non_utf8_input(recipe_model, tmp_path):
    src = tmp_path / "in.de"
    src.write_bytes(b"Hallo!\nGr\xfc\xdfe\n")
    assert_one_line_error(attnmt("translate", str(recipe_model.path), "-i", str(src)), f"{src}:2", "UTF-8")


def test_plot_cli(recipe_model, tmp_path):
    out = tmp_path / "heat.png"
    result = attnmt("plot", str(recipe_model.path), recipe_model.pairs[0][0], "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_evaluate_cli(recipe_model, tmp_path):
    src, ref = tmp_path / "s.de", tmp_path / "r.en"
    src.write_text("".join(source + "\n" for source, _ in recipe_model.pairs), encoding="utf-8")
    ref.write_text("".join(reference + "\n" for _, reference in recipe_model.pairs), encoding="utf-8")
    result = attnmt("evaluate", str(recipe_model.path), "--src", str(src), "--ref", str(ref))
    assert result.returncode == 0, result.stderr
    for key in ("exact: ", "bleu: ", "length_ratio: ", "chrf: ", "bleu_signature: nrefs:1"):
        assert key in result.stdout, result.stdout


def test_train_refuses_to_overwrite_a_model(recipe_model, tmp_path):
    before = recipe_model.path.read_bytes()
    write_dates_tsv(tmp_path / "pairs.txt", 300)
    result = attnmt("train", "configs/tatoeba_de_en.yaml", f"train.out_dir={recipe_model.path.parent}",
                    f"data.path={tmp_path / 'pairs.txt'}")
    assert_one_line_error(result, "already holds a model", "--overwrite")
    assert recipe_model.path.read_bytes() == before


@pytest.mark.parametrize("corpus", ["dates", "multi30k"])
def test_train_on_multi30k_parallel_files(request, tmp_path, corpus):
    data = tmp_path / corpus
    sizes = {"train": 1000, "val": 100, "test_2016_flickr": 100}
    if corpus == "dates":
        write_dates_files(data, sizes, gz=True)
    else:  # the first lines of the real gzipped files (all of them would take minutes)
        shared_data = request.getfixturevalue("shared_data")
        data.mkdir()
        for split, count in sizes.items():
            for lang in ("de", "en"):
                with gzip.open(shared_data / "multi30k" / f"{split}.{lang}.gz", "rb") as full:
                    head = b"".join(line for _, line in zip(range(count), full))
                (data / f"{split}.{lang}.gz").write_bytes(gzip.compress(head))
    result = attnmt("train", "configs/multi30k_de_en.yaml", f"data.path={data}", "train.epochs=1",
                    f"train.out_dir={tmp_path / 'out'}", *TINY_MODEL)
    assert result.returncode == 0, result.stderr
    assert "1000 training pairs" in result.stdout and "100 valid, 100 test" in result.stdout


def test_mismatched_parallel_files(tmp_path):
    for name, lines in [("train.de", 3), ("train.en", 2), ("val.de", 1), ("val.en", 1),
                        ("test_2016_flickr.de", 1), ("test_2016_flickr.en", 1)]:
        (tmp_path / name).write_text("ein Satz\n" * lines, encoding="utf-8")
    result = attnmt("train", "configs/multi30k_de_en.yaml", f"data.path={tmp_path}",
                    f"train.out_dir={tmp_path / 'out'}")
    assert_one_line_error(result, "train.en ends after line 2", "train.de goes on at line 3")


def test_unknown_config_key(tmp_path):
    result = attnmt("train", "configs/tatoeba_de_en.yaml", "model.atention=dot", "data.path=x")
    assert_one_line_error(result, "model.atention", "attention")


def test_missing_model_file(tmp_path):
    assert_one_line_error(attnmt("translate", str(tmp_path / "none.safetensors"), stdin="x\n"), "not found")


def test_debug_shows_traceback(tmp_path):
    result = attnmt("--debug", "translate", str(tmp_path / "none.safetensors"), stdin="x\n")
    assert result.returncode == 2 and "Traceback" in result.stderr


@pytest.mark.parametrize("level,joint", [("bpe", "true"), ("unigram", "false")])
@pytest.mark.parametrize("corpus", ["dates", pytest.param("tatoeba", marks=pytest.mark.slow)])
def test_subword_model_trains_and_detokenizes(tmp_path, corpus, level, joint):
    if corpus == "dates":  # 800 training pairs: enough for 200 pieces on either side
        data, vocab_size, sentence = tmp_path / "dates.txt", 200, "Montag, 3. Oktober 1990"
        write_dates_tsv(data, 1000)
    else:
        data, vocab_size, sentence = SHARED_DATA / "tatoeba_deu_eng" / "deu.txt.gz", 600, "Ich bin müde."
        if not data.exists():
            pytest.skip("../shared/data is not beside the repository")
    result = attnmt("train", "configs/tatoeba_de_en.yaml", f"data.path={data}", "data.max_pairs=3000",
                    "data.valid_size=100", "data.test_size=100", "train.epochs=1", "train.batch_size=64",
                    "train.batch_type=sentences", f"train.out_dir={tmp_path / 'out'}", f"tokenizer.level={level}",
                    f"tokenizer.joint={joint}", f"tokenizer.vocab_size={vocab_size}", *TINY_MODEL)
    assert result.returncode == 0, result.stderr
    from attnmt import Translator

    model = tmp_path / "out" / "model.safetensors"
    translator = Translator.load(model)
    assert (translator.src_tokenizer is translator.tgt_tokenizer) == (joint == "true")
    for tokenizer in (translator.src_tokenizer, translator.tgt_tokenizer):  # the corpus has pieces for more
        assert tokenizer.level == level and len(tokenizer.pieces()) == vocab_size
    pieces = translator.src_tokenizer.tokenize(sentence)
    assert pieces[0].startswith("\u2581") and translator.src_tokenizer.detokenize(pieces) == sentence
    out = attnmt("translate", str(model), stdin=sentence + "\n")
    assert out.returncode == 0 and "\u2581" not in out.stdout


# --- streaming translation (the small dates model; CHUNK made small to cross chunk boundaries) ------

DATE_LINES = ["March 3, 2021", "", "3. Oktober 1990", "12/25/2031", "the 1st of May 1999"]


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("to_file", [True, False])
@pytest.mark.parametrize("n_best", [1, 2])
def test_translate_streams_chunk_by_chunk(dates_model, tmp_path, monkeypatch, capsys, to_file, n_best):
    from attnmt import Translator, cli, translate

    nbests = Translator.load(dates_model).translate_nbest(DATE_LINES * 2, n_best, beam_size=3)
    if n_best == 1:
        expected = "".join(hyps[0].text + "\n" for hyps in nbests)
    else:
        expected = "".join(f"{i} ||| {h.text} ||| " for i, hyps in enumerate(nbests) for h in hyps)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(line + "\n" for line in DATE_LINES * 2), encoding="utf-8")
    monkeypatch.setattr(translate, "CHUNK", 1)  # 5 chunks of 2 lines
    args = ["translate", str(dates_model), "-i", str(src), "--batch-size", "2", "--beam", "3", "--n-best", str(n_best)]
    assert cli.main(args + (["-o", str(out)] if to_file else [])) == 0
    written = out.read_text(encoding="utf-8") if to_file else capsys.readouterr().out
    if n_best > 1:  # log-probabilities differ in the last digits from batch to batch
        written = "".join(line.rsplit("||| ", 1)[0] + "||| " for line in written.splitlines())
    assert written == expected


def test_translate_empty_input_writes_empty_output(dates_model, tmp_path):
    from attnmt import cli

    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_bytes(b"")
    assert cli.main(["translate", str(dates_model), "-i", str(src), "-o", str(out)]) == 0
    assert out.read_bytes() == b"" and not temp_files(tmp_path)


def test_translate_refuses_a_giant_line(dates_model, tmp_path, monkeypatch, capsys):
    from test_bad_input import run_cli

    giant = b"March 3, 2021\n" + b"1" * (2 << 20)  # 2 MiB and no line end
    src, out = tmp_path / "big.txt", tmp_path / "out.txt"
    src.write_bytes(giant)
    line = run_cli(capsys, "translate", str(dates_model), "-i", str(src), "-o", str(out))
    assert f"{src}:2: line longer than 1 MiB" in line
    assert not out.exists() and not temp_files(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(giant)))
    assert "<stdin>:2: line longer than 1 MiB" in run_cli(capsys, "translate", str(dates_model), "-o", str(out))
    assert not out.exists() and not temp_files(tmp_path)


def test_translate_failing_midway_keeps_the_existing_output(dates_model, tmp_path, monkeypatch, capsys):
    from test_bad_input import run_cli

    from attnmt import translate

    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_bytes(b"March 3, 2021\n12/25/2031\n3. Oktober 1990\nGr\xfc\xdfe\n")
    out.write_text("previous output\n", encoding="utf-8")
    monkeypatch.setattr(translate, "CHUNK", 1)  # the first chunk is written before line 4 is read
    line = run_cli(capsys, "translate", str(dates_model), "-i", str(src), "-o", str(out), "--batch-size", "2")
    assert f"{src}:4: not valid UTF-8" in line
    assert out.read_text(encoding="utf-8") == "previous output\n" and not temp_files(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_translation_leaves_no_output(dates_model, tmp_path, sig):
    out = tmp_path / "out.txt"
    process = subprocess.Popen([sys.executable, "-m", "attnmt", "translate", str(dates_model), "-o", str(out)],
                               stdin=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    process.stdin.write(b"March 3, 2021\n" * 10)  # and the input stays open: translating is under way
    process.stdin.flush()
    deadline = time.monotonic() + 120
    while not temp_files(tmp_path) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert temp_files(tmp_path), process.stderr.read() if process.poll() is not None else "no temporary file"
    process.send_signal(sig)
    assert process.wait(timeout=60) == (-sig if sig == signal.SIGKILL else 128 + sig)
    process.stdin.close()
    process.stderr.close()
    assert not out.exists()
    if sig == signal.SIGTERM:  # a SIGKILL cannot be caught: its hidden temporary file stays
        assert not temp_files(tmp_path)
