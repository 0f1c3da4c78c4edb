#!/usr/bin/env bash
# The paper-scale path on a CUDA device, in one go: writes bench/results/gpu_check.md.
#
#   bash bench/gpu_check.sh                 # on a machine with a CUDA GPU
#   bash bench/gpu_check.sh --dry-run       # (or DRY=1) the same code on CPU at the demo's width
#   PEAK_TFLOPS=989 bash bench/gpu_check.sh # a device the built-in peak table does not know
#
# 1. The rehearsal of the paper config (grids/amazon2023.yaml, bf16 on CUDA): `mmgrid build amazon2023
#    --rehearse`, where this mmgrid has that flag (else the record says it is missing). Skipped in the dry run.
# 2. A semid training stage (bf16 autocast, AdamW) and a trie beam-search ranking pass (bf16 weights,
#    beam 20) at Qwen3-0.6B's shape (28 layers, hidden 1024, vocabulary 151,936, tied head; random
#    weights, nothing downloaded): tokens/s and MFU as nanoGPT defines it, achieved FLOP/s (6N per
#    training token, 2N per ranking token) over the device's peak dense bf16 FLOP/s.
# A failed rehearsal is recorded and makes the script exit 1 after the timings.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
DRY=${DRY:-0}
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$arg' (use --dry-run or --help)" >&2; exit 2 ;;
  esac
done
ARGS=(--gpu-check)
[ -n "${PEAK_TFLOPS:-}" ] && ARGS+=(--peak-tflops "$PEAK_TFLOPS")
status=0
has_rehearse() { "$PY" -m mmgrid build --help | grep -q -- --rehearse; }
if [ "$DRY" = 1 ]; then
  ARGS+=(--dry-run)
  if has_rehearse; then rehearsal="not run (dry run); mmgrid build --rehearse is there"; else
    rehearsal="not run (dry run); missing: this mmgrid has no 'mmgrid build --rehearse'"; fi
else
  if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check.sh: no CUDA device is visible to torch; run it on a GPU machine, or with --dry-run on CPU" >&2
    exit 2
  fi
  if has_rehearse; then
    echo "== rehearsal: $PY -m mmgrid build amazon2023 --rehearse"
    if "$PY" -m mmgrid build amazon2023 --rehearse; then rehearsal="passed"; else
      rc=$?; rehearsal="FAILED (exit $rc; its output is above in the terminal)"; status=1; fi
  else
    rehearsal="missing: this mmgrid has no 'mmgrid build --rehearse'"
    echo "gpu_check.sh: $rehearsal; timing only" >&2
  fi
fi
echo "== timings: $PY bench/peers.py ${ARGS[*]}"
MMGRID_GPU_REHEARSAL="$rehearsal" "$PY" bench/peers.py "${ARGS[@]}"
exit $status
