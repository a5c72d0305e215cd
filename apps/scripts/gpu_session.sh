#!/usr/bin/env bash
# apps/scripts/gpu_session.sh: build, test, measure and collect on a GPU node, in as few calls as possible.
#
#   source .devkit/env.sh && bash apps/scripts/gpu_session.sh [options] [phase ...]
#
# Phases, in this order (default: all of them but sanitize):
#   build  configure + build build-gpu (Release, sm_90 from TANDEM_CMAKE_ARGS, ninja, -j16; never apt)
#   info   nvidia-smi, driver, nvcc, cuDNN / NCCL versions (headers, PyTorch, what tandem links)
#   test   ctest -L gpu (the parity tests), then every other ctest entry (CPU and multi-rank)
#   dist   mpi_gpu_* tests (GPU tensors) with 1 rank over NCCL and 2 ranks sharing the GPU with
#          TANDEM_HOST_STAGING=1; train_imagenet on 2 host-staged ranks (GPU tensors through MPI)
#   bench  bench_ops (tandem vs cuBLASLt/cuDNN), bench_allreduce (1 rank NCCL; 2 ranks host-staged)
#   train  per config and precision (--train-amp: f32 with TF32, and bf16 autocast): train_imagenet
#          --synthetic, then the PyTorch peer (pytorch_peer.py) with the same model, batch, precision
#          and steps, eager and torch.compile'd (--peer-modes) - tandem_<tag>, torch_<tag>[_compile]
#          with tag <model>_b<batch>_<tf32|bf16>; VGG and AlexNet at lr 0.01 on both sides
#          (torchvision's recipe for them; 0.1 diverged at step 8). Then train_imagenet with and
#          without --cuda-graph, in each precision, for the first resnet50 and resnet18 configs
#          (cudagraph_<tag>_on/_off). Default configs take ~15 min: split them over calls.
#   encoder  per encoder config model:batch:seq: train_encoder --synthetic --amp bf16, then the PyTorch
#          peer (pytorch_peer.py --encoder: plain torch.nn BERT, SDPA, bf16 autocast, fused AdamW)
#          eager and compiled, with the same model, batch, sequence length and steps
#          (enc_tandem_<tag>, enc_torch_<tag>[_compile], tag <model>_b<batch>_s<seq>); then the kernel
#          profile (kernel_profile.sh: ncu, per kernel and category, tandem vs PyTorch eager) of
#          --profile-config (bert_large:64:128), into kernel_profile_<tag>/ and the summary.
#          Default configs take ~15 min: split them over calls (--encoder-configs).
#   sanitize  compute-sanitizer --tool memcheck on one resnet18 training step (tiny synthetic setup,
#          cuDNN BN and tandem's BN kernels) and on each GPU parity test binary (tests/gpu_*). A run
#          fails on any memory error and on any CUDA API error of tandem's own; API errors whose host
#          backtrace runs through NCCL's initialisation (ncclCommInitRank probing for kernel images
#          this GPU lacks: cudaErrorNoKernelImageForDevice) are counted but ignored
#          (sanitize_filter.py). One line per run goes to sanitize_summary.txt.
#          Not in `all` (slow: run it as its own call). Memcheck slows kernels 10-100x, so the sizes
#          are small and each run has its own time limit.
# --first-look: the first minutes on a fresh GPU (fits 10 minutes on an H100, build included), in place
#          of the phases: build only what it runs; serialise the GPU's cuDNN device properties
#          (tests/cudnn_device_properties.cpp; an H100's is also copied to
#          tests/data/cudnn/h100_device_properties.json for tests/cpu_cudnn_graphs.cpp, to commit) and
#          run that CPU graph check; then the GPU tests that never ran on a GPU (conv fusion,
#          attention, BN, matmul/BGRADB, gradient accumulation, optimizers), each with its own time
#          limit, three at once; then BERT-large b128 s128 and ResNet-50 b256, bf16, each beside the
#          PyTorch peer (eager and torch.compile). summary.md's "Fused paths and fallbacks" table gives
#          every run's fused-path and fallback counts. Results in apps/results/<date>-<gpu>/ (or $OUT).
# Every step runs under `timeout`, logs to its own file and is recorded in steps.tsv; a failing step
# never ends the session. After every step summary.md (session_summary.py) and results.tar.gz are
# rewritten, so a call killed by the device tool's time limit still returns what it had.
#
# Where things go: the results folder is $OUT when set (the device tool returns at most 8 files from
# it, so it gets only summary.md, summary.json and results.tar.gz; the raw logs and JSON live in
# <build>/session-raw, which survives between calls on a warm machine and so accumulates over calls),
# otherwise apps/results/<date>-<gpu>/ with the raw files in its raw/ folder.
#
# --cpu-smoke runs the same pipeline on a CPU-only machine (CPU build in build-cpu, only the needed
# targets, tiny settings); GPU-only steps report "skipped", and so do the PyTorch peer's steps when
# torch is not installed (with the reason), so the script is known to work end to end before the
# GPU minutes are spent.
set -uo pipefail  # no -e: one failing step must not end the session

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/apps/scripts
smoke=0 first_look=0 build_dir="" results="" deadline="" fresh=0 steps=60 configs="" jobs=16 san_only=. enc_configs=""
train_amps=off,bf16 peer_modes=eager,compile profile_config=bert_large:64:128
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; cat <<'EOF'
Options:
  --cpu-smoke        CPU-only rehearsal with tiny settings (see above)
  --first-look       the 10-minute first look on a fresh GPU (see above); with --cpu-smoke, its rehearsal
  --build-dir DIR    default build-gpu (build-cpu with --cpu-smoke)
  --results DIR      default $OUT, else apps/results/<date>-<gpu>
  --deadline S       start no step after S seconds, keeping time to pack (default 560 when $OUT is
                     set: the device tool stops a command at 600 s; 0: no deadline)
  --steps N          training steps per run, warm-up included (default 60; 10 are warm-up)
  --configs LIST     model:batch list (default resnet50:256,resnet18:256,vgg16:128,alexnet:512)
  --train-amp LIST   train phase precisions: off (f32 + TF32) and/or bf16 (default off,bf16)
  --peer-modes LIST  the PyTorch peer's modes: eager and/or compile (default eager,compile)
  --encoder-configs LIST  encoder phase's model:batch:seq list (default bert_large:32:128,
                     bert_large:128:128,bert_large:32:512, the same for bert_base; --cpu-smoke:
                     bert_tiny:4:32)
  --profile-config M:B:S  the encoder phase's kernel profile (default bert_large:64:128; none: skip)
  --jobs N           build parallelism (default 16)
  --fresh            forget earlier calls' raw results
  --sanitize REGEX   sanitize phase: only the runs whose step name matches (default: all), e.g.
                     'train' or 'gpu_ops' to split the phase over calls of 10 minutes
