"""Tokenizers, vocabulary and batching."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import SHARED_DATA

from attnmt.batch import Batch, batch_indices, collate, pad
from attnmt.tokenize import (
    SPACE_SYMBOL,
    CharTokenizer,
    WordTokenizer,
    make_tokenizer,
    normalize,
    tokenizer_from_dict,
)
from attnmt.vocab import EOS, EOS_ID, PAD, PAD_ID, SOS, SOS_ID, SPECIALS, UNK, UNK_ID, Vocabulary

# --------------------------------------------------------------------------- WordTokenizer


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("Hello, world!", ["Hello", ",", "world", "!"]),
        ("Don't go.", ["Don", "'", "t", "go", "."]),
        ('He said: "Yes (maybe)."', ["He", "said", ":", '"', "Yes", "(", "maybe", ")", ".", '"']),
        ("Wait...", ["Wait", ".", ".", "."]),
        ("¿Qué?", ["¿", "Qué", "?"]),
        ("Ich weiß es nicht.", ["Ich", "weiß", "es", "nicht", "."]),
        ("Tom has 3 cats.", ["Tom", "has", "3", "cats", "."]),
    ],
)
def test_word_punctuation_split(text, tokens):
    assert WordTokenizer().tokenize(text) == tokens


def test_word_whitespace_runs_and_edges():
    assert WordTokenizer().tokenize("  Hello \t  world \n") == ["Hello", "world"]
    assert WordTokenizer().tokenize("") == []
    assert WordTokenizer().tokenize(" \u00a0 ") == []


@pytest.mark.parametrize("space", ["\u00a0", "\u202f"])
def test_word_odd_spaces_act_as_spaces(space):
    t = WordTokenizer()
    assert t.tokenize(f"Ein{space}Hund") == ["Ein", "Hund"]
    assert t.tokenize(f"Wie bitte{space}?") == ["Wie", "bitte", "?"]
    assert t.tokenize(f"100{space}%") == ["100", "%"]
    assert normalize(f"a{space}b") == "a b"


@pytest.mark.parametrize("invisible", ["\u200b", "\u00ad"])
def test_word_zero_width_space_and_soft_hyphen_removed(invisible):
    t = WordTokenizer()
    assert t.tokenize(f"Sil{invisible}be") == ["Silbe"]
    tokens = t.tokenize(f"Das ist{invisible} gut{invisible}.")
    assert tokens == ["Das", "ist", "gut", "."]
    assert all(invisible not in tok for tok in tokens)
    # alone between spaces it must not become a token of its own
    assert t.tokenize(f"a {invisible} b") == ["a", "b"]


def test_word_bom_and_word_joiner_removed():
    assert WordTokenizer().tokenize("\ufeffHallo\u2060Welt") == ["HalloWelt"]


def test_word_nfc_normalization():
    decomposed = "Mu\u0308ller"  # u + combining diaeresis
    assert WordTokenizer().tokenize(decomposed) == ["Müller"]
    assert WordTokenizer().tokenize(decomposed) == WordTokenizer().tokenize("Müller")


def test_word_marathi_vowel_signs_stay_inside_words():
    tokens = WordTokenizer().tokenize("तुम्हाला हेच हवं होतं का?")
    assert tokens == ["तुम्हाला", "हेच", "हवं", "होतं", "का", "?"]


def test_word_marathi_zwj_kept():
    text = "आम्ही बर\u094d\u200dया आहोत."  # eyelash-ra: RA + virama + ZWJ
    tokens = WordTokenizer().tokenize(text)
    assert tokens == ["आम्ही", "बर\u094d\u200dया", "आहोत", "."]
    assert "\u200d" in tokens[1]
    assert "\u200c" in WordTokenizer().tokenize("क\u094d\u200cष")[0]  # ZWNJ too, one word


def generated_marathi_lines(count: int) -> list[str]:
    """Lines of Marathi words, each with a word joined by ZWJ (eyelash-ra: RA + virama + ZWJ),
    among words with viramas, vowel signs, anusvaras and ZWNJ, and punctuation."""
    rng = random.Random(11)
    joined = ["बर\u094d\u200dया", "दर\u094d\u200dया", "सुर\u094d\u200dया"]
    others = ["आम्ही", "आहोत", "तुम्हाला", "हेच", "हवं", "होतं", "क\u094d\u200cष", "मुलं", "शाळेत", "गेलं"]
    lines = []
    for _ in range(count):
        words = rng.sample(others, rng.randint(1, 5)) + rng.sample(joined, rng.randint(1, 2))
        rng.shuffle(words)
        lines.append(" ".join(words) + rng.choice([".", "?", " !", ", का?"]))
    return lines


@pytest.mark.parametrize("corpus", ["generated", "tatoeba"])
def test_word_marathi_lines_keep_zwj(corpus):
    if corpus == "generated":
        marathi = generated_marathi_lines(200)
    else:
        path = SHARED_DATA / "tatoeba_mar_eng" / "mar.txt.gz"
        if not path.exists():
            pytest.skip("real data not available")
        from attnmt.corpus.readers import read_tsv

        marathi = [m for _, m in read_tsv(path) if "\u200d" in m][:200]
    assert marathi
    t = WordTokenizer()
    for line in marathi:
        tokens = t.tokenize(line)
        assert sum(tok.count("\u200d") for tok in tokens) == line.count("\u200d"), line
        # no token is a lone combining mark or joiner: marks stay attached to their letters
        for tok in tokens:
            assert tok not in ("\u200d", "\u094d", "\u093e", "\u0902"), (line, tokens)


def test_word_lowercase_option():
    assert WordTokenizer(lowercase=True).tokenize("Hello WORLD, Ärger!") == ["hello", "world", ",", "ärger", "!"]
    assert WordTokenizer().tokenize("Hello WORLD") == ["Hello", "WORLD"]


PROSE = [
    "Hello, world!",
    "Don't go.",
    'He said: "Yes (maybe)."',
    "Ich weiß nicht, ob er morgen kommt.",
    "Wie geht's dir?",
    '"Hi," he said.',
    "Tom (30) kam gestern an; Maria nicht.",
    "Really?! Yes.",
    "I'm sure it's fine, isn't it?",
    "¿Dónde está?",
    "तुम्हाला हेच हवं होतं का?",
]


@pytest.mark.parametrize("sentence", PROSE)
def test_word_detokenize_round_trip(sentence):
    t = WordTokenizer()
    assert t.detokenize(t.tokenize(sentence)) == sentence


# Ordinary Tatoeba-style sentences; about 1% of each side of deu.txt is like these.
COMMON_PUNCTUATION = [
    "Tom has no self-confidence.",         # hyphenated compound
    "Wo ist die US-Botschaft?",            # German compound with hyphen
    "Tom came back at 2:30.",              # clock time
    "Her library has 3,500 books.",        # thousands separator
    "Er wiegt 1,5 Kilo.",                   # decimal comma
    "She was born on March 27, 1976.",     # a date: the comma keeps its space
    "Auf der Seite stand das Wort „Frosch“.",  # German quotation marks
    "Hier drin stinkt’s.",                 # typographic apostrophe
    "He said 'hi' to me.",                 # single-quoted word
]


@pytest.mark.parametrize("sentence", COMMON_PUNCTUATION)
def test_word_detokenize_round_trip_common_punctuation(sentence):
    t = WordTokenizer()
    assert t.detokenize(t.tokenize(sentence)) == sentence


@pytest.mark.parametrize("corpus", ["generated", "tatoeba"])
def test_word_detokenize_round_trip_rate_on_german_and_english(corpus):
    if corpus == "generated":  # every two of the sentences above as one text: quotes, numbers, marks side by side
        sentences = [f"{a} {b}" for a in PROSE + COMMON_PUNCTUATION for b in PROSE + COMMON_PUNCTUATION]
        sides = [sentences]
    else:
        path = SHARED_DATA / "tatoeba_deu_eng" / "deu.txt.gz"
        if not path.exists():
            pytest.skip("real data not available")
        from attnmt.corpus.readers import read_tsv

        pairs = read_tsv(path)[::17]  # ~10k pairs across the whole length range
        sides = [[normalize(p[side]) for p in pairs] for side in (0, 1)]
    t = WordTokenizer()
    for sentences in sides:
        ok = sum(t.detokenize(t.tokenize(s)) == s for s in sentences)
        assert ok / len(sentences) > 0.97


def test_word_detokenize_empty():
    assert WordTokenizer().detokenize([]) == ""


def test_tokenizer_dict_round_trip():
    for tok in (WordTokenizer(), WordTokenizer(lowercase=True), CharTokenizer(), CharTokenizer(lowercase=True)):
        again = tokenizer_from_dict(tok.to_dict())
        assert type(again) is type(tok) and again.lowercase == tok.lowercase
    assert isinstance(make_tokenizer("word"), WordTokenizer)
    assert isinstance(make_tokenizer("char", True), CharTokenizer)


# --------------------------------------------------------------------------- CharTokenizer


def test_char_tokenize_shows_spaces():
    assert CharTokenizer().tokenize("Hi yo!") == ["H", "i", SPACE_SYMBOL, "y", "o", "!"]
    assert SPACE_SYMBOL == "\u2581"


@pytest.mark.parametrize("sentence", ["Hi there, you!", "Ich weiß.", "होतं का?", "2019-01-05", "a"])
def test_char_round_trip(sentence):
    t = CharTokenizer()
    tokens = t.tokenize(sentence)
    assert " " not in tokens
    assert t.detokenize(tokens) == sentence


def test_char_normalizes_like_word():
    t = CharTokenizer(lowercase=True)
    assert t.tokenize("A\u00a0\u200bB") == ["a", SPACE_SYMBOL, "b"]
    assert CharTokenizer().tokenize("  x  ") == ["x"]


# --------------------------------------------------------------------------- Vocabulary


def test_vocab_specials_first():
    assert SPECIALS == (PAD, UNK, SOS, EOS)
    assert (PAD_ID, UNK_ID, SOS_ID, EOS_ID) == (0, 1, 2, 3)
    v = Vocabulary.build([["b", "a"], ["a"]])
    assert v.itos[:4] == [PAD, UNK, SOS, EOS]
    assert [v.stoi[s] for s in SPECIALS] == [0, 1, 2, 3]
    assert v.itos[4:] == ["a", "b"]
    assert len(v) == 6


def test_vocab_frequency_order_ties_alphabetical_and_input_order_free():
    sentences = [["z", "y", "x"], ["y", "z"], ["w"], ["q", "q", "q"]]
    v = Vocabulary.build(sentences)
    assert v.itos[4:] == ["q", "y", "z", "w", "x"]
    shuffled = [list(reversed(s)) for s in reversed(sentences)]
    assert Vocabulary.build(shuffled).itos == v.itos


def test_vocab_min_freq():
    v = Vocabulary.build([["a", "a", "b", "c"], ["a", "b"]], min_freq=2)
    assert v.itos[4:] == ["a", "b"]
    assert v.encode(["c"]) == [UNK_ID]
    assert Vocabulary.build([["a"]], min_freq=2).itos == list(SPECIALS)


def test_vocab_max_size_counts_specials():
    sentences = [["a"] * 5 + ["b"] * 4 + ["c"] * 3 + ["d"] * 2 + ["e"]]
    v = Vocabulary.build(sentences, max_size=7)
    assert len(v) == 7
    assert v.itos[4:] == ["a", "b", "c"]
    assert len(Vocabulary.build(sentences, max_size=2)) == 4  # never fewer than the specials
    assert len(Vocabulary.build(sentences, max_size=100)) == 9


def test_vocab_encode_unknown_and_decode_stops_at_eos():
    v = Vocabulary.build([["hallo", "welt"]])
    ids = v.encode(["hallo", "unbekannt", "welt"])
    assert ids == [v.stoi["hallo"], UNK_ID, v.stoi["welt"]]
    assert v.decode(ids) == ["hallo", UNK, "welt"]
    assert v.decode([v.stoi["welt"], EOS_ID, v.stoi["hallo"]]) == ["welt"]
    assert v.decode([EOS_ID]) == []
    assert v.decode(torch.tensor([v.stoi["hallo"], EOS_ID, 0])) == ["hallo"]


def test_vocab_specials_in_text_are_not_duplicated():
    v = Vocabulary.build([["<unk>", "a", "<pad>"]])
    assert v.itos == list(SPECIALS) + ["a"]
    assert len(set(v.itos)) == len(v.itos)


def test_vocab_list_round_trip():
    v = Vocabulary.build([["der", "die", "das", "der"], ["die", "Hund"]], min_freq=1)
    again = Vocabulary.from_list(v.to_list())
    assert again.itos == v.itos and again.stoi == v.stoi
    assert v.to_list() is not v.itos  # a copy
    with pytest.raises(ValueError):
        Vocabulary.from_list(["a", "b", "c", "d"])


# --------------------------------------------------------------------------- batching


def batches_of(lengths: list[tuple[int, int]], *args, **kwargs) -> list[list[int]]:
    """batch_indices over lengths written as tuples, its batches as lists."""
    return [b.tolist() for b in batch_indices(np.array(lengths, dtype=np.int64).reshape(-1, 2), *args, **kwargs)]


def list_batches(lengths: list[tuple[int, int]], batch_size: int, batch_type: str, shuffle: bool,
                 rng: random.Random) -> list[list[int]]:
    """The batching of attnmt before prepared corpora, over Python lists (the oracle the arrays must match)."""
    order = list(range(len(lengths)))
    if shuffle:
        rng.shuffle(order)
        pool = 50 * (batch_size if batch_type == "sentences" else max(1, batch_size // 20))
    else:
        pool = len(order) or 1
    batches: list[list[int]] = []
    for start in range(0, len(order), pool):
        current: list[int] = []
        longest = 0
        for i in sorted(order[start : start + pool], key=lambda i: lengths[i]):
            longest_if_added = max(longest, max(lengths[i]) + 1)
            too_big = (len(current) >= batch_size if batch_type == "sentences"
                       else longest_if_added * (len(current) + 1) > batch_size)
            if current and too_big:
                batches.append(current)
                current, longest_if_added = [], max(lengths[i]) + 1
            current.append(i)
            longest = longest_if_added
        if current:
            batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


@pytest.mark.parametrize("batch_type, size", [("sentences", 1), ("sentences", 37), ("tokens", 1), ("tokens", 450),
                                              ("tokens", 4096)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_batches_from_arrays_are_those_of_python_lists(batch_type, size, shuffle):
    """The same batches, in the same order, as shuffling and sorting Python lists with the same seed:
    runs of earlier versions resume, and Multi30k trains on the same batches as before."""
    for seed, count in ((3, 5000), (4, 130), (5, 1)):
        lengths = random_lengths(count, seed=seed, high=120)
        expected = list_batches(lengths, size, batch_type, shuffle, random.Random(seed))
        assert batches_of(lengths, size, batch_type, shuffle=shuffle, rng=random.Random(seed)) == expected


def random_lengths(n: int, seed: int = 0, low: int = 1, high: int = 40) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(low, high), rng.randint(low, high)) for _ in range(n)]


def assert_partition(batches: list[list[int]], n: int) -> None:
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(n)), "every index exactly once"
    assert all(batches), "no empty batches"


@pytest.mark.parametrize("shuffle", [False, True])
def test_batch_sentences(shuffle):
    lengths = random_lengths(1003)
    batches = batches_of(lengths, 32, "sentences", shuffle=shuffle, rng=random.Random(1))
    assert_partition(batches, 1003)
    assert all(len(b) <= 32 for b in batches)
    assert sum(len(b) == 32 for b in batches) >= 25


@pytest.mark.parametrize("shuffle", [False, True])
def test_batch_tokens_respect_cap(shuffle):
    lengths = random_lengths(2000, seed=3)
    cap = 400
    batches = batches_of(lengths, cap, "tokens", shuffle=shuffle, rng=random.Random(2))
    assert_partition(batches, 2000)
    for b in batches:
        longest = max(max(lengths[i]) for i in b) + 1
        assert longest * len(b) <= cap, b
    # batches are reasonably full, not one sentence each
    assert len(batches) < 2000 / 4


def test_batch_tokens_overlong_sentence_alone():
    lengths = [(5, 5)] * 10 + [(300, 20)] + [(4, 6)] * 10
    batches = batches_of(lengths, 100, "tokens")
    assert_partition(batches, len(lengths))
    assert [10] in batches
    for b in batches:
        if b != [10]:
            assert (max(max(lengths[i]) for i in b) + 1) * len(b) <= 100


def test_batch_tokens_overlong_sentences_each_alone_even_when_several():
    lengths = [(500, 1), (3, 3), (600, 2), (2, 2), (450, 450)]
    batches = batches_of(lengths, 50, "tokens")
    assert_partition(batches, 5)
    for i in (0, 2, 4):
        assert [i] in batches


def test_batch_no_shuffle_is_length_sorted_and_deterministic():
    lengths = random_lengths(500, seed=7)
    batches = batches_of(lengths, 16, "sentences")
    flat = [i for b in batches for i in b]
    assert [lengths[i] for i in flat] == sorted(lengths)
    assert batches == batches_of(lengths, 16, "sentences")
    token_batches = batches_of(lengths, 300, "tokens")
    assert [lengths[i] for b in token_batches for i in b] == sorted(lengths)


def test_batch_shuffle_deterministic_with_seeded_rng():
    lengths = random_lengths(3000, seed=11)
    for kind, size in (("sentences", 16), ("tokens", 500)):
        a = batches_of(lengths, size, kind, shuffle=True, rng=random.Random(42))
        b = batches_of(lengths, size, kind, shuffle=True, rng=random.Random(42))
        c = batches_of(lengths, size, kind, shuffle=True, rng=random.Random(43))
        assert a == b
        assert a != c
        assert a != batches_of(lengths, size, kind)
        assert_partition(c, 3000)


def test_batch_shuffle_still_groups_similar_lengths():
    lengths = random_lengths(5000, seed=5, high=60)
    batches = batches_of(lengths, 32, "sentences", shuffle=True, rng=random.Random(0))
    spread = [max(lengths[i][0] for i in b) - min(lengths[i][0] for i in b) for b in batches]
    assert sum(spread) / len(spread) < 10  # random batches would spread ~55


def test_batch_empty_input():
    assert batches_of([], 8, "sentences") == []
    assert batches_of([], 8, "tokens", shuffle=True, rng=random.Random(0)) == []


def test_pad():
    assert pad([[1, 2, 3], [4]]).tolist() == [[1, 2, 3], [4, PAD_ID, PAD_ID]]
    assert pad([[5], [6]], value=9).dtype == torch.long


def test_collate():
    examples = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14])]
    batch = collate(examples, indices=[3, 1])
    assert isinstance(batch, Batch)
    assert batch.src.tolist() == [[5, 6, 7], [10, PAD_ID, PAD_ID]]
    assert batch.src_lengths.tolist() == [3, 1]
    assert batch.src_lengths.device.type == "cpu"
    assert batch.tgt_in.tolist() == [[SOS_ID, 8, 9, PAD_ID, PAD_ID], [SOS_ID, 11, 12, 13, 14]]
    assert batch.tgt_out.tolist() == [[8, 9, EOS_ID, PAD_ID, PAD_ID], [11, 12, 13, 14, EOS_ID]]
    assert batch.tgt_in.dtype == batch.tgt_out.dtype == batch.src.dtype == torch.long
    assert batch.indices == [3, 1]
    assert batch.num_target_tokens == 2 + 1 + 4 + 1


def test_collate_empty_target():
    batch = collate([([4], [])], indices=[0])
    assert batch.tgt_in.tolist() == [[SOS_ID]]
    assert batch.tgt_out.tolist() == [[EOS_ID]]
    assert batch.num_target_tokens == 1


class _StopHere(str):
    """A sentence whose truth test raises what a signal's handler raises (Ctrl-C) mid-reading."""

    def __bool__(self) -> bool:
        raise KeyboardInterrupt


def test_a_signal_while_sentencepiece_reads_ends_as_that_signal(monkeypatch):
    # sentencepiece turns an exception raised in the sentences it reads into a RuntimeError holding
    # a traceback, which became a many-line "cannot train" error instead of the interruption.
    import attnmt.tokenize as tokenize_module

    monkeypatch.setattr(tokenize_module, "normalize", lambda s: _StopHere(s) if s == "stop" else s)
    sentences = [f"ein satz {i} mit worten" for i in range(200)] + ["stop"] + ["noch ein satz"] * 10
    with pytest.raises(KeyboardInterrupt):
        tokenize_module.SubwordTokenizer.train("bpe", sentences, vocab_size=60)
