"""Integration: a Ray head with token auth on, as docker-compose.yml runs it (issue 20, item 3): a Ray
Client with the cluster's token connects and runs work; one with a wrong token, or with auth off, is
refused. The head listens on 127.0.0.2 (a loopback address of its own) with its client server, as the
compose head does on 10001; only the processes this test started are stopped."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from helpers.ray_cluster import RAY, free_port, stop_cluster, write_token

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEAD = "127.0.0.2"
# Ray Client connection attempts (argv[2] of them, each without Ray's own retries), in a process of its
# own: Ray's auth state is global. A client with the token may meet a transient "Initialization failure
# from server" (the proxy's per-client server dying at start under load) and tries again, as a user would.
CLIENT = """
import sys, time
from ray.util.client import ray
for attempt in range(int(sys.argv[2])):
    try:
        ray.connect(sys.argv[1], connection_retries=0)
        break
    except ConnectionError as e:
        print("refused:", str(e).splitlines()[0]); time.sleep(2)
else:
    sys.exit(3)
print("answer", ray.get(ray.remote(lambda: 6 * 7).remote()))
ray.disconnect()
"""


def _env(**auth: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", **auth}


@pytest.fixture(scope="module")
def head():
    temp_dir = tempfile.mkdtemp(prefix="eia-", dir="/tmp")  # short: Ray's socket paths are length-limited
    token = write_token(temp_dir)   # fresh, 0600
    gcs, client = free_port(HEAD), free_port(HEAD)
    env = _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token)
    try:
        subprocess.run([RAY, "start", "--head", f"--node-ip-address={HEAD}", f"--port={gcs}",
                        f"--ray-client-server-port={client}", "--include-dashboard=false", "--num-cpus=1",
                        "--num-gpus=0", "--disable-usage-stats", f"--temp-dir={temp_dir}"],
                       env=env, check=True, capture_output=True, timeout=180)
        yield f"{HEAD}:{client}", token
    except subprocess.CalledProcessError as e:
        pytest.fail(f"could not start the token-auth Ray head: {e.stderr.decode()[-2000:]}")
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _connect(address: str, env: dict[str, str], attempts: int = 1) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLIENT, address, str(attempts)], env=env, capture_output=True,
                          text=True, timeout=180)


def test_a_client_with_the_token_runs_work(head):
    address, token = head
    done = _connect(address, _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token), attempts=3)
    assert done.returncode == 0 and "answer 42" in done.stdout, done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize("auth", [{"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token"},
                                  {"RAY_AUTH_MODE": "disabled"}], ids=["wrong-token", "auth-off"])
def test_a_client_without_the_token_is_refused(head, auth):
    address, _token = head
    done = _connect(address, _env(**auth))
    assert done.returncode == 3 and "refused" in done.stdout, done.stdout + done.stderr[-2000:]
