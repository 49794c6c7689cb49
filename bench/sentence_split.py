"""Which sentence splitter attnmt uses: each candidate's boundary F1 on paragraphs made of real news
documents, its hard cases, and its speed (docs/documents.md cites the result).

The gold: WMT newstest2014, German and English side (../shared/data/wmt_newstest_deen). Each of its
164 documents becomes paragraphs as a writer would have them: the headline (its first segment)
alone, then its other segments, in order, four to a paragraph, joined by one space; a heading inside
the document (a segment that ends without a sentence's last mark: "Built by experts") on a line of
its own, as a page has it, since no splitter can find a heading's end in running text. A splitter is
given one paragraph at a time (documents.sentences splits a text at its line breaks first); a
boundary is the character offset where a sentence starts inside a paragraph. Precision, recall and
F1 count those offsets over all paragraphs (a paragraph's own start is not a boundary); a
segment that itself holds two sentences (the corpus has a few) costs every candidate alike.

The hard cases are this script's own: one line each, with the sentences a reader sees, for what
news, mail and manuals hold (ordinals and dates, abbreviations, decimals and times, quotes,
ellipses, list items, a last sentence without its full stop). Speed: sentences a second over both
sides' paragraphs, the best of three passes, one thread, after a warm-up.

    python bench/sentence_split.py            # prints the table; --json FILE writes the figures
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import time
from pathlib import Path
from typing import Callable

NEWSTEST = Path(__file__).resolve().parents[2] / "shared" / "data" / "wmt_newstest_deen"
PER_PARAGRAPH = 4

# A splitter: (language, paragraph) -> the offsets where its sentences start, the first included.
Splitter = Callable[[str, str], list[int]]

HARD_CASES = {
    "de": [
        ["Die Mauer fiel am 9. November 1989.", "Am 3. Oktober 1990 kam die Einheit."],
        ["Dr. Müller kam um 10.30 Uhr.", "Er blieb bis 12 Uhr."],
        ["Wir brauchen z. B. Mehl, Zucker usw. für den Kuchen.", "Dann backen wir."],
        ["Der Preis stieg um 2,5 Prozent auf 3.000 Euro.", "Das ist viel."],
        ["Er sagte: „Ich komme morgen.“", "Sie glaubte ihm nicht."],
        ["Ich weiß nicht ...", "Vielleicht morgen."],
        ["Das Treffen ist am Mo. 4. Mai.", "Bitte kommt pünktlich."],
        ["Er wurde im 19. Jh. geboren und starb mit 80 Jahren.", "Sein Werk blieb."],
        ["Die Firma XY GmbH & Co. KG stellt ein.", "Bewerbungen bis Freitag"],
        ["Wie geht es dir?", "Gut, danke!", "Und dir?"],
        ["1. Mehl abwiegen.", "2. Eier trennen."],
        ["Siehe S. 12 ff. und Abb. 3.", "Dort steht mehr."],
    ],
    "en": [
        ["Dr. Smith arrived at 10.30 a.m. on Monday.", "He left at noon."],
        ["The price rose 2.5 percent to $3.5 million.", "Analysts were surprised."],
        ["We need e.g. flour, sugar, etc. for the cake.", "Then we bake it."],
        ["She said, \"I will come tomorrow.\"", "He did not believe her."],
        ["I do not know...", "Maybe tomorrow."],
        ["Mr. and Mrs. Jones live in the U.S. now.", "They moved in 2010."],
        ["The meeting is on Jan. 4 at 3 p.m.", "Please be on time."],
        ["Is it true?", "Yes!", "Really?"],
        ["1. Weigh the flour.", "2. Separate the eggs."],
        ["See p. 12 and Fig. 3 for details.", "There is more there."],
        ["Apple Inc. rose on Monday.", "Microsoft Corp. fell"],
        ["He was born on 3 Oct. 1990 in St. Louis.", "His work lives on."],
    ],
}


def read_documents(language: str) -> list[list[str]]:
    """newstest2014's documents of one side, each its segments' texts in order."""
    documents: list[list[str]] = []
    with gzip.open(NEWSTEST / f"newstest2014-deen-src.{language}.sgm.gz", "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.startswith("<doc "):
                documents.append([])
            elif line.startswith("<seg "):
                documents[-1].append(re.sub(r"^<seg id=\"\d+\">|</seg>\s*$", "", line))
    return documents


def paragraphs_of(documents: list[list[str]]) -> list[list[str]]:
    """The paragraphs, each as its sentences: a document's headline alone, then its segments by four, but a
    heading (a segment that ends without a sentence's last mark) on a line of its own, as a page has it."""
    paragraphs = []
    for segments in documents:
        paragraphs.append(segments[:1])
        paragraph: list[str] = []
        for segment in segments[1:]:
            if not re.search(r"[.!?:;…\"'“”»«)]$", segment):
                paragraphs += [paragraph, [segment]] if paragraph else [[segment]]
                paragraph = []
                continue
            paragraph.append(segment)
            if len(paragraph) == PER_PARAGRAPH:
                paragraphs.append(paragraph)
                paragraph = []
        if paragraph:
            paragraphs.append(paragraph)
    return paragraphs


def starts_of(sentences: list[str]) -> tuple[str, list[int]]:
    """A paragraph's text (its sentences joined by a space) and where each sentence starts."""
    starts, offset = [], 0
    for sentence in sentences:
        starts.append(offset)
        offset += len(sentence) + 1
    return " ".join(sentences), starts


def first_letters(text: str, starts: list[int]) -> set[int]:
    """Offsets moved past the white space a splitter may give to either side of a boundary."""
    moved = set()
    for start in starts:
        while start < len(text) and text[start].isspace():
            start += 1
        if 0 < start < len(text):
            moved.add(start)
    return moved


def sentencex_splitter() -> Splitter:
    import sentencex

    return lambda language, text: [b["start_index"] for b in sentencex.get_sentence_boundaries(language, text)]


def pysbd_splitter() -> Splitter:
    import pysbd

    segmenters: dict[str, pysbd.Segmenter] = {}

    def split(language: str, text: str) -> list[int]:
        segmenter = segmenters.setdefault(language, pysbd.Segmenter(language=language, clean=False, char_span=True))
        return [span.start for span in segmenter.segment(text)]
    return split


def syntok_splitter() -> Splitter:
    from syntok import segmenter

    return lambda language, text: [sentence[0].offset for paragraph in segmenter.analyze(text)
                                   for sentence in paragraph]


def blingfire_splitter() -> Splitter:
    import blingfire

    return lambda language, text: [int(start) for start, _ in blingfire.text_to_sentences_and_offsets(text)[1]]


CANDIDATES = {"sentencex": sentencex_splitter, "pysbd": pysbd_splitter, "syntok": syntok_splitter,
              "blingfire": blingfire_splitter}


def score(split: Splitter, language: str, paragraphs: list[list[str]]) -> dict[str, float]:
    found = wanted = right = 0
    for sentences in paragraphs:
        text, starts = starts_of(sentences)
        gold, guess = first_letters(text, starts), first_letters(text, split(language, text))
        found, wanted, right = found + len(guess), wanted + len(gold), right + len(gold & guess)
    precision, recall = right / found, right / wanted
    return {"precision": precision, "recall": recall, "f1": 2 * precision * recall / (precision + recall)}


def hard_cases(split: Splitter, language: str) -> list[bool]:
    results = []
    for sentences in HARD_CASES[language]:
        text, starts = starts_of(sentences)
        results.append(first_letters(text, split(language, text)) == first_letters(text, starts))
    return results


def speed(split: Splitter, texts: list[tuple[str, str]], sentences: int) -> float:
    for language, text in texts[:50]:
        split(language, text)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for language, text in texts:
            split(language, text)
        best = min(best, time.perf_counter() - start)
    return sentences / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    import importlib.metadata

    sides = {language: paragraphs_of(read_documents(language)) for language in ("de", "en")}
    texts = [(language, starts_of(p)[0]) for language, paragraphs in sides.items() for p in paragraphs]
    sentences = sum(len(p) for paragraphs in sides.values() for p in paragraphs)
    boundaries = {lang: sum(len(p) - 1 for p in paragraphs) for lang, paragraphs in sides.items()}
    print(f"newstest2014: {len(texts)} paragraphs, {sentences} sentences, in-paragraph boundaries "
          f"de {boundaries['de']}, en {boundaries['en']}; hard cases de {len(HARD_CASES['de'])}, "
          f"en {len(HARD_CASES['en'])}")
    print(f"{'splitter':<20} {'de P':>6} {'de R':>6} {'de F1':>6} {'en P':>6} {'en R':>6} {'en F1':>6} "
          f"{'hard de':>8} {'hard en':>8} {'sent/s':>9}")
    figures = {}
    for name, make in CANDIDATES.items():
        split = make()
        row = {language: score(split, language, paragraphs) for language, paragraphs in sides.items()}
        hard = {language: hard_cases(split, language) for language in HARD_CASES}
        rate = speed(split, texts, sentences)
        label = f"{name} {importlib.metadata.version(name)}"
        figures[label] = {"scores": row, "hard_cases": hard, "sentences_per_second": rate}
        print(f"{label:<20} " + " ".join(f"{100 * row[lang][k]:6.2f}" for lang in ("de", "en")
                                          for k in ("precision", "recall", "f1"))
              + " " + " ".join(f"{sum(hard[lang]):>4}/{len(hard[lang]):<3}" for lang in ("de", "en"))
              + f" {rate:9.0f}")
        for language, results in hard.items():
            missed = [" | ".join(HARD_CASES[language][i]) for i, ok in enumerate(results) if not ok]
            for case in missed:
                print(f"    {language} wrong: {case}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
