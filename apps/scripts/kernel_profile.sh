#!/usr/bin/env bash
# apps/scripts/kernel_profile.sh: per-kernel GPU time of N training steps of a tandem trainer and of
# the PyTorch peer (apps/scripts/pytorch_peer.py) with the same model, batch and precision, aggregated
# per kernel and per category, side by side in one markdown table (kernel_profile.py).
#
#   bash apps/scripts/kernel_profile.sh --app encoder --model bert_large --batch 64 [--seq 128] [--amp bf16]
#   bash apps/scripts/kernel_profile.sh --app imagenet --model resnet50 --batch 256 --amp bf16
#
# Each program runs under Nsight Compute with one metric, the kernel's duration:
#   ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw --log-file K.csv CMD
# --clock-control none leaves the GPU's clocks as the program would find them (ncu otherwise locks
# them to base, which slows every kernel alike); one metric needs one pass, so no kernel is
# replayed. ncu serialises the launches, so the sum is GPU busy time, not wall time: what overlaps
# in a normal run (NCCL beside backward) is added here.
# What is profiled: the whole process running --steps N steps (default 2) with no validation and
# no warm-up excluded, so one-time kernels (weight init, the first use of a cast) are in the totals,
# spread over the N steps; they are small next to N training steps of the models this is for.
# tandem and the peer are profiled one after the other, same GPU, same settings.
#
# How to read the table (profile.md): one row per category (kernel_profile.py's header lists the
# rules), with each side's ms per step, its share of that side's step and its launches per step;
# then each side's top kernels. A category far larger on one side is where the time goes: e.g.
# transpose/copy 20 % of tandem's step against none of PyTorch's, or launches per step in the
# thousands where the other side fuses. GPU time only: host overhead (a launch-bound small batch)
# does not show here - compare the tokens/s of gpu_session.sh for that.
#
# Options:
#   --app encoder|imagenet   which trainer (default encoder)
#   --model M --batch B      (defaults bert_large 64 / resnet50 256)
#   --seq S                  encoder sequence length (default 128)
#   --image-size P           imagenet image size (default 224)
#   --amp bf16|fp16|off      precision of both sides (default bf16; the peer takes bf16 or off)
#   --steps N                training steps per program (default 2)
#   --peer eager|compile|none  the PyTorch side (default eager; compile = torch.compile, default mode)
#   --build-dir DIR          tandem's build (default build-gpu)
#   --out DIR                results: tandem.csv, pytorch.csv, profile.md, profile.json, logs
#                            (default runs/kernel_profile-<app>-<model>-b<batch>)
#   --ncu PATH               Nsight Compute's CLI (default: ncu on PATH, else next to nvcc)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/apps/scripts
app=encoder model="" batch="" seq=128 image=224 amp=bf16 steps=2 peer=eager build_dir=$root/build-gpu out="" ncu=""
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --app) app=$2; shift ;;
    --model) model=$2; shift ;;
    --batch) batch=$2; shift ;;
    --seq) seq=$2; shift ;;
    --image-size) image=$2; shift ;;
    --amp) amp=$2; shift ;;
    --steps) steps=$2; shift ;;
    --peer) peer=$2; shift ;;
    --build-dir) build_dir=$2; shift ;;
    --out) out=$2; shift ;;
    --ncu) ncu=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "kernel_profile: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $app in
  encoder) model=${model:-bert_large} batch=${batch:-64} ;;
  imagenet) model=${model:-resnet50} batch=${batch:-256} ;;
  *) echo "kernel_profile: --app $app: use encoder or imagenet" >&2; exit 2 ;;
esac
case $peer in eager|compile|none) ;; *) echo "kernel_profile: --peer $peer: use eager, compile or none" >&2; exit 2 ;; esac
case $amp in bf16|fp16|off) ;; *) echo "kernel_profile: --amp $amp: use bf16, fp16 or off" >&2; exit 2 ;; esac
[ "$steps" -ge 1 ] 2>/dev/null || { echo "kernel_profile: --steps must be a positive number" >&2; exit 2; }
if [ -z "$ncu" ]; then
  ncu=$(command -v ncu || true)
  nvcc_dir=$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")
  for c in "$nvcc_dir/ncu" /usr/local/cuda/bin/ncu; do [ -z "$ncu" ] && [ -x "$c" ] && ncu=$c; done
