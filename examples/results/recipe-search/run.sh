#!/usr/bin/env bash
# The search behind the translation script's defaults (#15): Multi30k En->De, every setting trained
# for the same 12 minutes of training time on one core, and judged on the VALIDATION set only
# (greedy BLEU of the best of the evaluations every 4 training minutes; the test set is not read).
# Two runs go side by side, one thread each (`pair`: TaLK and the Transformer with the same flags).
# The language models (rounds lm-*): WikiText-2, validation perplexity, the same budget.
#
#   bash examples/results/recipe-search/run.sh DATA RUNS ROUND...   (e.g. ../shared/data runs/recipe-search batch)
#
# ROUND names a group of settings below. summarize.py collects the scores into results.md/json.
set -euo pipefail
DATA=${1:-../shared/data}
RUNS=${2:-runs/recipe-search}
shift 2
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
python -m talk_hf.ops.build --cpu >/dev/null

run() {  # name script model_type [flags]: one 12-minute run on validation only (skipped when done)
    local out="$RUNS/$1" data
    [[ -f "$out/done" ]] && return
    rm -rf "$out"
    if [[ $2 == translation ]]; then
        data=(--data_dir "$DATA/multi30k" --source_lang en --target_lang de --valid_num_beams 1 --eval_batch_size 128)
    else
        data=(--data_dir "$DATA/wikitext-2")
    fi
    python "examples/$2/train.py" "${data[@]}" --model_type "$3" --output_dir "$out" --test_split '' \
        --max_train_minutes 12 --eval_every_minutes 4 --save_every 100000 "${@:4}" >"$out.log" 2>&1
    touch "$out/done"
}

pair() {  # name [flags]: TaLK and the Transformer baseline translating with the same flags, side by side
    run "talk-$1" translation talk "${@:2}" &
    run "transformer-$1" translation transformer "${@:2}" &
    wait
}

lm_pair() {  # name [flags]: the TaLK LM and GPT-2 with the same flags, side by side
    run "lm-talk-$1" language-modeling talk "${@:2}" &
    run "lm-transformer-$1" language-modeling transformer "${@:2}" &
    wait
}

slicenet() {  # name [flags]: SliceNet as the comparison trains it (t2t's slicenet_1 at d_model 384, the
    # scripts' recipe: 512 tokens, lr 1e-3, 150 warmup steps, dropout 0), with the flags changed
    run "slicenet-$1" translation slicenet --preset t2t-slicenet_1 --d_model 384 --dropout 0.0 "${@:2}"
}

# Coordinate search: each round varies one thing around the settings with the best mean validation BLEU
# of the two model types so far (one recipe for every model type).
for round in "$@"; do
    case $round in
        batch)  # tokens per batch at the plain script's lr and warmup (the old default was 4,096)
            pair tok1024-lr1e-3 --max_tokens 1024 --lr 1e-3 --warmup_steps 150 --dropout 0.1
            pair tok1536-lr1e-3 --max_tokens 1536 --lr 1e-3 --warmup_steps 150 --dropout 0.1
            pair tok512-lr1e-3 --max_tokens 512 --lr 1e-3 --warmup_steps 150 --dropout 0.1
            pair tok256-lr1e-3 --max_tokens 256 --lr 1e-3 --warmup_steps 150 --dropout 0.1
            ;;
        lr)  # the learning rate at 512 tokens (the best mean of the two model types in round batch)
            pair tok512-lr2e-3 --max_tokens 512 --lr 2e-3 --warmup_steps 150 --dropout 0.1
            ;;
        dropout)  # no dropout (12 minutes of 512-token batches are about 1.5 epochs)
            pair tok512-lr1e-3-drop0 --max_tokens 512 --lr 1e-3 --warmup_steps 150 --dropout 0.0
            ;;
        average)  # checkpoint averaging: evaluations every minute, the last three averaged at the end
            pair tok512-lr1e-3-drop0-avg3 --max_tokens 512 --lr 1e-3 --warmup_steps 150 --dropout 0.0 \
                --eval_every_minutes 1 --average_last 3
            ;;
        lm-batch)  # WikiText-2, blocks of 256, the translation recipe's dropout 0: blocks per batch (the old
            # comparison used 16 blocks, 4,096 tokens; 12 minutes are about a third of an epoch)
            lm_pair tok1024-lr1e-3 --max_tokens 1024 --lr 1e-3 --schedule inverse_sqrt --warmup_steps 50 --dropout 0.0
            lm_pair tok2048-lr1e-3 --max_tokens 2048 --lr 1e-3 --schedule inverse_sqrt --warmup_steps 50 --dropout 0.0
            ;;
        lm-lr)  # the learning rate at blocks of 256 (lm-batch kept the translation recipe's 1e-3), asked
            # after lm-long found our models wanting a higher rate at 2,048
            lm_pair tok1024-lr2e-3 --max_tokens 1024 --lr 2e-3 --schedule inverse_sqrt --warmup_steps 50 --dropout 0.0
            ;;
        lm-long)  # blocks of 2,048 (the README's long-context comparison), one block per batch: the
            # learning rate, since the recipe above was chosen at blocks of 256
            for lr in 1e-3 2e-3 5e-4 4e-3 8e-3; do  # 4e-3, 8e-3 added while TaLK kept improving
                lm_pair "long-lr$lr" --block_size 2048 --max_tokens 2048 --lr "$lr" --schedule inverse_sqrt \
                    --warmup_steps 50 --dropout 0.0
            done
            ;;
        slicenet-norm)  # SliceNet's own settings (#33), after its kernels: the recipe as it is, and with a
            # LayerNorm before the tied output layer (t2t's design starts at a loss of about 24 without it)
            slicenet recipe &
            slicenet final-norm --config_overrides final_layer_norm=true &
            wait
            ;;
        slicenet-lr)  # the learning rate around the recipe's 1e-3, with the final LayerNorm (round slicenet-norm)
            slicenet lr2e-3 --lr 2e-3 --config_overrides final_layer_norm=true &
            slicenet lr5e-4 --lr 5e-4 --config_overrides final_layer_norm=true &
            wait
            ;;
        slicenet-lr-up)  # lr 2e-3 won round slicenet-lr by far: higher still, and 2e-3 without the final LayerNorm
            slicenet lr4e-3 --lr 4e-3 --config_overrides final_layer_norm=true &
            slicenet lr2e-3-no-norm --lr 2e-3 --config_overrides final_layer_norm=false &
            wait
            ;;
        *) echo "unknown round $round" >&2; exit 2 ;;
    esac
done
