"""The attention explorer in headless Chromium, against `attnmt serve` on 127.0.0.1 with a tiny model."""

import contextlib
import json
import shutil
from pathlib import Path
from typing import Callable, Iterator, Optional
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from conftest import relabelled, serving
from marian_folders import write_marian_folder

from attnmt.formats.marian import import_marian
from attnmt.translate import Translator

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
# Root in a container has no user namespaces for the sandbox; nothing else should start either.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@contextlib.contextmanager
def browsing(browser, url: str, model: Optional[Callable[[dict], dict]] = None):
    """A page at `url`; fails if the page logged an error. `model` rewrites what the page reads from /model."""
    page = browser.new_page(viewport={"width": 1000, "height": 760})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    if model is not None:
        page.route("**/model", lambda route: route.fulfill(json=model(route.fetch().json())))
    page.goto(url)
    yield page
    page.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def server(dates_model: Path) -> Iterator[str]:
    with serving(dates_model) as url:
        yield url


@pytest.fixture(scope="module")
def page(browser, server: str):
    with browsing(browser, server) as page:
        yield page


def screenshot(page, name: str) -> None:
    """The page, an output token hovered, into tests/artifacts/ (for people to look at)."""
    page.hover('#heatmap .tok.out[data-row="2"]')
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / name
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 10_000


def clipped(page, selector: str) -> list[float]:
    """How far the element at `selector`, its outline included, reaches past what #heatmap-wrap
    shows on each side (left, top, right, bottom; in px, > 0: cut off). A scroll container shows
    its padding box."""
    return page.eval_on_selector(selector, """node => {
        const wrap = document.querySelector('#heatmap-wrap'), style = getComputedStyle(node);
        const reach = style.outlineStyle === 'none' ? 0 : parseFloat(style.outlineWidth) + parseFloat(style.outlineOffset);
        const box = node.getBoundingClientRect(), frame = wrap.getBoundingClientRect();
        const left = frame.left + wrap.clientLeft, top = frame.top + wrap.clientTop;
        return [left - (box.left - reach), top - (box.top - reach), box.right + reach - (left + wrap.clientWidth),
                box.bottom + reach - (top + wrap.clientHeight)];
    }""")


def translate_on_page(page, text: str) -> None:
    page.fill("#source", text)
    page.press("#source", "Enter")
    page.wait_for_function("text => document.querySelector('#output').dataset.source === text", arg=text)


def test_translate_heatmap_and_hover(page, server):
    page.wait_for_function("document.querySelector('#model-info').textContent.includes('de \u2192 en')")
    assert page.locator("#model-picker").is_hidden()        # one model: nothing to pick
    translate_on_page(page, "3. Oktober 1990")
    expected = httpx.post(server + "translate", json={"text": "3. Oktober 1990", "attention": True}).json()
    result = expected["results"][0]
    rows, cols = len(result["tokens"]), len(result["source_tokens"])
    assert page.inner_text("#translation") == result["translation"]
    assert page.locator("#heatmap .cell").count() == rows * cols
    assert page.locator("#heatmap .tok.out").all_inner_texts() == result["tokens"]
    assert page.locator("#heatmap .tok.src").all_inner_texts() == result["source_tokens"]
    assert not page.is_visible("#map-controls")  # an RNN model has one map: no layer or head to pick

    # An output token: its row and the source tokens it attended to light up.
    page.hover('#heatmap .tok.out[data-row="0"]')
    assert "active" in page.get_attribute('#heatmap .tok.out[data-row="0"]', "class")
    assert page.locator("#heatmap .cell.active").count() == cols
    assert page.locator('#heatmap .cell.active[data-row="0"]').count() == cols
    strongest = max(range(cols), key=lambda j: result["attention"][0][j])
    assert "attended" in page.get_attribute(f'#heatmap .tok.src[data-col="{strongest}"]', "class")

    # And the other way round: a source token lights up its column and the outputs that looked at it.
    page.hover(f'#heatmap .tok.src[data-col="{strongest}"]')
    assert page.locator(f'#heatmap .cell.active[data-col="{strongest}"]').count() == rows
    assert page.locator("#heatmap .tok.out.attended").count() >= 1
    assert page.locator("#heatmap .tok.src.attended").count() == 0

    # A token clicked keeps its outline, whole: the row's label at the grid's left edge (issue 60),
    # the source token at its top.
    for clicked in '#heatmap .tok.out[data-row="0"]', '#heatmap .tok.src[data-col="0"]':
        page.click(clicked)
        assert "active" in page.get_attribute(clicked, "class")
        assert max(clipped(page, clicked)) <= 0.01, (clicked, clipped(page, clicked))
    page.click('#heatmap .tok.src[data-col="0"]')          # unpinned again


