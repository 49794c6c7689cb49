"""The demo as a user runs it: accuracy on held-out dates, and attention that aligns."""

import numpy as np
import pytest

from attnmt import Translator
from attnmt.demo import run_demo

pytestmark = pytest.mark.slow


def test_demo_reaches_95_percent_and_attends_to_the_year(tmp_path):
    lines: list[str] = []
    report = run_demo(str(tmp_path), log=lines.append)
    assert report["exact"] >= 95.0, "\n".join(lines)
    assert report["heatmap"].read_bytes()[:4] == b"\x89PNG"
    assert any("sample translations" in line for line in lines)

    translator = Translator.load(report["model"])
    for sentence, year in [("Samstag, den 14. März 2026", "2026"), ("March 3, 1987", "1987"), ("12/25/2031", "2031")]:
        (result,) = translator.translate([sentence])
        assert result.text[:4] == year, result.text
        year_start = sentence.index(year)  # char tokens: token i is character i
        # The output's year digits look mostly at the source's year digits.
        year_rows = result.attention[:4]                                  # [4, S]
        on_year = year_rows[:, year_start : year_start + 4].sum(axis=1)
        assert np.all(on_year > 0.5), (sentence, year_rows.round(2))
