#!/usr/bin/env bash
# The GPU checks of tests/gpu/README.md as one script, for a lent GPU machine that reaches no registry.
#
#     bench/gpu/gpu_checks.sh env tests   # first device call  (about 5 minutes on an H200)
#     bench/gpu/gpu_checks.sh zoo bench   # second call, on the still-warm machine (about 6 minutes)
#     bench/gpu/gpu_checks.sh env iree    # issue 28: the zoo through IREE on Vulkan beside XLA on CUDA and the
#                                         # official GPU accelerator, same run (after bench/gpu/gpu_prepare.sh iree)
#     bench/gpu/gpu_checks.sh llm         # issue 25: ~3 GB decoders, this checkout's code and .old's (see step_llm)
#     bench/gpu/gpu_checks.sh batch       # issue 25: batched() at 1, 8, 64 beside XNNPACK and the official GPU
#     DECODE_FORMATS=int4 bench/gpu/gpu_checks.sh decode   # issue 37, one call per format (float16, int8, int4;
#                                         # each under 10 minutes): ~3 GB decoders at positions 128 / 2048 of a 4096
#                                         # cache, with cache buckets on and off, with loops in command buffers and
#                                         # without (LITEGPU_GPU_LOOP_BUFFERS=0), first token cold / warm, a trace;
#                                         # then continuous batching's tokens/s at 1, 8, 32, 64 sequences
#
# Run from the repository root.  A device call lasts at most 10 minutes and a session has 15 minutes of device
# time, machine start included, so the steps come in two calls made back to back (the machine stays warm for
# 30 s after a call): on 2026-11-25 (H200) the tests took about 300 s, the zoo of shared models 170 s, the
# benchmarks without the int4 decoder 150 s (int4: 50 s to write the file, then over a minute to compile).  What it expects beside the checkout (each optional; what is missing is
# skipped and said so):
#   .whl/*.whl   wheels the machine lacks (ai-edge-litert and backports.strenum: the official interpreter is the
#                tests' reference and the official GPU accelerator the zoo's comparison), installed to /tmp/site;
#   .gl/*.deb    the Vulkan / EGL loaders the official GPU accelerator (WebGPU over Vulkan) needs;
#   .gpu/models  the shared models (LITEGPU_SHARED_MODELS), .gpu/zoo a few zoo models (LITEGPU_ZOO_DIR);
#   .gpu/iree_cache  IREE programs compiled ahead for this GPU (bench/gpu/iree_precompile.py): the machine gets IREE's
#                runtime wheel only, so a program missing there runs on the CPU (with a warning) instead.
# Every step runs under its own time limit (seconds, STEP_LIMIT_<step> overrides) so that one runaway step
# cannot eat the others' time, and writes its log to $OUT/<step>.log; bench and zoo also leave their JSON there.
set -u
OUT=${OUT:-/tmp/gpu_checks}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
export LITEGPU_SHARED_MODELS=${LITEGPU_SHARED_MODELS:-$PWD/.gpu/models}
export LITEGPU_ZOO_DIR=${LITEGPU_ZOO_DIR:-$PWD/.gpu/zoo}
export LITEGPU_IREE_CACHE=${LITEGPU_IREE_CACHE:-$PWD/.gpu/iree_cache}
export PY=${PY:-python3} OUT
# GPU_CHECKS_ACCELERATOR=cpu rehearses the script where there is no GPU (the CPU stands in for it; small decoders)
export ACCELERATOR=${GPU_CHECKS_ACCELERATOR:-gpu} LITEGPU_TEST_ACCELERATOR=${GPU_CHECKS_ACCELERATOR:-gpu}
JSON=$(mktemp -d)  # the bench JSON files, packed into one archive at the end (few files come back from $OUT)
export JSON

