"""Training and translation speed on the peers' benchmark model, in the peers' metric format.

    python bench/speed.py --data ../shared/data/multi30k [--arch transformer] [--steps 300] [--precision bf16|auto]
                          [--also-decode int8] [--device cuda] [key=value ...]

Trains the model of ../shared/bench/peers (`--arch rnn`: bench/peers_model.yaml; `--arch
transformer`: bench/peers_transformer.yaml, the peers' MODEL=transformer) for a fixed number of updates
in a child process (its peak RSS is the training memory), then translates test2016 greedy and
with beam 5, timing the decoding loop only (model loading excluded, and printed apart: the
seconds to load in a fresh process and, for a `-compiled` decoding, to compile its step into
empty caches first). The text is lowercased and
split into \\w+ runs and single punctuation marks, as the peers' prep_data.py does, so that both
sides see the same tokens, vocabularies and target-word counts; BLEU is sacreBLEU with
`-tok none` on those tokens, as the peers' harness computes it.

Prints `peer=attnmt metric=<name> value=<number> unit=<unit>` lines, as the peers' harness does,
plus the model FLOPs per target word, this machine's fp32 matmul peak measured in the same run,
and the achieved fraction of it (MFU); a bf16 run also gives its fraction of the bf16 peak.
With `--device cuda` everything runs on the GPU, the peaks are the GPU's, and the training's
peak GPU memory is read from nvidia-smi as for the peers (bench/gpu_memory.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import sacrebleu
import torch
from gpu_memory import GpuMemoryWatch

from attnmt.batch import Batch, collate
from attnmt.config import Config
from attnmt.configfile import load_config
from attnmt.corpus.prepare import prepare_corpus
from attnmt.corpus.readers import find_split_file, read_lines
from attnmt.families import build_model
from attnmt.families.rnn.network import RNNEncoderDecoder
from attnmt.fast.process import DEFAULT_THREADS, set_up_decoding_process, set_up_training_process, use_threads
from attnmt.precision import resolve
from attnmt.seam import Model
from attnmt.threads import parse_setting
from attnmt.training.data import Part, epoch_batches
from attnmt.training.step import TeacherForced, make_optimizer, train_step
from attnmt.translate import Translation, Translator
from attnmt.vocab import PAD_ID

REPO = Path(__file__).resolve().parents[1]
TOKEN = re.compile(r"\w+|[^\w\s]")
SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}
CONFIGS = {"rnn": "peers_model.yaml", "transformer": "peers_transformer.yaml"}


PEER = "attnmt"


def emit(metric: str, value: float, unit: str) -> None:
    print(f"peer={PEER} metric={metric} value={value:.6g} unit={unit}", flush=True)


def prepare_tokens(data_dir: Path, out_dir: Path) -> None:
    """Lowercase and tokenize Multi30k like the peers' prep_data.py, into out_dir/{train,val,test}.{de,en}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, prefix in SPLITS.items():
        for lang in ("de", "en"):
            source = read_lines(find_split_file(data_dir, prefix, lang))
            lines = [" ".join(TOKEN.findall(line.strip().lower())) for line in source]
            (out_dir / f"{name}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def bench_config(args: argparse.Namespace) -> Config:
    return load_config(REPO / "bench" / CONFIGS[args.arch], [
        f"data.path={Path(args.out) / 'data'}", "data.test_prefix=test", f"train.out_dir={args.out}",
        f"train.precision={args.precision}", f"decode.precision={args.precision}", *args.overrides])


def weights(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.dim() == 2)  # matrices, not biases


# FLOPs of the matrix products of one forward pass over real tokens (no padding), summed over
# sentences, for each model.arch: `lengths` holds the sums of S (source length), T (target
# length), T x S, S x S and T x T. Each weight matrix a token passes through costs 2 FLOPs per weight.

def transformer_forward_flops(model: Model, lengths: dict[str, int]) -> float:
    """Per source token the encoder layers and the cross-attention's key and value projections; per
    target token the rest of the decoder and the output layer; per pair of positions a score and a
    weighted sum of d-wide vectors (4d): S x S per encoder layer, T x T per decoder layer (teacher
    forcing computes the whole masked square), T x S per cross-attention."""
    dim = model.config.emb_dim
    cross_kv = sum(layer.cross_attention.key_proj.weight.numel() + layer.cross_attention.value_proj.weight.numel()
                   for layer in model.decoder_layers)
    per_src = sum(weights(layer) for layer in model.encoder_layers) + cross_kv
    per_tgt = sum(weights(layer) for layer in model.decoder_layers) - cross_kv + weights(model.classifier)
    pairs = (len(model.encoder_layers) * lengths["src_x_src"]
             + len(model.decoder_layers) * (lengths["tgt_x_tgt"] + lengths["tgt_x_src"]))
    return 2.0 * (per_src * lengths["src"] + per_tgt * lengths["tgt"] + 2 * dim * pairs)


def rnn_forward_flops(model: RNNEncoderDecoder, lengths: dict[str, int]) -> float:
    """Per source position of each decoder step (T x S), the attention's score (an attn_dim-wide
    dot product after the additive layer) and the context."""
    src_tokens, tgt_tokens, attended = lengths["src"], lengths["tgt"], lengths["tgt_x_src"]
    enc, dec = model.encoder, model.decoder
    key_proj = dec.attention.key_proj.weight.numel()
    per_src = weights(enc.rnn) + key_proj
    per_tgt = weights(dec.rnn) + dec.attention.query_proj.weight.numel() + weights(dec.combine) + weights(dec.classifier)
    per_position = dec.attention.v.weight.numel() + enc.output_size
    return 2.0 * (per_src * src_tokens + per_tgt * tgt_tokens + per_position * attended)


FORWARD_FLOPS = {"rnn": rnn_forward_flops, "transformer": transformer_forward_flops}


def teacher_forced_lengths(batch: Batch) -> dict[str, int]:
    """The `lengths` of one training batch: its real source and target positions (the target's
    EOS counted, no padding), the whole T x T square that teacher forcing computes."""
    tgt, src = (batch.tgt_out != PAD_ID).sum(1).cpu(), batch.src_lengths.cpu()
    return {"src": int(src.sum()), "tgt": int(tgt.sum()), "tgt_x_src": int((tgt * src).sum()),
            "src_x_src": int((src**2).sum()), "tgt_x_tgt": int((tgt**2).sum())}


def matmul_peak_gflops(threads: int, dtype: torch.dtype = torch.float32, device: str = "cpu", repeats: int = 10) -> float:
    """GFLOP/s of square matrix products: 2048 wide on a CPU, 8192 on a GPU (fp32 without TF32,
    PyTorch's default), random operands."""
    torch.set_num_threads(threads)
    size = 8192 if torch.device(device).type == "cuda" else 2048
    a, b = (torch.randn(size, size, dtype=dtype, device=device) for _ in range(2))
    for _ in range(2):
        a @ b
    sync(device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    return 2 * size**3 * repeats / (time.perf_counter() - started) / 1e9


def sync(device: str) -> None:
    """Wait for the GPU's queued work before a clock is read (nothing to wait for on a CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def train_phase(args: argparse.Namespace) -> None:
    """In the child process: train `--steps` updates, print a JSON record of the timing."""
    set_up_training_process()  # as `attnmt train` does
    threads = use_threads(args.threads, torch.device(args.device), "--threads")
    config = bench_config(args)
    torch.manual_seed(config.train.seed)
    corpus = prepare_corpus(config)
    text = corpus.tokenization
    model = build_model(config.model, len(text.src_vocab), len(text.tgt_vocab)).to(args.device)
    optimizer = make_optimizer(model, config.train)
    batches = [b.tolist() for b in epoch_batches(corpus.lengths, config.train, epoch=1)]
    network = TeacherForced(model).train()
    tc = replace(config.train, precision=resolve(config.train.precision, torch.device(args.device)))  # as train() does
    marks, words = [], 0
    lengths: Counter = Counter()
    for step, ids in enumerate(batches[: args.steps], start=1):
        batch = collate([corpus.example(i) for i in ids], ids, args.device)
        train_step(network, optimizer, [Part(batch)], tc, step, batch.num_target_tokens)  # its loss.item() waits for the GPU
        marks.append((time.perf_counter(), words))
        words += batch.num_target_tokens - len(ids)  # real target words: no EOS, no padding
        lengths.update(teacher_forced_lengths(batch))
    marks.append((time.perf_counter(), words))
    translator = Translator(model, config, text)
    translator.save(Path(args.out) / "model.safetensors")

    def rate(first: int) -> float:
        (t0, w0), (t1, w1) = marks[first], marks[-1]
        return (w1 - w0) / (t1 - t0)

    print(json.dumps({
        "tok_per_s": rate(args.warmup), "tok_per_s_steady": rate(min(100, args.steps // 2)),
        "sent_per_s": (args.steps - args.warmup) * config.train.batch_size / (marks[-1][0] - marks[args.warmup][0]),
        # Training = forward + backward, about 3 forward passes.
        "flops_per_word": 3 * FORWARD_FLOPS[args.arch](model, lengths) / words,
        "params": sum(p.numel() for p in model.parameters()),
        "threads": threads.count,
    }))


def tokens_bleu(hypotheses: list[str], references: list[str]) -> float:
    def tok(line: str) -> str:
        return " ".join(TOKEN.findall(line.strip().lower()))

    bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    return bleu.corpus_score([tok(h) for h in hypotheses], [[tok(r) for r in references]]).score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="directory with the Multi30k files as in ../shared/data/multi30k")
    parser.add_argument("--out", default="runs/speed", help="working directory (tokenized data, model)")
    parser.add_argument("--steps", type=int, default=300, help="training updates, as the peers' budget")
    parser.add_argument("--warmup", type=int, default=20, help="updates left out of the throughput")
    parser.add_argument("--threads", default="2", help="torch threads, as the peers' OMP_NUM_THREADS, or auto "
                                                        "(as attnmt's train.threads and --threads: the free cores)")
    parser.add_argument("--arch", default="rnn", choices=list(CONFIGS), help="the peers' RNN or Transformer model")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"],
                        help="training and decoding precision (auto: bf16 where this CPU computes it natively)")
    parser.add_argument("--also-decode", default="", help="more decodings, e.g. int8,int8-compiled (a precision, "
                                                           "-compiled: with --compile); their lines name peer "
                                                           "attnmt-<decoding>")
    parser.add_argument("--decode-batches", default="64,256", help="sentences per decoding batch; the first is the peers' 64")
    parser.add_argument("--test-n", type=int, default=1000, help="test2016 sentences to translate")
    parser.add_argument("--name", default="attnmt", help="the peer= name on the metric lines")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: train and decode on the GPU")
    parser.add_argument("--phase", default="all", choices=["all", "train", "peak"],
                        help="peak: only measure the fp32 matmul peak (compare_peers.sh does, around the peers' run)")
    parser.add_argument("overrides", nargs="*", help="config key=value overrides")
    args = parser.parse_args()
    # The matmul peak is one per core; auto's count is the training's and decoding's to choose.
    peak_threads = parse_setting(args.threads, "--threads") or DEFAULT_THREADS
    global PEER
    PEER = args.name
    if args.phase == "train":
        train_phase(args)
        return
    if args.phase == "peak":
        emit("matmul_peak_fp32_gflops", matmul_peak_gflops(peak_threads, device=args.device), "GFLOP/s")
        return

    out = Path(args.out)
    prepare_tokens(Path(args.data), out / "data")
    peak_before = matmul_peak_gflops(peak_threads, device=args.device)
    emit("matmul_peak_fp32_gflops", peak_before, "GFLOP/s")
    gpu = torch.device(args.device).type == "cuda"
    with GpuMemoryWatch() if gpu else contextlib.nullcontext() as watch:
        fixed = {} if args.threads == "auto" else {"OMP_NUM_THREADS": args.threads}
        child = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--phase", "train"], capture_output=True,
                               text=True, env={**os.environ, **fixed})
    if child.returncode != 0:
        sys.exit(f"training failed:\n{child.stderr}")
    record = json.loads(child.stdout.strip().splitlines()[-1])
    peak_after = matmul_peak_gflops(peak_threads, device=args.device)
    emit("matmul_peak_fp32_gflops", peak_after, "GFLOP/s")
    # A busy neighbour on the machine can only slow a measurement down: the higher one is the peak.
    peak = max(peak_before, peak_after)
    emit("train_steps", args.steps, "steps")
    emit("train_threads", record["threads"], "threads")
    emit("train_tgt_tok_per_s", record["tok_per_s"], "tok/s")
    emit("train_tgt_tok_per_s_steady", record["tok_per_s_steady"], "tok/s")
    emit("train_sent_per_s", record["sent_per_s"], "sent/s")
    emit("train_peak_rss_mb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "MiB")
    if watch is not None:
        emit("train_gpu_peak_mib", watch.peak_mib, "MiB")
    emit("model_params", record["params"], "params")
    emit("model_gflop_per_tgt_word", record["flops_per_word"] / 1e9, "GFLOP")
    achieved = record["flops_per_word"] * record["tok_per_s_steady"] / 1e9               # GFLOP/s
    emit("train_mfu_fp32_pct", 100 * achieved / peak, "%")
    if resolve(args.precision, torch.device(args.device)) == "bf16":
        # bf16 products run over twice as fast as fp32 ones on CPUs with AVX512-BF16: against the
        # fp32 peak a bf16 run can pass 100 %, so its fraction of the bf16 peak is printed too.
        bf16_peak = max(matmul_peak_gflops(peak_threads, torch.bfloat16, args.device) for _ in range(2))
        emit("matmul_peak_bf16_gflops", bf16_peak, "GFLOP/s")
        emit("train_mfu_bf16_pct", 100 * achieved / bf16_peak, "%")

    emit("decode_threads", use_threads(args.threads, torch.device(args.device), "--threads").count, "threads")
    set_up_decoding_process()  # as attnmt translate does
    sources = list(read_lines(out / "data" / "test.de"))[: args.test_n]
    references = list(read_lines(out / "data" / "test.en"))[: args.test_n]
    for decoding in [args.precision] + [d for d in args.also_decode.split(",") if d]:
        if decoding != args.precision:
            PEER = f"attnmt-{decoding}"
        precision, _, compiled = decoding.partition("-")
        if compiled:
            # Compiled afresh, into empty caches (attnmt's and torch inductor's), as a new user would.
            for cache in (out / "cache", out / "inductor"):
                shutil.rmtree(cache, ignore_errors=True)
            os.environ.update(ATTNMT_CACHE=str(out / "cache"), TORCHINDUCTOR_CACHE_DIR=str(out / "inductor"))
        started = time.perf_counter()
        translator = Translator.load(out / "model.safetensors", device=args.device, precision=precision,
                                     compile=bool(compiled))
        if compiled:
            emit("decode_compile_s", time.perf_counter() - started, "s")
        emit("decode_load_s", load_seconds(out / "model.safetensors", args.device, precision, bool(compiled)), "s")
        decode_test(translator, args.arch, sources, references, [int(b) for b in args.decode_batches.split(",")], peak)


def load_seconds(model: Path, device: str, precision: str, compile: bool) -> float:
    """Seconds Translator.load takes in a fresh process (a compiled step: loaded from the cache)."""
    code = ("import sys, time; from attnmt.translate import Translator; started = time.perf_counter(); "
            "Translator.load(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == '1'); "
            "print(time.perf_counter() - started)")
    child = subprocess.run([sys.executable, "-c", code, str(model), device, precision, str(int(compile))],
                           capture_output=True, text=True, check=True)
    return float(child.stdout.strip().splitlines()[-1])


def decode_flops(model: Model, arch: str, outputs: list[Translation], beam: int) -> float:
    """Model FLOPs of decoding: the encoder over each source (its tokens and EOS), and `beam` rows
    of decoder steps over the output and its EOS, each step's query attending the positions so far
    (T(T+1)/2 pairs per decoder layer, not teacher forcing's square). Padding, ended rows and
    beams that stop early are not counted: what any implementation of this search must compute."""
    lengths = dict.fromkeys(("src", "tgt", "tgt_x_src", "src_x_src", "tgt_x_tgt"), 0)
    for output in outputs:
        src, tgt = len(output.source_tokens) + 1, len(output.tokens) + 1
        for name, value in (("src", src), ("tgt", beam * tgt), ("tgt_x_src", beam * tgt * src),
                            ("src_x_src", src * src), ("tgt_x_tgt", beam * tgt * (tgt + 1) // 2)):
            lengths[name] += value
    return FORWARD_FLOPS[arch](model, lengths)


def decode_test(translator: Translator, arch: str, sources: list[str], references: list[str],
                batch_sizes: list[int], peak: float) -> None:
    """Greedy and beam 5 over the test set at each batch size: speed (decoding loop only), BLEU, and
    the model FLOPs per sentence and their rate against the fp32 matmul `peak` (GFLOP/s)."""
    # The first batch size gets the peers' metric names (they decode 64 sentences at a time);
    # others get a _b<size> suffix. Outputs do not depend on the batch, so neither does BLEU.
    for name, beam in (("greedy", 1), ("beam5", 5)):
        for batch_size in batch_sizes:
            started = time.perf_counter()
            outputs = translator.translate(sources, beam_size=beam, batch_size=batch_size)
            seconds = time.perf_counter() - started
            suffix = "" if batch_size == batch_sizes[0] else f"_b{batch_size}"
            emit(f"translate_{name}{suffix}_sent_per_s", len(sources) / seconds, "sent/s")
            emit(f"translate_{name}{suffix}_decode_s", seconds, "s")
            emit(f"bleu_{name}{suffix}", tokens_bleu([t.text for t in outputs], references), "BLEU")
            flops = decode_flops(translator.model, arch, outputs, beam)
            emit(f"decode_{name}{suffix}_gflop_per_sent", flops / len(outputs) / 1e9, "GFLOP")
            emit(f"decode_{name}{suffix}_mfu_fp32_pct", 100 * flops / 1e9 / seconds / peak, "%")


if __name__ == "__main__":
    main()