EOF
}
phases=()
while [ $# -gt 0 ]; do
  case $1 in
    --cpu-smoke) smoke=1 ;;
    --first-look) first_look=1 ;;
    --build-dir) build_dir=$2; shift ;;
    --results) results=$2; shift ;;
    --deadline) deadline=$2; shift ;;
    --steps) steps=$2; shift ;;
    --configs) configs=$2; shift ;;
    --encoder-configs) enc_configs=$2; shift ;;
    --train-amp) train_amps=$2; shift ;;
    --peer-modes) peer_modes=$2; shift ;;
    --profile-config) profile_config=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --fresh) fresh=1 ;;
    --sanitize) san_only=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    build|info|test|dist|bench|train|encoder|sanitize|all) phases+=("$1") ;;
    *) echo "gpu_session: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$first_look" = 1 ] && [ ${#phases[@]} -gt 0 ] && { echo "gpu_session: --first-look runs its own steps; drop the phase names" >&2; exit 2; }
[ ${#phases[@]} -eq 0 ] && phases=(all)
[ "$first_look" = 1 ] && phases=(first-look)
# `all` is every phase but sanitize (minutes of memcheck; asked for by name).
want() {
  local p
  for p in "${phases[@]}"; do { [ "$p" = all ] && [ "$1" != sanitize ]; } || [ "$p" = "$1" ] && return 0; done
  return 1
}

cd "$root" || exit 1
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork}  # local ranks by fork: hydra must not look for ssh
export CCACHE_BASEDIR=$root
t_start=$(date +%s)
if [ "$smoke" = 1 ]; then
  build_dir=${build_dir:-$root/build-cpu}
  configs=${configs:-resnet_tiny:8}
  steps=6 image=32 jobs=2
  enc_configs=${enc_configs:-bert_tiny:4:32}
  gpu_name=cpu
else
  build_dir=${build_dir:-$root/build-gpu}
  configs=${configs:-resnet50:256,resnet18:256,vgg16:128,alexnet:512}
  image=224
  # Batch 32 (launch-bound) and 128 (the GPU full) at BERT's phase-1 length 128, and 32 at phase 2's 512.
  enc_configs=${enc_configs:-bert_large:32:128,bert_large:128:128,bert_large:32:512,bert_base:32:128,bert_base:128:128,bert_base:32:512}
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  gpu_name=${gpu_name:-nogpu}
  [ -n "${TANDEM_CMAKE_ARGS:-}" ] || echo "gpu_session: TANDEM_CMAKE_ARGS is empty: was 'source .devkit/env.sh' run?" >&2
fi
case $build_dir in /*) ;; *) build_dir=$root/$build_dir ;; esac
if [ -z "$results" ] && [ -n "${OUT:-}" ]; then
  results=$OUT raw=$build_dir/session-raw
  deadline=${deadline:-560}
elif [ "$first_look" = 1 ] && [ "$smoke" = 0 ]; then
  deadline=${deadline:-570}  # ten minutes, less the time to pack
else
  results=${results:-$root/apps/results/$(date +%Y%m%d)-${gpu_name// /-}}
  raw=$results/raw
fi
deadline=${deadline:-0}
[ "$fresh" = 1 ] && rm -rf "$raw"
mkdir -p "$raw" "$results"
bin=$build_dir  # executables: $bin/apps/<name>, $bin/tests/<name>
warm=$(( steps / 4 < 10 ? steps / 4 : 10 ))  # train_imagenet's --bench-warmup default, given to both sides

# Rewrites summary.md / summary.json and the tarball: run after every step (cheap).
pack() {
  python3 "$here/session_summary.py" "$raw" --json "$results/summary.json" > "$results/summary.md" 2> "$raw/summary.err"
  cp "$results/summary.md" "$raw/summary.md"
  tar czf "$results/results.tar.gz.tmp" -C "$(dirname "$raw")" "$(basename "$raw")" && mv "$results/results.tar.gz.tmp" "$results/results.tar.gz"
}

# run_step NAME LIMIT_S CMD...: runs CMD under timeout, logs to $raw/NAME.log, appends
# "name status rc seconds" to steps.tsv. Status: ok, fail, timeout, skipped (rc 77 or no time left).
run_step() {
  local name=$1 limit=$2; shift 2
  local log=$raw/$name.log t0 rc status
  if [ "$deadline" -gt 0 ]; then
    local left=$(( t_start + deadline - $(date +%s) ))
    if [ "$left" -lt 20 ]; then
      printf '%s\tskipped\t-\t0\tno time left before the deadline\n' "$name" >> "$raw/steps.tsv"
      echo "== $name: skipped (deadline)"; return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
  fi
  echo "== $name (limit ${limit}s)"
  { echo "\$ $*"; echo "# $(date -Is) limit ${limit}s"; } > "$log"
  t0=$(date +%s)
  timeout -k 10 "$limit" "$@" >> "$log" 2>&1
  rc=$?
  case $rc in 0) status=ok ;; 77) status=skipped ;; 124|137) status=timeout ;; *) status=fail ;; esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$(( $(date +%s) - t0 ))" "$*" >> "$raw/steps.tsv"
  echo "   $name: $status (rc $rc, $(( $(date +%s) - t0 )) s); last lines:"; tail -n 3 "$log" | sed 's/^/   | /'
  [ "${no_pack:-0}" = 1 ] || pack  # parallel steps pack once, after the batch
  return 0
}
# gpu_tests N LIMIT_S TEST...: GPU test binaries (names under $bin/tests), each its own step with its
# own time limit (a hung test costs its limit, not the session), at most N at once. One GPU: the
# tests' tensors are small (MBs to a few GiB), so a few fit side by side.
gpu_tests() {
  local n=$1 limit=$2 t running=0; shift 2
  for t in "$@"; do
    need "$bin/tests/$t" "$t" || continue
    no_pack=1 run_step "$t" "$limit" "$bin/tests/$t" &
    running=$(( running + 1 ))
    if [ "$running" -ge "$n" ]; then wait -n; running=$(( running - 1 )); fi
  done
  wait
  pack
}
# The GPU tests that had never run on a GPU when written (issue 27), most important first.
never_ran_tests=(gpu_conv_fusion gpu_attention_parity gpu_bn_cudnn gpu_matmul_conv_parity gpu_grad_accumulate
                 gpu_optim_parity)
# A step that needs something absent (no GPU, no binary) is recorded as skipped with the reason.
skip_step() { printf '%s\tskipped\t-\t0\t%s\n' "$1" "$2" >> "$raw/steps.tsv"; echo "== $1: skipped ($2)"; }
have_gpu() { [ "$smoke" = 0 ] && nvidia-smi -L >/dev/null 2>&1; }
# The PyTorch peer needs torch; a machine without it (the CPU rehearsal, usually) skips its steps.
have_torch() { python3 -c 'import torch' >/dev/null 2>&1; }
# peer_step NAME LIMIT ARGS...: pytorch_peer.py as a step, or skipped with the reason.
peer_step() {
  local name=$1 limit=$2; shift 2
  if ! have_torch; then skip_step "$name" "torch is not installed for $(command -v python3): the PyTorch peer cannot run here"; return 0; fi
  run_step "$name" "$limit" python3 "$here/pytorch_peer.py" "$@"
}
# Torchvision's learning rate per model: 0.1 for ResNets, 0.01 for VGG and AlexNet (0.1 diverges).
lr_for() { case $1 in vgg*|alexnet) echo 0.01 ;; *) echo 0.1 ;; esac; }
need() { [ -x "$1" ] || { skip_step "$2" "$1 was not built"; return 1; }; }

# The versions that matter for reading the numbers later; each probe may fail on its own.
info_probe() {
  echo "## date"; date -Is; hostname
  echo "## nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit,compute_cap \
    --format=csv 2>&1; nvidia-smi 2>&1 | head -20
  echo "## nvcc"; nvcc --version 2>&1 | tail -2
  echo "## cuDNN / NCCL headers (CUDNN_ROOT=${CUDNN_ROOT:-} NCCL_ROOT=${NCCL_ROOT:-})"
  for h in "${CUDNN_ROOT:-/nonexistent}/include/cudnn_version.h" /usr/include/cudnn_version.h \
           /usr/local/cuda/include/cudnn_version.h /usr/include/x86_64-linux-gnu/cudnn_version.h; do
    [ -f "$h" ] && echo "$h: $(grep -E '^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' "$h" | awk '{print $3}' | paste -sd.)"
  done
  for h in "${NCCL_ROOT:-/nonexistent}/include/nccl.h" /usr/include/nccl.h /usr/local/cuda/include/nccl.h; do
    [ -f "$h" ] && echo "$h: $(grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$h" | awk '{print $3}' | paste -sd.)"
  done
  echo "## PyTorch"; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None,
"gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)' 2>&1
  python3 -c 'import torchvision; print("torchvision", torchvision.__version__)' 2>&1 | tail -1
  echo "## libraries train_imagenet loads"; ldd "$bin/apps/train_imagenet" 2>&1 | grep -E 'cudnn|nccl|cublas|cudart|mpi|openblas'
  echo "## cmake cache"; grep -E '^(CMAKE_CUDA_ARCHITECTURES|CMAKE_BUILD_TYPE|TANDEM_CUDA|CUDNN_|NCCL_)' "$build_dir/CMakeCache.txt" 2>&1
}
export -f info_probe
export bin build_dir

if want build; then
  if [ "$smoke" = 1 ]; then
    # shellcheck disable=SC2086
    run_step configure 300 cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=OFF
    # Only what the smoke steps below run: a full CPU build takes long on a small machine.
    run_step build 1800 cmake --build "$build_dir" -j "$jobs" --target train_imagenet bench_ops bench_allreduce \
      mpi_gpu_collectives mpi_gpu_ddp mpi_collectives test_core test_autograd gpu_elementwise_parity \
      train_encoder -- -k 0
  else
    # -DTANDEM_CUDA=ON: configure fails, naming what is missing, instead of quietly building a CPU-only
    # tandem whose "GPU" figures would be CPU figures.
    # CUDAToolkit_ROOT: env.sh puts links to Python's nvidia/* libraries on CMAKE_LIBRARY_PATH so that
    # cuDNN and NCCL are found, but that path also outranks the toolkit for cudart/cuBLAS(Lt), which
    # may then come from PyTorch's wheels (another CUDA major than nvcc's). A package root is searched
    # before CMAKE_LIBRARY_PATH, so naming nvcc's toolkit keeps its own libraries (checked on Debian
    # with pip's cu13 wheels: cudart/cublasLt from /usr/local/cuda, cuDNN/NCCL from the wheels).
    tk=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
    # shellcheck disable=SC2086
    run_step configure 300 cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCUDAToolkit_ROOT="$tk" ${TANDEM_CMAKE_ARGS:-}
    # -k 0: a target that fails to compile must not stop the others; the session uses what built.
    run_step build 3600 cmake --build "$build_dir" -j "$jobs" -- -k 0
  fi
fi

if want info; then
  run_step info 60 bash -c info_probe
fi

if want test; then
  ctest_args=(--test-dir "$build_dir" --output-on-failure --timeout 300)
  # The smoke run keeps to the targets it built; on the node everything is built and run.
  if [ "$smoke" = 1 ]; then
    run_step ctest_gpu 300 ctest "${ctest_args[@]}" -L gpu -R '^gpu_elementwise_parity$'
    run_step ctest_rest 300 ctest "${ctest_args[@]}" -LE gpu -R '^(core|autograd|mpi_collectives_np2)$'
  else
    # Each GPU test its own step and time limit, the never-run ones first (issue 27 item 7: one 300 s
    # limit over all of them let the first slow test starve the rest).
    others=()
    for t in "$bin"/tests/gpu_*; do
      [ -x "$t" ] || continue
      case " ${never_ran_tests[*]} " in *" $(basename "$t") "*) ;; *) others+=("$(basename "$t")") ;; esac
    done
    gpu_tests 3 240 "${never_ran_tests[@]}" "${others[@]}"
    run_step ctest_rest 540 ctest "${ctest_args[@]}" -LE gpu -j 8
  fi
fi

if want dist; then
  # tests/mpi_gpu_*.cpp run collectives and the DDP equivalence test on GPU tensors: with 1 rank over
  # NCCL, and with 2 ranks sharing the one GPU through host-staged MPI (the issue's two GPU checks).
  # ctest -L gpu runs them too; here they get their own logs. The smoke run has no GPU: they skip (77).
  for t in mpi_gpu_collectives mpi_gpu_ddp; do
    need "$bin/tests/$t" "${t}_np1" && run_step "${t}_np1" 180 mpiexec -n 1 "$bin/tests/$t"
    need "$bin/tests/$t" "${t}_np2_staged" && \
      run_step "${t}_np2_staged" 240 mpiexec -n 2 -env TANDEM_HOST_STAGING 1 -env OMP_NUM_THREADS 1 "$bin/tests/$t"
  done
  m=resnet18 b=32
  [ "$smoke" = 1 ] && m=resnet_tiny b=4
  need "$bin/apps/train_imagenet" train_np2_staged && \
    run_step train_np2_staged 240 mpiexec -n 2 -env TANDEM_HOST_STAGING 1 -env OMP_NUM_THREADS 1 \
      "$bin/apps/train_imagenet" --synthetic --synthetic-val-size 0 --model "$m" --batch "$b" --steps 20 \
      --image-size $(( smoke ? 32 : 112 )) --log-every 10 --metrics "$raw/train_np2_staged.json"
fi

if want bench; then
  if need "$bin/apps/bench_ops" bench_ops; then
    if [ "$smoke" = 1 ]; then
      run_step bench_ops 300 "$bin/apps/bench_ops" --cpu-reps 1 --reps 2 --warmup 1 --json "$raw/bench_ops.json"
    else
      run_step bench_ops 300 "$bin/apps/bench_ops" --json "$raw/bench_ops.json"
    fi
  fi
  if need "$bin/apps/bench_allreduce" bench_allreduce_np1; then
    if have_gpu; then
      run_step bench_allreduce_np1 120 mpiexec -n 1 "$bin/apps/bench_allreduce" --backend nccl --max-bytes 256M \
        --json "$raw/bench_allreduce_np1.json"
    else
      skip_step bench_allreduce_np1 "no GPU: the 1-rank sweep is the NCCL one"
    fi
    run_step bench_allreduce_np2_staged 180 mpiexec -n 2 -env TANDEM_HOST_STAGING 1 "$bin/apps/bench_allreduce" \
      --max-bytes "$([ "$smoke" = 1 ] && echo 64K || echo 64M)" --reps "$([ "$smoke" = 1 ] && echo 3 || echo 10)" \
      --json "$raw/bench_allreduce_np2_staged.json"
  fi
fi

if want train; then
  dev_args=() peer_dev=cuda
  [ "$smoke" = 1 ] && dev_args=(--device cpu) peer_dev=cpu
  IFS=, read -r -a cfgs <<< "$configs"
  IFS=, read -r -a amps <<< "$train_amps"
  IFS=, read -r -a modes <<< "$peer_modes"
  for c in "${cfgs[@]}"; do
    m=${c%%:*} b=${c##*:} lr=$(lr_for "${c%%:*}")
    for amp in "${amps[@]}"; do
      tag=${m}_b${b}_$([ "$amp" = off ] && echo tf32 || echo "$amp")
      # Tandem, then PyTorch, back to back: same GPU state, same settings (see pytorch_peer.py's header).
      need "$bin/apps/train_imagenet" "tandem_$tag" && \
        run_step "tandem_$tag" 240 mpiexec -n 1 "$bin/apps/train_imagenet" --synthetic --synthetic-val-size 0 \
          "${dev_args[@]}" --model "$m" --batch "$b" --steps "$steps" --bench-warmup "$warm" --image-size "$image" \
          --amp "$amp" --lr "$lr" --log-every 20 --metrics "$raw/tandem_$tag.json"
      for mode in "${modes[@]}"; do
        suffix=""; extra=()
        [ "$mode" = compile ] && suffix=_compile extra=(--compile)
        peer_step "torch_$tag$suffix" 300 --device "$peer_dev" --model "$m" --batch "$b" --amp "$amp" --lr "$lr" \
          --steps "$steps" --warmup "$warm" --image-size "$image" "${extra[@]}" --json "$raw/torch_$tag$suffix.json"
      done
    done
  done
  # --cuda-graph (apps/trainer/step/graph_capture.h): the same run with and without graphs, side by side, for
  # the first resnet50 and resnet18 configs, in each precision (bf16: the capturable update keeps the
  # loss scaler's flag on the device, apps/trainer/step/step.h). Both sides use --on-nonfinite off (the
  # graph requires it, and the eager default's per-step loss read would otherwise be counted against eager).
  for gm in resnet50 resnet18; do
    gc=""
    for c in "${cfgs[@]}"; do [ "${c%%:*}" = "$gm" ] && { gc=$c; break; }; done
    [ "$smoke" = 1 ] && [ -z "$gc" ] && gc=${cfgs[0]}
    [ -z "$gc" ] && continue
    m=${gc%%:*} b=${gc##*:}
    for amp in "${amps[@]}"; do
      tag=${m}_b${b}_$([ "$amp" = off ] && echo tf32 || echo "$amp")
      for mode in off on; do
        extra=(--on-nonfinite off)
        [ "$mode" = on ] && extra+=(--cuda-graph)
        if [ "$mode" = on ] && ! have_gpu; then skip_step "cudagraph_${tag}_on" "no GPU: --cuda-graph needs one"; continue; fi
        need "$bin/apps/train_imagenet" "cudagraph_${tag}_$mode" && \
          run_step "cudagraph_${tag}_$mode" 240 mpiexec -n 1 "$bin/apps/train_imagenet" --synthetic --synthetic-val-size 0 \
            "${dev_args[@]}" --model "$m" --batch "$b" --steps "$steps" --bench-warmup "$warm" --image-size "$image" \
            --amp "$amp" --log-every 20 "${extra[@]}" --metrics "$raw/cudagraph_${tag}_$mode.json"
      done
    done
    [ "$smoke" = 1 ] && break  # one config is enough to rehearse the pipeline
  done
  # --conv-bn-fusion (issue 18 item 3; off by default because no GPU has measured it): the first
  # resnet50 config in each precision with the switch on, beside tandem_<tag> (the same run, off).
  # The metrics JSON's conv_bn_fusion says how many graphs ran and how many fell back.
  for c in "${cfgs[@]}"; do
    [ "${c%%:*}" = resnet50 ] || continue
    m=${c%%:*} b=${c##*:}
    for amp in "${amps[@]}"; do
      tag=${m}_b${b}_$([ "$amp" = off ] && echo tf32 || echo "$amp")
      if ! have_gpu; then skip_step "convbn_${tag}_on" "no GPU: the conv-BN graphs are cuDNN's"; continue; fi
      need "$bin/apps/train_imagenet" "convbn_${tag}_on" && \
        run_step "convbn_${tag}_on" 240 mpiexec -n 1 "$bin/apps/train_imagenet" --synthetic --synthetic-val-size 0 \
          "${dev_args[@]}" --model "$m" --batch "$b" --steps "$steps" --bench-warmup "$warm" --image-size "$image" \
          --amp "$amp" --lr "$(lr_for "$m")" --log-every 20 --conv-bn-fusion on --metrics "$raw/convbn_${tag}_on.json"
    done
    break
  done
  # What cuDNN autotuning would add on top of heuristics (tandem does not autotune): one config, f32.
  m=${cfgs[0]%%:*} b=${cfgs[0]##*:}
  peer_step "torch_${m}_b${b}_tf32_cudnnbench" 240 --device "$peer_dev" --model "$m" --batch "$b" --lr "$(lr_for "$m")" \
    --steps "$steps" --warmup "$warm" --image-size "$image" --cudnn-benchmark --json "$raw/torch_${m}_b${b}_tf32_cudnnbench.json"
fi

if want encoder; then
  # Tandem, then PyTorch (eager, then compiled), back to back, as in the train phase (pytorch_peer.py's
  # header lists what is matched: tandem's synthetic batch and masking, bf16 autocast over f32
  # masters, AdamW, clip 1.0). enc_ prefixes keep these files out of the train phase's
  # tandem_*/torch_* globs (session_summary.py). --val-batches 2: the validation after the last step
  # is outside the timed window; keep it short.
  enc_dev=cuda
  [ "$smoke" = 1 ] && enc_dev=cpu
  IFS=, read -r -a ecfgs <<< "$enc_configs"
  IFS=, read -r -a modes <<< "$peer_modes"
  for c in "${ecfgs[@]}"; do
    IFS=: read -r m b sq <<< "$c"
    sq=${sq:-128}
    tag=${m}_b${b}_s${sq}
    need "$bin/apps/train_encoder" "enc_tandem_$tag" && \
      run_step "enc_tandem_$tag" 300 mpiexec -n 1 "$bin/apps/train_encoder" --synthetic --device "$enc_dev" \
        --model "$m" --batch "$b" --seq-len "$sq" --amp bf16 --steps "$steps" --bench-warmup "$warm" \
        --val-batches 2 --log-every 20 --metrics "$raw/enc_tandem_$tag.json"
    for mode in "${modes[@]}"; do
      suffix=""; extra=()
      [ "$mode" = compile ] && suffix=_compile extra=(--compile)
      peer_step "enc_torch_$tag$suffix" 300 --device "$enc_dev" --encoder "$m" --batch "$b" --seq "$sq" --amp bf16 \
        --steps "$steps" --warmup "$warm" "${extra[@]}" --json "$raw/enc_torch_$tag$suffix.json"
    done
  done
  # The per-kernel GPU time of one config, tandem against PyTorch eager (kernel_profile.sh).
  if [ "$profile_config" != none ]; then
    IFS=: read -r m b sq <<< "$profile_config"
    sq=${sq:-128}
    ptag=kernel_profile_${m}_b${b}_s${sq}
    if ! have_gpu; then
      skip_step "$ptag" "no GPU: Nsight Compute profiles GPU kernels"
    else
      run_step "$ptag" 540 bash "$here/kernel_profile.sh" --app encoder --model "$m" --batch "$b" --seq "$sq" \
        --amp bf16 --steps 2 --build-dir "$build_dir" --out "$raw/$ptag" $(have_torch || echo --peer none)
    fi
  fi
fi

if want sanitize; then
  # compute-sanitizer ships with the toolkit; on the node it may not be on PATH.
  san=$(command -v compute-sanitizer || true)
  for c in "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/compute-sanitizer" \
           /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$san" ] && [ -x "$c" ] && san=$c
  done
  # --error-exitcode: any memcheck error fails the step even when the program itself exits 0.
  # Leak checking stays off: the stream-ordered pool keeps memory by design (core/ storage).
  # --print-limit: NCCL's initialisation alone reports a few errors per communicator; every record
  # must be printed for sanitize_filter.py to judge it (an unprinted one counts as an error).
  san_args=(--tool memcheck --error-exitcode 99 --print-limit 10000 --target-processes all)
  # sanitized NAME [--mpi] PROGRAM ARGS...: PROGRAM under the sanitizer (--mpi: as one rank of
  # mpiexec, the sanitizer inside it), its report kept in $raw/NAME.san and judged by
  # sanitize_filter.py (memory errors and tandem's own API errors fail; NCCL init's are ignored).
  # The program's own failure (any other exit code) fails the step as it is.
  sanitized() {
    local name=$1 launch=(); shift
    [ "$1" = --mpi ] && { launch=(mpiexec -n 1); shift; }
    "${launch[@]}" "$san" "${san_args[@]}" "$@" 2>&1 | tee "$raw/$name.san"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ] || [ "$rc" = 99 ]; then
      python3 "$here/sanitize_filter.py" "$raw/$name.san" --summary "$raw/$name.verdict"
      return $?
    fi
    return "$rc"
  }
  export -f sanitized
  export san here raw
  export san_args_str="${san_args[*]}"  # arrays do not cross into bash -c: rebuilt there
  if ! have_gpu; then
    skip_step sanitize "no GPU (memcheck needs one)"
  elif [ -z "$san" ]; then
    # A GPU without the sanitizer is a broken toolkit, not a reason to skip: fail loudly.
    run_step sanitize_tool 10 bash -c 'echo "compute-sanitizer not found (PATH, next to nvcc, /usr/local/cuda): install the CUDA toolkit'"'"'s sanitizer" >&2; exit 1'
  else
    # One step of resnet18, batch 4 at 64 px (layer4 at 2x2: every kernel and cuDNN BN path runs,
    # at ~1 % of a 224 px batch's work), with each BN implementation.
    for impl in cudnn tandem; do
      [[ "sanitize_train_resnet18_$impl" =~ $san_only ]] || continue
      need "$bin/apps/train_imagenet" "sanitize_train_resnet18_$impl" && \
        run_step "sanitize_train_resnet18_$impl" 420 bash -c 'read -r -a san_args <<< "$san_args_str"; sanitized "$@"' _ \
          "sanitize_train_resnet18_$impl" --mpi "$bin/apps/train_imagenet" \
          --device cuda --synthetic --synthetic-size 64 --synthetic-val-size 0 --model resnet18 --batch 4 \
          --image-size 64 --steps 1 --log-every 1 --workers 1 --bn-impl "$impl"
    done
    # The GPU parity tests (tests/gpu_*): exit 77 would mean "no GPU", which is a failure here.
    # Left out under memcheck: gpu_vector_access_parity's case over 2^31 elements (~20 GiB of
    # tensors; the test phase runs it) - memcheck's 10-100x would take it past the step's limit, and
    # its kernels are the same ones the small cases run. The filter is doctest's; other binaries have
    # no such case and run whole.
    for t in "$bin"/tests/gpu_*; do
      [ -x "$t" ] || continue
      n=$(basename "$t")
      [[ "sanitize_$n" =~ $san_only ]] || continue
      run_step "sanitize_$n" 420 bash -c 'read -r -a san_args <<< "$san_args_str"; sanitized "$@"; rc=$?
        [ $rc = 77 ] && { echo "$2: exit 77 (no GPU) on a GPU node" >&2; exit 1; }; exit $rc' \
        _ "sanitize_$n" "$t" '--test-case-exclude=more than 2^31*'
    done
  fi
  # One line per run: the step's status and sanitize_filter.py's verdict (compute-sanitizer's
  # "ERROR SUMMARY: N errors", and how many were NCCL initialisation's, ignored), or the last
  # ERROR SUMMARY line when the filter never ran (a timeout, a missing tool).
  for f in "$raw"/sanitize_*.log; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .log)
    printf '%s: %s; %s\n' "$n" "$(awk -F'\t' -v n="$n" '$1 == n {s = $2 " (rc " $3 ")"} END {print s}' "$raw/steps.tsv")" \
      "$(cat "$raw/$n.verdict" 2>/dev/null || grep -h 'ERROR SUMMARY' "$f" | tail -1 | sed 's/^=* *//' | grep . || echo 'no ERROR SUMMARY line')"
  done > "$raw/sanitize_summary.txt"
  [ -s "$raw/sanitize_summary.txt" ] && cp "$raw/sanitize_summary.txt" "$results/sanitize_summary.txt"
fi

if want first-look; then
  fl_targets=(cudnn_device_properties cpu_cudnn_graphs train_imagenet train_encoder "${never_ran_tests[@]}")
  if [ "$smoke" = 1 ]; then
    run_step configure 300 cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=OFF
  else
    tk=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
    # shellcheck disable=SC2086
    run_step configure 120 cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCUDAToolkit_ROOT="$tk" ${TANDEM_CMAKE_ARGS:-}
  fi
  # Only what the first look runs; -k 0: what builds, runs.
  run_step build "$([ "$smoke" = 1 ] && echo 1800 || echo 300)" cmake --build "$build_dir" -j "$jobs" \
    --target "${fl_targets[@]}" -- -k 0
  # The GPU's cuDNN device properties first (seconds): with them tests/cpu_cudnn_graphs.cpp checks
  # every graph for this GPU on any machine. An H100's go to tests/data/cudnn/ as well, to commit.
  if ! have_gpu; then
    skip_step cudnn_device_properties "no GPU: the properties are read from the device"
  elif need "$bin/tests/cudnn_device_properties" cudnn_device_properties; then
    run_step cudnn_device_properties 30 "$bin/tests/cudnn_device_properties" "$raw/cudnn_device_properties.json"
    case $gpu_name in *H100*)
      [ -s "$raw/cudnn_device_properties.json" ] &&
        cp "$raw/cudnn_device_properties.json" "$root/tests/data/cudnn/h100_device_properties.json" ;;
    esac
  fi
  need "$bin/tests/cpu_cudnn_graphs" cudnn_graphs && \
    run_step cudnn_graphs 120 env TANDEM_SOURCE_DIR="$root" "$bin/tests/cpu_cudnn_graphs"
  gpu_tests 3 150 "${never_ran_tests[@]}"
  # The two targets' configs, each tandem then the PyTorch peer (eager, compiled), bf16.
  fl_steps=$([ "$smoke" = 1 ] && echo 6 || echo 40) fl_warm=$([ "$smoke" = 1 ] && echo 1 || echo 10)
  IFS=: read -r em eb es <<< "$([ "$smoke" = 1 ] && echo bert_tiny:4:32 || echo bert_large:128:128)"
  etag=${em}_b${eb}_s${es} dev=$([ "$smoke" = 1 ] && echo cpu || echo cuda)
  need "$bin/apps/train_encoder" "enc_tandem_$etag" && \
    run_step "enc_tandem_$etag" 150 mpiexec -n 1 "$bin/apps/train_encoder" --synthetic --device "$dev" --model "$em" \
      --batch "$eb" --seq-len "$es" --amp bf16 --steps "$fl_steps" --bench-warmup "$fl_warm" --val-batches 1 \
      --log-every 10 --metrics "$raw/enc_tandem_$etag.json"
  for mode in eager compile; do
    suffix=""; extra=()
    [ "$mode" = compile ] && suffix=_compile extra=(--compile)
    peer_step "enc_torch_$etag$suffix" 180 --device "$dev" --encoder "$em" --batch "$eb" --seq "$es" --amp bf16 \
      --steps "$fl_steps" --warmup "$fl_warm" "${extra[@]}" --json "$raw/enc_torch_$etag$suffix.json"
  done
  m=$([ "$smoke" = 1 ] && echo resnet_tiny || echo resnet50) b=$([ "$smoke" = 1 ] && echo 8 || echo 256)
  tag=${m}_b${b}_bf16
  need "$bin/apps/train_imagenet" "tandem_$tag" && \
    run_step "tandem_$tag" 150 mpiexec -n 1 "$bin/apps/train_imagenet" --synthetic --synthetic-val-size 0 \
      --device "$dev" --model "$m" --batch "$b" --steps "$fl_steps" --bench-warmup "$fl_warm" --image-size "$image" \
      --amp bf16 --lr 0.1 --log-every 10 --metrics "$raw/tandem_$tag.json"
  for mode in eager compile; do
    suffix=""; extra=()
    [ "$mode" = compile ] && suffix=_compile extra=(--compile)
    peer_step "torch_$tag$suffix" 180 --device "$dev" --model "$m" --batch "$b" --amp bf16 --lr 0.1 \
      --steps "$fl_steps" --warmup "$fl_warm" --image-size "$image" "${extra[@]}" --json "$raw/torch_$tag$suffix.json"
  done
fi

pack
echo
cat "$results/summary.md"
echo
echo "gpu_session: $(( $(date +%s) - t_start )) s; results in $results (raw: $raw)"
