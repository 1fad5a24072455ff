#!/usr/bin/env bash
# Issue 19 (GPU evidence) in two device calls on one warm machine (a call carries at most 64 MiB, the packs
# are ~100 MB). Each call unpacks what it carried into /tmp/site, which stays while the machine is warm:
#
#   bench/gpu_stretch.sh 1 [STEPS]   carry .devpack/b .devpack/p .devdata: the GPU tests but the Ray one, then
#                                    bench_gpu (a), (d), (b) with STEPS batches per trial (default 100);
#                                    BENCH_ARGS="--concurrency 16 --graphs" adds (a)'s and (b)'s CUDA-graphed
#                                    rows (cuda_graphs, embinit.train.graphed) and keeps (b) to N=16
#   bench/gpu_stretch.sh 2           carry .devpack/a .devpack/c: the Ray test (4 trials with gpus: 0.25)
#   bench/gpu_stretch.sh profile     carry .devpack/p .devdata: bench/profile_gpu_step.py (bf16, fp32), ~2 min;
#                                    PROFILE_ARGS=--graphs profiles the CUDA-graphed step instead
#   bench/gpu_stretch.sh repro BATCH...  (all four parts unpacked: after stages 1 and 2, or carry what is missing)
#                                    tune_configs/gpu/run_batch.sh BATCH... into docs/reproduction/runs (the
#                                    committed run store: it travels with the tree and comes back as
#                                    $OUT/gpu-runs.tgz; unpack it over docs/reproduction/runs and commit)
#
# Before the first call, on the CPU machine (`../shared` does not travel; .devpack and .devdata are git-ignored):
#   ../shared/tools/device-pack.sh .devpack   # a: ray; b: spacy (+ pydantic); c: mlflow, sqlalchemy, optuna, fastapi...
#   bench/gpu_stretch.sh --pack               # p: pydantic, fastapi-offline; .devdata: multi30k, analogy
#                                             # questions, and with ASSETS=DIR (stage_pretrained.py's folder)
#                                             # GloVe 6B 50d cut to those texts' words (cut_vectors.py, 1.6 MB);
#                                             # .devassets: MiniLM cut to tokenizer + embedding (42 MB, for sst2:
#                                             # carry it alone once, e.g. with `repro sst2`)
# `datasets` (hub loading) is not packed: runs there read local files. Results land under $OUT (default
# ./gpu-stretch): machine.txt, tests.log, tests-ray.log, bench.log and bench_gpu.json (saved after every
# section, so a call cut off at its limit keeps what ran). The trainer needs spaCy (the synthetic tasks
# tokenize with it too); only the sweep test needs Ray and MLflow; bench_gpu needs neither.
# The CPU rehearsal (issue 19: no GPU minute to an import error) runs the same stages in a Python 3.12 venv
# holding only the device image's packages, with test_gpu.py's tests pointed at the CPU:
#   SITE=/tmp/site312 DATA=/tmp/data312 OUT=/tmp/rehearsal BENCH_ARGS="--device cpu --concurrency 1 2 --fused 2" \
#     PATH=$PWD/.py312/bin:$PATH bench/gpu_stretch.sh 1 2   (then stage 2; an absolute PATH: run_batch.sh cds)
set -uo pipefail
if [ "${1:-}" = --pack ]; then   # on the CPU machine: the parts the device call carries beside .devpack/a and c
  t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
  PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}   # needs spaCy, transformers
  python3 -m pip install -q --target "$t/p" --python-version 3.12 --implementation cp --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "pydantic>=2.6"
  python3 -m pip install -q --target "$t/p" --no-deps "fastapi-offline>=1.7"   # the service's /docs assets (pure Python)
  mkdir -p "$t/te" && mv "$t/p"/typing_extensions* "$t/te/"     # used there only if its own is too old
  rm -rf "$t/p/bin" "$t/p/__pycache__"
  mkdir -p .devpack/p .devdata
  tar -cf - -C "$t/p" . | xz -T0 -9 > .devpack/p/pydantic.tar.xz
  tar -cf - -C "$t/te" . | xz -T0 -9 > .devpack/p/typing_extensions.tar.xz
  tar -cf - -C "${SHARED:-../shared}/data" multi30k analogy sst2 | xz -9 > .devdata/data.tar.xz
  if [ -n "${ASSETS:-}" ]; then
    d="${SHARED:-../shared}/data"
    "$PY" tune_configs/gpu/cut_vectors.py "$ASSETS/glove.6B.50d.txt" "$t/assets/glove.6B.50d.txt" \
      "$d"/multi30k/*.en "$d/analogy/questions-words.txt" || exit 1
    tar -cf - -C "$t/assets" . | xz -9 > .devdata/assets.tar.xz
  fi
  if [ -d "${ASSETS:-/nonexistent}/all-MiniLM-L6-v2" ]; then   # 42 MB: a call of its own carries it (sst2)
    "$PY" tune_configs/gpu/cut_hf_embeddings.py "$ASSETS/all-MiniLM-L6-v2" "$t/minilm/all-MiniLM-L6-v2" || exit 1
    mkdir -p .devassets && tar -cf - -C "$t/minilm" . | xz -9 -T0 > .devassets/minilm.tar.xz
  fi
  ls -la .devpack/*/ .devdata; exit 0
