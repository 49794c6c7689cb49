"""Prepared corpora: the same examples, vocabularies and held-out pairs as reading the corpus in
memory; reuse and rebuilding; workers; filters; bad lines counted; failures that leave nothing behind."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA, write_dates_files, write_dates_tsv, write_line_aligned

from attnmt.configfile import config_from_dict
from attnmt.corpus import prepare
from attnmt.corpus.prepare import LOCKS, find_corpus, load_split, open_corpus, prepare_corpus
from attnmt.corpus.readers import load_corpus
from attnmt.corpus.store import META_FILE, PreparedCorpus, StoreWriter
from attnmt.errors import AttnmtError
from attnmt.tokenize import SubwordTokenizer, make_tokenizer
from attnmt.training.resume import find_start
from attnmt.vocab import Tokenization, Vocabulary


def write_parallel(directory: Path, pairs: list[tuple[str, str]], prefix: str = "train") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for side, lang in ((0, "de"), (1, "en")):
        (directory / f"{prefix}.{lang}").write_bytes("".join(p[side] + "\n" for p in pairs).encode())


def small_corpus(directory: Path, count: int = 300) -> Path:
    """Line-aligned train/val/test files of made-up sentences of varied lengths."""
    words = "der die das ein Hund Katze läuft schnell über Wiese und Mann Frau liest Buch".split()
    pairs = [(" ".join(words[(i * 7 + k) % len(words)] for k in range(1 + i % 9)),
              " ".join(words[(i * 3 + k) % len(words)].upper() for k in range(1 + (i * 5) % 11))) for i in range(count)]
    write_parallel(directory, pairs)
    write_parallel(directory, pairs[:20], "val")
    write_parallel(directory, pairs[20:40], "test_2016_flickr")
    return directory


def left_in(root: Path) -> list[str]:
    """What a store root holds but its lock files (kept, empty, as the system's locks need)."""
    return sorted(p.name for p in root.iterdir() if p.name != LOCKS) if root.exists() else []


def config_for(path: Path, tmp_path: Path, **data) -> dict:
    return {"data": {"format": "parallel", "path": str(path), "prepared_dir": str(tmp_path / "prepared"), **data},
            "tokenizer": {"level": "word"}, "train": {"out_dir": str(tmp_path / "run")}}


def in_memory(values: dict) -> tuple[list, Tokenization, list, list]:
    """What training read before prepared corpora: the corpus in memory, tokenized and filtered there."""
    config = config_from_dict(values)
    corpus = load_corpus(config.data)
    tokenizer, level = config.tokenizer, config.tokenizer.level
    if level in ("bpe", "unigram"):
        src = tgt = SubwordTokenizer.train(level, [s for s, _ in corpus.train] + [t for _, t in corpus.train],
                                           tokenizer.vocab_size, tokenizer.lowercase)
    else:
        src, tgt = make_tokenizer(level, tokenizer.lowercase), make_tokenizer(level, tokenizer.lowercase)
    limit = config.data.max_len
    tokenized = [(src.tokenize(s), tgt.tokenize(t)) for s, t in corpus.train]
    tokenized = [(s, t) for s, t in tokenized if 0 < len(s) <= limit and 0 < len(t) <= limit]
    if config.vocab.joint:
        src_vocab = tgt_vocab = Vocabulary.build((side for pair in tokenized for side in pair))
    else:
        src_vocab, tgt_vocab = Vocabulary.build(s for s, _ in tokenized), Vocabulary.build(t for _, t in tokenized)
    examples = [(src_vocab.encode(s), tgt_vocab.encode(t)) for s, t in tokenized]
    return examples, Tokenization(src, tgt, src_vocab, tgt_vocab), corpus.valid, corpus.test


def assert_same_as_in_memory(values: dict) -> PreparedCorpus:
    prepared = prepare_corpus(config_from_dict(values), log=lambda _: None)
    examples, tokenization, valid, test = in_memory(values)
    assert [prepared.example(i) for i in range(len(prepared))] == examples
    assert prepared.tokenization.src_vocab.itos == tokenization.src_vocab.itos
    assert prepared.tokenization.tgt_vocab.itos == tokenization.tgt_vocab.itos
    assert prepared.valid_pairs == valid and prepared.test_pairs == test
    lengths = np.array([(len(t), len(s)) for s, t in examples]).reshape(-1, 2)
    assert np.array_equal(prepared.lengths, lengths)
    return prepared


def test_the_store_writer_writes_what_the_reader_opens(tmp_path):
    """store.py's two sides of one format: pairs appended out of training order from two corpora
    (the second of weight 2), renumbered into the vocabularies (a token they lack: UNK), opened in
    training order."""
    words = Tokenization(make_tokenizer("word", False), make_tokenizer("word", False),
                         Vocabulary(["a", "b"]), Vocabulary(["x", "y", "z"]))
    inventory = (["b", "a", "gone"], ["z", "y", "x"])  # the tokens by their ids while preparing
    # (position, source ids, target ids); positions 0 and 1 are the first corpus's, 2 the second's
    pairs = [(2, [2], [0, 1]), (0, [0, 1], [2]), (1, [1, 1, 0], [1])]
    with StoreWriter(tmp_path) as writer:
        for position, src, tgt in pairs:
            writer.append((np.array(src), np.array([len(src)])), (np.array(tgt), np.array([len(tgt)])),
                          np.array([position]))
    assert writer.arrange(words, inventory, starts=[0, 2], weights=[1, 2]) == [2, 1]
    writer.finish([("a", "x")], [], fingerprint="f", report={"said": 1}, about={"made": "here"})
    store = PreparedCorpus.open(tmp_path)
    a, b, unk, x, y, z = 4, 5, 1, 4, 5, 6
    assert [store.example(i) for i in range(len(store))] == [([b, a], [x]), ([a, a, b], [y]), ([unk], [z, y]),
                                                             ([unk], [z, y])]
    assert store.lengths.tolist() == [[1, 2], [1, 3], [2, 1], [2, 1]]
    assert (store.valid_pairs, store.test_pairs, store.fingerprint, store.report) == ([("a", "x")], [], "f", {"said": 1})
    assert store.tokenization.to_dict() == words.to_dict() and store.meta["made"] == "here"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heldout.json", "lengths", "meta.json", "order", "src.ids",
                                                          "src.offsets", "tgt.ids", "tgt.offsets"]


