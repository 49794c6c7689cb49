"""Documents: texts cut into sentences and put together again as written, long sentences cut at a clause
end, a confidence for every translation, and the fronts that split (LibreTranslate's API, `split`, the CLI)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from attnmt.config import ServeConfig
from attnmt.documents.sentences import cut_to_fit, sentence_spans
from attnmt.documents.text import Segmented, joined_nbests, segment, translate_texts
from attnmt.serve import create_app
from attnmt.translate import Translation, Translator

# The hard cases the issue names, as a reader splits them (bench/sentence_split.py measures more).
HARD = {
    "de": [["Die Mauer fiel am 9. November 1989.", "Am 3. Oktober 1990 kam die Einheit."],
           ["Dr. Müller kam um 10.30 Uhr.", "Er blieb bis 12 Uhr."],
           ["Wir brauchen z. B. Mehl, Zucker usw. für den Kuchen.", "Dann backen wir."],
           ["Er sagte: „Ich komme morgen.“", "Sie glaubte ihm nicht."],
           ["Der Preis stieg um 2,5 Prozent.", "Das ist viel"]],
    "en": [["Dr. Smith arrived at 10.30 a.m. on Monday.", "He left at noon."],
           ["The price rose 2.5 percent.", "Analysts were surprised."],
           ["We need e.g. flour and sugar.", "Then we bake it."],
           ["She said, \"I will come tomorrow.\"", "He did not believe her."],
           ["Is it true?", "Yes!", "Really"]],
}


@pytest.mark.parametrize("language", ["de", "en"])
def test_the_hard_cases_split_where_a_reader_splits_them(language):
    for sentences in HARD[language]:
        text = " ".join(sentences)
        assert [text[start:end] for start, end in sentence_spans(text, language)] == sentences


def fake(text: str, tokens: int = 2, log_prob: float = -1.0) -> Translation:
    return Translation(text.upper(), [f"t{i}" for i in range(tokens)], ["s"] * 3,
                       np.full((tokens, 3), 1 / 3, dtype=np.float32), log_prob)


def test_a_text_keeps_its_spacing_and_line_breaks_around_its_translated_sentences():
    text = "  Das ist gut. Am 3. Oktober 1990 kam Dr. Müller.\n\nNeue Zeile  \n"
    document = segment(text, "de")
    assert document.sentences == ["Das ist gut.", "Am 3. Oktober 1990 kam Dr. Müller.", "Neue Zeile"]
    joined = document.join([fake(s) for s in document.sentences])
    assert joined.text == "  DAS IST GUT. AM 3. OKTOBER 1990 KAM DR. MÜLLER.\n\nNEUE ZEILE  \n"
    # Tokens: a line-break token per line break between two sentences, none between sentences of a line.
    assert joined.tokens == ["t0", "t1", "t0", "t1", "\n", "\n", "t0", "t1"]
    assert joined.log_prob == -3.0 and len(joined.parts) == 3
    assert joined.attention is not None and joined.attention.shape == (8, 11)
    assert joined.attention[:2, :3].sum() == pytest.approx(2) and joined.attention[:2, 3:].sum() == 0
    assert joined.attention[4:6].sum() == 0                     # the line breaks' rows
    # Without a language, a line is a sentence, whatever its full stops.
    assert segment(text, None).sentences == ["Das ist gut. Am 3. Oktober 1990 kam Dr. Müller.", "Neue Zeile"]
    # A text that is one sentence and nothing else gets its translation unchanged; an empty one, itself.
    one = fake("Ja.")
    assert segment("Ja.", "de").join([one]) is one
    assert segment(" \n", "de").join([]).text == " \n"


def test_n_best_lists_join_rank_by_rank():
    documents = [segment("Eins. Zwei.", "de"), segment("", "de"), segment("Drei.", "de")]
    nbests = [[fake("a1"), fake("a2")], [fake("b1")], [fake("c1"), fake("c2")]]
    joined = joined_nbests(documents, nbests, 2)
    # The second rank of a sentence with one translation repeats its only one; an empty text has one rank.
    assert [t.text for t in joined[0]] == ["A1 B1", "A2 B1"]
    assert [t.text for t in joined[1]] == [""]
    assert [t.text for t in joined[2]] == ["C1", "C2"]


def test_a_sentence_too_long_is_cut_at_a_clause_end_and_nothing_is_lost():
    text = "Er kam nach Hause, aß zu Abend und ging schlafen; am Morgen stand er früh auf, weil der Hahn krähte"
    fits = lambda part: len(part.split()) <= 6          # noqa: E731
    parts = [text[start:end] for start, end in cut_to_fit(text, (0, len(text)), fits)]
    assert all(fits(part) for part in parts)
    assert parts[0] == "Er kam nach Hause," and parts[1] == "aß zu Abend und ging schlafen;"
    assert " ".join(parts).split() == text.split()                # every word kept, in order
    # No clause end near enough: cut at a space, still every word.
    words = " ".join(f"w{i}" for i in range(20))
    assert [len(words[s:e].split()) for s, e in cut_to_fit(words, (0, len(words)), fits)] == [6, 6, 6, 2]


def test_confidence_is_the_geometric_mean_of_the_token_probabilities():
    sentence = fake("x", tokens=3, log_prob=-2.0)
    assert sentence.confidence == pytest.approx(math.exp(-2.0 / 4))
    joined = Segmented("a. b.", [(0, 2), (3, 5)]).join([sentence, fake("y", tokens=1, log_prob=-1.0)])
    assert joined.confidence == pytest.approx(math.exp(-3.0 / 6))    # over all the sentences' tokens and ends
    assert Translation("", [], [], None, 0.0).confidence == 1.0


@pytest.fixture(scope="module")
def translator(dates_model: Path) -> Translator:
    return Translator.load(dates_model, device="cpu")


DATES = ["3. Oktober 1990", "March 14, 2026", "the 21st of June 1975"]


def test_a_paragraph_is_translated_sentence_by_sentence_in_one_batch(translator):
    alone = [t.text for t in translator.translate(DATES)]
    settings = translator.settings()
    sentences = ["3. Oktober 1990.", "March 14, 2026.", "June 21, 1975."]
    [[paragraph]] = translate_texts(translator, [" ".join(sentences)], settings, "de")
    # Each sentence as the model translates it alone (the full stop is part of the sentence it reads).
    assert paragraph.text == " ".join(t.text for t in translator.translate(sentences))
    [[lines]] = translate_texts(translator, ["\n".join(DATES)], settings, split=False)
    assert lines.text == "\n".join(alone)
    confidences = [t.confidence for t in translator.translate(DATES)]
    assert all(0 < c <= 1 for c in confidences) and len(set(confidences)) == 3


def test_a_sentence_over_the_models_limit_is_cut_not_truncated(translator):
    """The dates model reads at most decode.max_src_len characters: a longer sentence is cut at its comma."""
    limit = translator.config.decode.max_src_len
    long = "the 21st of June 1975, " + "March 14, 2026 " * (limit // 10)
    assert not translator.fits(long)
    parts = segment(long, None, translator.fits).sentences
    assert len(parts) > 1 and all(translator.fits(part) for part in parts)
    assert " ".join(parts).split() == long.split()
    [[cut]] = translate_texts(translator, [long], translator.settings(), split=False)
    assert [t.text for t in cut.parts] == [t.text for t in translator.translate(parts)]


@pytest.fixture
def client(translator: Translator):
    with TestClient(create_app(translator, ServeConfig(max_sentences=6, max_chars=40))) as test_client:
        yield test_client


def test_libretranslate_splits_a_paragraph_as_libretranslate_does(client, translator):
    paragraph = "the 21st of June 1975. March 14, 2026.\n3. Oktober 1990"
    answer = client.post("/translate", json={"q": paragraph, "source": "de", "target": "en"})
    assert answer.status_code == 200, answer.text
    parts = [t.text for t in translator.translate(["the 21st of June 1975.", "March 14, 2026.", "3. Oktober 1990"])]
    assert answer.json()["translatedText"] == f"{parts[0]} {parts[1]}\n{parts[2]}"
    # A sentence over the server's characters (40) is cut at a clause end, not refused.
    long = "the 21st of June 1975, March 14, 2026, 3. Oktober 1990"
    assert client.post("/translate", json={"q": long, "source": "de", "target": "en"}).status_code == 200


def test_attnmt_api_splits_when_asked_and_gives_each_translation_a_confidence(client, translator):
    text = "the 21st of June 1975. March 14, 2026."
    whole = client.post("/translate", json={"text": text}).json()["results"][0]
    assert whole["translation"] == translator.translate([text])[0].text
    assert whole["confidence"] == pytest.approx(translator.translate([text])[0].confidence, abs=1e-4)
    split = client.post("/translate", json={"text": text, "split": True}).json()["results"][0]
    parts = translator.translate(["the 21st of June 1975.", "March 14, 2026."])
    assert split["translation"] == " ".join(t.text for t in parts)
    assert split["score"] == pytest.approx(sum(t.log_prob for t in parts), abs=1e-3)


def test_the_cli_splits_paragraphs_when_told_and_prints_confidences(dates_model, tmp_path, translator):
    source = tmp_path / "in.txt"
    source.write_text("the 21st of June 1975. March 14, 2026.\n\n3. Oktober 1990\n")
    run = [sys.executable, "-m", "attnmt", "translate", str(dates_model), "--input", str(source)]
    lines = subprocess.run(run, capture_output=True, text=True, check=True).stdout.split("\n")
    assert lines[0] == translator.translate(["the 21st of June 1975. March 14, 2026."])[0].text   # a line a sentence
    split = subprocess.run(run + ["--split-sentences", "--scores"], capture_output=True, text=True,
                           check=True).stdout.split("\n")
    parts = translator.translate(["the 21st of June 1975.", "March 14, 2026."])
    confidence, text = split[0].split("\t")
    assert text == " ".join(t.text for t in parts) and split[1] == "1.0000\t"
    assert float(confidence) == pytest.approx(math.exp(sum(t.log_prob for t in parts)
                                                       / sum(len(t.tokens) + 1 for t in parts)), abs=1e-4)
    refused = subprocess.run(run + ["--language", "de"], capture_output=True, text=True)
    assert refused.returncode == 2 or refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1].startswith("attnmt: error: --language")