fi
STAGE=${1:?usage: gpu_stretch.sh 1 [STEPS] | 2 | profile | repro BATCH... | --pack}; shift; STEPS=${1:-100}
OUT=${OUT:-$PWD/gpu-stretch}; mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}; DATA=${DATA:-/tmp/devdata}
start=$SECONDS
mkdir -p "$SITE" "$DATA" /tmp/te
for f in .devpack/*/*.tar.xz; do   # a part already unpacked on this warm machine is skipped
  done_mark="$SITE/.unpacked-$(basename "$f")"; [ -e "$done_mark" ] && continue
  case "$f" in *typing_extensions*) tar -xJf "$f" -C /tmp/te ;; *) tar -xJf "$f" -C "$SITE" ;; esac && touch "$done_mark"
done
[ -f .devdata/data.tar.xz ] && tar -xJf .devdata/data.tar.xz -C "$DATA"
mkdir -p /tmp/devassets; [ -f .devdata/assets.tar.xz ] && tar -xJf .devdata/assets.tar.xz -C /tmp/devassets
[ -f .devassets/minilm.tar.xz ] && tar -xJf .devassets/minilm.tar.xz -C /tmp/devassets
export PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
[ -n "${GIT_HEAD:-}" ] && export EMBINIT_GIT_COMMIT="$GIT_HEAD"   # the copy there has no .git: the runs' commit tag
python3 -c "import pydantic" 2>/dev/null || export PYTHONPATH="$SITE:/tmp/te:$PWD"
echo "unpacked in $((SECONDS - start)) s"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c \
  "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  lscpu | grep 'Model name'; echo "commit ${GIT_HEAD:-$(git rev-parse HEAD 2>/dev/null)}"
  # the reports' confidence intervals need scipy (pyproject declares it; the packs assume the image has it)
  python3 -c "import scipy; print('scipy', scipy.__version__)" 2>/dev/null \
    || echo "scipy MISSING: reports (confidence intervals) will fail; add scipy to the p pack (--pack)"; } \
  | tee "$OUT/machine.txt"
if [ "$STAGE" = repro ]; then   # each batch resumes through dedup when a call ends mid-batch
  rc=0
  for b in "$@"; do
    EMBINIT_DATA_DIR="$DATA" EMBINIT_ASSETS=/tmp/devassets REPRO_DIR="${REPRO_DIR:-docs/reproduction/runs}" \
      BATCH_S="${BATCH_S:-480}" tune_configs/gpu/run_batch.sh "$b" 2>&1 | grep -v Warning | tee -a "$OUT/repro.log" \
      | grep -v '^\[embinit\] [0-9]' | tail -20
    rc=${PIPESTATUS[0]}; echo "== batch $b: exit $rc after $((SECONDS - start)) s"; [ "$rc" = 0 ] || break
  done
  exit "$rc"
fi
if [ "$STAGE" = profile ]; then
  PYTHONPATH="$PYTHONPATH:$PWD/bench" timeout 240 python3 bench/profile_gpu_step.py --data "$DATA/multi30k" \
    --out "$OUT" ${PROFILE_ARGS:-} 2>&1 | grep -v Warning | cut -c1-200
  echo "== profile: exit ${PIPESTATUS[0]} after $((SECONDS - start)) s"; exit 0
fi
if [ "$STAGE" = 2 ]; then
  python3 -c "import ray, mlflow, pydantic, sqlalchemy, optuna, spacy, embinit.sweep, service.main" \
    || echo "IMPORT FAILED (above): the tests that need it fail"
  timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k four_trials -rA 2>&1 \
    | tee "$OUT/tests-ray.log" | tail -25
  echo "== Ray test: exit ${PIPESTATUS[0]} after $((SECONDS - start)) s"; exit 0
fi
python3 -c "import spacy, pydantic, embinit.train" || echo "IMPORT FAILED (above): the tests that need it fail"

echo "== pytest -m gpu tests/test_gpu.py"
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k 'not four_trials' -rA 2>&1 | tee "$OUT/tests.log" | tail -25
echo "== tests: exit ${PIPESTATUS[0]} after $((SECONDS - start)) s"

left=$(( ${BUDGET_S:-560} - (SECONDS - start) ))
echo "== bench_gpu --steps $STEPS (limit ${left}s)"
timeout "$left" python3 bench/bench_gpu.py --data "$DATA/multi30k" --steps "$STEPS" --out "$OUT" ${BENCH_ARGS:-} \
  2>&1 | tee "$OUT/bench.log" | tail -40
echo "== bench: exit ${PIPESTATUS[0]} after $((SECONDS - start)) s"
