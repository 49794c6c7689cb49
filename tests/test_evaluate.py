"""Scores: exact match against any reference, BLEU by source length, evaluation on a training split."""

import dataclasses
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import sacrebleu
from conftest import tiny_dates_config
from test_cli import assert_one_line_error, attnmt

from attnmt.configfile import config_from_dict
from attnmt.corpus.prepare import load_split
from attnmt.corpus.readers import load_corpus
from attnmt.evaluate import bleu_by_length, bucket_labels, corpus_scores, evaluate, exact_match_any, score_outputs
from attnmt.modelfile import read_model, save_model
from attnmt.plot import missing_glyphs
from attnmt.tokenize import WordTokenizer
from attnmt.translate import Translator


def test_bucket_labels():
    assert bucket_labels((10, 15, 20, 25)) == ["<=10", "11-15", "16-20", "21-25", ">25"]
    assert bucket_labels((3,)) == ["<=3", ">3"]
    assert bucket_labels((3, 4, 6)) == ["<=3", "4", "5-6", ">6"]


def test_bleu_by_length_buckets_by_source_words_and_scores_each_bucket_alone():
    short = [("ein Hund läuft .", "a dog is running on the grass", "a dog runs on the grass")] * 3
    long = [(" ".join(["Wort"] * 12), "the man on the left is riding a red bike", "the man on the left rides a red bike")] * 2
    sources, hypotheses, references = map(list, zip(*(short + long)))
    rows = bleu_by_length(sources, hypotheses, references, edges=(5, 10))
    assert [(r["bucket"], r["sentences"]) for r in rows] == [("<=5", 3), ("6-10", 0), (">10", 2)]
    assert rows[1]["bleu"] is None
    expected_long = sacrebleu.corpus_bleu(hypotheses[3:], [references[3:]]).score
    assert rows[2]["bleu"] == pytest.approx(expected_long, abs=0.01)
    assert rows[0]["bleu"] != rows[2]["bleu"]


def test_bleu_by_length_rejects_bad_edges():
    with pytest.raises(Exception, match="ascending"):
        bleu_by_length(["a"], ["a"], ["a"], edges=(10, 5))


def test_exact_match_any_accepts_every_translation_of_the_same_source():
    sources = ["She kissed him.", "She kissed him.", "I ran."]
    references = ["Sie hat ihn geküsst.", "Sie küsste ihn.", "Ich rannte."]
    hypotheses = ["Sie küsste ihn.", "Sie küsste ihn.", "Ich lief."]
    assert exact_match_any(sources, hypotheses, references) == pytest.approx(2 / 3)


def test_length_ratio_is_the_outputs_words_over_the_references():
    references = ["a man rides a red bike .", "two dogs play in the snow ."]   # 7 + 7 words
    short = ["a man rides a bike .", "two dogs play ."]                        # 6 + 4
    assert corpus_scores(short, references)["length_ratio"] == round(10 / 14, 4)
    assert corpus_scores(references, references)["length_ratio"] == 1.0


def test_a_model_that_writes_lowercase_is_scored_on_lowercased_references_and_the_signatures_say_so():
    references = ["Ein Mann fährt ein rotes Fahrrad.", "Zwei Hunde spielen im Schnee."]
    outputs = [r.lower() for r in references]
    cased = score_outputs(SimpleNamespace(tgt_tokenizer=WordTokenizer()), list(zip(references, references)), outputs)
    lowered = score_outputs(SimpleNamespace(tgt_tokenizer=WordTokenizer(lowercase=True)),
                            list(zip(references, references)), outputs)
    assert lowered["bleu"] == lowered["chrf"] == 100.0 and cased["bleu"] < 60 and cased["chrf"] < 90
    assert "case:lc" in lowered["bleu_signature"] and "case:lc" in lowered["chrf_signature"]
    assert "case:mixed" in cased["bleu_signature"]
    buckets = bleu_by_length(references, outputs, references, edges=(6,), lowercase=True)
    assert [row["bleu"] for row in buckets] == [100.0, 100.0]


def test_load_split_cuts_the_corpus_as_training_did():
    config = config_from_dict(tiny_dates_config(Path("unused")))
    corpus = load_corpus(config.data)
    assert load_split(config.data, "test") == corpus.test
    assert load_split(config.data, "valid") == corpus.valid
    assert load_split(config.data, "train") == corpus.train


