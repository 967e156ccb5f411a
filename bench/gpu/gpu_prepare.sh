#!/usr/bin/env bash
# Prepare, on the development machine, what bench/gpu/gpu_checks.sh needs on a lent GPU machine that reaches no
# registry and gets only the checkout (tests/gpu/README.md):
#
#     bench/gpu/gpu_prepare.sh        # wheels in .whl, Vulkan/EGL loaders in .gl, shared models in .gpu/models
#     bench/gpu/gpu_prepare.sh aside  # also move the tracked folders the GPU checks do not read out of the tree
#     bench/gpu/gpu_prepare.sh back   # put them back (do it after the device calls, before committing)
#     bench/gpu/gpu_prepare.sh iree   # the IREE measurement instead (issue 28): IREE's runtime wheel in .whl, the
#                                     # zoo's IREE programs compiled here for the GPU into .gpu/iree_cache, and
#                                     # everything the zoo does not read set aside (then "back" as above)
#
# Then call the device tool with carry [".whl", ".gl", ".gpu"]. What travels is limited to 64 MiB; the script
# prints its size.
set -eu
cd "$(git rev-parse --show-toplevel)"
ASIDE=${GPU_ASIDE:-/tmp/litegpu-gpu-aside}
NOT_READ_BY_GPU_CHECKS="tests/heldout/litert_torch tests/heldout/mediapipe"
# the IREE zoo run reads the shared models only: the held-out models go aside too
[ "${1:-}" = iree ] && NOT_READ_BY_GPU_CHECKS="$NOT_READ_BY_GPU_CHECKS tests/heldout/models"
# The GPU the IREE programs are compiled for, as Vulkan names it, and the models compiled (IREE_MODELS: stems of
# the shared models; the transformer encoder, 14 MB, does not fit beside the wheels within 64 MiB)
IREE_GPU=${IREE_GPU:-NVIDIA H100 80GB HBM3}
IREE_MODELS=${IREE_MODELS:-mediapipe_face_detection_short_range mediapipe_hand_landmark_lite mediapipe_selfie_segmentation microwakeword_okay_nabu mobilenet_v3_small_float32 mobilenet_v3_small_int8 two_signatures_float32}
SHARED=${LITEGPU_SHARED_MODELS:-../shared/models}

if [ "${1:-}" = back ]; then
    for d in $NOT_READ_BY_GPU_CHECKS tests/heldout/models; do
        [ -d "$ASIDE/$d" ] && mkdir -p "$(dirname "$d")" && mv "$ASIDE/$d" "$d" && echo "restored $d"
    done
    git status --short | head
    exit 0
fi

exclude=$(git rev-parse --git-path info/exclude)  # (.git is a file in a worktree)
mkdir -p "$(dirname "$exclude")"
for p in /.whl/ /.gl/ /.gpu/; do
    grep -qxF "$p" "$exclude" 2>/dev/null || echo "$p" >>"$exclude"
done
if ! ls .whl/ai_edge_litert-*.whl >/dev/null 2>&1; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
        "ai-edge-litert==${LITERT_VERSION:-2.3.0}" backports.strenum
fi
if ! ls .gl/*.deb >/dev/null 2>&1; then  # the device README's recipe: loaders for the official GPU accelerator
    mkdir -p .gl /tmp/amd64/partial
    o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64"
    apt-get $o update >/dev/null
    (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 2>/dev/null)
fi
if [ ! -d .gpu/models ]; then
    mkdir -p .gpu && cp -r "$SHARED" .gpu/models && chmod -R u+w .gpu
    rm -f .gpu/models/*.intermediates.npz  # the CPU tests' layer dumps: not read on the GPU
fi
if [ "${1:-}" = iree ]; then
    if ! ls .whl/iree_base_runtime-*.whl >/dev/null 2>&1; then  # the runtime only: the compiler stays here
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 -d .whl "iree-base-runtime==$(python3 -c \
            'from importlib.metadata import version; print(version("iree-base-runtime"))')"
    fi
    # keep the models the IREE run measures (the tests' reference outputs are not read by the zoo)
    for f in .gpu/models/*; do
        stem=$(basename "$f"); stem=${stem%%.*}
        case " $IREE_MODELS " in *" $stem "*) [[ $f == *.tflite ]] || rm -f "$f" ;; *) rm -f "$f" ;; esac
    done
    PYTHONPATH=src python3 bench/gpu/iree_precompile.py --cache .gpu/iree_cache --gpu "$IREE_GPU" .gpu/models/*.tflite
fi
if [ "${1:-}" = aside ] || [ "${1:-}" = iree ]; then
    for d in $NOT_READ_BY_GPU_CHECKS; do
        [ -d "$d" ] && mkdir -p "$ASIDE/$(dirname "$d")" && mv "$d" "$ASIDE/$d" && echo "moved $d to $ASIDE"
    done
fi
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
untracked=$(git ls-files -z --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
carried=$(du -cb .whl .gl .gpu | tail -1 | cut -f1)
total=$(( tracked + ${untracked:-0} + carried ))
echo "travels: $(( total >> 20 )) MiB (tracked $(( tracked >> 20 )), untracked $(( ${untracked:-0} >> 20 )), carried $(( carried >> 20 ))) of 64 MiB"
[ "$total" -le $(( 64 << 20 )) ] || echo "over the limit: run 'bench/gpu/gpu_prepare.sh aside' (and 'back' afterwards)"
