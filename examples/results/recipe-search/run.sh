#!/usr/bin/env bash
# The search behind the translation script's defaults (#15): Multi30k En->De, every setting trained
# for the same 12 minutes of training time on one core, and judged on the VALIDATION set only
# (greedy BLEU of the best of the evaluations every 4 training minutes; the test set is not read).
# Two runs go side by side, one thread each; the pair of a round are the model types being tuned.
#
#   bash examples/results/recipe-search/run.sh [DATA] [RUNS] ROUND...
#
# ROUND names a group of settings below. summarize.py collects the scores into results.md/json.
set -euo pipefail
DATA=${1:-../shared/data}
RUNS=${2:-runs/recipe-search}
shift 2
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
python -m talk_hf.ops.build --cpu >/dev/null

run() {  # name model_type [flags]: one 12-minute run on validation only (skipped when done)
    local out="$RUNS/$1"
    [[ -f "$out/done" ]] && return
    rm -rf "$out"
    python examples/translation/train.py --data_dir "$DATA/multi30k" --source_lang en --target_lang de \
        --model_type "$2" --output_dir "$out" --test_split '' --max_train_minutes 12 --eval_every_minutes 4 \
        --valid_num_beams 1 --save_every 100000 --eval_batch_size 128 "${@:3}" >"$out.log" 2>&1
    touch "$out/done"
}

pair() {  # name [flags]: TaLK and the Transformer baseline with the same flags, side by side
    run "talk-$1" talk "${@:2}" &
    run "transformer-$1" transformer "${@:2}" &
    wait
}

for round in "$@"; do
    case $round in
        batch)  # tokens per batch at the plain script's lr and warmup
            pair tok1024-lr1e-3 --max_tokens 1024 --lr 1e-3 --warmup_steps 150 --dropout 0.1
            pair tok1536-lr1e-3 --max_tokens 1536 --lr 1e-3 --warmup_steps 150 --dropout 0.1
            pair tok2048-lr1e-3 --max_tokens 2048 --lr 1e-3 --warmup_steps 150 --dropout 0.1
            ;;
        *) echo "unknown round $round" >&2; exit 2 ;;
    esac
done
