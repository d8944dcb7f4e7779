#!/usr/bin/env bash
# The measured comparison of the README ("Measured results"): every model trained by the same
# script, with the scripts' default recipe (chosen on validation data: examples/results/recipe-search),
# for the same budget of training time on a 2-core CPU, two runs side by side with one thread each
# (every run has one core for its whole budget), three seeds each.
#
#   bash examples/results/reproduce.sh [DATA] [RUNS] [PARTS]
#
# DATA: ../shared/data; RUNS: runs/results (checkpoints, logs); PARTS (default: all six, in this order):
#   translation  Multi30k En→De and De→En, TaLK, the Transformer baseline, DynamicConv and LightConv,
#                12 training minutes each; validation BLEU (greedy) every 4 minutes,
#                test_2016_flickr BLEU with beam 5 at the end
#   goal         Multi30k En→De, TaLK and the Transformer, 25 training minutes each (the goal of #15)
#   lm           WikiText-2 word level, TaLK, DynamicConv and GPT-2, blocks of 256, 12 minutes each
#   long         the same with blocks of 2,048 tokens, where attention's cost grows and ours does not
#   long-lr2e-3  the same at learning rate 2e-3, the best of the search at blocks of 2,048 (round
#                lm-long of examples/results/recipe-search; the defaults were chosen at 256)
#   slicenet-pair  SliceNet with its compiled depthwise kernels and the settings its own search chose
#                (rounds slicenet-* of examples/results/recipe-search), and the Transformer beside
#                it, both directions, 12 minutes: tasks multi30k-{en-de,de-en}-slicenet-pair, so that
#                the pair's difference is measured on one machine at one time (the other models'
#                pairs stay in tasks multi30k-en-de and multi30k-de-en)
# Run folders are TASK-MODEL_TYPE-sSEED. A finished run's record (log.jsonl, test_results.json,
# best/config.json: what plot.py reads, a few hundred kB; environment.json: the machine it ran
# on) is copied to RECORDS (default: examples/results/runs, committed), and a run with a record
# there is skipped; an interrupted one resumes from its last saved state in RUNS. So the script
# can be stopped and started again, on another machine too once the records are committed; seeds
# go outermost, so a partial pass has whole seeds. To borrow the machine for a while without
# disturbing the timings: `pkill -STOP -f examples/results/reproduce.sh; pkill -TSTP -f
# 'examples/.*/train.py'` (a stopped run's clock stops too; the script, stopped, starts no new
# run), later the same with -CONT, runs first. Run it from a checkout nobody edits meanwhile (e.g.
# `git worktree add ../repro COMMIT`, then run it inside ../repro with `PYTHONPATH=.` and RECORDS
# pointing back here): every run imports the package and kernels of that checkout, so an edit would
# give later runs other code (a script builds the kernels it imports before its clock starts: a
# first build is not training time). Scripts and package must be of one commit: the scripts call
# the package's functions of their own time. At the end plot.py draws the README's figure and table
# from RECORDS (examples/results/summary.{md,json}, curves.png).
set -euo pipefail
DATA=${1:-../shared/data}
RUNS=${2:-runs/results}
PARTS=${3:-translation goal lm long long-lr2e-3 slicenet-pair}
# SliceNet's own settings in part slicenet-pair: the best validation BLEU of its search (rounds
# slicenet-* of examples/results/recipe-search): lr 2e-3 and a LayerNorm before the output layer
SLICENET_SEARCHED=(--lr 2e-3 --config_overrides final_layer_norm=true)
SEEDS=${SEEDS:-0 1 2}
RECORDS=${RECORDS:-examples/results/runs}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"

train() {  # script run_name [flags]: skip a recorded run, resume an interrupted one, record a finished one
    local out="$RUNS/$2" record="$RECORDS/$2" resume=()
    [[ -f "$record/test_results.json" ]] && return
    if [[ -d "$out/state" || -d "$out/state.old" ]]; then resume=(--resume); else rm -rf "$out"; fi
    # Each step's failure reaches the worker, which names the run (set -e does not act inside
    # `train ... || ...`); a record is whole or absent.
    python "examples/$1/train.py" --output_dir "$out" --save_every 200 "${resume[@]}" "${@:3}" >>"$RUNS/$2.log" 2>&1 &&
        mkdir -p "$record.partial/best" &&
        cp "$out/log.jsonl" "$out/test_results.json" "$out/environment.json" "$record.partial/" &&
        cp "$out/best/config.json" "$record.partial/best/" &&
        rm -rf "$record" && mv "$record.partial" "$record"
}

translation() {  # task model_type source target minutes seed
    local flags=()
    # t2t's slicenet_1 structure at about the others' parameter count (no FFN: width instead), and
    # the recipe's dropout 0, which the scripts give the others' `small` preset by default (t2t's is 0.5)
    [[ $2 == slicenet ]] && flags=(--preset t2t-slicenet_1 --d_model 384 --dropout 0.0 "${SLICENET_SEARCHED[@]}")
    train translation "$1-$2-s$6" --data_dir "$DATA/multi30k" --source_lang "$3" --target_lang "$4" \
        --model_type "$2" --seed "$6" --test_split test_2016_flickr --max_train_minutes "$5" \
        --eval_every_minutes 4 --valid_num_beams 1 --num_beams 5 --eval_batch_size 128 "${flags[@]}"
}

language_model() {  # task model_type seed [flags]
    train language-modeling "$1-$2-s$3" --data_dir "$DATA/wikitext-2" --model_type "$2" --seed "$3" \
        --max_train_minutes 12 --eval_every_minutes 4 "${@:4}"
}

jobs=()
for seed in $SEEDS; do
    for part in $PARTS; do
        case $part in
            translation)
                for direction in "en de" "de en"; do
                    for model in talk transformer dynamic_conv light_conv; do
                        jobs+=("translation multi30k-${direction/ /-} $model $direction 12 $seed")
                    done
                done ;;
            slicenet-pair)  # one job of each pair per worker: the two run side by side
                for direction in "en de" "de en"; do
                    for model in slicenet transformer; do
                        jobs+=("translation multi30k-${direction/ /-}-slicenet-pair $model $direction 12 $seed")
                    done
                done ;;
            goal) for model in talk transformer; do jobs+=("translation multi30k-en-de-25min $model en de 25 $seed"); done ;;
            lm) for model in talk dynamic_conv transformer; do jobs+=("language_model wikitext2 $model $seed"); done ;;
            long | long-lr2e-3)  # one block of 2,048 tokens per step; the part's name is its task's
                flags="--block_size 2048 --max_tokens 2048"
                [[ $part == long-lr2e-3 ]] && flags+=" --lr 2e-3"
                for model in talk dynamic_conv transformer; do
                    jobs+=("language_model wikitext2-$part $model $seed $flags")
                done ;;
            *) echo "unknown part $part" >&2; exit 2 ;;
        esac
    done
done

worker() {  # every second job, starting at $1
    local index
    for ((index = $1; index < ${#jobs[@]}; index += 2)); do
        ${jobs[$index]} || echo "FAILED (see its log): ${jobs[$index]}" >&2
    done
}
worker 0 &
worker 1 &
wait

python examples/results/plot.py "$RECORDS" examples/results