def test_parallel_files_give_the_in_memory_examples(tmp_path):
    values = config_for(small_corpus(tmp_path / "data"), tmp_path, max_len=8, max_ratio=0)
    corpus = assert_same_as_in_memory(values)
    assert corpus.report["left_out"]["too_long"] > 0  # the filter did leave some out


def test_tsv_file_gives_the_in_memory_split_and_examples(tmp_path):
    path = tmp_path / "deu.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("".join(f"English number {i}{' and more' * (i % 4)}\tDeutsch Nummer {i}\tattr\n" for i in range(400)))
        handle.write("\n")  # a blank line is no pair
    values = config_for(path, tmp_path, format="tsv", valid_size=30, test_size=20, seed=7, max_ratio=0)
    assert_same_as_in_memory(values)
    data = config_from_dict(values).data
    assert load_split(data, "test") == load_corpus(data).test  # evaluate --split, without the training pairs
    assert load_split(data, "valid") == load_corpus(data).valid
    values["data"]["max_pairs"] = 120
    assert len(assert_same_as_in_memory(values)) == 70


def test_dates_give_the_in_memory_examples(tmp_path):
    values = config_for(tmp_path, tmp_path, format="dates", num_pairs=600, valid_size=50, test_size=50)
    values["tokenizer"]["level"] = "char"
    assert_same_as_in_memory(values)


@pytest.mark.parametrize("corpus", ["dates", pytest.param("multi30k", marks=pytest.mark.slow)])
def test_joint_bpe_on_gzipped_files_gives_the_in_memory_examples(tmp_path, monkeypatch, corpus):
    if corpus == "dates":  # in chunks as small as Multi30k's two, so that two workers encode them
        data, vocab_size, count = tmp_path / "dates", 300, 2000
        write_dates_files(data, {"train": count, "val": 100, "test_2016_flickr": 100}, gz=True)
        monkeypatch.setattr(prepare, "CHUNK_PAIRS", 700)
        values = config_for(data, tmp_path, workers=2)
    else:
        if not (SHARED_DATA / "multi30k").is_dir():
            pytest.skip("../shared/data is not beside the repository")
        data, vocab_size, count = SHARED_DATA / "multi30k", 8000, 29000
        values = config_for(data, tmp_path)
    values["tokenizer"] = {"level": "bpe", "vocab_size": vocab_size}
    values["vocab"] = {"joint": True}
    assert len(assert_same_as_in_memory(values)) == count