def test_hovering_a_word_lights_up_its_aligned_words(page, server):
    translate_on_page(page, "Samstag, den 14. März 2026")
    expected = httpx.post(server + "translate", json={"text": "Samstag, den 14. März 2026", "alignments": True})
    alignment = expected.json()["results"][0]["alignment"]
    assert page.locator("#alignment-source span").all_inner_texts() == alignment["source_words"]
    assert page.locator("#alignment-target span").all_inner_texts() == alignment["target_words"]
    assert page.inner_text("#alignment-method") == "(argmax of the attention)"     # the model has no aligner
    for target in range(len(alignment["target_words"])):
        page.hover(f'#alignment-target span[data-index="{target}"]')
        lit = [int(i) for i in page.locator("#alignment-source span.linked").evaluate_all(
            "nodes => nodes.map(node => node.dataset.index)")]
        assert lit == sorted(s for s, t in alignment["links"] if t == target)
    source = alignment["links"][0][0]
    page.hover(f'#alignment-source span[data-index="{source}"]')
    lit = [int(i) for i in page.locator("#alignment-target span.linked").evaluate_all(
        "nodes => nodes.map(node => node.dataset.index)")]
    assert lit == sorted(t for s, t in alignment["links"] if s == source)


def test_beam_nbest_and_a_non_latin_sentence(page):
    page.select_option("#decoding", "beam")
    page.fill("#nbest", "3")
    page.dispatch_event("#nbest", "change")
    translate_on_page(page, "Samstag, 14. März 2026")
    page.wait_for_function("document.querySelectorAll('#nbest-list li').length === 3")
    assert "beam 5" in page.inner_text("#status")
    page.click("#nbest-list li:nth-child(2)")
    second = page.inner_text("#nbest-list li:nth-child(2) .text")
    assert "selected" in page.get_attribute("#nbest-list li:nth-child(2)", "class")
    assert page.inner_text("#translation") == second

    # Devanagari (unknown to this model, but shown as typed) and an Arabic-script date.
    sentence = "१४ मार्च २०२६ · ١٤ مارس"
    translate_on_page(page, sentence)
    sources = page.locator("#heatmap .tok.src").all_inner_texts()
    assert "म" in sources and "م" in sources
    screenshot(page, "explorer.png")


def values(page, selector: str) -> list[str]:
    return page.locator(selector).evaluate_all("nodes => nodes.map(node => node.value)")


def another_family(info: dict) -> dict:
    """/model as a family other than the two would answer it: its own arch, no keys of theirs."""
    return {**info, "arch": "third", "architecture": {"summary": info["architecture"]["summary"]}}


