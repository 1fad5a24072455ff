"""docker-compose.yml and the Dockerfile agree with the service's settings (there is no Docker engine
here, so the files are parsed and cross-checked, not run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
RAW = (ROOT / "docker-compose.yml").read_text()
_DEFAULT = re.compile(r"\$\{([A-Z_]+):-([^}]*)\}")
_REQUIRED = re.compile(r"\$\{([A-Z_]+):\?([^}]*)\}")
# what the user sets before `docker compose up` (docs/deployment.md): compose refuses to start without it
GIVEN = {"POSTGRES_PASSWORD": "set-by-the-user"}


class Unset(Exception):
    """A `${VAR:?message}` with VAR unset: compose stops with the message."""


def resolved(value: str, given: dict[str, str] = GIVEN) -> str:
    """`${VAR:-default}` -> default, as compose does with VAR unset; `${VAR:?message}` -> VAR's value in
    `given`, or Unset as compose refuses."""
    def required(m: re.Match) -> str:
        if m.group(1) not in given:
            raise Unset(f"{m.group(1)}: {m.group(2)}")
        return given[m.group(1)]
    return _REQUIRED.sub(required, _DEFAULT.sub(lambda m: m.group(2), str(value)))


def env(service: str) -> dict[str, str]:
    return {k: resolved(v) for k, v in (SERVICES[service].get("environment") or {}).items()}


def command(service: str) -> list[str]:
    cmd = SERVICES[service]["command"]
    return shlex.split(resolved(cmd)) if isinstance(cmd, str) else [resolved(c) for c in cmd]


def option(cmd: list[str], name: str) -> str:
    for i, part in enumerate(cmd):
        if part == name:
            return cmd[i + 1]
        if part.startswith(name + "="):
            return part.split("=", 1)[1]
    raise AssertionError(f"{name} not in {cmd}")


def mounts(service: str) -> dict[str, str]:
    """container path -> volume name."""
    return {v.split(":")[1]: v.split(":")[0] for v in SERVICES[service].get("volumes", [])}


def published(service: str) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for p in SERVICES[service].get("ports", []):
        host, container = str(p).rsplit(":", 1) if ":" in str(p) else (p, p)
        out[int(container)] = int(host.split(":")[-1])
    return out


def test_services_present():
    assert {"api", "ray-head", "ray-worker", "mlflow", "postgres"} <= set(SERVICES)


def test_api_env_names_exist_in_settings_and_parse(monkeypatch):
    api_env = {k: v for k, v in env("api").items() if k.startswith("EMBINIT_")}
    fields = set(Settings.model_fields)
    unknown = [k for k in api_env if k.removeprefix("EMBINIT_").lower() not in fields]
    assert not unknown, f"compose sets variables the service does not read: {unknown}"
    for k, v in api_env.items():
        monkeypatch.setenv(k, v)
    settings = Settings(_env_file=None)
    assert settings.data_roots == [Path("/data")] and settings.pretrained_roots == [Path("/pretrained")]
    assert settings.api_token in (None, "")  # no token baked into the file


def test_tracking_uri_points_at_the_mlflow_service():
    uri = urlparse(env("api")["EMBINIT_TRACKING_URI"])
    cmd = command("mlflow")
    assert uri.scheme == "http" and uri.hostname == "mlflow"
    assert uri.port == int(option(cmd, "--port"))
    assert option(cmd, "--host") == "0.0.0.0"
    assert uri.port in published("mlflow")
    assert f"mlflow:{uri.port}" in option(cmd, "--allowed-hosts").split(",")
    ui = urlparse(env("api")["EMBINIT_MLFLOW_UI_URL"])
    assert published("mlflow")[uri.port] == ui.port


def _written(service: str) -> list[str]:
    """A service's environment values and command, as the file writes them."""
    spec = SERVICES[service]
    return [str(v) for v in (spec.get("environment") or {}).values()] + [str(spec.get("command", ""))]


