"""An OPUS-MT model at its real size, in attnmt beside transformers and CTranslate2: import, load, memory,
greedy and beam-5 speed, one run side by side.

    python bench/marian_speed.py ../shared/models/opus-mt-en-mg --sources FILE --work DIR
        [--count 500] [--threads 2] [--batch-size 32] [--max-length 256] [--fixed-length 30] [--busy]

The folder holds a real OPUS-MT model's config.json, tokenizers and vocabulary without its weights:
random weights of the real shapes are made once by transformers (MarianMTModel(config), seeded) and
saved into DIR/hf as model.safetensors. A random model writes no sentence end of its own, so its
</s> bias (final_logits_bias) is set once, by bisection on 32 of the sentences, so that greedy outputs
are as long as their sources on average: every engine then decodes the same, real-length outputs.
Then, each in a process of its own (so that one's memory and threads never reach another's):
- `attnmt import` of the folder (seconds);
- loading: attnmt's Translator.load and transformers' from_pretrained: seconds, and the resident
  memory the model added to the process (VmRSS after loading minus VmRSS once torch and the library
  were imported) and its peak (VmHWM minus the same), against the weights' size in float32;
- decoding the first --count sentences of FILE greedy and with beam 5 (sentences per second, after a
  warm-up batch; the same batch size and threads everywhere; transformers' batches sorted by length
  as attnmt's and CTranslate2's are): attnmt fp32, bf16 and int8 (where the CPU has the instructions),
  transformers' generate fp32, and CTranslate2 int8 converted by its own converter from the same folder
  (ctranslate2.converters.TransformersConverter); with how many outputs equal attnmt fp32's and the
  mean output length in pieces;
- beam 5 twice: by the model's own rule (generate's early_stopping false, which the import sets: a beam
  stays open while an unfinished hypothesis could still win) and with early stopping, done once 5
  hypotheses have finished (attnmt decode.beam_scoring length_power_early, generate early_stopping=True,
  and CTranslate2, whose beam search always stops so): engines that stop by different rules do different
  work, so only the second compares CTranslate2 with the others on the same search;
- the same work: beam 5 on a copy of the model whose </s> bias is -10^4 (DIR/hf-fixed, imported and
  converted as the first), so that every engine writes --fixed-length pieces for every sentence
  (CTranslate2: min_decoding_length): the arithmetic alone, at a real sentence's length.
Every decoding process keeps freed memory blocks for reuse as attnmt's translating commands do
(fast/process.py set_up_decoding_process), the other engines' too.
--busy runs a busy loop on one core beside every measurement (a user's machine is rarely idle).
Prints one table and writes it, with the command, the date and the CPU's flags, to DIR/results.md.
Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

# What each decoding measures: (beam size, early stopping).
SEARCHES = {"greedy": (1, False), "beam5": (5, False), "beam5-early": (5, True)}


def memory_kb() -> dict[str, int]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def make_folder(config_folder: Path, out: Path, seed: int = 0) -> Path:
    """The real folder's files with random weights of its shapes, as transformers makes and saves them."""
    import torch
    import transformers

    if (out / "model.safetensors").is_file():
        return out
    config = transformers.MarianConfig.from_pretrained(str(config_folder))
    config.torch_dtype = "float32"
    torch.manual_seed(seed)
    transformers.MarianMTModel(config).eval().save_pretrained(str(out), safe_serialization=True)
    # save_pretrained writes its own config.json and generation_config.json (without the folder's
    # max_length and bad_words_ids): the folder's own files replace them, as published.
    (out / "generation_config.json").unlink(missing_ok=True)
    for file in config_folder.iterdir():
        if file.suffix in (".json", ".spm"):
            shutil.copy(file, out / file.name)
    return out


def set_eos_bias(folder: Path, bias: float) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    eos = json.loads((folder / "config.json").read_text())["eos_token_id"]
    weights["final_logits_bias"][0, eos] = bias
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


def calibrate(folder: Path, sources: list[str], threads: int) -> float:
    """The </s> bias at which attnmt's greedy outputs of `sources` are as long as the sources, on average:
    bisection on the imported model's output bias, in one process."""
    set_eos_bias(folder, 0.0)
    run_worker("import", str(folder), str(folder.parent / "calibrating.safetensors"))
    return run_worker("calibrate", str(folder.parent / "calibrating.safetensors"), json.dumps(sources),
                      str(threads))["bias"]


def run_worker(kind: str, *arguments: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "worker", kind, *arguments], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# What each worker process does; each prints one JSON line.