def test_workers_prepare_the_same_store_as_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "CHUNK_PAIRS", 37)  # many chunks, so that the pool of workers runs
    data = small_corpus(tmp_path / "data", 500)
    stores = []
    for workers in (1, 2):
        values = config_for(data, tmp_path / f"w{workers}", workers=workers)
        values["tokenizer"] = {"level": "bpe", "vocab_size": 60}
        stores.append(prepare_corpus(config_from_dict(values), log=lambda _: None))
    one, two = stores
    assert one.report["workers"] == 1 and two.report["workers"] == 2
    for name in ("src.ids", "tgt.ids", "src.offsets", "tgt.offsets", "order", "lengths"):
        assert (one.directory / name).read_bytes() == (two.directory / name).read_bytes(), name
    assert one.tokenization.to_dict() == two.tokenization.to_dict()


def test_a_store_is_reused_until_the_raw_text_or_a_setting_changes(tmp_path):
    data = small_corpus(tmp_path / "data")
    values = config_for(data, tmp_path)
    first = prepare_corpus(config_from_dict(values), log=lambda _: None)
    made = (first.directory / META_FILE).stat().st_mtime_ns
    again = prepare_corpus(config_from_dict(values), log=lambda _: None)
    assert again.directory == first.directory and (again.directory / META_FILE).stat().st_mtime_ns == made
    os.utime(data / "train.de")  # touched, same text: still reused
    assert (prepare_corpus(config_from_dict(values)).directory / META_FILE).stat().st_mtime_ns == made
    with open(data / "train.de", "r+b") as handle:  # another text of the same size
        handle.write(b"X")
    lines: list[str] = []
    changed = prepare_corpus(config_from_dict(values), log=lines.append)
    assert any("raw data changed" in line for line in lines)
    assert changed.directory == first.directory and changed.fingerprint != first.fingerprint
    values["tokenizer"]["lowercase"] = True
    lowercased = prepare_corpus(config_from_dict(values), log=lambda _: None).directory
    assert lowercased != first.directory
    values["data"]["workers"] = 1  # how it is read does not change what is read
    found = find_corpus(config_from_dict(values))
    assert found is not None and found.directory == lowercased


def test_a_run_that_finds_another_preparing_the_same_store_waits_and_opens_it(tmp_path):
    """Two trials started together: the second waits while the first holds the store's lock, then
    opens what the first made, instead of preparing its own and replacing the store under the first."""
    values = config_for(small_corpus(tmp_path / "data"), tmp_path)
    config = config_from_dict(values)
    source, root = prepare.CorpusSource(config.data), tmp_path / "prepared"
    directory = root / prepare.store_key(config, source, None)
    waiting, lines, second = threading.Event(), [], {}

    def log(line: str) -> None:
        lines.append(line)
        if "another run is preparing this corpus" in line:
            waiting.set()

    with prepare._preparing(root, directory, lambda _: None):               # the first run, preparing
        thread = threading.Thread(target=lambda: second.update(corpus=prepare_corpus(config_from_dict(values), log=log)))
        thread.start()
        assert waiting.wait(60), "the second run did not wait for the first"
        assert not left_in(root), "the second run prepared while the first held the lock"
        prepare._build(config, source, None, root, directory, lambda _: None)  # what the first makes
        made = (directory / META_FILE).stat().st_ino
    thread.join(60)
    assert second["corpus"].directory == directory and (directory / META_FILE).stat().st_ino == made
    assert any("prepared by the run it waited for" in line for line in lines)


def test_an_incomplete_damaged_or_older_store_is_prepared_again(tmp_path):
    values = config_for(small_corpus(tmp_path / "data"), tmp_path)
    corpus = prepare_corpus(config_from_dict(values), log=lambda _: None)
    examples = [corpus.example(i) for i in range(len(corpus))]
    (corpus.directory / "src.ids").write_bytes(b"12345")           # damaged
    lines: list[str] = []
    again = prepare_corpus(config_from_dict(values), log=lines.append)
    assert any("damaged" in line for line in lines)
    assert [again.example(i) for i in range(len(again))] == examples
    meta = json.loads((again.directory / META_FILE).read_text())
    (again.directory / META_FILE).write_text(json.dumps({**meta, "format": 0}))  # written by another version
    lines.clear()
    prepare_corpus(config_from_dict(values), log=lines.append)
    assert any("format 0" in line for line in lines)
    (again.directory / META_FILE).unlink()                        # never finished: not a store
    assert find_corpus(config_from_dict(values)) is None