def test_no_service_has_a_default_database_password():
    """The database password has no default (`${POSTGRES_PASSWORD:-embinit}` gave every copy of this file
    the same one): every password a service is given, as POSTGRES_PASSWORD or in a connection URL, is
    `${POSTGRES_PASSWORD:?...}`, which compose refuses to start without."""
    passwords = {name: [str(v) for k, v in (SERVICES[name].get("environment") or {}).items() if "PASSWORD" in k]
                 + [m.group(1) for text in _written(name)
                    for m in re.finditer(r"://[^/:@\s]+:(\$\{[^}]*\}|[^@\s]+)@", text)] for name in SERVICES}
    given = [(name, p) for name, found in passwords.items() for p in found]
    assert len(given) == 4, given    # postgres's own, MLflow's backend store, the API's two URLs
    for name, password in given:
        required = _REQUIRED.fullmatch(password)
        assert required and required.group(1) == "POSTGRES_PASSWORD", f"{name}: a default password {password!r}"
    assert not _DEFAULT.search(" ".join(re.findall(r"\$\{POSTGRES_PASSWORD[^}]*\}", RAW)))
    for name in ("postgres", "mlflow", "api"):   # compose refuses to start each without it
        with pytest.raises(Unset, match="POSTGRES_PASSWORD"):
            [resolved(text, given={}) for text in _written(name)]


def test_no_password_is_on_a_command_line():
    """A process's command line is readable by every user of its host (`ps`): the database password is
    only ever in an environment (MLflow's server reads --backend-store-uri from MLFLOW_BACKEND_STORE_URI)."""
    for name, spec in SERVICES.items():
        assert "POSTGRES_PASSWORD" not in str(spec.get("command", "")), name
        assert "PASSWORD" not in str(spec.get("entrypoint", "")), name


