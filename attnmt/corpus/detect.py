"""Which of a model's source languages a text is in: a small, explainable guess, not a language identifier.

A model says which languages it reads (`data.source_languages`); detection only ever picks among
those. With one, the answer is that one, with confidence 100. With several, each language scores
one point per word of the text in its short list of very common words (function words, months
and weekdays) and one per letter only its alphabet or script has (ß, ñ, Cyrillic, kana...); the
confidences are the languages' shares of the points, in percent. A text with no such evidence
(a number, a name, "12/25/2031") gets equal shares, and the first declared language comes
first. Languages without a profile here score nothing and so are picked only by that tie.
Short texts give little evidence: one word decides.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Very common words per language, lowercase: articles, pronouns, prepositions, conjunctions,
# months and weekdays. A word in two lists counts for both.
WORDS = {
    "en": "the of and to in is it that for on with as was he she they you not this be are at by from or "
          "january february march april may june july august september october november december "
          "monday tuesday wednesday thursday friday saturday sunday",
    "de": "der die das und ist nicht ein eine zu den von mit sich auf für im dem des ich sie er es wir "
          "januar februar märz mai juni juli oktober dezember "
          "montag dienstag mittwoch donnerstag freitag samstag sonntag",
    "fr": "le la les et est un une des du de en que qui pas pour dans sur avec il elle je nous vous "
          "janvier février mars avril mai juin juillet août septembre octobre novembre décembre "
          "lundi mardi mercredi jeudi vendredi samedi dimanche",
    "es": "el la los las y es un una de del en que por con para no se lo su al "
          "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre "
          "lunes martes miércoles jueves viernes sábado domingo",
    "it": "il lo la gli le e è un una di del della che per con non si sono in al "
          "gennaio febbraio marzo aprile maggio giugno luglio agosto settembre ottobre novembre dicembre "
          "lunedì martedì mercoledì giovedì venerdì sabato domenica",
    "nl": "de het een en is van dat niet op te zijn met voor ik je hij ze wij "
          "januari februari maart mei augustus oktober "
          "maandag dinsdag woensdag donderdag vrijdag zaterdag zondag",
    "pt": "o a os as e é um uma de do da em que não por com para se no na "
          "janeiro fevereiro março maio junho julho setembro outubro novembro dezembro "
          "segunda terça quarta quinta sexta sábado domingo",
}
WORD_SETS = {code: frozenset(words.split()) for code, words in WORDS.items()}

# Letters that only one of the profiled Latin-script languages uses.
LETTERS = {"de": "äöüß", "fr": "çœêîôûëïÿ", "es": "ñ¿¡", "pt": "ãõ", "it": "ìò"}

# Scripts by the start of their Unicode character names, for languages written in them.
SCRIPTS = {"ru": "CYRILLIC", "uk": "CYRILLIC", "el": "GREEK", "ar": "ARABIC", "hi": "DEVANAGARI",
           "mr": "DEVANAGARI", "ja": "HIRAGANA KATAKANA", "ko": "HANGUL", "zh": "CJK", "he": "HEBREW"}
WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Detection:
    language: str
    confidence: float  # percent, 0-100


def detect(text: str, languages: list[str]) -> list[Detection]:
    """The declared `languages` ordered by how likely `text` is in each, with their confidences."""
    if len(languages) == 1:
        return [Detection(languages[0], 100.0)]
    words = WORD.findall(text.lower())
    points = {code: float(sum(word in WORD_SETS.get(code, ()) for word in words)) for code in languages}
    for char in text.lower():
        for code in languages:
            if char in LETTERS.get(code, ""):
                points[code] += 1
            elif code in SCRIPTS and char.isalpha() and \
                    unicodedata.name(char, "").startswith(tuple(SCRIPTS[code].split())):
                points[code] += 1
    total = sum(points.values())
    shares = {code: 100 * points[code] / total if total else 100 / len(languages) for code in languages}
    # sorted is stable: on a tie the first declared language comes first.
    return [Detection(code, round(shares[code], 1)) for code in sorted(languages, key=lambda c: -shares[c])]
