# One image for every embinit container: the API, the Ray head and workers, and the MLflow server
# (docker-compose.yml). CPU torch by default; for GPU workers build with
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 -t embinit:latest .
FROM python:3.11-slim

ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"
# spaCy tokenizers used by the translation tasks (de -> en); set empty to skip.
ARG SPACY_MODELS="en_core_web_sm de_core_news_sm"

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false

WORKDIR /opt/embinit
# torch first, from its own index, so the project install does not pull a different build.
RUN pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC"
COPY pyproject.toml README.md ./
COPY embinit ./embinit
COPY service ./service
# psycopg: the PostgreSQL driver for the API's state database and MLflow's backend store;
# ray[client,default]: the client server the API connects through (ray://) and the dashboard;
# the focus extra (gensim): the `focus` OOV rule, which trials on any worker may use.
RUN pip install ".[focus]" "psycopg[binary]>=3.1" \
 && pip install "ray[client,default]==$(python -c 'import ray; print(ray.__version__)')" \
 && for m in $SPACY_MODELS; do python -m spacy download "$m"; done

RUN useradd --create-home --uid 1000 embinit \
 && mkdir -p /srv/embinit /data /pretrained /mlartifacts \
 && chown -R embinit:embinit /srv/embinit /data /pretrained /mlartifacts
USER embinit
WORKDIR /srv/embinit

EXPOSE 8000 5000 6379 8265 10001
CMD ["embinit", "serve", "--host", "0.0.0.0", "--port", "8000"]