def test_evaluate_split_by_length_with_chart_for_two_models(dates_model, no_attention_model, tmp_path):
    chart = tmp_path / "by_length.png"
    result = attnmt("evaluate", str(dates_model), str(no_attention_model), "--split", "test",
                    "--by-length", "--buckets", "2,3", "--chart", str(chart))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("== ") == 2 and result.stdout.count("bleu by source length") == 2
    rows = [line.split() for line in result.stdout.splitlines() if "sentences" in line]
    assert [r[0] for r in rows] == ["<=2", "3", ">3"] * 2
    assert sum(int(r[2]) for r in rows[:3]) == 100  # the 100 test dates, each in one bucket
    assert chart.read_bytes()[:4] == b"\x89PNG"


def test_evaluate_needs_one_kind_of_input(dates_model, tmp_path):
    src = tmp_path / "s.txt"
    src.write_text("march 3, 1999\n", encoding="utf-8")
    assert_one_line_error(attnmt("evaluate", str(dates_model), "--src", str(src), "--split", "test"),
                          "--src and --ref, or --split")
    assert_one_line_error(attnmt("evaluate", str(dates_model), "--split", "test", "--buckets", "5,x"), "--buckets")


def test_a_split_whose_data_is_not_here_names_what_to_give(dates_model, tmp_path):
    # A model trained on a file that is not on this machine: the error names --data, or the model's
    # data.path with the flag that moves it.
    description, weights, _ = read_model(dates_model)
    data = dataclasses.replace(description.config.data, format="tsv", path=str(tmp_path / "gone.tsv"))
    moved = tmp_path / "moved.safetensors"
    save_model(moved, dataclasses.replace(description, config=dataclasses.replace(description.config, data=data)), weights)
    assert_one_line_error(attnmt("evaluate", str(moved), "--split", "test"), f"data.path: {tmp_path / 'gone.tsv'}",
                          "give --data where the data is on this machine")
    given = attnmt("evaluate", str(moved), "--split", "test", "--data", str(tmp_path / "x.tsv"))
    assert_one_line_error(given, f"attnmt: error: --data: {tmp_path / 'x.tsv'}")
    assert "data.path" not in given.stderr


def test_missing_glyphs_names_what_no_font_draws():
    assert missing_glyphs(["hello", "Zürich"]) == []
    assert missing_glyphs(["\U000f0000"]) == ["\U000f0000"]  # a private-use plane: no font has it
    assert missing_glyphs(["\u200d"]) == []                  # ZWJ shapes, it is never drawn


def test_devanagari_heatmap_labels_have_a_font(tmp_path):
    from attnmt.plot import available_fonts, plot_attention

    if "Noto Sans Devanagari" not in available_fonts():
        pytest.skip("no Devanagari font installed (Debian: fonts-noto-core; .ci/run installs it)")
    source, output = ["i", "am", "tired", "."], ["मी", "थकलो", "आहे", "."]
    assert missing_glyphs(source + output) == []
    out = tmp_path / "mr.png"
    plot_attention([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.7, 0.1], [0.1, 0.7, 0.1, 0.1], [0.0, 0.0, 0.0, 1.0]],
                   source, output, out)
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_scoring_tokenized_periods_prints_no_sacrebleu_warning_and_hides_no_other(caplog, capsys):
    """sacreBLEU warns in three lines when 100 outputs end in " ."; validation scored such a model's
    outputs at every epoch. That warning is silenced where attnmt scores; the logger itself is not."""
    translator = SimpleNamespace(tgt_tokenizer=WordTokenizer())  # all that scoring asks of a translator
    pairs = [(f"source {i}", f"a reference {i}.") for i in range(120)]
    hypotheses = [f"a reference {i} ." for i in range(120)]  # each ends in a tokenized period
    caplog.set_level(logging.WARNING)
    scores = score_outputs(translator, pairs, hypotheses)
    logging.getLogger("sacrebleu").warning("another sacreBLEU warning")
    assert float(scores["bleu"]) > 90 and scores["exact"] == 0.0
    said = caplog.text + capsys.readouterr().err
    assert "tokenized period" not in said and "detokenize" not in said, said
    assert "another sacreBLEU warning" in caplog.text
    # The same outputs through sacreBLEU's own default do warn: the test would see the warning.
    caplog.clear()
    sacrebleu.metrics.BLEU().corpus_score(hypotheses, [[r for _, r in pairs]])
    assert "tokenized period" in caplog.text


def test_an_evaluation_keeps_the_outputs_it_scored(dates_model):
    """bench/quality.py scores evaluate's outputs once more by a measure of its own."""
    translator = Translator.load(dates_model, "cpu")
    pairs = [("march 3, 1999", "1999-03-03"), ("12 june 2001", "2001-06-12")]
    evaluation = evaluate(translator, pairs, beam_size=2)
    assert evaluation.hypotheses == [t.text for t in translator.translate([s for s, _ in pairs], 2)]
    assert evaluation.scores == score_outputs(translator, pairs, evaluation.hypotheses)