setup() {
    if ls .whl/*.whl >/dev/null 2>&1; then
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl || echo "wheel install failed"
        export PYTHONPATH=/tmp/site
    fi
    export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
    if ls .gl/*.deb >/dev/null 2>&1; then
        for f in .gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
        export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
        export __EGL_VENDOR_LIBRARY_FILENAMES=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json}
    fi
}

step_env() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    $PY - <<'EOF'
import importlib, platform
print("python", platform.python_version())
for name in ("jax", "jaxlib", "numpy", "torch", "cupy", "ai_edge_litert", "openvino", "flatbuffers", "ml_dtypes"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "?"))
    except Exception as e:
        print(name, "MISSING", type(e).__name__, e)
import jax
print("jax devices", jax.devices())
import litegpu
from litegpu.backends.xla.backend import available_platforms
print("litegpu", litegpu.__file__, "platforms", available_platforms())
EOF
    # the command-line tools on the GPU: what doctor sees, and bench on one model (start-up, latency, memory)
    $PY -m litegpu.cli.main doctor
    local model=$LITEGPU_SHARED_MODELS/mediapipe_hand_landmark_lite.tflite
    [ -f "$model" ] && $PY -m litegpu.cli.main bench "$model" --accelerator "${ACCELERATOR/cpu/gpu,cpu}" --runs 20
}

step_tests() {
    local per_test="" workers=""  # one hung test must not take the step's whole time
    $PY -c "import pytest_timeout" 2>/dev/null && per_test="--timeout ${TEST_TIMEOUT:-120}"
    # TEST_WORKERS=4: pytest-xdist processes (compiling is most of the time; each process then takes GPU
    # memory as it needs it instead of JAX's 75 % up front). Ran with the CPU standing in, not yet on a GPU.
    if [ "${TEST_WORKERS:-1}" -gt 1 ] && $PY -c "import xdist" 2>/dev/null; then
        workers="-n $TEST_WORKERS"
        export XLA_PYTHON_CLIENT_PREALLOCATE=false
    fi
    $PY -m pytest -q -rxXsf -p no:cacheprovider --durations 15 $per_test $workers tests/gpu
}

step_bench() {
    local b="$PY bench/gpu/bench_gpu.py" a="--accelerator $ACCELERATOR" small=""
    [ "$ACCELERATOR" = cpu ] && small="--width 256 --vocab 1000 --max-len 64 --prefill-len 8 --steps 8 --bandwidth-gb 0.02"
    $b bandwidth $a ${small:+--bandwidth-gb 0.02} --json "$JSON/bandwidth.json"
    $b run-async $a ${small:+--size 256} --json "$JSON/run_async.json"
    $b boundaries $a --json "$JSON/boundaries.json"
    for w in ${DECODE_WEIGHTS:-float16 float32 int8 int4}; do
        $b decode $a --gigabytes "${DECODE_GB:-1}" --weights "$w" --repeats 2 $small --json "$JSON/decode_$w.json"
        if [ "$w" = float16 ]; then  # A/B: one launch per token (generate's loop before 2026-11-26)
            $b decode $a --gigabytes "${DECODE_GB:-1}" --weights float16 --chunk 0 --repeats 2 $small \
                --json "$JSON/decode_float16_token_by_token.json"
        fi
    done
}

step_llm() {
    # Issue 25: decode of ~3 GB decoders (width 4096: float16 7 layers, int8 15, int4 30) with litegpu as it is
    # (weights as stored, a chunk of tokens per launch) and, on the same files, the litegpu of OLD_SRC (a copy of
    # src/ from before the change: `git archive <commit> src | tar -x -C .old`), new first.  The JSON goes straight
    # to $OUT, so that what finished comes back even if the device time runs out during a later model.
    local b="bench/gpu/bench_gpu.py decode --accelerator $ACCELERATOR --repeats 3 --width ${DECODE_WIDTH:-4096}"
    local keep=/tmp/litegpu-llm small=""
    [ "$ACCELERATOR" = cpu ] && small="--vocab 1000 --max-len 64 --prefill-len 8 --steps 17 --bandwidth-gb 0.02"
    mkdir -p $keep
    for w in ${LLM_WEIGHTS:-float16 int8 int4}; do
        # a fresh compile cache: the first token cold (this process) and warm (a second one reading the cache)
        rm -rf "$keep/cache_$w"
        PYTHONPATH=$PWD/src:$PYTHONPATH timeout "${LLM_NEW_LIMIT:-130}" $PY $b --gigabytes "${LLM_GB:-3}" \
            --weights "$w" --keep $keep $small --cache-dir "$keep/cache_$w" --json "$OUT/llm_new_$w.json"
    done
    if [ -d "${OLD_SRC:-.old/src}" ]; then
        for w in ${LLM_OLD_WEIGHTS:-float16 int8}; do
            PYTHONPATH=$PWD/${OLD_SRC:-.old/src}:$PYTHONPATH timeout "${LLM_STEP_LIMIT:-100}" $PY $b \
                --gigabytes "${LLM_GB:-3}" --weights "$w" --keep $keep $small --json "$OUT/llm_old_$w.json"
        done
    fi
    rm -rf $keep
}

step_decode() {
    # Issue 37: decode of ~3 GB decoders (width 4096, a 4096-row KV cache: float16, int8, int4) at positions 128
    # and 2048, as litegpu runs it (the attention over a bucket of the cache, backends.xla.kv_rows; the loops of a
    # chunk and of the layer scan inside command buffers, backends.xla.backend.gpu_compiler_options; the next
    # bucket compiled ahead, backends.xla.ahead): the first token cold (fresh compile cache) and warm (a second
    # process), a jax.profiler trace of a few chunks; then, old and new side by side, with LITEGPU_KV_BUCKETS=0
    # (the whole cache at every step) and with LITEGPU_GPU_LOOP_BUFFERS=0 (XLA's default command buffers: the
    # loops driven from the host, one launch a layer).  Then continuous batching (the batched step), total
    # tokens/s at 1, 8, 32, 64 sequences on a ~1B decoder of that format.  The JSON and traces are packed into
    # $OUT/decode.tgz after each run, so that what finished comes back.
    local b="bench/gpu/bench_gpu.py decode --accelerator $ACCELERATOR --repeats 3 --width ${DECODE_WIDTH:-4096}"
    local keep=/tmp/litegpu-decode small="" positions="${DECODE_POSITIONS:-128 2048}" buckets=${LITEGPU_KV_BUCKETS:-}
    local results=/tmp/litegpu-decode-results traces=/tmp/litegpu-decode-traces
    local batched="--layers 16 --width 2048 --heads 16 --vocab 32000 --max-len 4096 --prompt 128 --new 64"
    local sequences="1 8 32 64"
    # the rehearsal's 96-row cache is below the 256-row smallest bucket: buckets of 16 rows and up there
    [ "$ACCELERATOR" = cpu ] && small="--vocab 1000 --max-len 96 --prefill-len 8 --steps 40 --bandwidth-gb 0.02" \
        && positions="8 48" && buckets=${buckets:-16} \
        && batched="--layers 2 --width 256 --heads 4 --vocab 1000 --max-len 96 --prompt 8 --new 16" \
        && sequences="1 8"
    export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the warm-start child shares the GPU with its parent
    mkdir -p $keep $results $traces
    pack() {
        tar czf "$OUT/decode.tgz" -C $results .
        tar czf "$OUT/decode_traces.tgz" -C $traces .  # apart: a trace past 16 MiB would not come back
    }
    run() {  # run NAME BUCKETS LOOP_BUFFERS [bench_gpu.py options...]: one measurement, its JSON $results/NAME.json
        local name=$1 rows=$2 loops=$3; shift 3
        LITEGPU_KV_BUCKETS=$rows LITEGPU_GPU_LOOP_BUFFERS=$loops timeout "${DECODE_LIMIT:-130}" $PY $b \
            --gigabytes "${DECODE_GB:-3}" --max-len 4096 --prefill-len 128 --steps 257 --keep $keep \
            --positions $positions $small --json "$results/$name.json" "$@"
        pack
    }
    for w in ${DECODE_FORMATS:-float16 int8 int4}; do
        rm -rf "$keep/cache_$w"
        run "decode_$w" "$buckets" "" --weights "$w" --cache-dir "$keep/cache_$w" --trace "$traces/trace_$w"
        run "decode_${w}_no_buckets" 0 "" --weights "$w"
        run "decode_${w}_no_loop_buffers" "$buckets" 0 --weights "$w"
        rm -f $keep/decoder_${w}_*.tflite
        LITEGPU_KV_BUCKETS=$buckets timeout "${BATCHED_LIMIT:-130}" $PY bench/serving/bench_continuous.py \
            --accelerator "$ACCELERATOR" --weights "$w" $batched --sequences $sequences --rounds 1 \
            --json "$results/batched_$w.json"
        pack
    done
}

step_batch() {
    # Issue 25, item 5: model.batched() at batch 1, 8 and 64 beside XNNPACK and the official GPU accelerator
    local models=("$LITEGPU_SHARED_MODELS"/*.tflite)
    ls "$LITEGPU_ZOO_DIR"/*.tflite >/dev/null 2>&1 && models+=("$LITEGPU_ZOO_DIR"/*.tflite)
    $PY bench/serving/bench_batching.py --accelerator "$ACCELERATOR" --batches 1 8 64 --seconds "${BATCH_SECONDS:-1}" \
        --rounds 2 --json "$OUT/batching.json" "${models[@]}"
}

step_zoo() {
    $PY bench/cpu/zoo.py run --seconds "${ZOO_SECONDS:-1}" --max-runs 30 --results "$OUT/zoo.json"
}

step_iree() {
    [ -f "$LITEGPU_IREE_CACHE/vulkan_target.txt" ] && \
        export LITEGPU_IREE_VULKAN_TARGET="$(cat "$LITEGPU_IREE_CACHE/vulkan_target.txt")"
    # what IREE sees (its Vulkan device through NVIDIA's ICD, the target the programs were compiled for), then the
    # zoo: official CPU, litegpu CPU, XLA on CUDA fp32 / fp16, IREE on Vulkan fp32 / fp16, the official GPU
    $PY - <<'EOF'
from litegpu.backends.iree import engine as iree
from litegpu.backends.iree.vulkan import vulkan_devices, vulkan_problem
print("vulkan:", [d.describe() for d in vulkan_devices()] or vulkan_problem())
found = iree.iree_devices()
print("iree:", iree.missing_package() or (found and iree.compile_target(found[0]).description[:80]) or "no device")
EOF
    ls "$LITEGPU_IREE_CACHE" >/dev/null 2>&1 || echo "no $LITEGPU_IREE_CACHE: IREE programs cannot be compiled here"
    $PY bench/cpu/zoo.py run --iree --seconds "${ZOO_SECONDS:-1}" --max-runs 30 --results "$OUT/zoo_iree.json"
}

declare -A LIMIT=([decode]=560 [env]=90 [tests]=400 [zoo]=220 [bench]=330 [llm]=590 [iree]=420 [batch]=300)
setup
for step in "${@:-env tests zoo bench}"; do
    for s in $step; do
        limit_var="STEP_LIMIT_$s"
        limit=${!limit_var:-${LIMIT[$s]:-120}}
        echo "== $s (limit ${limit} s) $(date +%T)"
        timeout -k 5 "$limit" bash -c "$(declare -f step_$s); step_$s" >"$OUT/$s.log" 2>&1
        echo "== $s exit $? $(date +%T)"
        tail -n "${TAIL_LINES:-30}" "$OUT/$s.log"
    done
done
ls "$JSON"/*.json >/dev/null 2>&1 && tar czf "$OUT/bench_json.tgz" -C "$JSON" .
