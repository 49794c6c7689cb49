"""attnmt's own decoding against CTranslate2 on the same weights: one process, alternating rounds.

    python bench/ct2_speed.py MODEL SOURCES REFERENCES [--rounds 3] [--batch-size 64] [--threads 2]

Exports MODEL (a Transformer model file) to CTranslate2 in fp32 and int8 (into a temporary
directory), then translates SOURCES greedy and with beam 5, `--rounds` times in turn with:
attnmt's engine in fp32, in `auto` (bf16 where the CPU computes it natively) and in int8 (where
this CPU's int8 products are exact), each eager and with `--compile` (compiled into $ATTNMT_CACHE
first if needed); CTranslate2 fp32 and int8 through attnmt's engine interface (`attnmt translate
--engine ctranslate2`: text in and out, attention and log-probabilities as attnmt gives them); and
CTranslate2 int8 raw (`translate_batch` on the tokens under attnmt's length limit, nothing else:
the engine at its fastest). Prints each round's sentences per second, the medians, sacreBLEU and
how many outputs equal attnmt fp32's.
Run it on an otherwise idle machine.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import sacrebleu
from compiled import decoding_arguments

from attnmt.fast.int8 import int8_products_exact
from attnmt.formats.ctranslate2 import export_ctranslate2
from attnmt.formats.ctranslate2_engine import CTranslate2Translator, ctranslate2_package
from attnmt.translate import Translator


def main() -> None:
    args, sources, references = decoding_arguments(__doc__, rounds=3)
    with tempfile.TemporaryDirectory() as scratch:
        exported = {q: export_ctranslate2(args.model, Path(scratch) / q, None if q == "fp32" else q)
                    for q in ("fp32", "int8")}
        precisions = ("fp32", "auto", "int8") if int8_products_exact() else ("fp32", "auto")
        attnmt = {(p, compiled): Translator.load(args.model, "cpu", p, compile=compiled)
                  for compiled in (False, True) for p in precisions}
        plain = attnmt[("fp32", False)]
        ct2 = {q: CTranslate2Translator.load(exported[q], "cpu", q) for q in ("fp32", "int8")}
        raw = ctranslate2_package().Translator(str(exported["int8"]), compute_type="int8_float32",
                                                intra_threads=args.threads)
        tokenized = [plain.tokenize_source(s) for s in sources]

        # The length rule of attnmt's engines, as attnmt's CTranslate2 engine applies it: one call with
        # the longest limit, each output cut to its own (otherwise CTranslate2 decodes up to 256
        # tokens, and a model that fails to end a sentence makes the raw engine do more work).
        limits = [plain.max_output_tokens(len(tokens)) for tokens in tokenized]

        def raw_int8(beam: int) -> list[str]:
            results = raw.translate_batch(tokenized, max_batch_size=args.batch_size, beam_size=beam,
                                          length_penalty=0.0, max_decoding_length=max(limits))
            return [plain.tgt_tokenizer.detokenize(r.hypotheses[0][:limit]) for r, limit in zip(results, limits)]

        engines: dict[str, Callable[[int], list[str]]] = {
            **{f"attnmt {p} ({t.precision}){', compiled' if compiled else ''}": (lambda beam, t=t: [
                o.text for o in t.translate(sources, beam_size=beam, batch_size=args.batch_size)])
               for (p, compiled), t in attnmt.items()},
            **{f"CTranslate2 {q}, attnmt engine": (lambda beam, t=ct2[q]: [
                o.text for o in t.translate(sources, beam_size=beam, batch_size=args.batch_size)]) for q in ct2},
            "CTranslate2 int8, raw translate_batch": raw_int8}
        for beam in (1, 5):
            speeds: dict[str, list[float]] = {name: [] for name in engines}
            outputs: dict[str, list[str]] = {}
            engines[next(iter(engines))](beam)  # warm-up
            for round_number in range(1, args.rounds + 1):
                for name, run in engines.items():
                    started = time.perf_counter()
                    outputs[name] = run(beam)
                    speeds[name].append(len(sources) / (time.perf_counter() - started))
                    print(f"beam {beam} round {round_number} | {name} | {speeds[name][-1]:.1f} sent/s", flush=True)
            reference_outputs = outputs[next(iter(engines))]
            print(f"beam {beam}, medians over {args.rounds} rounds ({len(sources)} sentences, batches of "
                  f"{args.batch_size}, {args.threads} threads):")
            for name in engines:
                same = sum(a == b for a, b in zip(outputs[name], reference_outputs))
                bleu = sacrebleu.corpus_bleu(outputs[name], [references]).score
                print(f"  {name}: {statistics.median(speeds[name]):.1f} sent/s | sacreBLEU {bleu:.2f} | "
                      f"{same} of {len(sources)} outputs equal attnmt fp32's")


if __name__ == "__main__":
    main()
