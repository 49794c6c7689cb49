"""Readers for manythings TSV files and line-aligned files, the seeded split, and the dates corpus."""

from __future__ import annotations

import datetime
import gzip
import io
import random
import re
import sys
from pathlib import Path

import pytest
from conftest import SHARED_DATA, write_line_aligned

from attnmt.config import DataConfig
from attnmt.corpus.dates import generate_dates
from attnmt.corpus.readers import (
    MAX_LINE_BYTES,
    Corpus,
    decode_lines,
    find_split_file,
    is_blank,
    load_corpus,
    read_lines,
    read_parallel,
    read_tsv,
    split_pairs,
)
from attnmt.errors import AttnmtError


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real data not available: {path}")
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def write_text(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def write_gz(path: Path, text: str) -> Path:
    with gzip.open(path, "wb") as handle:
        handle.write(text.encode("utf-8"))
    return path


def numbers_outside(message: str, *paths: Path) -> str:
    """The message with the paths removed (tmp paths may contain digits of their own)."""
    for path in paths:
        message = message.replace(str(path), "<path>")
    return message


# --------------------------------------------------------------------------- manythings TSV


def test_tsv_fields_starting_with_quote_are_verbatim(tmp_path):
    p = write_text(tmp_path / "deu.txt", '"Hi," he said.\t"Hallo", sagte er.\nGo.\tGeh.\n')
    assert read_tsv(p) == [('"Hi," he said.', '"Hallo", sagte er.'), ("Go.", "Geh.")]


def test_tsv_quote_spanning_what_csv_would_treat_as_quoted_field(tmp_path):
    # With csv quoting, the unbalanced quote would swallow the TAB and the next line.
    p = write_text(tmp_path / "deu.txt", '"Hi\tHallo\nBye.\t"Tschüss\n')
    assert read_tsv(p) == [('"Hi', "Hallo"), ("Bye.", '"Tschüss')]


def test_tsv_three_columns_keep_first_two(tmp_path):
    line = "Go.\tजा.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #3138228 (sabretou)\n"
    p = write_text(tmp_path / "mar.txt", line)
    assert read_tsv(p) == [("Go.", "जा.")]


def test_tsv_mixed_two_and_three_columns(tmp_path):
    p = write_text(tmp_path / "mix.txt", "A.\tB.\nC.\tD.\tattribution\nE.\tF.\n")
    assert read_tsv(p) == [("A.", "B."), ("C.", "D."), ("E.", "F.")]


@pytest.mark.parametrize(
    "bad_line, columns",
    [("only one column", 1), ("a\tb\tc\td", 4)],
)
def test_tsv_wrong_column_count_names_file_and_line(tmp_path, bad_line, columns):
    p = write_text(tmp_path / "bad.txt", f"A.\tB.\nC.\tD.\n{bad_line}\nE.\tF.\n")
    with pytest.raises(AttnmtError) as info:
        read_tsv(p)
    message = str(info.value)
    assert f"{p}:3" in message
    assert str(columns) in numbers_outside(message, p)


def test_tsv_blank_lines_skipped_but_line_numbers_are_physical(tmp_path):
    p = write_text(tmp_path / "blank.txt", "A.\tB.\n\n   \nC.\tD.\n\nbroken\n")
    with pytest.raises(AttnmtError, match=re.escape(f"{p}:6")):
        read_tsv(p)
    ok = write_text(tmp_path / "ok.txt", "\nA.\tB.\n\n\nC.\tD.\n\n")
    assert read_tsv(ok) == [("A.", "B."), ("C.", "D.")]


def test_tsv_lines_of_unicode_spaces_are_blank(tmp_path):
    p = write_text(tmp_path / "spaces.txt", "A.\tB.\n\u3000\u00a0\n\u2003\t\u202f\r\n\x1c\nC.\tD.\n\u201cE.\u201d\tF.\n")
    assert read_tsv(p) == [("A.", "B."), ("C.", "D."), ("\u201cE.\u201d", "F.")]
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    assert all(is_blank(f" {c}{c}\n".encode()) for c in spaces)  # every first byte is in data._SPACE_LEADS
    assert not any(is_blank(f"{c}x".encode()) for c in spaces) and not is_blank(b"\xe3\x80")


def test_tsv_crlf_line_ends_are_stripped(tmp_path):
    p = write_text(tmp_path / "crlf.txt", "A.\tB.\r\nC.\tD.\tattr\r\n")
    assert read_tsv(p) == [("A.", "B."), ("C.", "D.")]


def test_tsv_gz_reads_the_same_as_plain(tmp_path):
    text = '"Hi," he said.\t"Hallo", sagte er.\nGo.\tGeh.\tattr\n\nRun!\tLauf!\n'
    plain = write_text(tmp_path / "deu.txt", text)
    packed = write_gz(tmp_path / "deu.txt.gz", text)
    assert read_tsv(packed) == read_tsv(plain)
    assert len(read_tsv(packed)) == 3


def test_tsv_max_pairs(tmp_path):
    p = write_text(tmp_path / "many.txt", "".join(f"e{i}\td{i}\n" for i in range(50)))
    assert read_tsv(p, max_pairs=7) == [(f"e{i}", f"d{i}") for i in range(7)]
    assert len(read_tsv(p, max_pairs=0)) == 50
    assert len(read_tsv(p, max_pairs=500)) == 50


def test_tsv_max_pairs_stops_before_a_later_bad_line(tmp_path):
    p = write_text(tmp_path / "many.txt", "a\tb\nc\td\nbroken line\n")
    assert read_tsv(p, max_pairs=2) == [("a", "b"), ("c", "d")]


def test_tsv_empty_file_is_an_error(tmp_path):
    p = write_text(tmp_path / "empty.txt", "\n\n")
    with pytest.raises(AttnmtError, match=re.escape(str(p))):
        read_tsv(p)


def _tsv_config(path: Path, src: str, tgt: str) -> DataConfig:
    return DataConfig(format="tsv", path=str(path), src_lang=src, tgt_lang=tgt, valid_size=2, test_size=2, seed=5)


def test_load_corpus_tsv_puts_non_english_on_source_side(tmp_path):
    english = [f"english {i}" for i in range(12)]
    german = [f"deutsch {i}" for i in range(12)]
    p = write_text(tmp_path / "deu.txt", "".join(f"{e}\t{g}\n" for e, g in zip(english, german)))
    corpus = load_corpus(_tsv_config(p, "de", "en"))
    everything = corpus.train + corpus.valid + corpus.test
    assert sorted(everything) == sorted(zip(german, english))
    assert all(src.startswith("deutsch") and tgt.startswith("english") for src, tgt in everything)
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (8, 2, 2)


def test_load_corpus_tsv_english_source_keeps_column_order(tmp_path):
    p = write_text(tmp_path / "deu.txt", "".join(f"english {i}\tdeutsch {i}\tattr\n" for i in range(12)))
    corpus = load_corpus(_tsv_config(p, "en", "de"))
    everything = corpus.train + corpus.valid + corpus.test
    assert len(everything) == 12
    assert all(src.startswith("english") and tgt.startswith("deutsch") for src, tgt in everything)


def test_load_corpus_tsv_max_pairs_and_seed(tmp_path):
    p = write_text(tmp_path / "deu.txt", "".join(f"e{i}\td{i}\n" for i in range(40)))
    config = _tsv_config(p, "de", "en")
    config.max_pairs = 10
    first, second = load_corpus(config), load_corpus(config)
    assert first == second
    assert sorted(first.train + first.valid + first.test) == sorted((f"d{i}", f"e{i}") for i in range(10))


# --------------------------------------------------------------------------- line-aligned files


def test_parallel_tab_inside_sentence_stays_in_one_sentence(tmp_path):
    de = ['Ein Hund läuft.', '"Zwei Personen spielen in einer \tWasserfontäne."', "Ein Mann liest."]
    en = ["A dog runs.", "Two people play in a fountain.", "A man reads."]
    src = write_text(tmp_path / "train.de", "\n".join(de) + "\n")
    tgt = write_text(tmp_path / "train.en", "\n".join(en) + "\n")
    pairs = read_parallel(src, tgt)
    assert pairs == list(zip(de, en))
    assert "\t" in pairs[1][0]
    assert pairs[2] == ("Ein Mann liest.", "A man reads.")


def test_parallel_keeps_trailing_spaces_and_nbsp(tmp_path):
    src = write_text(tmp_path / "a.de", "Hallo \nEin\u00a0Hund\n")
    tgt = write_text(tmp_path / "a.en", "Hello\nA dog\n")
    assert read_parallel(src, tgt) == [("Hallo ", "Hello"), ("Ein\u00a0Hund", "A dog")]


def test_parallel_mismatched_line_counts_name_both_files_and_the_line(tmp_path):
    src = write_text(tmp_path / "train.de", "".join(f"s{i}\n" for i in range(5)))
    tgt = write_text(tmp_path / "train.en", "".join(f"t{i}\n" for i in range(7)))
    expected = (f"{src} ends after line 5 but {tgt} goes on at line 6; parallel files must have one line per "
                "sentence on both sides")
    for limit in (None, 2):  # refused even when fewer pairs are asked for
        with pytest.raises(AttnmtError) as info:
            read_parallel(src, tgt, limit)
        assert str(info.value) == expected


def test_parallel_gz_and_plain_mixed(tmp_path):
    src = write_gz(tmp_path / "val.de.gz", "Eins\nZwei\n")
    tgt = write_text(tmp_path / "val.en", "One\nTwo\n")
    assert read_parallel(src, tgt) == [("Eins", "One"), ("Zwei", "Two")]


def test_find_split_file_prefers_plain_then_gz(tmp_path):
    gz = write_gz(tmp_path / "train.de.gz", "x\n")
    assert find_split_file(tmp_path, "train", "de") == gz
    plain = write_text(tmp_path / "train.de", "x\n")
    assert find_split_file(tmp_path, "train", "de") == plain


def test_find_split_file_missing_names_the_file(tmp_path):
    write_text(tmp_path / "train.en", "x\n")
    with pytest.raises(AttnmtError) as info:
        find_split_file(tmp_path, "train", "de")
    message = str(info.value)
    assert str(tmp_path / "train.de") in message
    assert "train.de.gz" in message


def test_load_corpus_parallel_reads_three_splits(tmp_path):
    for prefix, n in (("train", 6), ("val", 2), ("test_2016_flickr", 3)):
        write_gz(tmp_path / f"{prefix}.de.gz", "".join(f"{prefix} de {i}\n" for i in range(n)))
        write_text(tmp_path / f"{prefix}.en", "".join(f"{prefix} en {i}\n" for i in range(n)))
    config = DataConfig(format="parallel", path=str(tmp_path), src_lang="de", tgt_lang="en", max_pairs=4)
    corpus = load_corpus(config)
    assert corpus.train == [(f"train de {i}", f"train en {i}") for i in range(4)]
    assert corpus.valid == [(f"val de {i}", f"val en {i}") for i in range(2)]
    assert corpus.test == [(f"test_2016_flickr de {i}", f"test_2016_flickr en {i}") for i in range(3)]


# --------------------------------------------------------------------------- bad input


def test_non_utf8_names_file_and_line(tmp_path):
    p = write_bytes(tmp_path / "latin1.txt", "ok\tgut\n".encode() + "Café\tKäse\n".encode("latin-1"))
    with pytest.raises(AttnmtError) as info:
        read_tsv(p)
    message = str(info.value)
    assert f"{p}:2" in message
    assert "UTF-8" in message


def test_non_utf8_in_gz_names_file_and_line(tmp_path):
    p = tmp_path / "bad.en.gz"
    with gzip.open(p, "wb") as handle:
        handle.write(b"one\ntwo\nthr\xe9e\n")
    src = write_text(tmp_path / "bad.de", "eins\nzwei\ndrei\n")
    with pytest.raises(AttnmtError, match=re.escape(f"{p}:3")):
        read_parallel(src, p)


def test_nul_bytes_are_an_error(tmp_path):
    p = write_bytes(tmp_path / "binary.txt", b"a\tb\nc\x00\x01\x02\td\n")
    with pytest.raises(AttnmtError) as info:
        read_tsv(p)
    assert f"{p}:2" in str(info.value)
    assert "NUL" in str(info.value) or "binary" in str(info.value)


def test_missing_file_names_it(tmp_path):
    missing = tmp_path / "nope" / "deu.txt"
    with pytest.raises(AttnmtError, match=re.escape(str(missing))):
        read_tsv(missing)
    other = write_text(tmp_path / "x.en", "x\n")
    with pytest.raises(AttnmtError, match=re.escape(str(missing))):
        read_parallel(missing, other)
    with pytest.raises(AttnmtError, match=re.escape(str(missing))):
        read_parallel(other, missing)


def test_directory_instead_of_file_is_an_error(tmp_path):
    with pytest.raises(AttnmtError, match=re.escape(str(tmp_path))):
        read_tsv(tmp_path)


def test_truncated_gz_is_an_error(tmp_path):
    full = gzip.compress(("hello\tworld\n" * 2000).encode())
    p = write_bytes(tmp_path / "cut.txt.gz", full[: len(full) // 2])
    with pytest.raises(AttnmtError, match=re.escape(str(p))):
        read_tsv(p)


def test_read_lines_strips_only_line_ends(tmp_path):
    p = write_text(tmp_path / "x.txt", "  a \t\nb\r\n\n")
    assert list(read_lines(p)) == ["  a \t", "b", ""]


def test_decode_lines_line_ends_and_a_last_line_without_one():
    assert list(decode_lines(io.BytesIO(b"a\r\nb\n\n\xc3\xbc last"), "x")) == ["a", "b", "", "\u00fc last"]


def test_a_line_at_the_cap_is_read():
    line = b"y" * (MAX_LINE_BYTES - 1) + b"\n"  # the cap counts the line end
    assert [len(text) for text in decode_lines(io.BytesIO(b"a\n" + line + b"b"), "x")] == [1, MAX_LINE_BYTES - 1, 1]


@pytest.mark.parametrize("ending", [b"", b"\n"])
def test_a_giant_line_is_refused_without_reading_it(ending):
    handle = io.BytesIO(b"one\ntwo\n" + b"x" * MAX_LINE_BYTES + ending + b"more\n" * 10)
    with pytest.raises(AttnmtError) as info:
        list(decode_lines(handle, "big.txt"))
    assert str(info.value) == "big.txt:3: line longer than 1 MiB (1048576 bytes); expected one sentence per line"
    assert handle.tell() <= len(b"one\ntwo\n") + MAX_LINE_BYTES + 1


@pytest.mark.parametrize("name", ["big.txt", "big.txt.gz"])
def test_read_lines_refuses_a_giant_line(tmp_path, name):
    data = "ok\n" + "x" * (2 * MAX_LINE_BYTES)  # and no line end
    p = (write_gz if name.endswith(".gz") else write_text)(tmp_path / name, data)
    with pytest.raises(AttnmtError, match=re.escape(f"{p}:2: line longer than 1 MiB")):
        list(read_lines(p))


# --------------------------------------------------------------------------- split_pairs


def test_split_pairs_sizes_disjoint_and_complete():
    pairs = [(f"s{i}", f"t{i}") for i in range(100)]
    corpus = split_pairs(pairs, valid_size=10, test_size=5, seed=3)
    assert isinstance(corpus, Corpus)
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (85, 10, 5)
    train, valid, test = set(corpus.train), set(corpus.valid), set(corpus.test)
    assert not (train & valid) and not (train & test) and not (valid & test)
    assert train | valid | test == set(pairs)
    assert pairs == [(f"s{i}", f"t{i}") for i in range(100)], "input list must not be shuffled in place"


def test_split_pairs_deterministic_by_seed():
    pairs = [(f"s{i}", f"t{i}") for i in range(200)]
    assert split_pairs(pairs, 20, 20, seed=1) == split_pairs(list(pairs), 20, 20, seed=1)
    assert split_pairs(pairs, 20, 20, seed=1).test != split_pairs(pairs, 20, 20, seed=2).test
    # shuffled, not the head of the file (manythings files are sorted by length)
    assert split_pairs(pairs, 20, 20, seed=1).test != pairs[:20]


@pytest.mark.parametrize("n, valid, test", [(10, 5, 5), (10, 6, 5), (3, 0, 3), (0, 0, 0)])
def test_split_pairs_too_few_pairs(n, valid, test):
    pairs = [(f"s{i}", f"t{i}") for i in range(n)]
    with pytest.raises(AttnmtError) as info:
        split_pairs(pairs, valid, test, seed=1)
    assert "valid_size" in str(info.value) and "test_size" in str(info.value)


def test_split_pairs_cuts_as_shuffling_a_list_and_keeps_each_training_corpus_together():
    pairs = [(f"s{i}", f"t{i}") for i in range(50)]
    shuffled = list(pairs)
    random.Random(4).shuffle(shuffled)
    corpus = split_pairs(pairs, 6, 4, seed=4, starts=(0, 30))
    assert corpus.test == shuffled[:4] and corpus.valid == shuffled[4:10]
    assert corpus.train == sorted(shuffled[10:], key=lambda pair: int(pair[0][1:]) >= 30)  # stable: shuffled within


def test_split_pairs_zero_held_out():
    pairs = [(f"s{i}", f"t{i}") for i in range(4)]
    corpus = split_pairs(pairs, 0, 0, seed=1)
    assert sorted(corpus.train) == pairs and corpus.valid == [] and corpus.test == []


# --------------------------------------------------------------------------- whole corpora: generated, and real ones


def test_a_whole_generated_manythings_file_reads_as_written(tmp_path):
    """As Tatoeba's deu.txt and mar.txt: gzip; two or three columns; fields that start with a quote,
    closed or not (a csv reader would join lines); Devanagari with ZWJ: read whole, verbatim, in order."""
    pairs = []
    for i, (written, iso) in enumerate(generate_dates(6000, seed=3)):
        english = f'"{iso}' if i % 97 == 0 else iso
        other = f'"{written}," sagte er.' if i % 89 == 0 else f"{written} बर\u094d\u200dया" if i % 7 == 0 else written
        pairs.append((english, other))
    text = "".join(f"{e}\t{o}\tCC-BY 2.0 (France) #{i}\n" if i % 3 else f"{e}\t{o}\n" for i, (e, o) in enumerate(pairs))
    assert read_tsv(write_gz(tmp_path / "deu.txt.gz", text)) == pairs


@pytest.mark.parametrize("gz", [True, False])  # Multi30k's files are gzipped, IWSLT's plain
def test_whole_generated_line_aligned_files_read_as_written(tmp_path, gz):
    """As Multi30k: three splits, a source line with a TAB inside quotes; load_corpus keeps each
    split whole and in order."""
    pairs = generate_dates(3200, seed=3)
    pairs[1234] = (f'"{pairs[1234][0]}\t(abends)"', pairs[1234][1])
    splits = {"train": pairs[:3000], "val": pairs[3000:3100], "test_2016_flickr": pairs[3100:]}
    write_line_aligned(tmp_path, splits, gz)
    assert read_parallel(find_split_file(tmp_path, "train", "de"), find_split_file(tmp_path, "train", "en")) == pairs[:3000]
    corpus = load_corpus(DataConfig(format="parallel", path=str(tmp_path), src_lang="de", tgt_lang="en"))
    assert (corpus.train, corpus.valid, corpus.test) == tuple(splits.values())


def test_real_tatoeba_deu():
    pairs = read_tsv(need(SHARED_DATA / "tatoeba_deu_eng" / "deu.txt.gz"))
    assert len(pairs) == 169_813
    quoted = [p for p in pairs if p[0].startswith('"') or p[1].startswith('"')]
    assert len(quoted) == 404
    assert sum(p[0].startswith('"') for p in pairs) == 401
    assert all("\t" not in e and "\t" not in g for e, g in pairs)
    assert pairs[0][0] and pairs[0][1]


def test_real_tatoeba_mar_three_columns():
    path = need(SHARED_DATA / "tatoeba_mar_eng" / "mar.txt.gz")
    pairs = read_tsv(path)
    assert len(pairs) == 41_028
    assert pairs[0] == ("Go.", "जा.")
    assert not any("CC-BY" in e or "CC-BY" in m for e, m in pairs)
    assert sum(e.startswith('"') or m.startswith('"') for e, m in pairs) == 129
    assert sum("\u200d" in m for _, m in pairs) > 0


def test_real_multi30k():
    directory = need(SHARED_DATA / "multi30k")
    pairs = read_parallel(find_split_file(directory, "train", "de"), find_split_file(directory, "train", "en"))
    assert len(pairs) == 29_000
    src, tgt = pairs[7365]
    assert "\t" in src and src.startswith('"')
    assert "\t" not in tgt
    assert sum("\t" in s for s, _ in pairs) == 1
    config = DataConfig(format="parallel", path=str(directory), src_lang="de", tgt_lang="en")
    corpus = load_corpus(config)
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (29_000, 1_014, 1_000)
    assert corpus.train[7365] == pairs[7365]


def test_real_iwslt_plain_files():
    directory = need(SHARED_DATA / "iwslt15_en_vi_devtest")
    pairs = read_parallel(find_split_file(directory, "tst2012", "en"), find_split_file(directory, "tst2012", "vi"))
    assert len(pairs) == 1_553


# --------------------------------------------------------------------------- dates

MONTHS = {
    **{m.lower(): i for i, m in enumerate(
        ["january", "february", "march", "april", "may", "june", "july", "august",
         "september", "october", "november", "december"], 1)},
    **{m: i for i, m in enumerate(
        ["januar", "februar", "märz", "april", "mai", "juni", "juli", "august",
         "september", "oktober", "november", "dezember"], 1)},
}
MONTHS.update({name[:3]: number for name, number in list(MONTHS.items())})
WEEKDAYS_EN = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
WEEKDAYS_DE = ["montag", "dienstag", "mittwoch", "donnerstag", "freitag", "samstag", "sonntag"]
WEEKDAYS = {**{w: i for i, w in enumerate(WEEKDAYS_EN)}, **{w: i for i, w in enumerate(WEEKDAYS_DE)},
            **{w[:3]: i for i, w in enumerate(WEEKDAYS_EN)}, **{w[:2]: i for i, w in enumerate(WEEKDAYS_DE)}}
FILLER = {"the", "of", "am", "den"}


def parse_written_date(text: str) -> datetime.date:
    """An independent reading of every format the generator writes (any case)."""
    t = text.lower()
    if m := re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{4})", t):  # US: month/day/year
        return datetime.date(int(m[3]), int(m[1]), int(m[2]))
    if m := re.fullmatch(r"(\d{4})/(\d{2})/(\d{2})", t):
        return datetime.date(int(m[1]), int(m[2]), int(m[3]))
    if m := re.fullmatch(r"(?:([a-z]{2})\., )?(\d{1,2})\.(\d{1,2})\.(\d{4})", t):  # German: day.month.year
        date = datetime.date(int(m[4]), int(m[3]), int(m[2]))
        if m[1]:
            assert WEEKDAYS[m[1]] == date.weekday(), text
        return date
    words = re.findall(r"[^\W\d]+|\d+(?:st|nd|rd|th)?", t)
    numbers = [w for w in words if w[0].isdigit()]
    names = [w for w in words if not w[0].isdigit()]
    years = [n for n in numbers if re.fullmatch(r"\d{4}", n)]
    days = [n for n in numbers if n not in years]
    months = [w for w in names if w in MONTHS]
    weekdays = [w for w in names if w in WEEKDAYS and w not in MONTHS]
    unknown = [w for w in names if w not in MONTHS and w not in WEEKDAYS and w not in FILLER]
    assert len(years) == 1 and len(days) == 1 and len(months) == 1 and not unknown, text
    day = re.match(r"\d+", days[0])[0]
    if days[0] != day:  # an English ordinal suffix must be the right one
        suffix = "th" if int(day) in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(int(day) % 10, "th")
        assert days[0] == day + suffix, text
    date = datetime.date(int(years[0]), MONTHS[months[0]], int(day))
    for w in weekdays:
        assert WEEKDAYS[w] == date.weekday(), f"{text}: wrong weekday"
    return date


def test_dates_deterministic_by_seed():
    assert generate_dates(300, seed=4) == generate_dates(300, seed=4)
    assert generate_dates(300, seed=4) != generate_dates(300, seed=5)
    assert generate_dates(50, seed=4) == generate_dates(300, seed=4)[:50]


def test_dates_count_and_distinct_sources():
    pairs = generate_dates(3000, seed=1)
    assert len(pairs) == 3000
    assert len({src for src, _ in pairs}) == 3000


def test_dates_targets_are_iso_and_match_source():
    pairs = generate_dates(3000, seed=2)
    for src, tgt in pairs:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", tgt), tgt
        date = datetime.date.fromisoformat(tgt)
        assert datetime.date(1900, 1, 1) <= date <= datetime.date(2099, 12, 31)
        assert parse_written_date(src) == date, (src, tgt)


def test_dates_us_and_german_numeric_formats_by_strptime():
    pairs = generate_dates(3000, seed=3)
    us = [(s, t) for s, t in pairs if re.fullmatch(r"\d{1,2}/\d{1,2}/\d{4}", s)]
    german = [(s, t) for s, t in pairs if re.fullmatch(r"\d{1,2}\.\d{1,2}\.\d{4}", s)]
    assert len(us) > 20 and len(german) > 20
    for s, t in us:
        assert datetime.datetime.strptime(s, "%m/%d/%Y").date().isoformat() == t, s
    for s, t in german:
        assert datetime.datetime.strptime(s, "%d.%m.%Y").date().isoformat() == t, s
    # at least one of each that only the right day/month order can read
    assert any(int(s.split("/")[1]) > 12 for s, _ in us)
    assert any(int(s.split(".")[0]) > 12 for s, _ in german)


def test_dates_corpus_via_load_corpus():
    config = DataConfig(format="dates", num_pairs=500, valid_size=50, test_size=50, seed=9)
    corpus = load_corpus(config)
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (400, 50, 50)
    assert corpus == load_corpus(config)