def test_every_map_of_a_transformer(browser, transformer_dates_model):
    """Cross, encoder and decoder self-attention, by layer and head, as the server computes them; the
    page knows them from /model's maps alone (its arch renamed, its family's keys gone)."""
    with serving(transformer_dates_model) as url, browsing(browser, url, another_family) as page:
        page.wait_for_function("!document.querySelector('#map-controls').hidden")
        assert values(page, "#map option") == ["cross", "encoder", "decoder"]
        assert page.locator("#layer option").count() == 2 and page.locator("#head option").count() == 5
        text = "May 5, 2001"
        translate_on_page(page, text)
        result = httpx.post(url + "translate", json={"text": text, "maps": True}).json()["results"][0]
        rows, cols = len(result["tokens"]), len(result["source_tokens"])
        assert page.locator("#heatmap .cell").count() == rows * cols             # cross, last layer, mean

        page.select_option("#map", "encoder")
        page.select_option("#layer", "1")
        page.select_option("#head", "2")
        assert page.locator("#heatmap .cell").count() == cols * cols
        assert page.locator("#heatmap .tok.out").all_inner_texts() == result["source_tokens"]
        assert "Layer 1, head 2" in page.inner_text("#axes")
        weight = result["maps"]["encoder"][0][1][0][cols - 1]
        assert page.get_attribute(f'#heatmap .cell[data-row="0"][data-col="{cols - 1}"]', "title").endswith(
            f"{weight:.3f}")

        page.select_option("#map", "decoder")
        assert page.locator("#heatmap .cell").count() == rows * rows
        assert page.locator("#heatmap .tok.src").all_inner_texts()[0] == "<sos>"
        screenshot(page, "explorer_transformer.png")

        # The explain panel follows the map, layer and head: decoder self-attention, layer 1, head 2.
        page.select_option("#layer", "1")
        page.click('#heatmap .tok.out[data-row="2"]')
        page.wait_for_function("document.querySelector('#explain').dataset.step === '3'")
        expected = httpx.post(url + "explain", json={"text": text, "attention": "decoder", "layer": 1,
                                                      "head": 2}).json()["steps"][2]
        assert "decoder attention, layer 1, head 2" in page.inner_text("#explain-title")
        weights = [float(w) for w in page.locator("#explain-table tbody td:nth-child(3)").all_inner_texts()]
        assert weights == pytest.approx(expected["weights"], abs=1e-4) and len(weights) == 3  # <sos> and 2 outputs


def test_the_pickers_follow_the_maps_model_reports(browser, server):
    """The maps, layers and heads offered are /model's, whatever they are: here maps of shapes no
    family of the two has, a map the page cannot draw left out, and a head kept where the next map has it."""
    shapes = {"cross": [3, 2], "decoder": [2, 4], "memory": [1, 1]}
    with browsing(browser, server, lambda info: {**another_family(info), "maps": shapes}) as page:
        page.wait_for_function("!document.querySelector('#map-controls').hidden")
        assert values(page, "#map option") == ["cross", "decoder"]
        assert values(page, "#layer option") == ["1", "2", "3"] and page.input_value("#layer") == "3"
        assert values(page, "#head option") == ["mean", "1", "2"] and page.input_value("#head") == "mean"
        page.select_option("#head", "2", force=True)       # before a translation, the pickers are hidden
        page.select_option("#map", "decoder", force=True)
        assert values(page, "#layer option") == ["1", "2"] and page.input_value("#layer") == "2"
        assert values(page, "#head option") == ["mean", "1", "2", "3", "4"] and page.input_value("#head") == "2"


def test_a_server_on_ctranslate2_shows_its_one_map(browser, transformer_dates_model, tmp_path):
    """CTranslate2 gives the last layer's mean over heads and no steps: no map choices, no explain panel."""
    pytest.importorskip("ctranslate2", reason="the ctranslate2 package (the test extra) is not installed")
    from attnmt.formats.ctranslate2 import export_ctranslate2

    out = export_ctranslate2(transformer_dates_model, tmp_path / "ct2")
    with serving(out) as url, browsing(browser, url) as page:
        page.wait_for_function("document.querySelector('#model-info').textContent.includes('Transformer')")
        text = "May 5, 2001"
        translate_on_page(page, text)
        result = httpx.post(url + "translate", json={"text": text}).json()["results"][0]
        assert page.locator("#heatmap .cell").count() == len(result["tokens"]) * len(result["source_tokens"])
        assert page.locator("#map-controls").is_hidden() and page.locator("#explain-hint").is_hidden()
        sent: list[str] = []
        page.on("request", lambda request: sent.append(urlsplit(request.url).path))
        page.click('#heatmap .tok.out[data-row="1"]')
        # A request the click sent would have gone before this one, which the page sends after the click.
        assert page.evaluate("fetch('/health').then(response => response.status)") == 200
        assert sent == ["/health"] and page.locator("#explain").is_hidden()


