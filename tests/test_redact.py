"""Secrets kept out of what embinit shows (embinit.redact): a URL's password in every form a store or a
server takes, a secret in a URL's query, a message quoting a URL, and the places that print a store's URI
(an experiment the store lacks, the reproduction document, the tracking-server warning)."""

from __future__ import annotations

import pytest

from urllib.parse import unquote

from embinit.commands import FromEnv, uri_arg
from embinit.tracking import mlflow_store, server_check as tracking_server
from embinit.errors import EmbinitError
from embinit.redact import has_secret, masked, masked_arg, scrubbed, secrets_of


@pytest.mark.parametrize("uri, shown", [
    ("postgresql+psycopg://mlflow:s3cret@db:5432/mlflow", "postgresql+psycopg://mlflow:***@db:5432/mlflow"),
    ("mysql://u:s3cret@h/m", "mysql://u:***@h/m"),
    ("http://me:s3cret@mlflow:5000", "http://me:***@mlflow:5000"),
    # psycopg takes the password from the query too
    ("postgresql://db/mlflow?user=u&password=s3cret", "postgresql://db/mlflow?user=u&password=***"),
    ("postgresql://u@db/m?sslpassword=s3cret&sslkey=/k.pem", "postgresql://u@db/m?sslpassword=***&sslkey=/k.pem"),
    ("http://mlflow:5000/?token=s3cret", "http://mlflow:5000/?token=***"),
    # an authority SQLAlchemy cannot parse: the password is hidden all the same
    ("postgresql://u:s3cret@[::1/db", "postgresql://u:***@[::1/db"),
])
def test_a_secret_in_a_uri_is_hidden(uri, shown):
    assert masked(uri) == shown and "s3cret" not in masked(uri)
    assert has_secret(uri) and not has_secret(shown.replace("***", ""))


@pytest.mark.parametrize("uri", ["sqlite:////abs/mlflow.db", "sqlite:///mlflow.db", "http://mlflow:5000",
                                 "file:///tmp/mlruns", "http://host:5000/a@b", "postgresql://u@db/m?sslmode=require",
                                 # a user name (libpq reads the password from ~/.pgpass or PGPASSWORD)
                                 "postgresql://reader@db/mlflow", "postgresql+psycopg://mlflow@db:5432/mlflow",
                                 "mysql://u@h/m", "http://host/a@b", "https://host:5000?next=a@b"])
def test_a_uri_without_a_secret_is_shown_as_given(uri):
    assert masked(uri) == uri and not has_secret(uri) and secrets_of(uri) == []


@pytest.mark.parametrize("uri, shown", [
    ("https://ghp_abcdef123456@mlflow.example.org/", "https://***@mlflow.example.org/"),
    ("https://s3cret-TOKEN@host:5000/path", "https://***@host:5000/path"),
    ("HTTP://dapi%2Bs3cret@mlflow:5000", "HTTP://***@mlflow:5000"),
    ("wss://s3cret@ray:8265/?token=t0ken", "wss://***@ray:8265/?token=***"),
    ("http://user@s3cret@mlflow:5000", "http://***@mlflow:5000"),   # an unescaped '@': up to the last
])
def test_a_bare_token_as_a_web_urls_userinfo_is_hidden(uri, shown):
    """An http(s)/ws(s) userinfo without a ':' is a token (GitHub, Databricks, a proxied MLflow server):
    hidden in the URI, found as a secret, scrubbed from a message quoting it, masked on a command line and
    taken from the environment by a printed command."""
    token = uri.split("//", 1)[1].rsplit("@", 1)[0]
    assert masked(uri) == shown and has_secret(uri) and not has_secret(shown.replace("***", ""))
    assert token in secrets_of(uri) and unquote(token) in secrets_of(uri)
    text = scrubbed(f"401 Unauthorized for {uri} (token {unquote(token)})", [uri])
    assert token not in text and unquote(token) not in text and shown.split("?")[0] in text
    assert masked_arg(f"--tracking-uri={uri}") == f"--tracking-uri={shown}" and masked_arg(uri) == shown
    assert isinstance(uri_arg(uri), FromEnv)


def test_a_message_quoting_a_password_has_it_scrubbed_in_every_spelling():
    uri = "postgresql+psycopg://mlflow:p%40ss%2Fword@db/mlflow"
    text = "connection to db failed: password 'p@ss/word' (p%40ss%2Fword) rejected"
    assert scrubbed(text, [None, uri]) == "connection to db failed: password '***' (***) rejected"
    assert scrubbed("a b c", ["postgresql://u:b@h/d"]) == "a b c"   # too short to scrub: no blotted words


def test_an_experiment_the_store_lacks_is_named_without_the_stores_password(monkeypatch):
    class Client:
        def search_experiments(self):
            return []
    monkeypatch.setattr(mlflow_store, "client", lambda uri=None: Client())
    error = mlflow_store.no_experiment("x", "postgresql://u:s3cret@db/mlflow")
    assert isinstance(error, EmbinitError) and "s3cret" not in str(error)
    assert "postgresql://u:***@db/mlflow" in str(error)


def test_the_tracking_server_warning_hides_a_basic_auth_password():
    text = tracking_server.keepalive_warning("http://me:s3cret@mlflow:5000", 2.0, [41.0, 42.0])
    assert text is not None and "s3cret" not in text and "http://me:***@mlflow:5000" in text