def test_bad_lines_among_many_are_counted_and_skipped(tmp_path):
    data = tmp_path / "data"
    good = [(f"satz {i} hier", f"sentence {i} here") for i in range(3000)]
    write_parallel(data, good)
    write_parallel(data, good[:5], "val")
    write_parallel(data, good[5:10], "test_2016_flickr")
    lines = (data / "train.de").read_bytes().split(b"\n")
    lines[99] = "Café".encode("latin-1")       # line 100: not UTF-8
    lines[1999] = b"nul \x00 byte"               # line 2000: NUL
    (data / "train.de").write_bytes(b"\n".join(lines))
    corpus = prepare_corpus(config_from_dict(config_for(data, tmp_path)), log=lambda _: None)
    assert len(corpus) == 2998
    assert corpus.report["left_out"]["unreadable"] == 2
    shown = corpus.report["unreadable_shown"]
    assert shown[0] == f"{data / 'train.de'}:100: not valid UTF-8 (byte 0xe9 at column 4)"
    assert shown[1].startswith(f"{data / 'train.de'}:2000: contains NUL bytes")


def test_a_file_of_many_bad_lines_is_refused_naming_the_first(tmp_path):
    data = tmp_path / "data"
    write_parallel(data, [(f"s {i}", f"t {i}") for i in range(200)])
    write_parallel(data, [("a", "b")], "val")
    write_parallel(data, [("a", "b")], "test_2016_flickr")
    lines = (data / "train.en").read_bytes().split(b"\n")
    lines[4] = b"\xff\xfe"
    (data / "train.en").write_bytes(b"\n".join(lines))
    with pytest.raises(AttnmtError) as info:
        prepare_corpus(config_from_dict(config_for(data, tmp_path)), log=lambda _: None)
    message = str(info.value)
    assert message.startswith(f"{data / 'train.en'}:5: not valid UTF-8") and "1 unreadable lines of 200" in message
    assert not left_in(tmp_path / "prepared")  # nothing left behind


@pytest.mark.parametrize("max_pairs", [0, 100])
def test_both_paths_refuse_unequal_files_alike_naming_the_line_where_they_part(tmp_path, max_pairs):
    """data.parallel_rows reads for both: the same line, whether or not data.max_pairs stops short of it."""
    data = small_corpus(tmp_path / "data")
    (data / "train.en").write_bytes(b"".join((data / "train.en").read_bytes().split(b"\n", 250)[:250]) + b"\n")
    tgt_lines = (data / "train.en").read_bytes().count(b"\n")
    assert tgt_lines < (data / "train.de").read_bytes().count(b"\n")
    config = config_from_dict(config_for(data, tmp_path, max_pairs=max_pairs))
    with pytest.raises(AttnmtError) as streamed:
        prepare_corpus(config, log=lambda _: None)
    with pytest.raises(AttnmtError) as in_memory:
        load_corpus(config.data)
    assert str(streamed.value) == str(in_memory.value) == (
        f"{data / 'train.en'} ends after line {tgt_lines} but {data / 'train.de'} goes on at line {tgt_lines + 1}; "
        "parallel files must have one line per sentence on both sides")