def test_the_explain_panel_shows_every_number_of_a_step(page, server):
    text = "3. Oktober 1990"
    translate_on_page(page, text)
    expected = httpx.post(server + "explain", json={"text": text}).json()
    page.click('#heatmap .tok.out[data-row="1"]')
    page.wait_for_function("document.querySelector('#explain').dataset.step === '2'")
    step = expected["steps"][1]
    assert page.inner_text("#explain-title") == f"Step 2: the model writes \u201c{step['token']}\u201d"
    assert page.text_content("#explain-formula") == expected["score_function"]
    rows = page.locator("#explain-table tbody tr")
    assert rows.count() == len(expected["source_tokens"])
    cells = [rows.nth(j).locator("td").all_inner_texts() for j in range(rows.count())]
    assert [c[0] for c in cells] == step["keys"]
    assert [float(c[1]) for c in cells] == pytest.approx(step["scores"], abs=1e-4)
    assert [float(c[2]) for c in cells] == pytest.approx(step["weights"], abs=1e-4)
    assert sum(float(c[2]) for c in cells) == pytest.approx(1, abs=2e-3)
    assert page.locator("#explain-next li").count() == page.locator("#explain-uniform li").count() == 5
    assert page.inner_text("#explain-next li.chosen").startswith(step["token"])
    screenshot(page, "explain_panel.png")


def test_the_step_panel_shows_attribution_under_attention(page, server):
    """The attention row and the attribution row of the step clicked, as /explain answers them."""
    text = "3. Oktober 1990"
    translate_on_page(page, text)

    def shown(step: int, method: str, **fields) -> dict:
        """Once the step last asked for is drawn: it is `step`, with /explain's numbers for it (returned)."""
        page.wait_for_function("method => { const table = document.querySelector('#attribution-table');"
                               " return table.dataset.step === table.dataset.asked && table.dataset.method === method; }",
                               arg=method)
        assert page.get_attribute("#attribution-table", "data-step") == str(step)
        expected = httpx.post(server + "explain", json={"text": text, "attribution": method, "step": step,
                                                         **fields}).json()
        assert page.locator("#attribution-table thead th").all_inner_texts()[1:] == expected["source_words"]
        (numbers,) = expected["steps"]
        for row in "attention", "attribution":
            cells = page.locator(f"#attribution-table tr.{row} td").all_inner_texts()
            assert [float(c) for c in cells] == pytest.approx(numbers["source" if row == "attribution" else row],
                                                              abs=1e-4)
        return numbers

    page.click('#heatmap .tok.out[data-row="1"]')        # the step panel, where the method is chosen
    page.select_option("#attribution", "grad")
    shown(2, "grad")
    # Another method and another step: integrated gradients in 4 steps, why its token (a digit of the
    # year) rather than "-".
    page.select_option("#attribution", "ig")
    page.fill("#ig-steps", "4")
    page.dispatch_event("#ig-steps", "change")
    page.fill("#contrast", "-")
    page.dispatch_event("#contrast", "change")
    page.click('#heatmap .tok.out[data-row="2"]')
    numbers = shown(3, "ig", ig_steps=4, contrast="-")
    note = page.inner_text("#attribution-note")
    assert "\u2212 log p(\u201c-\u201d)" in note
    # Every share the completeness total counts: the words, the spaces between them, the prefix.
    assert (f"the source words {sum(numbers['source']):.4f}, the spaces between them {numbers['between_words']:.4f}, "
            f"the translation so far {sum(numbers['prefix']):.4f}) add up to {numbers['completeness']['total']:.4f}") in note
    screenshot(page, "attribution_panel.png")
    page.select_option("#attribution", "off")
    assert page.locator("#attribution-view").is_hidden()


