#!/usr/bin/env bash
# Issue 13: one batch of the GPU reproduction per call, each within a 10-minute device call.
#   tune_configs/gpu/run_batch.sh BATCH      BATCH: xavier300 | glove | table3 | sst2 | table4 | dose | oov | blog1 |
#                                            blog2 | report
# dose: the dose-response study beyond the paper (issue 23; 81 trials at the paper's schedule, several calls);
# oov: the OOV-rule study (issue 23), CPU scale by design (12 small trials): run it on any machine, e.g. the
# CPU one, into the same store (PYTHON=.venv/bin/python); it cuts GloVe's top 20k rows itself.
# Run from the repository root on the GPU machine (an offline machine: the source tree on PYTHONPATH,
# the device pack's packages beside it, no network):
#   EMBINIT_DATA_DIR  multi30k/, sst2/, wikitext2/ (+ GPT-2 tokenizer files), analogy/questions-words.txt
#   EMBINIT_ASSETS    glove.6B.50d.txt, all-MiniLM-L6-v2/ (blog2 writes blog_exp1_{tied,untied}_best.pt here)
#   REPRO_DIR         the MLflow store (SQLite + artifacts), default ./gpu-runs (git-ignored; carry it
#                     between calls, or copy it back: it is the whole state)
#   BATCH_S           seconds a sweep may run before it is stopped (default 540, under the 10-minute call)
#   RUN_ARGS          spec overrides for every sweep (`embinit run SPEC KEY=VALUE ...`), for the CPU rehearsal:
#                     RUN_ARGS="device=cpu epochs=1 max_train_examples=300 resources.gpus=0 resources.cpus=1"
#                     (the MLflow experiments are then named after the overrides, apart from the real ones;
#                     keep the specs' d_model: a pretrained init fixes it)
# A batch stopped by BATCH_S exits 3: run the same batch again. Dedup by trial key skips finished trials
# and started ones resume from their last epoch's checkpoint (issue 11), so reruns continue where the
# last call stopped. When $OUT is set (the device tool), a copy of the store is left there too.
set -uo pipefail
BATCH=${1:?usage: run_batch.sh xavier300|glove|table3|sst2|table4|dose|oov|blog1|blog2|report}
: "${EMBINIT_DATA_DIR:?set EMBINIT_DATA_DIR}" "${EMBINIT_ASSETS:?set EMBINIT_ASSETS}"
REPO=$(pwd)
REPRO_DIR=$(realpath -m "${REPRO_DIR:-gpu-runs}")
BATCH_S=${BATCH_S:-540}
PY=${PYTHON:-python3}
mkdir -p "$REPRO_DIR"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false EMBINIT_CACHE_DIR=${EMBINIT_CACHE_DIR:-$REPRO_DIR/cache}
URI="sqlite:///$REPRO_DIR/mlflow.db"

mps() {   # many trials on one GPU overlap only under MPS (docs/deployment.md, "Many trials per GPU"); a running daemon is fine
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
  mkdir -p /tmp/mps /tmp/mpslog
  nvidia-cuda-mps-control -d 2>/dev/null || true
}

sweep() {   # one spec under the batch's time limit; 3 = stopped, run the batch again
  local spec=$1 start=$SECONDS rc
  echo "== embinit run $spec ($(date -u +%FT%TZ), limit ${BATCH_S}s)"
  (cd "$REPRO_DIR" && timeout --signal=INT --kill-after=30 "$BATCH_S" \
    "$PY" -m embinit run "$REPO/$spec" --tracking-uri "$URI" ${RUN_ARGS:-})
  rc=$?
  echo "== $spec: exit $rc after $((SECONDS - start)) s"
  if [ "$rc" = 124 ] || [ "$rc" = 130 ] || [ "$rc" = 137 ]; then return 3; fi
  return "$rc"
}