def test_both_paths_read_a_tsv_file_alike(tmp_path):
    """data.tsv_rows reads for both: a line of only whitespace, Unicode's spaces too, is no pair (the
    streamed reader took "\\u3000\\u00a0" for an unreadable line and "\\u2003<TAB>\\u00a0" for a pair); a line
    that is not a pair is named alike."""
    path = tmp_path / "deu.txt"
    lines = [f"English {i}{' and more' * (i % 3)}\tDeutsch {i}\n" for i in range(200)]
    lines[10:10] = ["\u3000\u00a0\n", "\u2003\t\u00a0\n", " \t \r\n"]
    path.write_text("".join(lines), encoding="utf-8")
    values = config_for(path, tmp_path, format="tsv", valid_size=20, test_size=20, seed=3, max_ratio=0)
    corpus = assert_same_as_in_memory(values)
    assert corpus.report["left_out"]["unreadable"] == 0 and corpus.report["left_out"]["blank"] == 3
    assert corpus.report["pairs_read"] == 163  # the blank lines counted among the lines read
    path.write_text("".join(lines[:5] + ["\u3000one column\n"] + lines[5:]), encoding="utf-8")
    with pytest.raises(AttnmtError) as streamed:
        prepare_corpus(config_from_dict(values), log=lambda _: None)
    with pytest.raises(AttnmtError) as in_memory:
        load_corpus(config_from_dict(values).data)
    assert str(in_memory.value) == f"{path}:6: expected 2 or 3 TAB-separated columns (English, translation, attribution), found 1"
    assert str(streamed.value).startswith(f"{in_memory.value} (1 unreadable lines of ")


def test_filters_are_counted_by_reason(tmp_path):
    data = tmp_path / "data"
    pairs = ([("ein hund", "a dog")] * 3 + [("", "empty source")] + [("eins " * 20, "one")]
             + [("a b c d e f g h i j", "x")] + [(f"satz {i}", f"sentence {i}") for i in range(10)])
    write_parallel(data, pairs)
    write_parallel(data, pairs[-2:], "val")
    write_parallel(data, pairs[-2:], "test_2016_flickr")
    values = config_for(data, tmp_path, max_len=15, max_ratio=5, dedup=True)
    corpus = prepare_corpus(config_from_dict(values), log=lambda _: None)
    assert corpus.report["left_out"] == {"blank": 0, "unreadable": 0, "empty": 1, "too_long": 1, "ratio": 1,
                                           "duplicate": 2}
    assert len(corpus) == 11 and corpus.report["pairs_read"] == 16


def test_the_subword_model_learns_from_a_seeded_sample(tmp_path):
    values = config_for(small_corpus(tmp_path / "data", 400), tmp_path)
    values["tokenizer"] = {"level": "bpe", "vocab_size": 40, "sample_pairs": 50}
    lines: list[str] = []
    corpus = prepare_corpus(config_from_dict(values), log=lines.append)
    assert "learning bpe pieces from 50 training pairs" in lines
    assert corpus.report["pairs_read"] == 400
    values["data"]["prepared_dir"] = str(tmp_path / "other")
    assert prepare_corpus(config_from_dict(values)).tokenization.to_dict() == corpus.tokenization.to_dict()
    values["data"]["seed"] = 2
    assert prepare_corpus(config_from_dict(values)).tokenization.to_dict() != corpus.tokenization.to_dict()


def test_a_full_disk_leaves_no_store_and_says_so_in_one_line(tmp_path):
    """The writes fail midway (a file-size limit stands in for a full disk): one line, nothing kept."""
    data = small_corpus(tmp_path / "data", 3000)
    values = config_for(data, tmp_path)
    code = ("import json, resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
            "from attnmt.configfile import config_from_dict\n"
            "from attnmt.errors import AttnmtError\n"
            "from attnmt.corpus.prepare import prepare_corpus\n"
            "try:\n"
            "    prepare_corpus(config_from_dict(json.loads(sys.argv[1])), log=lambda _: None)\n"
            "except AttnmtError as err:\n"
            "    print(err)\n")
    result = subprocess.run([sys.executable, "-c", code, json.dumps(values)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(rf"{re.escape(str(tmp_path / 'prepared'))}: cannot write the prepared corpus: File too large; "
                        r"nothing was kept\n", result.stdout)
    assert not left_in(tmp_path / "prepared")
    assert find_corpus(config_from_dict(values)) is None


def test_attnmt_prepare_prints_the_report_and_reuses_it(tmp_path):
    data = small_corpus(tmp_path / "data")
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(config_for(data, tmp_path)))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "attnmt", "prepare", str(config), *args], capture_output=True,
                              text=True)

    first = run("data.max_len=8")
    assert first.returncode == 0, first.stderr
    assert "training pairs:" in first.stdout and "left out: too long" in first.stdout
    second = run("data.max_len=8")
    assert "prepared earlier" in second.stdout
    bad = run("data.max_ratio=-1")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "data.max_ratio" in bad.stderr