def test_the_model_picker_translates_and_explains_with_the_model_picked(browser, dates_model, transformer_dates_model,
                                                                        tmp_path):
    """A server of two models: the RNN as de_en, the Transformer as en_fr. The page shows the first,
    translates and explains with the one picked (its languages, its maps, its numbers) and goes back."""
    models = {"de_en": relabelled(dates_model, tmp_path / "de_en", "de", "en"),
              "en_fr": relabelled(transformer_dates_model, tmp_path / "en_fr", "en", "fr")}
    greedy = {name: Translator.load(path, "cpu") for name, path in models.items()}   # the page decodes greedily
    candidates = ["May 5, 2001", "3. Oktober 1990", "the 21st of June 1975", "Samstag, den 14. März 2026",
                  "July 4, 1776", "Montag, 1. Januar 2024"]
    answers = {name: [t.text for t in translator.translate(candidates, beam_size=1)] for name, translator in greedy.items()}
    # Sentences the two models translate apart: a page that sent every request to the first model fails.
    texts = [text for text, a, b in zip(candidates, answers["de_en"], answers["en_fr"]) if a != b]
    assert len(texts) >= 2, answers
    expected = {name: dict(zip(candidates, answers[name])) for name in models}

    with serving(models["de_en"], str(models["en_fr"])) as url, browsing(browser, url) as page:
        sent: list[tuple[str, str]] = []      # (path, model) of each request to /translate and /explain
        page.on("request", lambda request: sent.append((urlsplit(request.url).path, json.loads(request.post_data)["model"]))
                if urlsplit(request.url).path in ("/translate", "/explain") else None)
        page.wait_for_function("document.querySelector('#model-info').textContent.includes('de \u2192 en')")
        assert page.locator("#model-picker").is_visible() and page.input_value("#model") == "de_en"
        assert values(page, "#model option") == ["de_en", "en_fr"]
        assert page.get_by_label("Model").evaluate("node => node.id") == "model"    # the label names the picker
        translate_on_page(page, texts[0])
        assert page.inner_text("#translation") == expected["de_en"][texts[0]]
        assert page.locator("#map-controls").is_hidden()                          # the RNN: one map

        # The Transformer: its languages, the sentence in the box translated again by it, its maps.
        page.select_option("#model", "en_fr")
        page.wait_for_function("document.querySelector('#model-info').textContent.includes('en \u2192 fr')")
        page.wait_for_function("text => document.querySelector('#output').dataset.source === text", arg=texts[0])
        assert page.inner_text("#translation") == expected["en_fr"][texts[0]]
        assert page.locator("#layer").is_visible() and values(page, "#layer option") == ["1", "2"]
        translate_on_page(page, texts[1])
        assert page.inner_text("#translation") == expected["en_fr"][texts[1]]
        screenshot(page, "explorer_models.png")

        # Its explain panel: the Transformer's cross-attention, last layer, head 1 (the mean has no scores).
        page.click('#heatmap .tok.out[data-row="1"]')
        page.wait_for_function("document.querySelector('#explain').dataset.step === '2'")
        assert "cross attention, layer 2, head 1" in page.inner_text("#explain-title")
        step = httpx.post(url + "explain", json={"text": texts[1], "model": "en_fr", "attention": "cross", "layer": 2,
                                                  "head": 1}).json()["steps"][1]
        weights = [float(w) for w in page.locator("#explain-table tbody td:nth-child(3)").all_inner_texts()]
        assert weights == pytest.approx(step["weights"], abs=1e-4)

        # Back to the RNN: the Transformer's panel and pickers go, the sentence is the RNN's again.
        page.select_option("#model", "de_en")
        assert page.locator("#explain").is_hidden()
        page.wait_for_function("document.querySelector('#model-info').textContent.includes('de \u2192 en')")
        page.wait_for_function("text => document.querySelector('#output').dataset.source === text", arg=texts[1])
        assert page.inner_text("#translation") == expected["de_en"][texts[1]]
        assert page.locator("#map-controls").is_hidden()
        assert parse_qs(urlsplit(page.url).query) == {"model": ["de_en"], "text": [texts[1]]}  # the address says both

    # A link to the Transformer's page (or a reload of it) opens on the Transformer.
    with serving(models["de_en"], str(models["en_fr"])) as url, browsing(browser, url + "?model=en_fr") as linked:
        linked.wait_for_function("document.querySelector('#model-info').textContent.includes('en \u2192 fr')")
        assert linked.input_value("#model") == "en_fr"
        translate_on_page(linked, texts[1])
        assert linked.inner_text("#translation") == expected["en_fr"][texts[1]]

    # Every request named the model picked when it was sent (a run of each, in the order they were picked).
    runs = [model for k, (_, model) in enumerate(sent) if k == 0 or sent[k - 1][1] != model]
    assert runs == ["de_en", "en_fr", "de_en"], sent
    assert ("/explain", "en_fr") in sent


