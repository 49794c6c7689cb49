"use strict";
// The attention explorer: translate as you type, draw the attention as a grid of cells
// (rows: output tokens, columns: source tokens) and link tokens and cells on hover or click.
// Model output only ever goes into textContent or title, never into HTML.
(() => {
  const LIVE_DELAY_MS = 400;
  const ACCENT = [37, 99, 235];
  const MARK = [234, 88, 12];
  const SPACE = "\u2581";  // how character-level and sentencepiece models write a space
  const $ = (id) => document.getElementById(id);
  const source = $("source"), decoding = $("decoding"), beamInput = $("beam"), nbestInput = $("nbest");
  const grid = $("heatmap");
  let result = null;        // the sentence result on display
  let attention = null;     // the attention of the hypothesis on display: [output][source]
  let pinned = null;        // a token or cell clicked: its highlight stays until the next click
  let inFlight = null;      // AbortController of the request in flight
  let timer = null;
  // /model of the model chosen: its name, family, sizes, the engine's maps (name -> [layers, heads]);
  // null while it is being read (translate waits for it).
  let model = null;
  let modelLoads = 0;       // the /model reads asked for: an answer counts only if no model was picked after it
  const modelSelect = $("model");
  // The page reads what a model can show from /model's maps alone, never from its family.
  const mapSelect = $("map"), layerSelect = $("layer"), headSelect = $("head");
  const methodSelect = $("attribution"), igStepsInput = $("ig-steps"), contrastInput = $("contrast");
  // The kinds of map the page can draw: what each one's rows and columns are (Translator.attention_maps),
  // and whether its rows are decoding steps (the explain panel opens them). /model says which a model has.
  const MAPS = {
    cross: { label: "cross: output over source", rows: "output tokens", cols: "source tokens", steps: true },
    encoder: { label: "encoder self-attention", rows: "source tokens", cols: "source tokens", steps: false },
    decoder: { label: "decoder self-attention", rows: "output tokens", cols: "the output before each (the start first)",
               steps: true },
  };

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // White for 0, the accent colour for 1: cells stay visible on any background.
  function shade(weight) {
    const mix = (c) => Math.round(255 - (255 - c) * weight);
    return `rgb(${mix(ACCENT[0])}, ${mix(ACCENT[1])}, ${mix(ACCENT[2])})`;
  }

  function setStatus(text) { $("status").textContent = text; }

  // The maps of /model the page can draw, name -> [layers, heads].
  function drawnMaps() {
    return Object.fromEntries(Object.entries(model ? model.maps : {}).filter(([name]) => name in MAPS));
  }

  // More than one map, layer or head to choose from (/model's maps: a Transformer on attnmt's own engine).
  function mapChoices() {
    const shapes = Object.values(drawnMaps());
    return shapes.length > 1 || shapes.some(([layers, heads]) => layers > 1 || heads > 1);
  }

  // The map picked, where there is a choice; null where the page shows the one map with its defaults.
  function pickedMap() {
    return mapChoices() ? mapSelect.value : null;
  }

  function showError(message) {
    $("error").textContent = message;
    $("error").hidden = false;
    setStatus("");
  }

  // Read what the model `name` is and can show, or the server's first model where no name is given
  // (the plain /model: a one-model server's page asks what it always asked), and set the page up for it.
  async function loadModel(name) {
    const asked = ++modelLoads;
    try {
      const response = await fetch(name ? `/model?name=${encodeURIComponent(name)}` : "/model");
      const info = await response.json();
      if (!response.ok) throw new Error(info.error || `HTTP ${response.status}`);
      if (asked !== modelLoads) return;       // another model was picked meanwhile: its answer is the one to show
      showModel(info);
      if (source.value.trim()) translate();   // the sentence in the box, now by the model chosen
    } catch (err) {
      if (asked !== modelLoads) return;
      showError(name ? `model ${name}: ${err.message}` : `cannot reach the server: ${err.message}`);
    }
  }

  function showModel(info) {
    model = info;
    // Every model's info names them all; the picker shows only where there is a choice.
    modelSelect.replaceChildren(...info.models.map((name) => {
      const option = element("option", "", name);
      option.value = name;
      return option;
    }));
    modelSelect.value = info.name;
    $("model-picker").hidden = info.models.length < 2;
    const family = info.architecture.summary || info.arch;
    $("model-info").textContent =
      `${info.source_languages.join(", ")} \u2192 ${info.tgt_lang} \u00b7 ${family} \u00b7 ${info.tokenizer} tokens \u00b7 ` +
      `vocabularies ${info.src_vocab_size} / ${info.tgt_vocab_size}`;
    beamInput.max = info.limits.max_beam;
    igStepsInput.max = info.limits.max_ig_steps;
    source.maxLength = info.limits.max_chars;
    $("explain-hint").hidden = !info.explains;
    $("timeline").hidden = true;
    if (info.timeline) loadTimeline(info.name);
    // Set for every model, not only the first: the last model's pickers must not outlive it.
    $("map-controls").hidden = !mapChoices();
    if (mapChoices()) {
      mapSelect.replaceChildren(...Object.keys(drawnMaps()).map((name) => {
        const option = element("option", "", MAPS[name].label);
        option.value = name;
        return option;
      }));
      fillPickers();
    }
  }

  // What is on display belongs to the model shown until now: it goes, and so do the requests on their way.
  function clearResults() {
    clearTimeout(timer);
    if (inFlight) inFlight.abort();
    if (attributing) attributing.abort();
    model = null;
    result = attention = pinned = null;
    explanation = explanationKey = null;
    grid.replaceChildren();
    $("nbest-list").replaceChildren();
    $("translation").textContent = "";
    for (const id of ["output", "explain", "attribution-view", "error"]) $(id).hidden = true;
    // The marks tests wait on: a wait must not be met by the last model's result.
    delete $("output").dataset.source;
    delete $("explain").dataset.step;
    delete $("attribution-table").dataset.step;
    delete $("attribution-table").dataset.method;
    setStatus("");
  }

  modelSelect.addEventListener("change", () => {
    const name = modelSelect.value;
    clearResults();
    $("model-info").textContent = `loading ${name}\u2026`;
    remember({ model: name });
    loadModel(name);
  });

  function fillOptions(select, values, chosen) {
    select.replaceChildren(...values.map((value) => {
      const option = element("option", "", value === "mean" ? "mean of the heads" : value);
      option.value = value;
      return option;
    }));
    select.value = chosen;
  }

  // The layers and heads of the map chosen, as /model gives them: its last layer, and the head
  // picked before where this map has it (else the mean of its heads).
  function fillPickers() {
    const [layers, heads] = model.maps[mapSelect.value];
    const numbers = (count) => Array.from({ length: count }, (_, k) => String(k + 1));
    fillOptions(layerSelect, numbers(layers), String(layers));
    const head = headSelect.value && Number(headSelect.value) <= heads ? headSelect.value : "mean";
    fillOptions(headSelect, ["mean", ...numbers(heads)], head);
  }

  function options() {
    if (decoding.value !== "beam") return { beam: 1, n_best: 1 };
    const beam = Math.max(2, Math.min(Number(beamInput.max) || 10, Number(beamInput.value) || 2));
    return { beam, n_best: Math.max(1, Math.min(beam, Number(nbestInput.value) || 1)) };
  }

  async function translate() {
    clearTimeout(timer);
    const text = source.value.trim();
    if (inFlight) inFlight.abort();
    if (!text || !model) return;   // without the model's /model yet, loadModel translates once it answers
    inFlight = new AbortController();
    const { beam, n_best } = options();
    const started = performance.now();
    setStatus("translating\u2026");
    try {
      const response = await fetch("/translate", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        // A text of several lines is translated line by line: one block-diagonal matrix, no maps.
        // `model` always: a server of several models refuses a request without it, one model takes its own name.
        body: JSON.stringify({ text, model: model.name, beam, n_best, attention: true,
                               maps: !text.includes("\n") && mapChoices(),
                               alignments: Boolean(model.alignments) && !text.includes("\n") }),
        signal: inFlight.signal,
      });
      const body = await response.json();
      if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
      $("error").hidden = true;
      $("output").dataset.source = text;  // which sentence is on display (tests wait for it)
      render(body.results[0]);
      remember({ model: model.name, text });
      openLinkedStep();
      const how = beam === 1 ? "greedy" : `beam ${beam}`;
      setStatus(`${how}, ${Math.round(performance.now() - started)} ms`);
    } catch (err) {
      if (err.name !== "AbortError") showError(err.message);
    }
  }

  function render(sentence) {
    result = sentence;
    $("output").hidden = false;
    const list = $("nbest-list");
    list.replaceChildren();
    const hypotheses = sentence.nbest || [sentence];
    hypotheses.forEach((hypothesis, index) => {
      const item = element("li");
      item.dataset.index = index;
      item.append(element("span", "text", hypothesis.translation || "(empty)"),
                  element("span", "score", hypothesis.score.toFixed(3)));
      item.title = "log-probability; click to see this translation's attention";
      item.addEventListener("click", () => select(index));
      list.append(item);
    });
    list.hidden = hypotheses.length < 2;
    showAlignment(sentence.alignment);
    select(0);
  }

  // The best translation's word alignment (POST /translate's `alignments`): hover a word, its linked words light up.
  function showAlignment(alignment) {
    $("alignment").hidden = !alignment;
    if (!alignment) return;
    $("alignment-method").textContent = alignment.method === "aligner"
      ? "(the model's aligner)" : "(argmax of the attention)";
    const rows = { source: $("alignment-source"), target: $("alignment-target") };
    const words = { source: alignment.source_words, target: alignment.target_words };
    for (const side of ["source", "target"]) {
      rows[side].replaceChildren(...words[side].map((word, index) => {
        const node = element("span", "", word);
        node.dataset.index = index;
        node.dataset.side = side;
        return node;
      }));
    }
    const linked = (side, index) => alignment.links
      .filter(([s, t]) => (side === "source" ? s : t) === index).map(([s, t]) => (side === "source" ? t : s));
    for (const side of ["source", "target"]) {
      const other = side === "source" ? "target" : "source";
      rows[side].onmouseover = (event) => {
        const node = event.target.closest("span");
        if (!node) return;
        for (const lit of $("alignment").querySelectorAll(".linked")) lit.classList.remove("linked");
        node.classList.add("linked");
        for (const index of linked(side, Number(node.dataset.index))) {
          rows[other].children[index].classList.add("linked");
        }
      };
    }
  }

  let selected = 0;

  function select(index) {
    selected = index;
    const hypothesis = (result.nbest || [result])[index];
    $("translation").textContent = hypothesis.translation;
    for (const item of $("nbest-list").children) item.classList.toggle("selected", item.dataset.index === String(index));
    // The maps are those of the best translation; the others show their heatmap matrix.
    if (!result.maps || !result.maps.cross || index !== 0) {
      $("axes").textContent = "Rows: output tokens. Columns: source tokens.";
      draw(result.source_tokens, hypothesis.tokens, hypothesis.attention);
      return;
    }
    const which = mapSelect.value;
    const layer = result.maps[which][Number(layerSelect.value) - 1];           // [heads][rows][cols]
    const weights = headSelect.value === "mean"
      ? layer[0].map((row, i) => row.map((_, j) => layer.reduce((sum, head) => sum + head[i][j], 0) / layer.length))
      : layer[Number(headSelect.value) - 1];
    const tokens = hypothesis.tokens, sources = result.source_tokens;
    const rows = which === "encoder" ? sources : tokens;
    const cols = which === "cross" ? sources : which === "encoder" ? sources : [model.start_token, ...tokens.slice(0, -1)];
    const head = headSelect.value === "mean" ? "mean of the heads" : `head ${headSelect.value}`;
    $("axes").textContent = `Rows: ${MAPS[which].rows}. Columns: ${MAPS[which].cols}. Layer ${layerSelect.value}, ${head}.`;
    draw(cols, rows, weights);
  }

  mapSelect.addEventListener("change", () => { fillPickers(); if (result) select(selected); });
  layerSelect.addEventListener("change", () => { if (result) select(selected); });
  headSelect.addEventListener("change", () => { if (result) select(selected); });

  function draw(sourceTokens, outputTokens, weights) {
    attention = weights || null;
    pinned = null;
    grid.replaceChildren();
    $("no-attention").hidden = Boolean(weights);
    if (!weights || !sourceTokens.length || !outputTokens.length) return;
    fillGrid(grid, sourceTokens, outputTokens, weights);
  }

  // A heatmap in `container`: the source tokens across, the output tokens down, a cell per weight.
  function fillGrid(container, sourceTokens, outputTokens, weights) {
    container.replaceChildren();
    container.classList.toggle("vertical", sourceTokens.some((t) => [...t].length > 2));
    container.style.gridTemplateColumns = `auto repeat(${sourceTokens.length}, minmax(1.6rem, auto))`;
    container.append(element("div", "corner"));
    sourceTokens.forEach((token, col) => {
      const node = element("div", "tok src" + (token === SPACE ? " space" : ""), token);
      node.dataset.col = col;
      container.append(node);
    });
    outputTokens.forEach((token, row) => {
      const head = element("div", "tok out" + (token === SPACE ? " space" : ""), token);
      head.dataset.row = row;
      container.append(head);
      sourceTokens.forEach((sourceToken, col) => {
        const cell = element("div", "cell");
        const weight = weights[row][col];
        cell.dataset.row = row;
        cell.dataset.col = col;
        cell.style.backgroundColor = shade(weight);
        cell.title = `${token} \u2190 ${sourceToken}: ${weight.toFixed(3)}`;
        container.append(cell);
      });
    });
  }

  // Mark the tokens on the other axis by the weights linking them to `index`; bold the strong ones.
  function markTokens(selector, key, weightOf) {
    const nodes = [...grid.querySelectorAll(selector)];
    const weights = nodes.map((node) => weightOf(Number(node.dataset[key])));
    const strongest = Math.max(...weights);
    nodes.forEach((node, k) => {
      node.style.backgroundColor = `rgba(${MARK.join(", ")}, ${weights[k].toFixed(3)})`;
      node.classList.toggle("attended", weights[k] >= 0.1 || weights[k] === strongest);
    });
  }

  function clearHighlight() {
    for (const node of grid.querySelectorAll(".active, .attended")) node.classList.remove("active", "attended");
    for (const node of grid.querySelectorAll(".tok")) node.style.backgroundColor = "";
  }

  function highlight(target) {
    clearHighlight();
    if (!target || !attention) return;
    const row = target.dataset.row === undefined ? null : Number(target.dataset.row);
    const col = target.dataset.col === undefined ? null : Number(target.dataset.col);
    target.classList.add("active");
    if (row !== null) {
      grid.querySelector(`.tok.out[data-row="${row}"]`).classList.add("active");
      for (const cell of grid.querySelectorAll(`.cell[data-row="${row}"]`)) cell.classList.add("active");
      markTokens(".tok.src", "col", (j) => attention[row][j]);
    }
    if (col !== null) {
      grid.querySelector(`.tok.src[data-col="${col}"]`).classList.add("active");
      if (row === null) {
        for (const cell of grid.querySelectorAll(`.cell[data-col="${col}"]`)) cell.classList.add("active");
        markTokens(".tok.out", "row", (i) => attention[i][col]);
      }
    }
  }

  grid.addEventListener("mouseover", (event) => {
    if (!pinned) highlight(event.target.closest(".tok, .cell"));
  });
  grid.addEventListener("mouseleave", () => { if (!pinned) clearHighlight(); });
  grid.addEventListener("click", (event) => {
    const target = event.target.closest(".tok, .cell");
    pinned = target && target !== pinned ? target : null;
    highlight(pinned || target);
    const steps = !pickedMap() || MAPS[pickedMap()].steps;   // not the encoder's map: its rows are the source
    if (target && target.classList.contains("out") && steps && model && model.explains) {
      explainStep(Number(target.dataset.row));
    }
  });

  // The explain panel: every number of one decoding step (POST /explain, as attnmt explain --json).
  let explanation = null, explanationKey = null;

  // The map, layer and head on display (a map whose rows are steps); the server's defaults where there is no choice.
  function explainView() {
    const map = pickedMap();
    return {
      text: $("output").dataset.source, model: model.name, attention: map || "cross",
      layer: map ? Number(layerSelect.value) : null,
      head: map ? (headSelect.value === "mean" ? 1 : Number(headSelect.value)) : null,
    };
  }

  async function explainStep(row) {
    if (!("cross" in model.maps)) return;   // a model without attention: no step's attention to explain
    const view = explainView();
    const key = JSON.stringify(view);
    const load = modelLoads;
    try {
      if (key !== explanationKey) {
        const response = await fetch("/explain", {
          method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(view),
        });
        const body = await response.json();
        if (load !== modelLoads) return;   // another model was picked meanwhile: this step is not on display
        if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
        explanation = body;
        explanationKey = key;
      }
      showStep(Math.min(row, explanation.steps.length - 1), view);
    } catch (err) {
      if (load === modelLoads) showError(err.message);
    }
  }

  function bar(value, text) {
    const cell = element("td");
    const shown = element("span", "bar");
    shown.style.width = `${(value * 6).toFixed(2)}rem`;
    cell.append(shown, text);
    return cell;
  }

  function predictions(list, pairs, chosen) {
    list.replaceChildren(...pairs.map(([token, probability]) => {
      const item = element("li", token === chosen ? "chosen" : "");
      const shown = element("span", "bar");
      shown.style.width = `${(probability * 6).toFixed(2)}rem`;
      item.append(shown, `${token}  ${probability.toFixed(4)}`);
      return item;
    }));
  }

  function showStep(index, view) {
    const step = explanation.steps[index];
    const panel = $("explain");
    panel.hidden = false;
    panel.dataset.step = step.step;
    const where = explanation.layer ? ` · ${explanation.attention} attention, layer ${explanation.layer}, head ${explanation.head}` : "";
    $("explain-title").textContent = `Step ${step.step}: the model writes “${step.token}”${where}`;
    const greedy = explanation.output_tokens.join(" ");
    $("explain-note").textContent = `Steps of the greedy translation (${greedy}), computed in float32 by the model's ` +
      `reference modules.` + (view.head === 1 && headSelect.value === "mean" ? " Head 1 is shown: a mean of heads has no scores." : "");
    $("explain-formula").textContent = explanation.score_function;
    const body = $("explain-table").tBodies[0];
    body.replaceChildren(...step.keys.map((token, j) => {
      const row = element("tr");
      const score = step.scores[j];
      row.append(element("td", "", token),
                 score === null ? element("td", "masked", "masked") : element("td", "", score.toFixed(4)),
                 bar(step.weights[j], step.weights[j].toFixed(4) +
                     (step.factors ? ` (softmax × Gaussian ${step.factors[j].toFixed(3)})` : "")),
                 bar(step.shares[j], step.shares[j].toFixed(4)));
      return row;
    }));
    predictions($("explain-next"), step.next, step.token);
    predictions($("explain-uniform"), step.next_uniform, step.token);
    remember({ model: model.name, text: view.text, step: step.step });
    attributeStep(step.step);
  }

  // The attribution row under the attention row, for the step on display (POST /explain with
  // `attribution`, as attnmt explain --attribution --json): each source word's attention and how
  // much it decides the step's output.
  let attributing = null;   // AbortController of the attribution request in flight

  function attributionRequest(step) {
    const cross = pickedMap() === "cross";   // the map on display; else align's default
    const request = { text: $("output").dataset.source, model: model.name, attribution: methodSelect.value, step,
                      layer: cross ? Number(layerSelect.value) : null,
                      head: cross && headSelect.value !== "mean" ? Number(headSelect.value) : null };
    if (methodSelect.value === "ig") request.ig_steps = Number(igStepsInput.value) || 50;
    if (contrastInput.value.trim()) request.contrast = contrastInput.value.trim();
    return request;
  }

  async function attributeStep(step) {
    if (attributing) attributing.abort();
    const view = $("attribution-view");
    if (methodSelect.value === "off") { view.hidden = true; return; }
    const controller = attributing = new AbortController();
    const request = attributionRequest(step);
    $("attribution-table").dataset.asked = step;   // the step last asked for; dataset.step: the one on display
    setStatus("attributing\u2026");
    try {
      const response = await fetch("/explain", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request),
        signal: controller.signal,
      });
      const body = await response.json();
      if (controller !== attributing) return;   // another step or method was asked for meanwhile
      if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
      $("error").hidden = true;
      setStatus("");
      showAttribution(body, body.steps[0]);
    } catch (err) {
      if (err.name === "AbortError") return;
      view.hidden = true;
      showError(err.message);
    }
  }

  // Attention in the accent colour; attribution by its sign (accent: for the token, mark: against),
  // as strong as its share of the row's largest magnitude.
  function valueCell(value, colour, strength) {
    const cell = element("td", "", value.toFixed(4));
    cell.style.backgroundColor = `rgba(${colour.join(", ")}, ${(0.6 * strength).toFixed(3)})`;
    return cell;
  }

  function showAttribution(attribution, step) {
    const table = $("attribution-table");
    const head = element("tr");
    head.append(element("th"), ...attribution.source_words.map((word) => element("th", "", word)));
    table.tHead.replaceChildren(head);
    const rows = [];
    if (step.attention) {
      const row = element("tr", "attention");
      row.append(element("th", "", "attention"), ...step.attention.map((a) => valueCell(a, ACCENT, a)));
      rows.push(row);
    }
    const largest = Math.max(...step.source.map(Math.abs)) || 1;
    const row = element("tr", "attribution");
    row.append(element("th", "", `attribution (${attribution.method})`),
               ...step.source.map((a) => valueCell(a, a >= 0 ? ACCENT : MARK, Math.abs(a) / largest)));
    rows.push(row);
    table.tBodies[0].replaceChildren(...rows);
    const f = step.contrast === null ? `log p(\u201c${step.token}\u201d)`
      : `log p(\u201c${step.token}\u201d) \u2212 log p(\u201c${step.contrast}\u201d)`;
    const notes = [`How much each source word decides step ${step.step}'s f = ${f} = ${step.output.toFixed(4)}, in nats` +
                   (attribution.method === "occlusion" ? ": f minus f with the word dropped" : "") +
                   "; blue raises f, orange lowers it."];
    if (!step.attention) notes.push("This model has no attention.");
    if (step.source_share !== null) {
      notes.push(`The source gives ${Math.round(step.source_share * 100)}% of the attribution, the translation so far the rest.`);
    }
    if (step.completeness) {
      // Every share the total counts, so that the parts shown add up to it.
      const c = step.completeness, sum = (values) => values.reduce((total, value) => total + value, 0);
      const parts = [`the source words ${sum(step.source).toFixed(4)}`];
      if (step.between_words !== null) parts.push(`the spaces between them ${step.between_words.toFixed(4)}`);
      parts.push(`the translation so far ${sum(step.prefix).toFixed(4)}`);
      notes.push(`Completeness: the attributions (${parts.join(", ")}) add up to ${c.total.toFixed(4)}, ` +
                 `f(input) \u2212 f(baseline) = ${c.change.toFixed(4)}` +
                 (c.holds ? "." : ": not within 1%; more IG steps close it."));
    }
    $("attribution-note").textContent = notes.join(" ");
    table.dataset.step = step.step;               // which step and method are on display (tests wait for them)
    table.dataset.method = attribution.method;
    $("attribution-view").hidden = false;
  }

  function attributeAgain() {
    igStepsInput.disabled = methodSelect.value !== "ig";
    const shown = new URLSearchParams(location.search);
    remember({ model: shown.get("model"), text: shown.get("text"), step: shown.get("step") });
    if (!$("explain").hidden) attributeStep(Number($("explain").dataset.step));
  }

  methodSelect.addEventListener("change", attributeAgain);
  igStepsInput.addEventListener("change", attributeAgain);
  contrastInput.addEventListener("change", attributeAgain);

  $("form").addEventListener("submit", (event) => { event.preventDefault(); translate(); });
  source.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); translate(); }
  });
  source.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(translate, LIVE_DELAY_MS); });
  decoding.addEventListener("change", () => {
    beamInput.disabled = nbestInput.disabled = decoding.value !== "beam";
    translate();
  });
  for (const input of [beamInput, nbestInput]) input.addEventListener("change", translate);
  // A link to a sentence: ?model=NAME&text=SENTENCE&step=N&attribution=METHOD (each optional), which the
  // address keeps as the page changes, so that a reload or a shared link opens on the same sentence and step.
  const link = new URLSearchParams(location.search);
  let linkedStep = Number(link.get("step")) || null;   // opened once, when the linked sentence is translated
  if (link.get("text")) source.value = link.get("text");
  if ([...methodSelect.options].some((option) => option.value === link.get("attribution"))) {
    methodSelect.value = link.get("attribution");
    igStepsInput.disabled = methodSelect.value !== "ig";
  }
  loadModel(link.get("model"));   // the server's first model where the link names none

  // The address of what is on display: the model, the sentence, the step and the attribution method.
  function remember({ model: name, text, step }) {
    const params = new URLSearchParams();
    if (name) params.set("model", name);
    if (text) params.set("text", text);
    if (text && step) params.set("step", step);
    if (methodSelect.value !== "off") params.set("attribution", methodSelect.value);
    history.replaceState(null, "", `?${params}`);
  }

  // Attention as it formed during training (GET /timeline): a slider over the points the run recorded,
  // the watched sentence's translation and map at each, and the validation curve with the point marked.
  let timeline = null;
  const timelineSlider = $("timeline-slider"), timelineSentence = $("timeline-sentence");

  async function loadTimeline(name) {
    const response = await fetch(`/timeline?name=${encodeURIComponent(name)}`);
    if (!response.ok || model.name !== name) return;
    timeline = await response.json();
    fillOptions(timelineSentence, timeline.sources.map((_, i) => String(i)), "0");
    [...timelineSentence.options].forEach((option, i) => { option.textContent = timeline.sources[i]; });
    timelineSlider.max = timeline.points.length - 1;
    timelineSlider.value = timeline.points.length - 1;
    $("timeline").hidden = false;
    showTimelinePoint();
  }

  function showTimelinePoint() {
    const point = timeline.points[Number(timelineSlider.value)], index = Number(timelineSentence.value);
    const watched = point.sentences[index];
    const loss = point.valid_loss === null ? "" : `, validation loss ${point.valid_loss}`;
    const aer = watched.aer === null ? "" : `, alignment error ${watched.aer}`;
    $("timeline-label").textContent = `update ${point.step} (epoch ${point.epoch}${loss}${aer}): ${watched.text}`;
    if (watched.tokens.length) fillGrid($("timeline-map"), timeline.source_tokens[index], watched.tokens, watched.attention);
    else $("timeline-map").replaceChildren();
    drawCurve(point.step);
  }

  // The validation loss against the update, and a line at `step`.
  function drawCurve(step) {
    const svg = $("timeline-curve"), width = 360, height = 120, pad = 6, ns = svg.namespaceURI;  // the page's own SVG
    const curve = timeline.curve, last = timeline.points[timeline.points.length - 1].step;
    const losses = curve.map((p) => p.valid_loss), low = Math.min(...losses), high = Math.max(...losses);
    const x = (s) => pad + (width - 2 * pad) * s / Math.max(last, 1);
    const y = (v) => height - pad - (height - 2 * pad) * (high > low ? (v - low) / (high - low) : 0.5);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", curve.map((p) => `${x(p.step)},${y(p.valid_loss)}`).join(" "));
    line.setAttribute("class", "curve");
    const marker = document.createElementNS(ns, "line");
    for (const [key, value] of Object.entries({ x1: x(step), x2: x(step), y1: 0, y2: height })) marker.setAttribute(key, value);
    marker.setAttribute("class", "marker");
    const label = (text, left, top, anchor) => {
      const node = document.createElementNS(ns, "text");
      for (const [key, value] of Object.entries({ x: left, y: top, "text-anchor": anchor })) node.setAttribute(key, value);
      node.textContent = text;
      return node;
    };
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.replaceChildren(line, marker, label(`validation loss ${high}`, pad, 14, "start"),
                        label(`${low}`, pad, height - 14, "start"), label(`update ${last}`, width - pad, height - 2, "end"));
  }

  timelineSlider.addEventListener("input", showTimelinePoint);
  timelineSentence.addEventListener("change", showTimelinePoint);

  // The step a link names, pinned and explained as a click on its output token would.
  function openLinkedStep() {
    const token = linkedStep && grid.querySelector(`.tok.out[data-row="${linkedStep - 1}"]`);
    linkedStep = null;
    if (!token || !model.explains) return;
    pinned = token;
    highlight(token);
    explainStep(Number(token.dataset.row));
  }
})();