def test_several_training_corpora_with_weights(tmp_path):
    data = tmp_path / "data"
    write_parallel(data, [(f"europa {i}", f"europe {i}") for i in range(30)], "europarl")
    write_parallel(data, [(f"nachricht {i}", f"news {i}") for i in range(20)], "news")
    write_parallel(data, [("a", "b")], "val")
    write_parallel(data, [("c", "d")], "test_2016_flickr")
    values = config_for(data, tmp_path, train_prefix="europarl news:3")
    corpus = prepare_corpus(config_from_dict(values), log=lambda _: None)
    assert len(corpus) == 30 + 3 * 20
    vocab = corpus.tokenization.src_vocab
    words = [vocab.itos[corpus.example(i)[0][0]] for i in range(len(corpus))]
    assert words.count("europa") == 30 and words.count("nachricht") == 60
    assert [c["weight"] for c in corpus.report["corpora"]] == [1, 3]
    assert [c["pairs_kept"] for c in corpus.report["corpora"]] == [30, 20]
    assert vocab.itos[4] == "europa"  # the vocabulary counts each pair once (30 > 20), not each repeat (30 < 60)
    for bad in ("europarl news:0", "europarl:x", "news news:2", "  "):
        values["data"]["train_prefix"] = bad
        with pytest.raises(AttnmtError, match="data.train_prefix"):
            config_from_dict(values)


# --- issue 60: the seeded split of line-aligned files; a reused store says so ------------------------

def split_values(path: Path, tmp_path: Path, **data) -> dict:
    """Line-aligned files without held-out files: both splits cut from the training pairs."""
    return config_for(path, tmp_path, **{"valid_prefix": "", "test_prefix": "", "valid_size": 30, "test_size": 20,
                                         "seed": 7, "max_ratio": 0, **data})


def test_empty_prefixes_cut_the_held_out_pairs_from_the_training_files_as_tsv_does(tmp_path):
    pairs = write_dates_tsv(tmp_path / "dates.tsv", 300)
    write_line_aligned(tmp_path / "files", {"train": pairs})
    values = split_values(tmp_path / "files", tmp_path)
    split = assert_same_as_in_memory(values)
    assert (split.report["pairs_read"], len(split.valid_pairs), len(split.test_pairs)) == (250, 30, 20)
    # The same pairs as a TSV file give the same split, held-out pairs and training order.
    tsv = config_for(tmp_path / "dates.tsv", tmp_path, format="tsv", valid_size=30, test_size=20, seed=7)
    assert load_corpus(config_from_dict(values).data) == load_corpus(config_from_dict(tsv).data)
    from_tsv = prepare_corpus(config_from_dict(tsv), log=lambda _: None)
    assert [split.example(i) for i in range(len(split))] == [from_tsv.example(i) for i in range(len(from_tsv))]
    assert (split.valid_pairs, split.test_pairs) == (from_tsv.valid_pairs, from_tsv.test_pairs)
    data = config_from_dict(values).data  # evaluate --split: the same pairs, without the training pairs
    assert (load_split(data, "valid"), load_split(data, "test")) == (split.valid_pairs, split.test_pairs)
    values["data"]["seed"] = 8
    assert prepare_corpus(config_from_dict(values), log=lambda _: None).test_pairs != split.test_pairs


def test_an_empty_valid_prefix_cuts_validation_pairs_beside_the_test_files(tmp_path):
    data = small_corpus(tmp_path / "data")
    values = config_for(data, tmp_path, valid_prefix="", valid_size=25, max_pairs=200, max_ratio=0)
    corpus = assert_same_as_in_memory(values)
    assert len(corpus.valid_pairs) == 25 and corpus.report["pairs_read"] == 175
    assert len(corpus.test_pairs) == 20  # test_2016_flickr.*, read as ever
    values["data"]["valid_size"] = 200
    with pytest.raises(AttnmtError, match=r"^only 200 pairs, too few for data.valid_size=200"):
        prepare_corpus(config_from_dict(values), log=lambda _: None)


