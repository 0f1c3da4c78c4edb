#!/usr/bin/env bash
# Re-run every benchmark of bench/ in one go, each writing its record to bench/results/<name>.md.
#
#   bash bench/run_all.sh                 # everything (about 2 h on 2 quiet cores with warm caches)
#   BENCH_CACHE=/data/bench bash bench/run_all.sh
#   BENCH_ONLY="data_prep registry" bash bench/run_all.sh
#
# The timing benchmarks run first and should have the machine to themselves. The studies run
# last; they read their trained checkpoints and replicate worlds from $BENCH_CACHE (default
# runs/bench), keyed by checkpoint id and recipe, so a change that alters what they compute
# recomputes it. With an empty cache the calibration study alone is several hours: its
# folder's runs are those of `mmgrid calibrate demo --out $BENCH_CACHE/calibrate
# exec.workers=2 sweeps.calibrate.own_world_replicates=10` (docs/calibration.md).
# mergekit, the merge benchmarks' baseline, is found as bench/merge.py says
# ($MMGRID_MERGEKIT_PYTHON, bench/.venv-mergekit, /tmp/venv-mergekit).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
C=${BENCH_CACHE:-runs/bench}
ONLY=" ${BENCH_ONLY:-} "
mkdir -p "$C"

want() { [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $1 "* ]]; }  # is step NAME to run?
step() {  # step NAME COMMAND...: run unless BENCH_ONLY names others; print its wall time
  local name=$1; shift
  want "$name" || return 0
  echo "== $name: $*"
  local t0=$SECONDS
  "$@"
  echo "== $name: $((SECONDS - t0)) s"
}

# timing benchmarks (a quiet machine)
step data_prep "$PY" bench/data_prep.py --dir "$C/data_prep"
step registry "$PY" bench/registry.py
step sweep "$PY" bench/sweep.py
step step_floor "$PY" bench/step_floor.py --compile --quick
step step_floor "$PY" bench/step_floor.py --compile
step train_eval "$PY" bench/train_eval.py --quick
step train_eval "$PY" bench/train_eval.py
step profile_cell "$PY" bench/profile_cell.py --out "$C/profile"
step merge "$PY" bench/merge.py
step merge_all "$PY" bench/merge.py --all
if want demo; then rm -rf "$C/demo" "$C/demo-quick"; fi  # bench/demo.py times a new run
step demo "$PY" bench/demo.py --quick --out "$C/demo-quick"
step demo "$PY" bench/demo.py --out "$C/demo"  # the full demo last: its record comes first in demo.md
step report_html "$PY" bench/report_html.py --run "$C/demo-quick"
step peers "$PY" bench/peers.py  # vs HF generate, matmul + topk, transformers.Trainer
if want gpu_check; then  # the paper-scale path on CUDA; without a GPU its dry run on CPU
  GPU=(); "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || GPU=(--dry-run)
  step gpu_check env PYTHON="$PY" bash bench/gpu_check.sh "${GPU[@]}"
fi
step rolling_cost "$PY" bench/rolling_cost.py --out "$C/rolling_cost"
step plan "$PY" bench/plan.py  # the demo's predicted stage times against measured ones

# studies (trained checkpoints and replicate worlds from the cache). The two calibration variants measure
# lambda*'s coverage against the configuration's value (lambda_population=config), as they were recorded.
NOTE="by bench/run_all.sh: the runs this record reads were re-used from the cache folder by recipe where they were there \
(how and how long they were computed: the earlier records below), and computed here where they were not"
step paradigms "$PY" bench/paradigms.py --budget 1500 6000 --out "$C/paradigms"
# MovieLens-100K (RecBole 1.2.1's files, fetched from PyPI by `mmgrid fetch-ml100k`): every paradigm against SASRec
step paradigms bash -c "\"$PY\" -m mmgrid fetch-ml100k && \"$PY\" -m mmgrid prepare grids/ml100k.yaml && \"$PY\" bench/paradigms.py \
  --grid grids/ml100k.yaml --budget 12000 --seeds 0 1 2 --paradigms sasrec semid text --arm id10=emb:id_embeddings=true,id_scale=10 \
  --out \"$C/ml100k\" --targets --as emb=id10 --record ml100k"
# where text's hits come from on MovieLens-100K (the titles it generates) and on the default preset, for comparison
step text_titles "$PY" bench/text_titles.py --grid grids/ml100k.yaml --budget 12000 --seeds 0 1 2 --out "$C/ml100k" \
  --record text_titles_ml100k
step text_titles "$PY" bench/text_titles.py --preset default --seeds 0 1 2 --out "$C/paradigms" --record text_titles
step paradigms "$PY" bench/paradigms.py --preset dense_short_text amazon_table1 --paradigms emb sasrec \
  --arm emb-id=emb:id_embeddings=true,id_scale=10 --out "$C/paradigms" --record paradigms_emb_id
step paradigms "$PY" bench/paradigms.py --valid --preset amazon_table1 dense_short_text default \
  --paradigms text sasrec --out "$C/text-grounding" --record paradigms_text_grounding \
  $(for a in raw-g0=popularity_gamma=0 raw-g0.5=popularity_gamma=0.5 raw-g2=popularity_gamma=2 \
      raw-g3=popularity_gamma=3 raw-g4=popularity_gamma=4 raw-g8=popularity_gamma=8 \
      raw-g16=popularity_gamma=16 raw-g100=popularity_gamma=100 \
      mm-g1=grounding_scale=minmax mm-g2=grounding_scale=minmax,popularity_gamma=2 \
      mm-g4=grounding_scale=minmax,popularity_gamma=4 mm-g8=grounding_scale=minmax,popularity_gamma=8 \
      mm-g16=grounding_scale=minmax,popularity_gamma=16 mm-g32=grounding_scale=minmax,popularity_gamma=32 \
      model-g1=ground_embedder=model model-g2=ground_embedder=model,popularity_gamma=2 \
      model-g4=ground_embedder=model,popularity_gamma=4 model-g8=ground_embedder=model,popularity_gamma=8 \
      best-g1=beam_combine=best best-g4=beam_combine=best,popularity_gamma=4 \
      bigrec-g1=ground_embedder=model,grounding_scale=minmax,beam_combine=best \
      bigrec-g4=ground_embedder=model,grounding_scale=minmax,beam_combine=best,popularity_gamma=4 \
      bigrec-g8=ground_embedder=model,grounding_scale=minmax,beam_combine=best,popularity_gamma=8 \
      bigrec-g16=ground_embedder=model,grounding_scale=minmax,beam_combine=best,popularity_gamma=16 \
      pall-g1=popularity_phases=all pall-g4=popularity_phases=all,popularity_gamma=4 \
      base-g1=ground_embedder=base base-g2=ground_embedder=base,popularity_gamma=2 \
      base-g4=ground_embedder=base,popularity_gamma=4 base-g8=ground_embedder=base,popularity_gamma=8 \
      bigrecbase-g1=ground_embedder=base,grounding_scale=minmax,beam_combine=best \
      bigrecbase-g4=ground_embedder=base,grounding_scale=minmax,beam_combine=best,popularity_gamma=4 \
      bigrecbase-g8=ground_embedder=base,grounding_scale=minmax,beam_combine=best,popularity_gamma=8 \
      bigrecbase-g16=ground_embedder=base,grounding_scale=minmax,beam_combine=best,popularity_gamma=16; do
      echo --rank-arm "${a%%=*}=text:${a#*=}"; done)
step text_emb_tune "$PY" bench/text_emb_tune.py --valid --seeds 0 1 2 --paradigms text emb sasrec --out "$C/text-emb-tune"
step popular_history "$PY" bench/popular_history.py --out "$C/popular-history"
step calibration "$PY" bench/calibration.py --note "$NOTE" --out "$C/calibrate" sweeps.calibrate.own_world_replicates=10
step calibration "$PY" bench/calibration.py --note "$NOTE" --record calibration_plant15 --out "$C/calibrate-plant15" world.seed=0 \
  world.plant.turnover=1.5 world.plant.trend=1.5 world.plant.trend_contrast=1.5 sweeps.calibrate.own_world_replicates=10 \
  sweeps.calibrate.lambda_population=config
step calibration "$PY" bench/calibration.py --note "$NOTE" --record calibration_pop6 --out "$C/calibrate-pop6" \
  sweeps.calibrate.own_world_replicates=10 sweeps.calibrate.population_worlds=6 'sweeps.calibrate.sizes=[1]' \
  sweeps.calibrate.lambda_population=config
step calibration "$PY" bench/calibration.py --note "$NOTE" --population --record population_amazon_table1 \
  world.preset=amazon_table1 world.n_domains=6 "data.root=$C/population-amazon_table1/world"
step verdict_stability "$PY" bench/verdict_stability.py --note "$NOTE" --sets 8 --out "$C/calibrate"
step lambda_star_users "$PY" bench/lambda_star_users.py --registry "$C/demo/registry"
echo "== every benchmark finished; records in bench/results/"
