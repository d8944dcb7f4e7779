#!/usr/bin/env bash
# Everything the GPU verification runs, in stages; each stage's output goes to RESULTS/STAGE.log:
#
#   bash benchmarks/gpu_suite.sh RESULTS [STAGE ...]
#
# Stages (default: env build test sanitize bench profile generate), and the files they add to RESULTS:
#   env       GPU, driver and package versions
#   build     the CPU and CUDA extensions, built just in time with the compiler's output
#   test      every `gpu` test (kernels against the reference, models on CUDA, autocast, FSDP)
#                                                                    -> gpu-tests.xml
#   test-all  the whole test suite on the GPU machine
#   sanitize  compute-sanitizer memcheck and racecheck over benchmarks/sanitize_kernels.py
#                                                                    -> sanitize-*.log
#   checks    test and sanitize at the same time (correctness only, so sharing the GPU is harmless;
#             each writes its own log as above)                      -> checks.log
#   bench     bench_ops.py: the TaLK paper's Table 6 setting, then the default lengths in float32 and
#             bfloat16; every case once on the CUDA kernels (backend cuda)
#                                   -> table6_cuda.json, ops_cuda.json, ops_cuda_bf16.json
#   variants  the candidate CUDA kernels that no GPU has verified yet (csrc/cuda_variants.h), each timed
#             against the default kernel in the same run (bench_ops.py --variants): talk_conv at the
#             Table 6 shape (float32) and at B = 2, C = 512, H = 8 in bfloat16, T = 256 .. 16,384;
#             their checks run in `test` and `sanitize` (every candidate switched on in turn)
#                                   -> variants_table6_cuda.json, variants_ops_cuda_bf16.json
#   profile   Nsight Compute over each kernel the ops run at the Table 6 shape, float32 and bfloat16
#                                                           -> ncu-table6.txt, ncu-table6-bf16.txt
#   generate  bench_generate.py on the GPU                           -> bench_generate_cuda.json
#   decode    bench_serving.py's LM section on the GPU, GPT-2 small's size: our causal LMs in eager and
#             compiled `generate` (CUDA graphs) against GPT-2 eager and with a compiled static cache
#                                                                    -> serving_lm_cuda.json
#   trainspeed  bench_train.py on the GPU: the language models against GPT-2 (flash SDPA) at GPT-2
#             small's size, bf16, T = 1,024, 4,096, 16,384: training tokens/s and peak memory
#                                                                    -> train_cuda_lm_bf16.json
#   longsource  bench_train.py --long-source on the GPU: TaLK, DynamicConv and LightConv
#             encoder-decoders against the same-size Transformer (SDPA, flash) at the cnn-dm preset's
#             shape, bf16, sources of 400 to 16,384 tokens, and beam-4 decoding from 4,096
#                                                                    -> train_long_source_cuda.json
#   train     Multi30k En->De, TaLK, DynamicConv and the Transformer baseline, bf16, the same
#             training-time budget each, all three at once on the one GPU; then plot.py
#                                                                    -> train/, curves.png, summary.*
#   pack      RESULTS.tgz beside RESULTS: every log, JSON, table and plot, no weights (put it last)
#
# A stage that fails is reported and the next one still runs; the exit status is 1 if any failed.
# After a failed build the stages that run the kernels are skipped (each would only retry the build).
# Settings (environment): PYTHON (python3), DATA (the data pack: ../shared/data beside the
# repository), TRAIN_MINUTES (5: wall time, evaluation excluded), TRAIN_EPOCHS (1000: the budget
# ends training, not the epochs), TRAIN_PRESET (iwslt14-de-en), TRAIN_MAX_TOKENS (8192), NCU (ncu
# on the PATH, else the newest under /opt/nvidia/nsight-compute).  Relative
# paths are taken from the current folder.  The package need not be installed: the repository root
# goes on PYTHONPATH.
#
# For a device lease shorter than the suite (one call of at most 10 minutes):
#   DEADLINE  seconds from the suite's start by which every stage must end: a stage gets the time
#             left (minus DEADLINE_RESERVE, 15 s, for the archive) and is stopped when it runs out
#             (reported as failed, what it wrote kept); a stage with under DEADLINE_MIN_STAGE (10 s)
#             left is skipped.  Both have their defaults for a lease; the tests shrink them.
#   PACK      an archive refreshed after every stage (like stage pack), so that a call cut short
#             still brings back every finished stage: e.g. PACK=$OUT/gpu.tgz
set -uo pipefail
RESULTS=$(realpath -m "${1:?usage: gpu_suite.sh RESULTS [STAGE ...]}")
shift
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(env build test sanitize bench profile generate)
ROOT=$(realpath "$(dirname "$0")/..")
DATA=$(realpath -m "${DATA:-$ROOT/../shared/data}")
cd "$ROOT"
export TALK_HF_TEST_DATA="$DATA"  # the example tests read the data pack from here
PYTHON=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$RESULTS"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
failed=()