def test_empty_prefixes_cut_from_all_training_corpora_together(tmp_path):
    """Several training corpora: the held-out pairs are drawn from all of them as one, whatever
    their weights; each corpus's remaining pairs train, weight times an epoch."""
    data = tmp_path / "data"
    write_parallel(data, [(f"europa {i}", f"europe {i}") for i in range(60)], "europarl")
    write_parallel(data, [(f"nachricht {i}", f"news {i}") for i in range(40)], "news")
    values = split_values(data, tmp_path, train_prefix="europarl news", valid_size=10, test_size=10, seed=3)
    plain = assert_same_as_in_memory(values)  # weight 1: the in-memory split, corpus after corpus
    held = plain.valid_pairs + plain.test_pairs
    assert len(set(held)) == 20 and {source.split()[0] for source, _ in held} == {"europa", "nachricht"}
    values["data"]["train_prefix"] = "europarl news:3"
    weighted = prepare_corpus(config_from_dict(values), log=lambda _: None)
    assert (weighted.valid_pairs, weighted.test_pairs) == (plain.valid_pairs, plain.test_pairs)
    kept = [c["pairs_kept"] for c in weighted.report["corpora"]]
    assert sum(kept) == 80 and len(weighted) == kept[0] + 3 * kept[1]
    vocab = weighted.tokenization.src_vocab
    words = [vocab.itos[weighted.example(i)[0][0]] for i in range(len(weighted))]
    assert words.count("europa") == kept[0] and words.count("nachricht") == 3 * kept[1]
    def examples(corpus: PreparedCorpus) -> set:
        return {(tuple(src), tuple(tgt)) for src, tgt in map(corpus.example, range(len(corpus)))}

    assert examples(weighted) == examples(plain)


def test_a_store_prepared_with_held_out_files_is_not_reused_for_the_split(tmp_path):
    data = small_corpus(tmp_path / "data")
    with_files = config_from_dict(config_for(data, tmp_path))
    first = prepare_corpus(with_files, log=lambda _: None)
    split = config_from_dict(split_values(data, tmp_path))
    assert find_corpus(split) is None
    second = prepare_corpus(split, log=lambda _: None)
    assert second.directory != first.directory and second.fingerprint != first.fingerprint
    assert find_corpus(with_files).directory == first.directory
    assert find_corpus(split).directory == second.directory


def test_a_training_run_says_where_its_corpus_is_prepared_and_when_it_reuses_it(tmp_path):
    config = config_from_dict(config_for(small_corpus(tmp_path / "data"), tmp_path))
    first: list[str] = []
    made = find_start(config, None, first.append).corpus  # where attnmt train finds its corpus
    assert not any(prepare.REUSED in line for line in first)
    assert [line for line in first if line.startswith(f"prepared corpus: {made} (prepared now")], first
    reused = [f"prepared corpus: {made} ({prepare.REUSED})"]
    again: list[str] = []
    assert find_start(config, None, again.append).corpus == made and again == reused
    resumed: list[str] = []  # a resumed run gives its checkpoint's tokenization, the store's
    assert open_corpus(config, PreparedCorpus.open(made).tokenization, resumed.append).directory == made
    assert resumed == reused


def test_a_training_run_names_the_lines_it_could_not_read_and_counts_blank_ones_as_prepare_does(tmp_path):
    from conftest import tiny_dates_config

    from attnmt.training.train import train

    path = tmp_path / "bad.tsv"
    lines = [f"date {i}\tdatum {i}\n" for i in range(3000)]
    lines[41] = "one column only\n"                   # line 42
    lines[99] = lines[500] = " \t\n"                  # blank lines, read and left out
    path.write_text("".join(lines), encoding="utf-8")
    values = tiny_dates_config(tmp_path / "run")
    values["data"] = {"format": "tsv", "path": str(path), "valid_size": 20, "test_size": 20,
                      "prepared_dir": str(tmp_path / "prepared")}
    values["train"]["epochs"] = 1
    logged: list[str] = []
    train(config_from_dict(values), log=logged.append)
    assert f"  unreadable: {path}:42: expected 2 or 3 TAB-separated columns (English, translation, attribution), " \
           "found 1" in logged, logged
    assert [line for line in logged if line.startswith("data: ")][0].startswith(
        "data: 2957 training pairs (2 blank, 1 unreadable left out)"), logged
    (store,) = [d for d in (tmp_path / "prepared").iterdir() if (d / "meta.json").is_file()]  # not .locks
    report = prepare.report_lines(PreparedCorpus.open(store))
    assert "  training pairs: 2,957 of 2,960 read (left out: blank 2, unreadable 1)" in report, report
