"""In a notebook, attnmt's results show themselves: short reprs, a translation's and an alignment's
heatmap (PNG), an explanation's and an attribution's numbers (HTML); TextTranslator.figure returns
the heatmap `attnmt plot` draws as a matplotlib Figure; importing attnmt leaves matplotlib as it was."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnmt import Translator
from attnmt.analysis.align import AttentionLinks, align_by_attention
from attnmt.analysis.attribution import attribute
from attnmt.analysis.explain import explain

MODELS = Path(__file__).parent / "fixtures" / "models"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def transformer() -> Translator:
    return Translator.load(MODELS / "transformer_pre_bpe_shared.safetensors")


def test_importing_the_plots_leaves_the_callers_matplotlib_backend_alone():
    """plot.py once called matplotlib.use("Agg") on import, which turned a notebook's inline plots off."""
    code = "import matplotlib; matplotlib.use('pdf'); import attnmt.plot; print(matplotlib.get_backend())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "pdf", done.stderr


def test_a_translation_shows_a_short_repr_and_its_heatmap(transformer):
    result = transformer.translate(["March 14, 2026"])[0]
    text = repr(result)
    rows, columns = result.attention.shape
    assert len(text) < 200 and repr(result.text) in text and f"attention {rows}x{columns}" in text
    assert result._repr_png_().startswith(PNG)


def test_figure_draws_one_map_or_every_layer_and_head(transformer):
    result = transformer.translate(["March 14, 2026"])[0]
    layers, heads = transformer.engine_info().maps["cross"]
    one = transformer.figure(result)
    assert len(one.axes) == 2 and one._repr_png_().startswith(PNG)  # the map and its colour bar; a notebook shows it
    assert [t.get_text() for t in one.axes[0].get_yticklabels()] == [t.replace("\u2581", "\u2423") for t in result.tokens]
    grid = transformer.figure(result, grid=True)
    assert len(grid.axes) == layers * heads
    decoder = transformer.figure(result, attention="decoder", layer=1, head=2)
    assert decoder.axes[0].get_images()[0].get_array().shape == (len(result.tokens), len(result.tokens))
    with pytest.raises(Exception, match=f"head 9: this model's cross attention has heads 1 to {heads}"):
        transformer.figure(result, head=9)


def test_an_explanation_and_its_steps_show_their_numbers_in_html(transformer):
    explanation = explain(transformer, "March 14, 2026")
    assert len(repr(explanation)) < 300
    page = explanation._repr_html_()
    assert page.count("<tr>") == 1 + len(explanation.steps)  # the header and a row per step
    first = explanation.steps[0]
    assert f"{first.weights[0]:.3f}" in page and "&lt;eos&gt;" in page and "&amp;lt;" not in page
    step = first._repr_html_()
    assert step.count("<tr>") == 1 + len(first.keys)
    assert f"score {first.scores[0]:.4f}" in step and "with uniform attention" in step


def test_an_attribution_shows_each_steps_values_over_the_words_and_the_attention(transformer):
    attribution = attribute(transformer, "March 14, 2026", method="grad")
    assert len(repr(attribution)) < 300
    page = attribution._repr_html_()
    assert page.count("<table") == 2 and page.count("<tr>") == 2 * (1 + len(attribution.steps))
    for word in attribution.source_words:
        assert f">{word}</th>" in page
    negative = [v for s in attribution.steps for v in s.source if v < 0]
    if negative:  # shaded red, against
        assert "rgba(214, 39, 40" in page
    assert re.search(r"f -?\d+\.\d{4}", page)


def test_an_alignment_shows_its_links_and_its_map(transformer):
    (alignment,) = align_by_attention(transformer, ["March 14 , 2026"], ["2026 - 03 - 14"], AttentionLinks())
    assert " ".join(f"{s}-{t}" for s, t in alignment.links) in repr(alignment)
    assert alignment._repr_png_().startswith(PNG)


@pytest.mark.slow
def test_the_learning_notebook_runs_and_draws(tmp_path, capsys):
    """docs/learn.ipynb, stored without outputs, executed in a Jupyter kernel as a student runs it:
    no cell fails, the heatmaps come out as pictures and the numbers as tables. Its text outputs go
    to the log, so that CI's log shows the notebook run."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(Path(__file__).parents[1] / "docs" / "learn.ipynb", as_version=4)
    assert all(not cell.get("outputs") and cell.get("execution_count") is None
               for cell in notebook.cells if cell.cell_type == "code"), "stored with outputs"
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pictures = [o for o in outputs if "image/png" in o.get("data", {})]
    tables = [o for o in outputs if "<table" in o.get("data", {}).get("text/html", "")]
    assert len(pictures) == 4 and len(tables) == 4, [list(o.get("data", {})) for o in outputs]
    with capsys.disabled():
        print("\ndocs/learn.ipynb, executed:")
        for number, cell in enumerate((c for c in notebook.cells if c.cell_type == "code"), 1):
            texts = [o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs]
            kinds = sorted({kind for o in cell.outputs for kind in o.get("data", {}) if kind != "text/plain"})
            print(f"[{number}] {cell.source.splitlines()[0]}\n{''.join(texts).rstrip()[-600:]}"
                  + (f"\n    (shown as {', '.join(kinds)})" if kinds else ""))
