"""Word alignments from attention: links, symmetrization, gold files, AER by hand, the CLI."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from attnmt import AttnmtError, Translator
from attnmt.analysis.align import (
    AttentionLinks,
    GoldLinks,
    align_by_attention,
    averaged,
    cross_attention_layers,
    default_layer,
    links_of,
    parse_links,
    pharaoh,
    read_gold,
    score,
    symmetrize,
    word_attention,
)
from attnmt.cli import main
from attnmt.tokenize import SubwordTokenizer, make_tokenizer
from attnmt.vocab import SOS_ID

PAIRS = [("3 March 2021", "2021 - 03 - 03"), ("June 17 , 1999", "1999 - 06 - 17"), ("1 Jan 2000", "2000 - 01 - 01")]


# ---------------------------------------------------------------- scores, links and gold files by hand

def test_aer_precision_recall_by_hand():
    """A = {0-0, 1-1, 2-1}, S = {0-0}, P = S + {1-1, 1-2}: |A∩S| = 1, |A∩P| = 2, so
    AER = 1 - (1 + 2) / (3 + 1) = 0.25, precision 2/3, recall 1; a possible-only link counts for
    precision, never for recall."""
    gold = GoldLinks({(0, 0)}, {(0, 0), (1, 1), (1, 2)})
    scores = score([{(0, 0), (1, 1), (2, 1)}], [gold])
    assert scores.aer == pytest.approx(0.25) and scores.precision == pytest.approx(2 / 3) and scores.recall == 1
    assert (scores.links, scores.sure, scores.possible) == (3, 1, 3)
    # over a corpus the counts add up before dividing: pair 2 has 1 link, wrong, and 2 sure links
    scores = score([[(0, 0), (1, 1), (2, 1)], [(0, 1)]], [gold, GoldLinks({(0, 0), (1, 1)}, {(0, 0), (1, 1)})])
    assert scores.aer == pytest.approx(1 - (1 + 2) / (4 + 3)) and scores.recall == pytest.approx(1 / 3)
    assert score([{(0, 0)}], [GoldLinks({(0, 0)}, {(0, 0)})]).aer == 0


def test_gold_links_read_from_one_or_zero():
    rwth = parse_links("1-1 2p3 3-2", 1, "x")
    assert rwth.sure == {(0, 0), (2, 1)} and rwth.possible == {(0, 0), (1, 2), (2, 1)}
    assert parse_links("0-0 1p2 2-1", 0, "x") == rwth


@pytest.mark.parametrize("line, base, message", [
    ("1-1 2x3", 1, "f.talp:4: '2x3' is not a link: expected i-j (sure) or ipj (possible)"),
    ("0-1", 1, "f.talp:4: link '0-1' has position 0, but positions are read from 1 (--gold-base)"),
    ("3-1", 1, "f.talp:4: link '3-1' points past the sentence pair (source 2 words, target 2; positions from 1)"),
    ("1-2", 0, "f.talp:4: link '1-2' points past the sentence pair (source 2 words, target 2; positions from 0)"),
])
def test_bad_gold_links_are_one_line(line, base, message):
    with pytest.raises(AttnmtError) as caught:
        parse_links(line, base, "f.talp:4", (2, 2))
    assert str(caught.value) == message


def test_gold_file_lines_must_pair_with_the_sentences(tmp_path):
    path = tmp_path / "g.talp"
    path.write_text("1-1\n2-2 1p2\n")
    assert read_gold(path, 1, [(2, 2), (2, 2)])[1].possible == {(1, 1), (0, 1)}
    with pytest.raises(AttnmtError, match="g.talp: 2 lines of gold links for 3 sentence pairs"):
        read_gold(path, 1, [(2, 2)] * 3)


def read_gold_folder(folder: Path) -> list[GoldLinks]:
    """The gold links of test.talp, checked against the word counts of test.de and test.en."""
    lengths = [(len(s.split()), len(t.split())) for s, t in
               zip((folder / "test.de").read_text().splitlines(), (folder / "test.en").read_text().splitlines())]
    return read_gold(folder / "test.talp", 1, lengths)


def test_rwth_gold_standard_reads_whole(shared_data):
    """508 pairs, 9,613 sure links and 921 possible-only ones (SOURCE.md says "9,613 links in all,
    921 of them possible only"; the file's items count 9,613 `i-j` and 921 `ipj`, none twice)."""
    gold = read_gold_folder(shared_data / "rwth_deen_gold")
    assert len(gold) == 508
    assert sum(len(g.sure) for g in gold) == 9613
    assert sum(len(g.possible - g.sure) for g in gold) == 921


def test_a_generated_gold_standard_in_rwths_form_reads_whole(tmp_path):
    """The RWTH files' form: word counts up to 30 (two-digit positions), `i-j` sure and `ipj`
    possible-only links from 1, in any order, a pair without links: read back as written."""
    rng = random.Random(7)
    written, lines = [], {"de": [], "en": [], "talp": []}
    for _ in range(300):
        m, n = rng.randint(1, 30), rng.randint(1, 30)
        links = rng.sample([(i, j) for i in range(m) for j in range(n)], rng.randint(0, min(m * n, 40)))
        cut = rng.randint(0, len(links))
        sure, possible_only = set(links[:cut]), set(links[cut:])
        items = [f"{i + 1}-{j + 1}" for i, j in sure] + [f"{i + 1}p{j + 1}" for i, j in possible_only]
        rng.shuffle(items)
        lines["de"].append(" ".join(f"wort{k}" for k in range(m)))
        lines["en"].append(" ".join(f"word{k}" for k in range(n)))
        lines["talp"].append(" ".join(items))
        written.append(GoldLinks(sure, sure | possible_only))
    for name, text in lines.items():
        (tmp_path / f"test.{name}").write_text("".join(line + "\n" for line in text))
    assert read_gold_folder(tmp_path) == written


def test_links_by_argmax_and_threshold():
    attention = np.array([[0.7, 0.2, 0.1],      # target word 0
                          [0.1, 0.45, 0.45],    # 1: a tie goes to the first
                          [0.0, 0.0, 0.0],      # 2: a word with no pieces attends nothing: no link
                          [0.05, 0.35, 0.6]])
    assert links_of(attention, "argmax") == {(0, 0), (1, 1), (2, 3)}
    assert links_of(attention, "threshold", 0.3) == {(0, 0), (1, 1), (2, 1), (1, 3), (2, 3)}
    assert pharaoh(sorted(links_of(attention))) == "0-0 1-1 2-3"
    with pytest.raises(AttnmtError, match="method 'aligner': choose argmax, threshold"):
        links_of(attention, "aligner")          # the aligner reads no attention


@pytest.mark.parametrize("settings, message", [
    ({"method": "aligner"}, "method 'aligner': choose argmax, threshold"),
    ({"threshold": 0.0}, r"threshold 0.0: allowed \(0, 1\]"),
    ({"step": "next"}, "step 'next': choose output, input"),
    ({"symmetrization": "grow"}, "symmetrization 'grow': choose intersect, union, grow-diag, grow-diag-final, average"),
])
def test_attention_links_refuse_what_no_attention_method_reads(settings, message):
    with pytest.raises(AttnmtError, match=message):
        AttentionLinks(**settings)


def test_symmetrization_by_hand():
    """Both directions agree on 0-0 and 2-2; forward adds 1-1, backward 1-2 and 3-0."""
    forward, backward = {(0, 0), (1, 1), (2, 2)}, {(0, 0), (1, 2), (2, 2), (3, 0)}
    assert symmetrize(forward, backward, "intersect") == {(0, 0), (2, 2)}
    assert symmetrize(forward, backward, "union") == forward | backward
    # grow-diag: 1-1 neighbours 0-0 (diagonally) and aligns source word 1 and target word 1, both
    # unaligned: added. Then 1-2 neighbours 1-1, but source 1 and target 2 are aligned: not added.
    # 3-0 touches no link: left out.
    assert symmetrize(forward, backward, "grow-diag") == {(0, 0), (1, 1), (2, 2)}
    # final: 3-0 aligns source word 3, still unaligned: added; 1-2 aligns nothing new.
    assert symmetrize(forward, backward, "grow-diag-final") == {(0, 0), (1, 1), (2, 2), (3, 0)}


def test_averaging_by_hand():
    """Links where the two directions' weights average one half or more."""
    forward = np.array([[0.9, 0.1], [0.4, 0.5]])                       # [target, source]
    backward = np.array([[0.2, 0.6], [0.0, 0.5]])                      # [source, target]
    # (0, 0): 0.9 and 0.2 → 0.55; (1, 0): 0.1 and 0.0; (0, 1): 0.4 and 0.6 → 0.5; (1, 1): 0.5 and 0.5.
    assert averaged(forward, backward) == {(0, 0), (0, 1), (1, 1)}
    assert averaged(forward, backward - 0.01) == {(0, 0)}


# ---------------------------------------------------------------- words and pieces

@pytest.mark.parametrize("level", ["word", "char", "bpe"])
def test_each_word_is_tokenized_alone_as_in_the_sentence(level):
    words = "Das Haus , daß ( es ) gibt – Drogenabhängiger .".split()
    if level == "bpe":
        tokenizer = SubwordTokenizer.train("bpe", ["das Haus gibt es", "der Drogen Händler", "daß es"] * 20, 60)
    else:
        tokenizer = make_tokenizer(level)
    tokens, owners = tokenizer.tokenize_words(words)
    assert tokens == tokenizer.tokenize(" ".join(words))
    for index, word in enumerate(words):
        assert tokenizer.detokenize([t for t, o in zip(tokens, owners, strict=True) if o == index]) == word
    assert set(owners) - {-1} == set(range(len(words)))


def forced_cross(translator: Translator, source: list[str], target: list[str]) -> np.ndarray:
    """The model's cross-attention [layers, heads, T + 1, S] over the pieces, teacher-forced: row t
    is the step that writes target piece t (the last row writes the end of the sentence)."""
    src = torch.tensor([translator.tokenization.src_vocab.encode(source)])
    output = translator.tokenization.tgt_vocab.encode(target)
    with torch.no_grad():
        maps = translator.model.eval().attention_maps(src, torch.tensor([len(source)]),
                                                      torch.tensor([[SOS_ID] + output]))
    return maps["cross"][0].numpy()


def test_word_attention_sums_source_pieces_and_averages_target_pieces(dates_model):
    """By hand from the piece attention of a character model: a source word's weight is the sum
    over its characters, a target word's row the mean over its characters; spaces belong to no word."""
    translator = Translator.load(dates_model, "cpu", precision="fp32")
    source, target = "3 Mar", "21 - 3"
    pieces = forced_cross(translator, list("3▁Mar"), list("21▁-▁3"))[0, 0]     # [7, 5]: 6 pieces + end
    by_source = np.stack([pieces[:, 0], pieces[:, 2:5].sum(1)], axis=1)       # words 3 | Mar
    expected = np.stack([by_source[0:2].mean(0), by_source[3], by_source[5]])  # words 21 | - | 3
    (words,) = word_attention(translator, [(source.split(), target.split())])
    np.testing.assert_allclose(words, expected, rtol=1e-5, atol=1e-6)
    (alignment,) = align_by_attention(translator, [source], [target])
    assert alignment.links == sorted((int(words[t].argmax()), t) for t in range(3))


@pytest.mark.parametrize("model", ["dates_model", "transformer_dates_model"])
def test_the_input_step_reads_the_row_after_the_output_step(model, request):
    """step input (shift-att) takes for target piece t the row of the step that reads it, t + 1:
    for the last piece, the step that writes the end of the sentence."""
    translator = Translator.load(request.getfixturevalue(model), "cpu", precision="fp32")
    pieces = forced_cross(translator, list("1▁Jan"), list("2000"))[0].mean(0)           # [5, 5]: 4 pieces + end
    by_source = np.stack([pieces[:, 0], pieces[:, 2:].sum(1)], axis=1)                 # words 1 | Jan
    for step, rows in (("output", by_source[:4]), ("input", by_source[1:])):
        (words,) = word_attention(translator, [(["1", "Jan"], ["2000"])], layer=1, step=step)
        np.testing.assert_allclose(words[0], rows.mean(0), rtol=1e-5, atol=1e-6)
    with pytest.raises(AttnmtError, match="step 'both': choose output, input"):
        word_attention(translator, [(["1"], ["2000"])], step="both")


def test_transformer_aligns_with_the_penultimate_layer_by_default(transformer_dates_model):
    translator = Translator.load(transformer_dates_model, "cpu", precision="fp32")
    cross = forced_cross(translator, list("1▁Jan"), list("2000"))[:, :, :4]     # [2 layers, 4 heads, 4, 5]
    assert default_layer(2) == 1 and default_layer(1) == 1 and default_layer(6) == 5
    for layer, head, expected in [(None, None, cross[0].mean(0)), (2, None, cross[1].mean(0)), (2, 3, cross[1, 2])]:
        (words,) = word_attention(translator, [(["1", "Jan"], ["2000"])], layer, head)
        np.testing.assert_allclose(words[0], [expected[:, 0].mean(), expected[:, 2:].sum(1).mean()], rtol=1e-5)
    with pytest.raises(AttnmtError, match="layer 3: this model's cross attention has layers 1 to 2"):
        word_attention(translator, [(["1"], ["2000"])], layer=3)


def test_cross_attention_layers_are_the_models_map_shapes(dates_model, transformer_dates_model, no_attention_model,
                                                         monkeypatch):
    """Read off the model's map_shapes, without a forward pass (one that ran would fail here)."""
    def no_pass(*_args):
        raise AssertionError("cross_attention_layers ran the model")

    for path, layers in [(dates_model, 1), (transformer_dates_model, 2)]:
        translator = Translator.load(path, "cpu")
        monkeypatch.setattr(translator.model, "attention_maps", no_pass)
        assert cross_attention_layers(translator) == layers
    with pytest.raises(AttnmtError, match="this model has no attention"):
        cross_attention_layers(Translator.load(no_attention_model, "cpu"))


def test_aligning_both_ways_combines_the_directions(dates_model):
    """The dates model translates either way here (the words are what they are): backward links
    are flipped to (source, target) before they combine."""
    translator = Translator.load(dates_model, "cpu", precision="fp32")
    sources, targets = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    forward = align_by_attention(translator, sources, targets)
    backward = align_by_attention(translator, targets, sources)
    for method in ("intersect", "union"):
        both = align_by_attention(translator, sources, targets, AttentionLinks(symmetrization=method), translator)
        for f, b, combined in zip(forward, backward, both, strict=True):
            flipped = {(s, t) for t, s in b.links}
            assert set(combined.links) == (set(f.links) & flipped if method == "intersect" else set(f.links) | flipped)
    both = align_by_attention(translator, sources, targets, AttentionLinks(symmetrization="average"), translator)
    for f, b, combined in zip(forward, backward, both, strict=True):
        assert set(combined.links) == averaged(f.attention, b.attention)
    assert align_by_attention(translator, sources, targets, reverse=translator)[0].links == \
        align_by_attention(translator, sources, targets, AttentionLinks(symmetrization="grow-diag-final"),
                           translator)[0].links
    with pytest.raises(AttnmtError, match="symmetrization 'grow': choose intersect, union, grow-diag, grow-diag-final, "
                                          "average"):
        AttentionLinks(symmetrization="grow")


# ---------------------------------------------------------------- the command line

def test_cli_writes_pharaoh_lines_and_scores_against_gold(dates_model, tmp_path, capsys):
    src, tgt, gold, out = (tmp_path / name for name in ("s.txt", "t.txt", "g.talp", "links.txt"))
    src.write_text("".join(s + "\n" for s, _ in PAIRS))
    tgt.write_text("".join(t + "\n" for _, t in PAIRS))
    gold.write_text("3-1 2-3 1-5\n4-1 1-3 2-5\n3-1 2p3 1-5\n")
    assert main(["align", str(dates_model), "--src", str(src), "--tgt", str(tgt), "-o", str(out), "--gold", str(gold),
                 "--device", "cpu"]) == 0
    lines = out.read_text().splitlines()
    predicted = [parse_links(line, 0, "out", (len(s.split()), len(t.split()))) for line, (s, t) in zip(lines, PAIRS, strict=True)]
    assert len(lines) == 3 and all(p.sure for p in predicted)
    expected = score([p.sure for p in predicted], read_gold(gold, 1))
    assert capsys.readouterr().err.strip() == expected.line()
    assert main(["align", str(dates_model), "--src", str(src), "--tgt", str(tgt), "--method", "threshold",
                 "--threshold", "0.2", "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_cli_refusals_are_one_line(dates_model, no_attention_model, tmp_path, capsys):
    src, tgt, gold = tmp_path / "s.txt", tmp_path / "t.txt", tmp_path / "g.txt"
    src.write_text("a b\nc d\n")
    tgt.write_text("x y\n")
    gold.write_text("0-0\n")

    def refusal(*argv) -> str:
        assert main(["align", *map(str, argv), "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        return err

    assert f"has 2 lines but --tgt {tgt} has 1" in refusal(dates_model, "--src", src, "--tgt", tgt)
    tgt.write_text("x y\nz w\n")
    assert "g.txt: 1 lines of gold links for 2 sentence pairs" in refusal(dates_model, "--src", src, "--tgt", tgt,
                                                                           "--gold", gold)
    assert "has no attention" in refusal(no_attention_model, "--src", src, "--tgt", tgt)


def test_plot_draws_gold_links_over_the_word_attention(dates_model, tmp_path, capsys):
    out = tmp_path / "a.png"
    assert main(["plot", str(dates_model), "3 March 2021", "--target", "2021 - 03 - 03", "--gold", "3-1 2p3 1-5",
                 "--gold-base", "1", "--out", str(out), "--device", "cpu"]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    links = capsys.readouterr().out.splitlines()[0]
    assert len(links.split()) == 5
    assert main(["plot", str(dates_model), "3 March", "--gold", "1-1", "--out", str(out)]) == 2
    assert "--gold needs --target" in capsys.readouterr().err
    assert main(["plot", str(dates_model), "3 March", "--target", "3", "--gold", "1-2", "--gold-base", "1",
                 "--out", str(out)]) == 2
    assert "--gold: link '1-2' points past the sentence pair (source 2 words, target 1" in capsys.readouterr().err