stage_env() {
    nvidia-smi
    "$PYTHON" -c "import sys, torch, transformers, accelerate; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, '| transformers', transformers.__version__, '| accelerate', accelerate.__version__); print(torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))"
    nvcc --version
}

stage_build() {
    TALK_HF_BUILD_VERBOSE=1 "$PYTHON" -m talk_hf.ops.build --cpu --cuda
}

stage_test() {
    # Four workers share the GPU where pytest-xdist is installed: the kernel tests are many and small
    local workers=()
    "$PYTHON" -c "import xdist" 2>/dev/null && workers=(-n 4)
    "$PYTHON" -m pytest -q -m gpu -rs "${workers[@]}" tests --junitxml "$RESULTS/gpu-tests.xml"
}

stage_test_all() {
    if "$PYTHON" -c "import xdist" 2>/dev/null; then
        "$PYTHON" -m pytest -q -n 8 tests
    else
        "$PYTHON" -m pytest -q tests
    fi
}

stage_sanitize() {
    # The caching allocator pools memory, which hides out-of-bounds accesses: allocate plainly.
    local status=0 tool
    for tool in memcheck racecheck; do
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$tool" --error-exitcode 1 \
            "$PYTHON" benchmarks/sanitize_kernels.py >"$RESULTS/sanitize-$tool.log" 2>&1
        status=$((status | $?))
        tail -n 5 "$RESULTS/sanitize-$tool.log"
    done
    return "$status"
}

stage_checks() {
    stage_test >"$RESULTS/test.log" 2>&1 &
    local test_pid=$!
    stage_sanitize >"$RESULTS/sanitize.log" 2>&1
    local status=$?
    wait "$test_pid" || status=1
    tail -n 3 "$RESULTS/test.log" "$RESULTS/sanitize.log"
    return "$status"
}

stage_bench() {
    "$PYTHON" benchmarks/bench_ops.py --table6 --out "$RESULTS/table6_cuda.json" &&
        "$PYTHON" benchmarks/bench_ops.py --lengths 256 1024 4096 16384 --backends cuda --out "$RESULTS/ops_cuda.json" &&
        "$PYTHON" benchmarks/bench_ops.py --lengths 256 1024 4096 16384 --backends cuda --dtype bfloat16 \
            --cases talk_bidirectional talk_causal dynamic_conv_k3 dynamic_conv_k31 light_conv_k31 sdpa_flash_bf16 \
            --out "$RESULTS/ops_cuda_bf16.json"
}

stage_variants() {
    local candidates
    candidates=$("$PYTHON" -c "from talk_hf.ops import _extension; print(' '.join(_extension.load('cuda').cuda_variant_names()))") ||
        return 1
    if [ -z "$candidates" ]; then
        echo "no candidate CUDA kernels in this build"
        return 0
    fi
    # shellcheck disable=SC2086  # one argument per candidate
    "$PYTHON" benchmarks/bench_ops.py --batch 10 --channels 1024 --heads 16 --lengths 10 100 1000 10000 --backends cuda \
        --cases talk_bidirectional talk_causal --variants $candidates --skip-peak --out "$RESULTS/variants_table6_cuda.json" &&
        "$PYTHON" benchmarks/bench_ops.py --lengths 256 1024 4096 16384 --backends cuda --dtype bfloat16 \
            --cases talk_bidirectional talk_causal --variants $candidates --skip-peak --out "$RESULTS/variants_ops_cuda_bf16.json"
}

stage_profile() {
    # Nsight Compute over one forward and backward of each op at the Table 6 shape, on the kernels
    # the ops run (profile_kernels.py; each launch is named on its stdout)
    local ncu=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -n 1)}
    local status=0 dtype report
    for dtype in float32 bfloat16; do
        report="$RESULTS/ncu-table6$([ "$dtype" = float32 ] || echo "-bf16").txt"
        "${ncu:?no ncu found: set NCU}" --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \
            --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis -k 'regex:talk|conv' \
            "$PYTHON" benchmarks/profile_kernels.py --dtype "$dtype" >"$report" 2>&1
        status=$((status | $?))
        grep -E '^profiled|^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Block Limit Shared Mem|Registers Per' \
            "$report" | head -n 500
    done
    return "$status"
}

stage_generate() {
    "$PYTHON" benchmarks/bench_generate.py --device cuda --out "$RESULTS/bench_generate_cuda.json"
}

stage_decode() {
    "$PYTHON" benchmarks/bench_serving.py --device cuda --no-translation --lm-d-model 768 --lm-layers 12 \
        --vocab 50257 --lm-positions 16 2048 --out "$RESULTS/serving_lm_cuda.json"
}