def test_a_link_opens_the_page_on_a_sentence_its_step_and_attribution_and_the_address_follows(browser, server):
    """?text=&step=&attribution= opens on that sentence, step and method (a teacher's link, a reload, a
    headless screenshot); clicking another step or method writes the address anew."""
    text = "3. Oktober 1990"
    link = server + "?" + urlencode({"text": text, "step": 2, "attribution": "grad"})
    with browsing(browser, link) as page:
        page.wait_for_function("document.querySelector('#explain').dataset.step === '2'")
        page.wait_for_function("document.querySelector('#attribution-table').dataset.step === '2'")
        assert page.input_value("#source") == text and page.input_value("#attribution") == "grad"
        assert page.inner_text("#translation") == httpx.post(server + "translate", json={"text": text, "beam": 1}
                                                              ).json()["results"][0]["translation"]
        assert "active" in page.get_attribute('#heatmap .tok.out[data-row="1"]', "class")   # pinned, as a click would
        screenshot(page, "explorer_link.png")
        page.click('#heatmap .tok.out[data-row="0"]')
        page.wait_for_function("document.querySelector('#explain').dataset.step === '1'")
        page.select_option("#attribution", "occlusion")
        page.wait_for_function("document.querySelector('#attribution-table').dataset.method === 'occlusion'")
        shown = parse_qs(urlsplit(page.url).query)
        assert shown == {"model": [shown["model"][0]], "text": [text], "step": ["1"], "attribution": ["occlusion"]}
        page.reload()                                                               # a reload opens the same
        page.wait_for_function("document.querySelector('#explain').dataset.step === '1'")
        page.wait_for_function("document.querySelector('#attribution-table').dataset.method === 'occlusion'")


def test_an_imported_marian_model_in_the_explorer(browser, tmp_path):
    """An imported OPUS-MT-style model (tests/marian_folders.py): the source it reads ends with </s>, its
    decoder map starts from Marian's start token, <pad>, as /model says; the step panel opens its steps."""
    model = import_marian(write_marian_folder(tmp_path / "opus-mt-de-en"), tmp_path / "imported.safetensors")
    with serving(model) as url, browsing(browser, url) as page:
        page.wait_for_function("!document.querySelector('#map-controls').hidden")
        text = "3. Oktober 1990"
        translate_on_page(page, text)
        result = httpx.post(url + "translate", json={"text": text, "maps": True, "beam": 1}).json()["results"][0]
        assert page.locator("#heatmap .tok.src").all_inner_texts() == result["source_tokens"]
        assert result["source_tokens"][-1] == "</s>"
        page.select_option("#map", "decoder")
        assert page.locator("#heatmap .tok.src").all_inner_texts() == ["<pad>", *result["tokens"][:-1]]
        page.select_option("#map", "cross")
        page.click('#heatmap .tok.out[data-row="0"]')
        page.wait_for_function("document.querySelector('#explain').dataset.step === '1'")
        screenshot(page, "explorer_imported_marian.png")


def test_the_timeline_slider_shows_attention_as_it_formed(browser, server):
    """A model in the folder of a run that watched sentences: /model says so, and the page shows a
    slider over the recorded updates, each with its translation, its map and a marker on the curve."""
    timeline = httpx.get(server + "timeline").json()
    points = timeline["points"]
    assert httpx.get(server + "model").json()["timeline"] is True and len(points) >= 3
    with browsing(browser, server) as page:
        page.wait_for_selector("#timeline:not([hidden])")
        shots, markers = [], []
        for index in (0, len(points) // 2, len(points) - 1):
            page.locator("#timeline-slider").fill(str(index))
            point, watched = points[index], points[index]["sentences"][0]
            page.wait_for_function("text => document.querySelector('#timeline-label').textContent.startsWith(text)",
                                   arg=f"update {point['step']} (epoch {point['epoch']}")
            assert page.inner_text("#timeline-label").endswith(watched["text"])
            cells = page.locator("#timeline-map .cell")
            assert cells.count() == len(watched["tokens"]) * len(timeline["source_tokens"][0])
            markers.append(float(page.get_attribute("#timeline-curve .marker", "x1")))
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"explorer_timeline_{len(shots)}.png"), full_page=True)
            shots.append(index)
        assert markers == sorted(markers) and markers[0] < markers[-1]   # the marker moves along the curve
        page.select_option("#timeline-sentence", "1")
        assert page.inner_text("#timeline-label").endswith(points[-1]["sentences"][1]["text"])