def set_eos_bias_copy(folder: Path, out: Path, bias: float) -> Path:
    """A copy of `folder` whose </s> bias is `bias`."""
    if out.is_dir():
        shutil.rmtree(out)
    shutil.copytree(folder, out)
    set_eos_bias(out, bias)
    return out


def attnmt_translator(path: str, precision: str, max_length: int):
    """attnmt's Translator of `path`, its outputs capped as generate's max_length caps them."""
    from attnmt.translate import Translator

    translator = Translator.load(path, "cpu", precision)
    translator.config.decode.max_len_ratio, translator.config.decode.max_len_extra = 0.0, max_length - 2
    return translator


def worker_calibrate(model: str, sources_json: str, threads: str) -> dict:
    import torch

    torch.set_num_threads(int(threads))
    sources = json.loads(sources_json)
    # Outputs capped at three times the longest source: enough to tell longer from shorter, and quick.
    translator = attnmt_translator(model, "fp32", 3 * max(len(s.split()) for s in sources) + 2)
    eos = translator.tokenization.tgt_vocab.eos_id
    low, high = -5.0, 30.0
    for _ in range(10):
        bias = (low + high) / 2
        with torch.no_grad():
            translator.model.classifier.bias[eos] = bias
        outputs = translator.translate(sources, beam_size=1, batch_size=32)
        ratio = sum(len(o.tokens) for o in outputs) / sum(len(o.source_tokens) - 1 for o in outputs)
        print(f"  </s> bias {bias:.2f}: outputs {ratio:.2f}x their sources", file=sys.stderr, flush=True)
        low, high = (bias, high) if ratio > 1.0 else (low, bias)
    return {"bias": (low + high) / 2}


def worker_import(folder: str, out: str) -> dict:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attnmt", "import", folder, "--out", out, "--overwrite"], check=True,
                   capture_output=True)
    return {"seconds": time.perf_counter() - started}


def worker_load(engine: str, path: str, threads: str) -> dict:
    import torch

    torch.set_num_threads(int(threads))
    if engine == "attnmt":
        from attnmt.translate import Translator
        before = memory_kb()
        started = time.perf_counter()
        model = Translator.load(path, "cpu", "fp32").model
    else:
        import transformers
        before = memory_kb()
        started = time.perf_counter()
        model = transformers.MarianMTModel.from_pretrained(path).eval()
    seconds = time.perf_counter() - started
    after = memory_kb()
    weights = sum(p.numel() * 4 for p in {id(p): p for p in model.parameters()}.values())
    return {"seconds": seconds, "added_mb": (after["VmRSS"] - before["VmRSS"]) / 1024,
            "peak_mb": (after["VmHWM"] - before["VmRSS"]) / 1024, "weights_mb": weights / 2**20}


def worker_decode(engine: str, path: str, folder: str, sources_file: str, threads: str, batch: str,
                  max_length: str, searches: str) -> dict:
    """Sentences per second of each of `searches` (names of SEARCHES, comma-separated), the outputs' texts
    for comparison and their mean length in pieces."""
    import torch

    from attnmt.fast.process import set_up_decoding_process

    # attnmt's translating commands keep freed blocks for reuse (its logits are tens of MB a step):
    # every engine's process alike, so that none pays page faults that another is spared.
    set_up_decoding_process()
    torch.set_num_threads(int(threads))
    sources = json.loads(Path(sources_file).read_text())
    translate = decoder(engine, path, folder, int(threads), int(batch), int(max_length))
    translate(sources[: int(batch)], 1, False)                                 # warm-up
    results = {}
    for search in searches.split(","):
        started = time.perf_counter()
        outputs = translate(sources, *SEARCHES[search])
        results[search] = {"per_second": len(sources) / (time.perf_counter() - started),
                           "outputs": [text for text, _ in outputs],
                           "length": sum(length for _, length in outputs) / len(outputs)}
    return results


