#!/usr/bin/env bash
# Issue 64's anchor in its own toolkit: Wu et al. (2021)'s small Transformer for Multi30k en->de trained by
# fairseq on their own text, averaged and decoded as their evaluate.sh does (the last 10 epochs, beam 5,
# fairseq's default length normalization), and scored with fairseq's BLEU4 on their lowercased, Moses-tokenized
# references, the figure they publish (41.02 on test.2016). It answers whether their recipe, in their code, reaches
# that figure on this machine with the training an attnmt run is compared at. For comparison only: fairseq lives in
# a venv of its own under WORK, never in attnmt's.
#
#   bash bench/anchor_fairseq.sh ANCHOR_DATA WORK [UPDATES [UPDATE_FREQ]]
#
# ANCHOR_DATA: their data/multi30k-en-de directory (github.com/LividWo/Revisit-MMT; from a bare clone:
#   git --git-dir=REPO archive HEAD data/multi30k-en-de | tar x). WORK: where the venv, fairseq's source, the
# binarized text, the checkpoints and the logs go. UPDATES (default 8000, theirs) updates of UPDATE_FREQ (default 2,
# theirs: two GPUs of 4,096 tokens each) batches of 4,096 tokens. A CPU trains on its cores (OMP_NUM_THREADS), a
# CUDA GPU where torch sees one. An interrupted run continues from its last epoch when started again.
#
# fairseq 0.12.2 (the newest on PyPI) is built from its source archive, with edits for today's Python and torch: three
# in dataclass defaults for Python 3.11 (a field defaulting to another config instance becomes default_factory), one
# turning off its encoder's fused inference path (see below), one building a Cython module as C++; no training code
# is touched. Its BLEU4 needs a C++
# extension the archive cannot build, so the same BLEU, on whitespace tokens of their text, comes from sacreBLEU
# with tokenize none. Their fork's defaults are written out: transformer_tiny's sizes, Adam (0.9, 0.98),
# clipping at 25, the inverse square root rate from 1e-7, label smoothing 0.1, no attention or activation dropout.
set -euo pipefail

ANCHOR=$(realpath "$1")
WORK=$(realpath -m "$2")
UPDATES=${3:-8000}
UPDATE_FREQ=${4:-2}
FAIRSEQ=$WORK/fairseq-0.12.2
RUN=$WORK/anchor_${UPDATES}x${UPDATE_FREQ}
mkdir -p "$WORK"

if [ ! -x "$WORK/venv/bin/python" ]; then
    python3.11 -m venv "$WORK/venv"
    "$WORK/venv/bin/pip" install -q torch==2.13.0
    "$WORK/venv/bin/pip" install -q "cython<3" numpy hydra-core==1.3.2 omegaconf==2.3.0 bitarray regex sacrebleu
fi
PY=$WORK/venv/bin/python
export PYTHONPATH=$FAIRSEQ
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1   # fairseq 0.12.2 reads its own checkpoints with torch.load's old default

if ! ls "$FAIRSEQ"/fairseq/data/data_utils_fast.*.so > /dev/null 2>&1; then   # not yet built
    rm -rf "$FAIRSEQ"
    "$WORK/venv/bin/pip" download -q --no-deps fairseq==0.12.2 -d "$WORK"
    tar xzf "$WORK/fairseq-0.12.2.tar.gz" -C "$WORK"
    sed -i -E 's/^(\s+\w+): (\w+) = \2\(\)$/\1: \2 = field(default_factory=\2)/' \
        "$FAIRSEQ/fairseq/dataclass/configs.py" "$FAIRSEQ/fairseq/models/transformer/transformer_config.py"
    sed -i 's/= field(default=QuantNoiseConfig())/= field(default_factory=QuantNoiseConfig)/' \
        "$FAIRSEQ/fairseq/models/transformer/transformer_config.py"
    sed -i 's/^        v = FairseqConfig.__dataclass_fields__\[k\].default$/        f = FairseqConfig.__dataclass_fields__[k]\n        v = f.default_factory() if callable(f.default_factory) else f.default/' \
        "$FAIRSEQ/fairseq/dataclass/initialize.py"
    # Its encoder layers' fused inference path calls a torch function whose arguments have changed since: off.
    sed -i 's/BT_version = True/BT_version = False/' "$FAIRSEQ/fairseq/modules/transformer_layer.py" \
        "$FAIRSEQ/fairseq/models/transformer/transformer_encoder.py"
    sed -i '1i # distutils: language = c++' "$FAIRSEQ/fairseq/data/data_utils_fast.pyx"
    NUMPY_INCLUDE=$("$PY" -c 'import numpy; print(numpy.get_include())')
    (cd "$FAIRSEQ/fairseq/data" && CPPFLAGS="-I$NUMPY_INCLUDE" "$WORK/venv/bin/cythonize" -i -q \
        data_utils_fast.pyx token_block_utils_fast.pyx)
