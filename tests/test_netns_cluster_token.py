"""The cluster harness (tests/helpers/netns_cluster.py) keeps its Ray auth token, the file every host's
RAY_AUTH_TOKEN_PATH names, to its owner: 0600 from its creation, never written into a file already there.
The start is stopped right after the token is written, before any namespace is made, so no root is needed."""

from __future__ import annotations

import os

import pytest
from helpers.netns_cluster import Cluster


class _Stop(Exception):
    """Raised where the harness would make its first namespace."""


def _stopped_cluster(tmp_path, monkeypatch) -> Cluster:
    cluster = Cluster()
    cluster.root = tmp_path / cluster.prefix
    cluster.token = cluster.root / "ray_auth_token"

    def stop() -> None:
        raise _Stop
    monkeypatch.setattr(cluster.switch, "create", stop)
    return cluster


@pytest.fixture
def usual_umask():
    old = os.umask(0o022)   # the common umask: a file made without a mode is 0644, readable by everyone
    yield
    os.umask(old)


@pytest.mark.usefixtures("usual_umask")
def test_the_ray_token_is_readable_by_its_owner_alone(tmp_path, monkeypatch):
    cluster = _stopped_cluster(tmp_path, monkeypatch)
    with pytest.raises(_Stop):
        cluster._up()
    assert os.stat(cluster.token).st_mode & 0o777 == 0o600
    assert len(cluster.token.read_text()) == 64


@pytest.mark.usefixtures("usual_umask")
def test_the_ray_token_is_not_written_into_a_file_already_there(tmp_path, monkeypatch):
    """A file planted at the token's path (another user's, readable by them) is refused, not filled."""
    cluster = _stopped_cluster(tmp_path, monkeypatch)
    cluster.root.mkdir()
    cluster.token.write_text("")
    os.chmod(cluster.token, 0o666)
    with pytest.raises(FileExistsError):
        cluster._up()
    assert cluster.token.read_text() == ""