def decoder(engine: str, path: str, folder: str, threads: int, batch: int, max_length: int):
    """A function (sentences, beam, early stopping) -> (output text, its length in pieces) per sentence, for
    `engine`: attnmt-fp32/-bf16/-int8, hf, ct2-int8. A model whose folder is hf-fixed decodes to the limit."""
    fixed = Path(folder).name == "hf-fixed"
    if engine.startswith("attnmt"):
        translator = attnmt_translator(path, engine.split("-")[1], max_length)
        rule = translator.config.decode.beam_scoring

        def attnmt(sources: list[str], beam: int, early: bool) -> list[tuple[str, int]]:
            translator.config.decode.beam_scoring = "length_power_early" if early else rule
            return [(o.text, len(o.tokens)) for o in translator.translate(sources, beam_size=beam, batch_size=batch)]
        return attnmt
    if engine == "hf":
        import torch
        import transformers
        tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
        model = transformers.MarianMTModel.from_pretrained(folder).eval()

        def hf(sources: list[str], beam: int, early: bool) -> list[tuple[str, int]]:
            order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
            found: dict[int, tuple[str, int]] = {}
            special = set(tokenizer.all_special_ids)
            for start in range(0, len(order), batch):
                rows = order[start:start + batch]
                inputs = tokenizer([sources[i] for i in rows], return_tensors="pt", padding=True)
                with torch.inference_mode():
                    out = model.generate(**inputs, num_beams=beam, max_length=max_length, early_stopping=early)
                found.update(zip(rows, [(text, sum(i not in special for i in ids)) for text, ids in
                                        zip(tokenizer.batch_decode(out, skip_special_tokens=True), out.tolist())]))
            return [found[i] for i in range(len(sources))]
        return hf
    import ctranslate2
    import transformers
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    translator = ctranslate2.Translator(path, device="cpu", compute_type="int8", intra_threads=threads)

    def ct2(sources: list[str], beam: int, early: bool) -> list[tuple[str, int]]:
        # CTranslate2's beam search always stops once beam_size hypotheses have finished (patience 1).
        tokens = [tokenizer.convert_ids_to_tokens(tokenizer.encode(s)) for s in sources]
        found = translator.translate_batch(tokens, beam_size=beam, max_batch_size=batch, length_penalty=1.0,
                                           max_decoding_length=max_length - 2 if fixed else max_length - 1,
                                           min_decoding_length=max_length - 2 if fixed else 1)
        return [(tokenizer.decode(tokenizer.convert_tokens_to_ids(r.hypotheses[0]), skip_special_tokens=True),
                 len(r.hypotheses[0])) for r in found]
    return ct2


def busy_loop() -> None:
    while True:
        pass