best_pt() {   # experiment 1's emb_seed-1 best.pt (tied or untied) -> $EMBINIT_ASSETS/blog_exp1_<tie>_best.pt
  "$PY" - "$URI" "$1" "$EMBINIT_ASSETS/blog_exp1_$2_best.pt" <<'PYEOF'
import shutil, sys
from embinit.tracking import mlflow_store
import mlflow
uri, tie, dest = sys.argv[1], sys.argv[2] == "true", sys.argv[3]
exp = mlflow_store.experiment_id("gpu-blog-exp1", uri)
runs = [r for r in mlflow_store.search_runs(exp, uri) if r.data.params.get("emb_seed") == "1"
        and r.data.params.get("tie_embeddings", "False").lower() == str(tie).lower() and r.info.status == "FINISHED"]
if not runs:
    sys.exit(f"no finished emb_seed-1 run with tie_embeddings={tie} in gpu-blog-exp1: run the blog1 batch first")
path = mlflow.artifacts.download_artifacts(run_id=runs[0].info.run_id, artifact_path="checkpoint/best.pt",
                                           tracking_uri=uri)
shutil.copy(path, dest)
print(f"{dest} <- run {runs[0].info.run_id}")
PYEOF
}

rc=0
case "$BATCH" in
  xavier300) mps; sweep tune_configs/gpu/multi30k_xavier300.yaml || rc=$? ;;
  glove)     mps; sweep tune_configs/gpu/multi30k_glove50.yaml || rc=$? ;;
  table3)    mps; sweep tune_configs/gpu/table3_ablation_glove50.yaml || rc=$? ;;
  sst2)      mps; sweep tune_configs/gpu/sst2_minilm.yaml || rc=$? ;;
  dose)      mps; sweep tune_configs/gpu/dose_response_sigma.yaml || rc=$? ;;
  oov)       top="$EMBINIT_ASSETS/glove.6B.50d.top20k.txt"   # the spec's source: GloVe's 20,000 most frequent words
             [ -f "$top" ] || head -n 20000 "$EMBINIT_ASSETS/glove.6B.50d.txt" > "$top" || exit 2
             sweep tune_configs/offline/oov_rules_focus.yaml || rc=$? ;;
  blog1)     mps; sweep tune_configs/gpu/blog_exp1.yaml || rc=$? ;;
  blog2)     mps
             best_pt true tied && best_pt false untied || exit 2
             sweep tune_configs/gpu/blog_exp2_tied.yaml || rc=$?
             [ "$rc" = 0 ] && { sweep tune_configs/gpu/blog_exp2_untied.yaml || rc=$?; } ;;
  table4)    # five draws of the random positions; CPU only, ~1 min each
             for s in 0 1 2 3 4; do
               "$PY" -m embinit analogy --embeddings "$EMBINIT_ASSETS/glove.6B.50d.txt" \
                 --questions "$EMBINIT_DATA_DIR/analogy/questions-words.txt" --task multi30k \
                 --data-dir "$EMBINIT_DATA_DIR/multi30k" --top 5893 --table4 --seed "$s" \
                 --tracking-uri "$URI" --log-experiment gpu-table4-analogy-glove50 || rc=$?
             done ;;
  report)    "$PY" -m embinit reproduction --tracking-uri "$URI" --preamble docs/reproduction/preamble.md \
               --epilogue docs/reproduction/epilogue.md --out docs/reproduction.md --exports docs/reproduction \
               || rc=$? ;;
  *) echo "unknown batch $BATCH" >&2; exit 2 ;;
esac
if [ -n "${OUT:-}" ]; then   # the device tool brings $OUT back: the store, and the regenerated document
  tar -C "$(dirname "$REPRO_DIR")" -czf "$OUT/gpu-runs.tgz" --exclude=cache --exclude=.embinit-cache --exclude="*.init-lock" "$(basename "$REPRO_DIR")"
  [ "$BATCH" = report ] && cp -r docs/reproduction.md docs/reproduction "$OUT/"
fi
[ "$rc" = 3 ] && echo "== batch $BATCH stopped at its time limit: run it again to resume"
exit "$rc"