def test_mlflow_server_setup():
    cmd = command("mlflow")
    assert "--backend-store-uri" not in cmd   # in the environment (above)
    backend = urlparse(env("mlflow")["MLFLOW_BACKEND_STORE_URI"])
    assert backend.scheme.startswith("postgresql") and backend.hostname == "postgres"
    pg = env("postgres")
    assert backend.username == pg["POSTGRES_USER"] and backend.password == pg["POSTGRES_PASSWORD"]
    assert backend.path.lstrip("/") == pg["POSTGRES_DB"]
    assert "--serve-artifacts" in cmd and option(cmd, "--workers") == "1"
    assert env("mlflow")["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert option(cmd, "--artifacts-destination") in mounts("mlflow")  # artifacts on a volume


def test_trials_write_to_the_database_behind_the_mlflow_server():
    """EMBINIT_TRACKING_WRITE_DIRECT: the API reads, and its trials write, the very database the server
    serves (another one would split the runs between two stores; the sweep checks it again at its start)."""
    api = env("api")
    assert api["EMBINIT_TRACKING_WRITE_DIRECT"] == "true"
    assert api["EMBINIT_TRACKING_READ_URI"] == env("mlflow")["MLFLOW_BACKEND_STORE_URI"]
    assert urlparse(api["EMBINIT_TRACKING_URI"]).hostname == "mlflow"


@pytest.mark.parametrize("service", ["mlflow", "api", "ray-head", "ray-worker"])
def test_no_usage_reports_leave_the_cluster(service):
    assert env(service)["MLFLOW_DISABLE_TELEMETRY"] == "true"
    if service != "mlflow":
        assert env(service)["RAY_USAGE_STATS_ENABLED"] == "0"


def test_state_database_is_the_postgres_service():
    url = urlparse(env("api")["EMBINIT_DATABASE_URL"])
    pg = env("postgres")
    assert url.scheme.startswith("postgresql") and url.hostname == "postgres"
    assert url.username == pg["POSTGRES_USER"] and url.password == pg["POSTGRES_PASSWORD"]
    state_db = url.path.lstrip("/")
    assert state_db != pg["POSTGRES_DB"]  # MLflow has a table named `experiments` too
    init = COMPOSE["configs"]["create-state-db"]["content"]
    assert f"CREATE DATABASE {state_db};" in init
    targets = [c["target"] for c in SERVICES["postgres"]["configs"]]
    assert any(t.startswith("/docker-entrypoint-initdb.d/") for t in targets)
    assert "api" in SERVICES and SERVICES["api"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_ray_address_is_the_heads_client_server():
    address = urlparse(env("api")["EMBINIT_RAY_ADDRESS"])
    head = command("ray-head")
    assert address.scheme == "ray" and address.hostname == "ray-head"
    assert address.port == int(option(head, "--ray-client-server-port"))
    gcs = option(head, "--port")
    for worker in ("ray-worker", "ray-worker-cpu"):
        assert option(command(worker), "--address") == f"ray-head:{gcs}"
        assert "--block" in command(worker)


def test_workers_scale_and_reserve_gpus():
    worker = SERVICES["ray-worker"]
    assert "container_name" not in worker and not worker.get("ports")  # scalable: no fixed names/ports
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert any("gpu" in d["capabilities"] for d in devices)


def test_gpu_worker_starts_the_mps_daemon_before_ray():
    """Trials sharing a GPU need CUDA MPS (docs/deployment.md): the GPU worker's entrypoint starts the
    daemon in the pipe directory every trial process inherits, then execs the Ray command."""
    worker = SERVICES["ray-worker"]
    entry = worker["entrypoint"]
    assert entry[:2] == ["sh", "-c"]
    script = entry[2].replace("$$", "$")
    start, run = script.index("nvidia-cuda-mps-control -d"), script.index('exec "$@"')
    assert start < run and 'mkdir -p "$CUDA_MPS_PIPE_DIRECTORY"' in script
    environment = env("ray-worker")
    assert environment["CUDA_MPS_PIPE_DIRECTORY"] and environment["CUDA_MPS_LOG_DIRECTORY"]
    assert environment["RAY_AUTH_MODE"] == env("ray-head")["RAY_AUTH_MODE"]   # the shared env is kept
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert any("compute" in d["capabilities"] for d in devices)
    assert command("ray-worker")[:2] == ["ray", "start"]   # what "$@" runs
    assert "entrypoint" not in SERVICES["ray-worker-cpu"]


@pytest.mark.parametrize("service", ["api", "ray-head", "ray-worker", "ray-worker-cpu"])
def test_roots_and_work_dir_are_shared_volumes(service, monkeypatch):
    for k, v in env("api").items():
        if k.startswith("EMBINIT_"):
            monkeypatch.setenv(k, v)
    settings = Settings(_env_file=None)
    paths = mounts(service)
    for root in settings.data_roots + settings.pretrained_roots:
        assert str(root) in paths, f"{service} does not mount {root}"
    assert paths[SERVICES[service]["working_dir"]] == "embinit-work"  # Tune checkpoints, caches


def test_named_volumes_are_declared():
    declared = set(COMPOSE["volumes"])
    used = {name for s in SERVICES for name in mounts(s).values() if not name.startswith((".", "/"))}
    assert used <= declared and {"pgdata", "mlartifacts"} <= used
    assert mounts("postgres")["/var/lib/postgresql/data"] == "pgdata"


def test_api_command_serves_the_app_on_its_published_port():
    """`embinit serve` (not bare uvicorn): it installs the header timeout and connection limits."""
    cmd = command("api")
    assert cmd[:2] == ["embinit", "serve"] and option(cmd, "--host") == "0.0.0.0"
    assert int(option(cmd, "--port")) in published("api")


def test_published_ports_listen_on_the_loopback_unless_told_otherwise():
    """The API (no token unless EMBINIT_API_TOKEN is set), the MLflow server (no auth at all) and the Ray
    dashboard are published on the host's loopback by default: `ports: ["8000:8000"]` put them on every
    interface of the host, for anyone on its network. PUBLISH_ADDRESS opens them up on purpose."""
    ports = {s: [str(p) for p in SERVICES[s].get("ports", [])] for s in SERVICES}
    assert {s for s, p in ports.items() if p} == {"api", "mlflow", "ray-head"}
    assert all(p.startswith("${PUBLISH_ADDRESS:-127.0.0.1}:") for p in sum(ports.values(), [])), ports
    assert published("api") == {8000: 8000} and published("mlflow") == {5000: 5000}


def test_dockerfile_builds_what_compose_runs():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert all(SERVICES[s].get("build") == "." for s in ("api", "ray-head", "ray-worker", "mlflow"))
    for needed in ("COPY embinit", "COPY service", "psycopg", "TORCH_SPEC", ".[focus]"):  # every OOV rule runs
        assert needed in dockerfile
    exposed = {int(p) for line in dockerfile.splitlines() if line.startswith("EXPOSE") for p in line.split()[1:]}
    assert {8000, 5000, 6379, 10001} <= exposed


@pytest.mark.parametrize("service", ["api", "ray-head", "ray-worker", "ray-worker-cpu"])
def test_ray_token_auth_stays_on_in_the_cluster(service):
    """On a cluster Ray's token auth is kept on (issue 20, item 3): every Ray node and the API (a Ray
    Client) run with RAY_AUTH_MODE=token and read the one token from the compose secret.
    tests/test_service_cluster_auth.py shows that such a head refuses a client without the token."""
    environment = env(service)
    assert environment["RAY_AUTH_MODE"] == "token"
    assert "ray_auth_token" in SERVICES[service]["secrets"]
    assert environment["RAY_AUTH_TOKEN_PATH"] == "/run/secrets/ray_auth_token"
    assert "file" in COMPOSE["secrets"]["ray_auth_token"]


def _setup_commands() -> dict[str, list[str]]:
    """The shell commands that set up the stack: docs/deployment.md's compose block, and the usage
    lines at the head of docker-compose.yml (comments cut)."""
    doc = (ROOT / "docs" / "deployment.md").read_text()
    block = doc.split("## On a cluster: docker compose")[1].split("```bash")[1].split("```")[0]
    head = [line.removeprefix("#").strip() for line in RAW.splitlines()[:12] if line.startswith("#   ")]
    cut = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    return {"docs/deployment.md": cut, "docker-compose.yml": [line.split("  #")[0].strip() for line in head]}


@pytest.mark.parametrize("where", ["docs/deployment.md", "docker-compose.yml"])
def test_the_setup_commands_make_the_ray_token_before_the_first_up(where):
    """Every service reads the secret `ray_auth_token` from a file: compose cannot start them until it
    exists. The printed commands made the password and then went straight to `docker compose up`."""
    commands = _setup_commands()[where]
    first_up = next(i for i, c in enumerate(commands) if re.search(r"docker compose .*\bup\b", c))
    secret = Path(resolved(COMPOSE["secrets"]["ray_auth_token"]["file"])).name
    assert any(re.search(rf">\s*(\./)?{secret}$", c) for c in commands[:first_up]), commands


def test_the_api_token_outlives_the_next_up():
    """`EMBINIT_API_TOKEN=... docker compose up -d api` gave the API a token no one could read back, and
    the block's next `docker compose up` (to scale the workers) recreated the API without it: writes
    open to all again. Compose keeps a setting for every later `up` only in `.env` (or the environment)."""
    commands = _setup_commands()["docs/deployment.md"]
    assert not [c for c in commands if re.match(r"(\w+=\S+\s+)+docker compose", c) and "EMBINIT_API_TOKEN" in c]
    assert any(re.fullmatch(r'echo "EMBINIT_API_TOKEN=\$\(openssl rand -hex \d+\)" >> \.env', c) for c in commands)
