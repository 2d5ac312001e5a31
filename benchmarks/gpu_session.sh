#!/usr/bin/env bash
# The GPU work that is still to be recorded (issues 32, 33, 29, 47), as named parts that one device call runs in
# order within its time limit. Run from the repository root on the GPU machine:
#
#   bash benchmarks/gpu_session.sh [--dry-run] PART [PART ...]
#
# Parts (the seconds are each part's own limit; a part gets less when the call's budget runs short):
#   gpu-tests       tests/gpu -m "not long": the gradient check of all six in bf16 and fp32, the planted
#                   faults, the other GPU tests at small scale (545 s)                      issue 32
#   maxpool         benchmarks/maxpool_diag.py: whether the removed pool's fault still reproduces (120 s)
#   gpu-tests-long  tests/gpu -m long: resnet50 full, the full-scale runner runs (580 s)     issue 32
#   stem            benchmarks/stem_precision.py: the ResNet stem's fp32 gradients (plain, fast eager, fast
#                   compiled) against float64, TF32 off and on (150 s)                        issue 47
#   throughput-W    benchmarks/throughput.py for one workload W (resnet50, ssd, maskrcnn, gnmt, transformer,
#                   ncf): the cold and warm `runner run` (time to the first step), then the runner's path,
#                   plain torch.compile and eager side by side (ssd, gnmt, transformer, ncf: the runner's
#                   path is the plain torch.compile, measured once as "compiled"). Each part's limit is
#                   planned from the times measured on an H100 (2026-12-06: build and first step per child,
#                   see THROUGHPUT_S below) with a margin, so that any one part fits a 10-minute call; the
#                   six together do not (about 25 minutes): give each call the parts that fit. issues 32, 33, 47
#   ttfs-W          `python -m runner run W --mode throughput --scale full` twice with one cache folder
#                   (emptied first): time to the first step cold, then warm, for one workload W (as
#                   throughput-W; limits in TTFS_S below); the summary line has both figures. The six
#                   together take about 11 minutes on an H100: two calls (e.g. ncf gnmt transformer ssd,
#                   then resnet50 maskrcnn)                                                     issues 33, 47
#                   GPULAB_TTFS_TRIES="NAME:VAR=VALUE[:VAR=VALUE...] ..." adds one warm run per try with
#                   that environment (e.g. "threads1:TORCHINDUCTOR_COMPILE_THREADS=1": Inductor's compile
#                   workers not started), its first step in the summary line as "NAME"
#   profile-W       benchmarks/profile_step.py W at full scale: where the runner's step spends its time
#                   (GEMM / convolution, elementwise and normalization, optimizer, memory, GPU idle), as
#                   profile-W.json and the table profile-W.md. It reuses ttfs-W's compiled kernels when
#                   ttfs-W ran first in the call (run ttfs-W, then profile-W)                   issue 47
#   speed-resnet50  issue 47's resnet50 candidates side by side in one process tree (benchmarks/tune.py, one
#                   child each, one compiled-kernel cache, the one of ttfs-resnet50/profile-resnet50): plain
#                   torch.compile first (it pays the cold compile), the runner's path (space-to-depth stem),
#                   each with CUDA graphs (mode=reduce-overhead), plain compile again (the drift between
#                   the first and the last; its first step is a warm one), plain compile without cuDNN's
#                   algorithm search (cudnn=off: what the search costs the first step and what it buys),
#                   then profile-resnet50 reuses the cache. Variants the part's time cannot hold are
#                   recorded as skipped (390 s; with profile-resnet50 and bn-resnet50 one 540 s call) issue 47
#   bn-resnet50     benchmarks/bn_kernels.py at batch 384: ResNet-50's 53 batch-norm + ReLU (+ add) passes,
#                   forward and backward, Inductor's kernels against ATen's (cuDNN's NHWC batch norm), in
#                   ms per training step: whether a cuDNN batch norm inside the compiled graph could carry
#                   the 1.3x at all (16 small compiles, 150 s)                               issue 47
#   ttfs-shipped    ttfs-resnet50's cold run (the pilot of a sweep), then a run whose cache folder holds only the
#                   pilot's artifacts file, as a second host gets it (runner README "Compiled kernels"):
#                   its time to the first step and its "compile caches" line (550 s)         issue 33
#   validate        `invoke validate --level standard --inventory inventory/local.yml` with its JSON and HTML (300 s)
#                                                                                             issue 29
#   nvbandwidth     builds nvbandwidth from the source carried in .src/nvbandwidth (cmake; Boost from .src/boost-debs where the machine has no Boost.Program_options CMake package) and runs
#                   it with -j; then `validate --level burn-in` finds it in GPULAB_TOOLS_DIR (400 s) issue 29
#   tune            `invoke tune ncf --scale small` on this machine's GPU (inventory/local.yml: localhost, no SSH;
#                   --gpus 1), 3 seeds a trial, the first trial the reference recipe (workloads.yml), the study
#                   in SQLite under $WORK/tune-results: one `invoke tune --trials k` per k = 1, 2, ... (each adds
#                   one trial and rewrites report.md, report.json and recipe.yml, copied to $WORK/<study>-report.md
#                   and -recipe.yml), while the part's time (400 s) holds another trial as long as the last one.
#                   GPULAB_TUNE_SCALE, _SEEDS, _TRIALS (the most trials, 10), _SECONDS shrink it; _GPUS= (empty)
#                   leaves out --gpus 1 (a tiny CPU try of the part where no GPU is); GPULAB_TUNE_WORKLOAD=gnmt
#                   GPULAB_TUNE_SCALE=tiny searches GNMT (13 epochs to its target on an H200 at tiny)  issue 41
#
# The call's budget is GPULAB_SESSION_SECONDS (default 570). What the parts write lands in one archive,
# $OUT/session.tar.gz, with $OUT/summary.txt beside it (the device returns at most 8 files). Wheels the GPU
# machine lacks travel in .whl/ (carry it): benchmarks/gpu_wheels.sh fetches them where PyPI answers.
# GPULAB_COMMIT names the checkout in machine.txt (the device's copy has no .git). --dry-run prints each
# part's commands and checks that the files and options they name exist, without running them (CI does).
set -u -o pipefail

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
[ $# -gt 0 ] || { echo "gpu_session: name the parts to run (see the head of $0)" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-/tmp/gpu-session-out}
WORK=${GPULAB_SESSION_WORK:-/tmp/gpu-session}
BUDGET=${GPULAB_SESSION_SECONDS:-570}
START=$(date +%s)
PY=${PYTHON:-python3}
SUMMARY="$OUT/summary.txt"
[ "$DRY" = 1 ] || mkdir -p "$OUT" "$WORK"

left() { echo $(( BUDGET - ($(date +%s) - START) - 15 )); }   # 15 s for the archive at the end
limit() { local want=$1 l; l=$(left); [ "$l" -lt "$want" ] && echo "$l" || echo "$want"; }

say() { if [ "$DRY" = 1 ]; then echo "$*"; else echo "$*" | tee -a "$SUMMARY"; fi; }

# run NAME SECONDS COMMAND...: COMMAND under timeout, output in $WORK/NAME.log, one summary line
run() {
    local name=$1 want=$2; shift 2
    if [ "$DRY" = 1 ]; then printf '%s (%ss):' "$name" "$want"; printf ' %q' "$@"; echo; return 0; fi
    local t; t=$(limit "$want")
    if [ "$t" -lt 30 ]; then say "$name: not run (budget spent: ${t}s left)"; return 0; fi
    local t0=$SECONDS rc=0
    RAN_S=0 RAN_RC=
    timeout --kill-after=10 "$t" "$@" > "$WORK/$name.log" 2>&1 || rc=$?
    RAN_S=$((SECONDS - t0)) RAN_RC=$rc
    say "$name: exit $rc in ${RAN_S}s (limit ${t}s); last line: $(tail -n 1 "$WORK/$name.log" | cut -c1-200)"
}

check_files() {   # --dry-run: every file a part names exists
    local f
    for f in "$@"; do [ -e "$ROOT/$f" ] || { echo "gpu_session: $f is missing" >&2; exit 2; }; done
}

# gpu_code_id: one id for the code a GPU record depends on, the same here and on the GPU machine (whose copy of
# the tree has no .git): sha256 over the paths and contents of GPU_CODE's files, documentation (*.md), the
# records (benchmarks/recorded) and Python's caches left out. GPU_CODE is what the gpu-tests, ttfs, throughput,
# profile, speed, bn, stem and maxpool parts run (the runner does not import lab/: tests/unit/test_layering.py);
# validate, nvbandwidth and tune also run lab/ and tasks.py, which the id leaves out so that work on the
# controller does not restart a set of records (their records name the commit). Records made at different
# commits of main with the same id ran the same code (issue 47 asks for its records "at one commit": one id);
# tests/unit/test_gpu_session.py checks that the id is the one of `git ls-files` on the same paths.
GPU_CODE="runner benchmarks tests/gpu tests/conftest.py tests/crashguard.py pyproject.toml"
gpu_code_id() {
    # shellcheck disable=SC2086  # GPU_CODE is a list of paths
    find $GPU_CODE -type f ! -path 'benchmarks/recorded/*' ! -path '*/__pycache__/*' ! -name '*.pyc' ! -name '*.md' \
        -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}

setup() {
    if [ "$DRY" = 1 ]; then echo "setup: wheels from .whl into /tmp/site; machine.txt; gpu code $(gpu_code_id)"; return 0; fi
    if ls .whl/*.whl > /dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl || { say "setup: the wheels in .whl did not install"; exit 1; }
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
        export PATH=/tmp/site/bin:$PATH
    fi
    export PYTHONUNBUFFERED=1 GPULAB_CACHE_DIR=${GPULAB_CACHE_DIR:-/tmp/gpucache}
    {
        echo "commit: ${GPULAB_COMMIT:-unknown (set GPULAB_COMMIT)}"
        echo "gpu code: $(gpu_code_id)"
        date -u +"date: %Y-%m-%dT%H:%M:%SZ"
        nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>&1
        "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version())' 2>&1
        echo "cores: $(nproc)"
    } > "$WORK/machine.txt"
    say "setup: $(head -n 4 "$WORK/machine.txt" | tr '\n' ' ')"
}

# THROUGHPUT_S: a throughput-W part's limit in seconds. Measured on one H100 (2026-12-06, s of build and first
# step of each child, cold cache): resnet50 compiled 70, baseline 16, and its two runner runs with the optimized
# child 158 s in all (first step 75.9 s cold, 31.4 s warm; benchmarks/recorded/h100-2026-12-06); ssd 18-66, 15;
# maskrcnn 20-59, eager ~30; gnmt 13-30, 7; transformer 18-56, 11; ncf 10-20, 6. A part runs two `runner run`s
# (cold, warm), then three children, each with 15 warm-up steps and 5 s measured; the limit is about 1.5 times
# that sum. Parts whose limits add up to the call's budget less 15 s fit one call.
throughput_s() {
    case $1 in resnet50) echo 420 ;; maskrcnn) echo 360 ;; ssd|transformer) echo 300 ;; gnmt) echo 240 ;;
               ncf) echo 200 ;; *) echo 0 ;; esac
}

# tune: one study, grown one trial per `invoke tune` call, so that the report and the recipe are written after
# every trial and a call cut short by the time limit costs only its own trial. A next call starts only while
# the part's time left holds 1.2 x the last call's time plus 20 s (the first: the reference recipe's runner
# install, health check and seeds).
tune_part() {
    local workload=${GPULAB_TUNE_WORKLOAD:-ncf} scale=${GPULAB_TUNE_SCALE:-small} seeds=${GPULAB_TUNE_SEEDS:-3}
    local most=${GPULAB_TUNE_TRIALS:-10} want=${GPULAB_TUNE_SECONDS:-400} results=$WORK/tune-results k end last=0 log=
    local name=tune-$workload-$scale-gpu gpus=${GPULAB_TUNE_GPUS-1}   # 1 GPU a run (empty: every count; a CPU host)
    tune_cmd() {
        printf '%s\n' env INVOKE_GPULAB_RESULTS="$results" "$PY" -m invoke tune "$workload" --host localhost \
            --scale "$scale" --seeds "$seeds" --trials "$1" --name "$name" --inventory inventory/local.yml \
            ${gpus:+--gpus} ${gpus:+"$gpus"}
    }
    if [ "$DRY" = 1 ]; then
        echo "tune: one call per --trials 1..$most while the part's time holds another trial; the last:"
        local -a argv; mapfile -t argv < <(tune_cmd "$most")
        run tune "$want" "${argv[@]}"; return 0
    fi
    end=$(( $(date +%s) + $(limit "$want") ))
    for k in $(seq 1 "$most"); do
        local left=$(( end - $(date +%s) ))
        if [ "$k" -gt 1 ] && [ "$left" -lt $(( last * 12 / 10 + 20 )) ]; then
            say "tune: stopped after $((k - 1)) trial(s): ${left}s left of the part, the last trial took ${last}s"; break
        fi
        local -a argv; mapfile -t argv < <(tune_cmd "$k")
        run "tune-$k" "$left" "${argv[@]}"
        last=$RAN_S log=$WORK/tune-$k.log
        [ "$RAN_RC" = 0 ] || { say "tune: --trials $k exited ${RAN_RC:-(not run)}: the study stops here"; break; }
    done
    if [ -f "$results/$name/report.md" ]; then
        cp "$results/$name/report.md" "$WORK/$name-report.md"
        cp "$results/$name/recipe.yml" "$WORK/$name-recipe.yml" 2> /dev/null
        say "tune: $(grep -h ': best trial ' "$log" 2> /dev/null | tail -n 1 | cut -c1-200)"
    else say "tune: no report was written (see $WORK/tune-*.log)"; fi
}

# TTFS_S: a ttfs-W part's limits in seconds, "cold warm": about twice the first steps measured (H100
# 2026-12-06: resnet50 75.9 s cold, 31.4 s warm; H200 2026-12-03: transformer 63.7 / 19.4 s, maskrcnn 88.9 s,
# gnmt 25.6 s, ncf 30.9 s cold) plus the run's start, short measurement and end.
ttfs_s() {
    case $1 in resnet50|maskrcnn) echo "240 150" ;; ssd|transformer) echo "200 120" ;; gnmt|ncf) echo "150 100" ;;
               *) echo "0 0" ;; esac
}
# PROFILE_S: a profile-W part's limit: the build (warm after ttfs-W, cold otherwise), 15 + 30 + 5 steps
profile_s() {
    case $1 in resnet50|maskrcnn) echo 240 ;; ssd|transformer) echo 180 ;; gnmt|ncf) echo 120 ;; *) echo 0 ;; esac
}

# first_steps W: the summary line of ttfs-W (the time to the first step of each run, from its status.json)
first_steps() {
    local w=$1 which t line="ttfs-$1: first step"
    for which in cold warm ${GPULAB_TTFS_TRIES:+$(for t in $GPULAB_TTFS_TRIES; do echo "${t%%:*}"; done)}; do
        t=$("$PY" -c 'import json, sys; r = json.load(open(sys.argv[1])).get("result") or {}
print("%.1f s" % r["time_to_first_step_s"])' "$WORK/ttfs-$w-$which/status.json" 2> /dev/null) || t="not recorded"
        line="$line $t $which,"
    done
    say "${line%,} (issue 47: at most 90 s cold, 15 s warm)"
}

part() {
    case $1 in
    gpu-tests)
        check_files tests/gpu
        run gpu-tests 545 env GPULAB_GRADCHECK_OUT="$WORK/gradcheck.json" GPULAB_GRADCHECK_DEADLINE=400 \
            GPULAB_GRADCHECK_JOBS=5 "$PY" -m pytest tests/gpu -m "not long" -n 4 --dist loadgroup -v -rA --durations=0 \
            --timeout 420 -p no:cacheprovider --junitxml "$WORK/junit.xml" ;;
    maxpool)
        check_files benchmarks/maxpool_diag.py
        run maxpool 120 "$PY" benchmarks/maxpool_diag.py ;;
    gpu-tests-long)
        check_files tests/gpu
        run gpu-tests-long 580 env GPULAB_GRADCHECK_OUT="$WORK/gradcheck-long.json" "$PY" -m pytest tests/gpu -m long -n 3 --dist loadgroup -v -rA --durations=0 \
            --timeout 560 -p no:cacheprovider --junitxml "$WORK/junit-long.xml" ;;
    stem)
        check_files benchmarks/stem_precision.py
        run stem 150 "$PY" benchmarks/stem_precision.py --json "$WORK/stem-precision.json" ;;
    throughput-*)
        check_files benchmarks/throughput.py
        local w=${1#throughput-} t
        t=$(throughput_s "$w")
        [ "$DRY" = 1 ] || t=$(limit "$t")   # the deadline inside follows the part's limit
        run "throughput-$w" "$t" "$PY" benchmarks/throughput.py --workloads "$w" --runner-runs "$w" \
            --measure-seconds 5 --deadline $((t - 20)) --workdir "$WORK/bench-$w" --out "$WORK/throughput-$w.json" ;;
    ttfs-resnet50|ttfs-ssd|ttfs-maskrcnn|ttfs-gnmt|ttfs-transformer|ttfs-ncf)
        check_files runner/__main__.py
        local w=${1#ttfs-} cache cold warm
        cache=$WORK/ttfs-cache-$w
        read -r cold warm <<< "$(ttfs_s "$w")"
        [ "$DRY" = 1 ] || rm -rf "$cache" "$WORK/ttfs-$w-cold" "$WORK/ttfs-$w-warm"   # cold means cold
        run "ttfs-$w-cold" "$cold" "$PY" -m runner run "$w" --mode throughput --scale full --gpus 1 --seed 1 \
            --cache-dir "$cache" --warmup-steps 3 --measure-seconds 2 --out "$WORK/ttfs-$w-cold"
        run "ttfs-$w-warm" "$warm" "$PY" -m runner run "$w" --mode throughput --scale full --gpus 1 --seed 2 \
            --cache-dir "$cache" --warmup-steps 3 --measure-seconds 2 --out "$WORK/ttfs-$w-warm"
        local try vars
        for try in ${GPULAB_TTFS_TRIES:-}; do   # one more warm run each, with the try's environment
            vars=${try#*:}
            # shellcheck disable=SC2086  # VAR=VALUE words, checked at the start
            run "ttfs-$w-${try%%:*}" "$warm" env ${vars//:/ } "$PY" -m runner run "$w" --mode throughput --scale full \
                --gpus 1 --seed 3 --cache-dir "$cache" --warmup-steps 3 --measure-seconds 2 --out "$WORK/ttfs-$w-${try%%:*}"
        done
        [ "$DRY" = 1 ] || first_steps "$w" ;;
    speed-resnet50)
        check_files benchmarks/tune.py
        local t=390 v
        [ "$DRY" = 1 ] || t=$(limit "$t")   # the deadline inside follows the part's limit
        local -a variants=()
        for v in "resnet50 compiled" "resnet50" "resnet50 compiled mode=reduce-overhead" \
                 "resnet50 mode=reduce-overhead" "resnet50 compiled" "resnet50 compiled cudnn=off"; do
            variants+=(--variant "$v")
        done
        run speed-resnet50 "$t" "$PY" benchmarks/tune.py --device cuda --scale full --measure-seconds 8 \
            --warmup-steps 10 --deadline $((t - 10)) --min-left 40 --cache "$WORK/ttfs-cache-resnet50" \
            --out "$WORK/speed-resnet50.json" "${variants[@]}"
        [ "$DRY" = 1 ] || grep -h '^\[tune\] resnet50' "$WORK/speed-resnet50.log" | cut -c1-200 \
            | while IFS= read -r v; do say "speed-resnet50: ${v#\[tune\] }"; done ;;
    bn-resnet50)
        check_files benchmarks/bn_kernels.py
        run bn-resnet50 150 env TORCHINDUCTOR_CACHE_DIR="$WORK/bn-cache/inductor" TRITON_CACHE_DIR="$WORK/bn-cache/triton" \
            "$PY" benchmarks/bn_kernels.py --batch 384 --repeat 20 --out "$WORK/bn-resnet50.json"
        [ "$DRY" = 1 ] || say "bn-resnet50: $(grep -h 'per training step' "$WORK/bn-resnet50.log" | cut -c1-200)" ;;
    profile-*)
        check_files benchmarks/profile_step.py
        local w=${1#profile-} cache
        cache=$WORK/ttfs-cache-$w   # ttfs-W's kernels when it ran first; else this part compiles into it
        run "profile-$w" "$(profile_s "$w")" env TORCHINDUCTOR_CACHE_DIR="$cache/inductor" \
            TRITON_CACHE_DIR="$cache/triton" TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1 \
            "$PY" benchmarks/profile_step.py "$w" --device cuda --scale full --warmup-steps 15 --steps 30 \
            --profile-steps 5 --top 25 --out "$WORK/profile-$w.json" --table "$WORK/profile-$w.md" ;;
    ttfs-shipped)
        check_files runner/__main__.py runner/compilecache.py
        local pilot=$WORK/shipped-pilot-cache second=$WORK/shipped-second-cache
        run shipped-pilot 300 "$PY" -m runner run resnet50 --mode throughput --scale full --gpus 1 --seed 1 \
            --cache-dir "$pilot" --measure-seconds 5 --out "$WORK/shipped-pilot"
        if [ "$DRY" = 0 ]; then   # the second host: an empty cache folder but for the pilot's artifacts
            mkdir -p "$second/artifacts"
            cp "$pilot"/artifacts/*.bin "$second/artifacts/" 2> /dev/null || say "shipped: the pilot left no artifacts"
        fi
        run shipped-second 250 "$PY" -m runner run resnet50 --mode throughput --scale full --gpus 1 --seed 2 \
            --cache-dir "$second" --measure-seconds 5 --out "$WORK/shipped-second"
        [ "$DRY" = 1 ] || say "shipped-second: $(grep -h 'compile caches' "$WORK/shipped-second/stdout.log" 2> /dev/null)" ;;
    validate)
        check_files inventory/local.yml tasks.py
        run validate 300 "$PY" -m invoke validate --level standard --inventory inventory/local.yml --json \
            --out "$WORK/validate" ;;
    nvbandwidth)
        local src=.src/nvbandwidth bin=$WORK/tools/bin
        if [ "$DRY" = 0 ] && [ ! -f "$src/CMakeLists.txt" ]; then
            say "nvbandwidth: not run: carry its release source in $src (benchmarks/gpu_wheels.sh --nvbandwidth)"; return 0
        fi
        # nvbandwidth links Boost.Program_options statically: the machine's where its CMake package is there, else
        # the carried debs. Boost's headers alone are not enough: the H100 of 2026-12-06 had Boost 1.83's headers and
        # BoostConfig.cmake but no boost_program_options package, and CMake 4 (no FindBoost) stopped there.
        local boost="" libs=""
        if [ "$DRY" = 0 ] && ! ls -d /usr/lib/*/cmake/boost_program_options-*/ > /dev/null 2>&1; then
            if ls .src/boost-debs/*.deb > /dev/null 2>&1; then
                for d in .src/boost-debs/*.deb; do dpkg -x "$d" "$WORK/boost"; done
                boost="-DBoost_DIR=$(echo "$WORK"/boost/usr/lib/x86_64-linux-gnu/cmake/Boost-*) -DBoost_NO_SYSTEM_PATHS=ON"
                libs=$WORK/boost/usr/lib/x86_64-linux-gnu
            else say "nvbandwidth: not run: no Boost.Program_options headers (carry the debs in .src/boost-debs)"
                 return 0; fi
        fi
        [ "$DRY" = 1 ] || mkdir -p "$bin"
        run nvbandwidth-build 240 bash -c "cmake -S $src -B $WORK/nvb-build -DCMAKE_BUILD_TYPE=Release $boost \
            && cmake --build $WORK/nvb-build -j 16 && cp $WORK/nvb-build/nvbandwidth $bin/"
        run nvbandwidth-run 120 env LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin/nvbandwidth" -j
        run validate-burnin 300 env GPULAB_TOOLS_DIR="$bin" LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PY" -m invoke validate --level burn-in \
            --inventory inventory/local.yml --json --out "$WORK/validate-burnin" ;;
    tune)
        check_files tasks.py inventory/local.yml lab/data/tune_space.yml lab/tune/search.py
        tune_part ;;
    *)
        echo "gpu_session: no part named $1 (see the head of $0)" >&2; exit 2 ;;
    esac
}

for t in ${GPULAB_TTFS_TRIES:-}; do   # NAME:VAR=VALUE[:VAR=VALUE...], checked before anything runs
    [[ $t =~ ^[a-z0-9]+(:[A-Z_][A-Z0-9_]*=[^:[:space:]]*)+$ ]] || {
        echo "gpu_session: GPULAB_TTFS_TRIES: $t is not NAME:VAR=VALUE[:VAR=VALUE...]" >&2; exit 2; }
done
for p in "$@"; do   # check every name before anything runs
    case $p in gpu-tests|maxpool|gpu-tests-long|stem|ttfs-shipped|validate|nvbandwidth|tune|speed-resnet50) ;;
    bn-resnet50) ;;
    throughput-resnet50|throughput-ssd|throughput-maskrcnn|throughput-gnmt|throughput-transformer|throughput-ncf) ;;
    ttfs-resnet50|ttfs-ssd|ttfs-maskrcnn|ttfs-gnmt|ttfs-transformer|ttfs-ncf) ;;
    profile-resnet50|profile-ssd|profile-maskrcnn|profile-gnmt|profile-transformer|profile-ncf) ;;
    *) echo "gpu_session: no part named $p (see the head of $0)" >&2; exit 2 ;; esac
done
[ "$DRY" = 1 ] || : > "$SUMMARY"
setup
for p in "$@"; do part "$p"; done
[ "$DRY" = 1 ] && exit 0
tar -C "$WORK" -czf "$OUT/session.tar.gz" --exclude='ttfs-cache*' --exclude=shipped-pilot-cache --exclude=shipped-second-cache --exclude=nvb-build --exclude=boost --exclude=gpucache --exclude='bench-*' --exclude=bn-cache . \
    && say "archive: $OUT/session.tar.gz ($(du -h "$OUT/session.tar.gz" | cut -f1))"