fi
[ -n "$ncu" ] || { echo "kernel_profile: ncu (Nsight Compute's CLI) not found: install the CUDA toolkit's nsight-compute or pass --ncu" >&2; exit 1; }
case $build_dir in /*) ;; *) build_dir=$root/$build_dir ;; esac
out=${out:-$root/runs/kernel_profile-$app-$model-b$batch}
mkdir -p "$out"
ncu_args=(--clock-control none --metrics gpu__time_duration.sum --csv --page raw --target-processes all)

# The same work on both sides (pytorch_peer.py's header lists what is matched).
if [ "$app" = encoder ]; then
  tandem_cmd=("$build_dir/apps/train_encoder" --synthetic --model "$model" --batch "$batch" --seq-len "$seq"
              --amp "$amp" --steps "$steps" --bench-warmup 0 --val-batches 0 --log-every "$steps")
  peer_cmd=(python3 "$here/pytorch_peer.py" --encoder "$model" --batch "$batch" --seq "$seq")
else
  # VGG and AlexNet train at torchvision's lr 0.01 (0.1 diverges; gpu_session.sh says why).
  lr=(); case $model in vgg*|alexnet) lr=(--lr 0.01) ;; esac
  tandem_cmd=("$build_dir/apps/train_imagenet" --synthetic --synthetic-val-size 0 --model "$model" --batch "$batch"
              --image-size "$image" --amp "$amp" --steps "$steps" --bench-warmup 0 --log-every "$steps" "${lr[@]}")
  peer_cmd=(python3 "$here/pytorch_peer.py" --model "$model" --batch "$batch" --image-size "$image" "${lr[@]}")
fi
peer_amp=$amp
[ "$amp" = fp16 ] && { echo "kernel_profile: the peer has no fp16 mode; it runs bf16" >&2; peer_amp=bf16; }
peer_cmd+=(--amp "$peer_amp" --steps "$steps" --warmup 0)
[ "$peer" = compile ] && peer_cmd+=(--compile)

[ -x "${tandem_cmd[0]}" ] || { echo "kernel_profile: ${tandem_cmd[0]} is not built (--build-dir)" >&2; exit 1; }
sides=()
echo "== tandem: ${tandem_cmd[*]}"
"$ncu" "${ncu_args[@]}" --log-file "$out/tandem.csv" "${tandem_cmd[@]}" > "$out/tandem.log" 2>&1
rc=$?
tail -n 3 "$out/tandem.log"
[ $rc = 0 ] && sides+=(--side "tandem=$out/tandem.csv") || echo "kernel_profile: tandem's run failed (rc $rc): $out/tandem.log" >&2
if [ "$peer" != none ]; then
  name=pytorch; [ "$peer" = compile ] && name=pytorch-compile
  echo "== $name: ${peer_cmd[*]}"
  "$ncu" "${ncu_args[@]}" --log-file "$out/$name.csv" "${peer_cmd[@]}" > "$out/$name.log" 2>&1
  prc=$?
  tail -n 3 "$out/$name.log"
  [ $prc = 0 ] && sides+=(--side "$name=$out/$name.csv") || echo "kernel_profile: the peer's run failed (rc $prc): $out/$name.log" >&2
fi
[ ${#sides[@]} -gt 0 ] || exit 1
{
  echo "# Kernel profile: $app $model batch $batch$([ "$app" = encoder ] && echo " seq $seq"), --amp $amp, $steps steps per side"
  echo
  echo "ncu ${ncu_args[*]}; whole process, GPU time per step (kernel_profile.sh's header says how to read it)."
  echo
  python3 "$here/kernel_profile.py" "${sides[@]}" --steps "$steps" --json "$out/profile.json"
} > "$out/profile.md"
prc2=$?
cat "$out/profile.md"
[ $prc2 = 0 ] && [ $rc = 0 ] && [ "${prc:-0}" = 0 ]
