#!/usr/bin/env bash
# The measured comparison of the README ("Measured results"): every model trained by the same
# script for the same fixed budget of training time on a 2-core CPU, two runs side by side with
# one thread each (so every run gets one core for its whole budget).
#
#   bash examples/results/reproduce.sh [DATA] [RUNS] [PARTS]
#
# DATA: ../shared/data; RUNS: runs/results; PARTS: "translation lm" (both, one after the other).
#
# Translation: Multi30k, 8k joint BPE, d=256 3+3 layers ("small" preset), 25 training minutes,
# validation BLEU (greedy) every 5 training minutes, test_2016_flickr BLEU with beam 5 at the end.
# Language modelling: WikiText-2 word level, d=256 3 layers, 15 training minutes (about 160 steps of
# 4,096 tokens on one core: the output layer over the 33k-word vocabulary dominates a step).
# At the end: the figure and table of the README (plot.py), and the small TaLK translation models'
# configuration, training log and metrics (not their weights) copied here.
set -euo pipefail
DATA=${1:-../shared/data}
RUNS=${2:-runs/results}
PARTS=${3:-translation lm}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
python -m talk_hf.ops.build --cpu  # compile the C++ kernels now, not inside the first timed training step

translation() {  # model_type source target [extra flags]
    python examples/translation/train.py --data_dir "$DATA/multi30k" --source_lang "$2" --target_lang "$3" \
        --model_type "$1" --output_dir "$RUNS/multi30k-$2-$3-$1" --test_split test_2016_flickr \
        --max_train_minutes 25 --eval_every_minutes 5 --valid_num_beams 1 --num_beams 5 \
        --warmup_steps 200 --save_every 100000 --eval_batch_size 128 "${@:4}" \
        >"$RUNS/multi30k-$2-$3-$1.log" 2>&1
}

language_model() {  # model_type
    python examples/language-modeling/train.py --data_dir "$DATA/wikitext-2" \
        --model_type "$1" --output_dir "$RUNS/wikitext2-$1" \
        --max_train_minutes 15 --eval_every_minutes 3 --schedule inverse_sqrt --warmup_steps 50 \
        --save_every 100000 >"$RUNS/wikitext2-$1.log" 2>&1
}

if [[ " $PARTS " == *" translation "* ]]; then
    (
        translation talk en de
        translation dynamic_conv en de
        translation talk de en
    ) &
    (
        translation transformer en de
        translation lightconv en de
        translation transformer de en
        # t2t's slicenet_1 structure at about the others' parameter count (no FFN: width instead)
        translation slicenet en de --preset t2t-slicenet_1 --d_model 384 --dropout 0.1
    ) &
    wait
fi
if [[ " $PARTS " == *" lm "* ]]; then
    (
        language_model talk
        language_model dynamic_conv
    ) &
    language_model transformer &
    wait
fi

python examples/results/plot.py "$RUNS" examples/results
for run in multi30k-en-de-talk multi30k-de-en-talk; do
    mkdir -p "examples/results/$run"
    cp "$RUNS/$run"/best/{config.json,generation_config.json,training_state.json} "$RUNS/$run"/{test_results.json,log.jsonl} \
        "examples/results/$run/"
done