fi

if [ ! -d "$WORK/bin" ]; then
    "$PY" "$FAIRSEQ/fairseq_cli/preprocess.py" --source-lang en --target-lang de --joined-dictionary --workers 2 \
        --trainpref "$ANCHOR/train" --validpref "$ANCHOR/valid" --testpref "$ANCHOR/test.2016" --destdir "$WORK/bin" \
        > "$WORK/preprocess.log" 2>&1
fi

DEVICE=$("$PY" -c 'import torch; print("" if torch.cuda.is_available() else "--cpu")')
echo "== training: $UPDATES updates of $UPDATE_FREQ x 4,096 tokens into $RUN (log: $RUN.log)"
# A finished run is left as it is: started again after its end, fairseq would make one more update.
if ! grep -q 'done training' "$RUN.log" 2> /dev/null; then
    "$PY" "$FAIRSEQ/fairseq_cli/train.py" "$WORK/bin" \
        --task translation --source-lang en --target-lang de \
        --arch transformer --encoder-layers 4 --decoder-layers 4 --encoder-embed-dim 128 --decoder-embed-dim 128 \
        --encoder-ffn-embed-dim 256 --decoder-ffn-embed-dim 256 --encoder-attention-heads 4 --decoder-attention-heads 4 \
        --share-all-embeddings --dropout 0.3 --attention-dropout 0 --activation-dropout 0 \
        --optimizer adam --adam-betas '(0.9,0.98)' --adam-eps 1e-8 --clip-norm 25 \
        --lr 0.005 --lr-scheduler inverse_sqrt --warmup-updates 2000 --warmup-init-lr 1e-7 \
        --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
        --max-tokens 4096 --update-freq "$UPDATE_FREQ" --max-update "$UPDATES" --patience 10 \
        --seed 1 --num-workers 0 $DEVICE --save-dir "$RUN" --keep-last-epochs 10 \
        --log-format simple --log-interval 50 >> "$RUN.log" 2>&1
fi

# The last 10 epochs' weights averaged, as their evaluate.sh averages them (fairseq's scripts/ folder, where its own
# averaging script lives, is not in its source archive).
"$PY" - "$RUN" <<'PY'
import re, sys, torch
from pathlib import Path
run = Path(sys.argv[1])
epochs = sorted((p for p in run.glob("checkpoint*.pt") if re.fullmatch(r"checkpoint\d+\.pt", p.name)),
                key=lambda p: int(p.stem[len("checkpoint"):]))[-10:]
states = [torch.load(p, map_location="cpu", weights_only=False) for p in epochs]
average = states[-1]
average["model"] = {name: sum(s["model"][name].double() for s in states).div(len(states)).to(value.dtype)
                    for name, value in average["model"].items()}
torch.save(average, run / "checkpoint_last10_avg.pt")
print(f"averaged {', '.join(p.name for p in epochs)}")
PY
for SPLIT in valid test; do
    echo "== $SPLIT (test: test.2016), the last 10 epochs averaged, beam 5, --lenpen 1 (their evaluate.sh)"
    "$PY" "$FAIRSEQ/fairseq_cli/generate.py" "$WORK/bin" --task translation --source-lang en --target-lang de \
        --path "$RUN/checkpoint_last10_avg.pt" --gen-subset "$SPLIT" --beam 5 --lenpen 1 --batch-size 128 \
        --remove-bpe --scoring sacrebleu --sacrebleu-tokenizer none $DEVICE 2> "$RUN/generate_$SPLIT.log" > "$RUN/generate_$SPLIT.txt"
    tail -1 "$RUN/generate_$SPLIT.txt"
done