def cpu_flags() -> str:
    flags = set(Path("/proc/cpuinfo").read_text().split())
    return " ".join(sorted(flags & {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8"}))


def convert_ct2(folder: Path, out: Path) -> Path:
    """CTranslate2 int8 of `folder`, by CTranslate2's own converter."""
    import ctranslate2.converters
    ctranslate2.converters.TransformersConverter(str(folder)).convert(str(out), quantization="int8", force=True)
    return out


def decode_all(args: argparse.Namespace, engines: dict[str, Path], folder: Path, searches: str,
               max_length: int) -> dict[str, dict]:
    """Each engine's worker_decode of `searches`, one process each, one after another."""
    decoded = {}
    for engine, path in engines.items():
        decoded[engine] = run_worker("decode", engine, str(path), str(folder), str(Path(args.work) / "sources.json"),
                                     str(args.threads), str(args.batch_size), str(max_length), searches)
        print(engine, {search: round(r["per_second"], 2) for search, r in decoded[engine].items()}, flush=True)
    return decoded


def measure(args: argparse.Namespace) -> list[str]:
    work = Path(args.work).resolve()
    opener = gzip.open if args.sources.endswith(".gz") else open
    with opener(args.sources, "rt", encoding="utf-8") as file:
        sources = [line.rstrip("\n") for line in file][: args.count]
    (work / "sources.json").parent.mkdir(parents=True, exist_ok=True)
    (work / "sources.json").write_text(json.dumps(sources))
    folder = make_folder(Path(args.folder), work / "hf")
    print(f"calibrating the </s> bias of {folder}", flush=True)
    bias = calibrate(folder, sources[:32], args.threads)
    set_eos_bias(folder, bias)
    imported = run_worker("import", str(folder), str(work / "model.safetensors"))
    ct2_dir = convert_ct2(folder, work / "ct2-int8")
    lines = [f"import: {imported['seconds']:.1f} s", "", "| load | seconds | memory added (MB) | peak (MB) | "
             "weights fp32 (MB) | added / weights |", "|---|---:|---:|---:|---:|---:|"]
    for engine, path in (("attnmt", work / "model.safetensors"), ("transformers", folder)):
        loaded = run_worker("load", engine, str(path), str(args.threads))
        lines.append(f"| {engine} | {loaded['seconds']:.2f} | {loaded['added_mb']:.0f} | {loaded['peak_mb']:.0f} | "
                     f"{loaded['weights_mb']:.0f} | {loaded['added_mb'] / loaded['weights_mb']:.2f} |")
        print(lines[-1], flush=True)
    engines = {"attnmt-fp32": work / "model.safetensors", "attnmt-bf16": work / "model.safetensors",
               "attnmt-int8": work / "model.safetensors", "hf": folder, "ct2-int8": ct2_dir}
    decoded = decode_all(args, engines, folder, "greedy,beam5,beam5-early", args.max_length)
    lines += ["", f"| decoding {len(sources)} sentences, sentences per second (mean output length in pieces) | greedy | "
              "beam 5 | beam 5, early stopping |", "|---|---:|---:|---:|"]
    for engine, result in decoded.items():
        lines.append(f"| {engine} | " + " | ".join(f"{r['per_second']:.2f} ({r['length']:.1f})" for r in result.values())
                     + " |")
    lines += ["", "| outputs equal to attnmt fp32's | greedy | beam 5 | beam 5, early stopping |", "|---|---:|---:|---:|"]
    for engine, result in decoded.items():
        lines.append(f"| {engine} | " + " | ".join(
            str(sum(a == b for a, b in zip(r["outputs"], decoded["attnmt-fp32"][search]["outputs"])))
            for search, r in result.items()) + " |")

    fixed_folder = set_eos_bias_copy(folder, work / "hf-fixed", -1e4)
    run_worker("import", str(fixed_folder), str(work / "fixed.safetensors"))
    convert_ct2(fixed_folder, work / "ct2-int8-fixed")
    fixed = decode_all(args, {**{e: work / "fixed.safetensors" for e in engines if e.startswith("attnmt")},
                              "hf": fixed_folder, "ct2-int8": work / "ct2-int8-fixed"},
                       fixed_folder, "beam5", args.fixed_length + 2)
    lines += ["", f"| the same work: beam 5, every output {args.fixed_length} pieces | sentences per second | "
              "pieces per second | mean output length |", "|---|---:|---:|---:|"]
    for engine, result in fixed.items():
        r = result["beam5"]
        lines.append(f"| {engine} | {r['per_second']:.2f} | {r['per_second'] * r['length']:.0f} | {r['length']:.1f} |")

    def ratio(table: dict, engine: str, search: str, other: str) -> float:
        return table[engine][search]["per_second"] / table[other][search]["per_second"]

    lines.append("")
    for engine in ("attnmt-fp32", "attnmt-bf16", "attnmt-int8"):
        lines.append(f"{engine}: greedy {ratio(decoded, engine, 'greedy', 'hf'):.2f}x transformers', "
                     f"{ratio(decoded, engine, 'greedy', 'ct2-int8'):.2f}x CTranslate2 int8's; beam 5 "
                     f"{ratio(decoded, engine, 'beam5', 'hf'):.2f}x transformers'; beam 5 with early stopping "
                     f"{ratio(decoded, engine, 'beam5-early', 'hf'):.2f}x transformers', "
                     f"{ratio(decoded, engine, 'beam5-early', 'ct2-int8'):.2f}x CTranslate2 int8's; the same work "
                     f"{ratio(fixed, engine, 'beam5', 'hf'):.2f}x transformers', "
                     f"{ratio(fixed, engine, 'beam5', 'ct2-int8'):.2f}x CTranslate2 int8's")
    lines.append(f"</s> bias (calibrated): {bias:.3f}")
    return lines


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        print(json.dumps(globals()[f"worker_{sys.argv[2]}"](*sys.argv[3:])))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a Marian folder (config.json, tokenizers, vocab.json), weights not needed")
    parser.add_argument("--sources", required=True, help="source sentences, one per line (plain or .gz); the first --count")
    parser.add_argument("--work", required=True, help="where the random weights, the import and the results go")
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256, help="generate's max_length, the same for every engine")
    parser.add_argument("--fixed-length", type=int, default=30,
                        help="the pieces every output has in the same-work measurement (about a news sentence's)")
    parser.add_argument("--busy", action="store_true", help="a busy loop on one core beside every measurement")
    args = parser.parse_args()
    busy = multiprocessing.Process(target=busy_loop, daemon=True) if args.busy else None
    if busy:
        busy.start()
    try:
        lines = measure(args)
    finally:
        if busy:
            busy.terminate()
    header = [f"# {' '.join(sys.argv)}", f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
              f"flags: {cpu_flags()}, threads {args.threads}, batch {args.batch_size}{', busy loop beside' if busy else ''}"]
    text = "\n".join(header + [""] + lines) + "\n"
    print(text)
    (Path(args.work) / "results.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