stage_trainspeed() {
    "$PYTHON" benchmarks/bench_train.py --device cuda --mixed-precision bf16 --blocks 1024 4096 16384 \
        --d-model 768 --layers 12 --heads 12 --ffn 3072 --vocab 50257 \
        --models TaLKForCausalLM DynamicConvForCausalLM "GPT2 (baseline)" --out "$RESULTS/train_cuda_lm_bf16.json"
}

stage_longsource() {
    "$PYTHON" benchmarks/bench_train.py --long-source --device cuda --mixed-precision bf16 \
        --out "$RESULTS/train_long_source_cuda.json"
}

translate() {  # model_type
    "$PYTHON" examples/translation/train.py --data_dir "$DATA/multi30k" --source_lang en --target_lang de \
        --model_type "$1" --preset "${TRAIN_PRESET:-iwslt14-de-en}" --output_dir "$RESULTS/train/multi30k-en-de-$1" --overwrite_output_dir \
        --test_split test_2016_flickr --mixed_precision bf16 --max_tokens "${TRAIN_MAX_TOKENS:-8192}" \
        --epochs "${TRAIN_EPOCHS:-1000}" --max_train_minutes "${TRAIN_MINUTES:-5}" --eval_every_minutes 1 --valid_num_beams 1 --num_beams 5 \
        --warmup_steps 500 --save_every 100000 --eval_batch_size 256 >"$RESULTS/train/multi30k-en-de-$1.log" 2>&1
}

stage_train() {
    mkdir -p "$RESULTS/train"
    local pids=() status=0 model_type
    for model_type in talk dynamic_conv transformer; do
        translate "$model_type" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || status=1
    done
    tail -n 3 "$RESULTS"/train/*.log
    "$PYTHON" examples/results/plot.py "$RESULTS/train" "$RESULTS" || status=1
    return "$status"
}

pack_into() {  # archive
    # Everything but model weights and training state (a device call returns at most 8 files of
    # 16 MiB: pack, then leave RESULTS itself behind); written beside and renamed, so never torn
    (cd "$RESULTS" && find . -type f \( -name '*.log' -o -name '*.json' -o -name '*.jsonl' -o -name '*.md' \
        -o -name '*.png' -o -name '*.txt' -o -name '*.xml' \) -not -path '*/best/*' -not -path '*/last/*' \
        -not -path '*/state/*' | tar czf "$1.partial" -T -) && mv "$1.partial" "$1"
}

stage_pack() {
    pack_into "$RESULTS.tgz" && ls -l "$RESULTS.tgz"
}

# Each stage runs in a child bash (so that `timeout` can stop it with all it started), which needs
# the functions and settings exported.
export RESULTS PYTHON DATA
export -f $(declare -F | awk '$3 ~ /^stage_|^pack_into$|^translate$/ {print $3}')
for stage in "${STAGES[@]}"; do
    function="stage_${stage//-/_}"
    if ! declare -F "$function" >/dev/null; then
        echo "gpu_suite: unknown stage $stage" >&2
        failed+=("$stage")
        continue
    fi
    if [ -n "${build_failed:-}" ] && [[ " test test-all sanitize checks bench variants profile generate decode trainspeed longsource train " == *" $stage "* ]]; then
        echo "=== $stage skipped: the build failed"
        failed+=("$stage")
        continue
    fi
    limit=()
    if [ -n "${DEADLINE:-}" ]; then
        left=$((DEADLINE - SECONDS - ${DEADLINE_RESERVE:-15}))
        if [ "$left" -lt "${DEADLINE_MIN_STAGE:-10}" ]; then
            echo "=== $stage skipped: ${left} s left before DEADLINE=$DEADLINE"
            failed+=("$stage")
            continue
        fi
        limit=(timeout --kill-after=5 "$left")
    fi
    echo "=== $stage ($(date -u +%H:%M:%S))"
    start=$SECONDS
    "${limit[@]}" bash -c "set -o pipefail; $function" 2>&1 | tee "$RESULTS/$stage.log"
    status=${PIPESTATUS[0]}
    if [ "$status" -eq 0 ]; then
        echo "=== $stage passed in $((SECONDS - start)) s"
    elif [ ${#limit[@]} -gt 0 ] && { [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; }; then
        echo "=== $stage STOPPED at DEADLINE=$DEADLINE s after $((SECONDS - start)) s"
        failed+=("$stage")
    else
        echo "=== $stage FAILED in $((SECONDS - start)) s"
        failed+=("$stage")
    fi
    [ "$stage" = build ] && [ "$status" -ne 0 ] && build_failed=1
    [ -n "${PACK:-}" ] && pack_into "$PACK"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_suite: failed stages: ${failed[*]}"
    exit 1
fi
echo "gpu_suite: all stages passed"
