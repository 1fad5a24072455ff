"""Secrets kept out of what embinit shows: a URL's password (`postgresql://user:PASSWORD@host/db`,
`http://user:PASSWORD@mlflow:5000`), an http(s)/ws(s) URL's bare token (`https://TOKEN@mlflow:5000/`), a
secret in its query (`?password=...`, `?token=...`) and a `--password=...`-like command-line flag.

The rule for a userinfo without a ':' depends on the scheme. For http, https, ws and wss it is taken for a
credential and hidden whole (`https://***@host/`): that is how GitHub and Databricks tokens and some MLflow
deployments behind a proxy pass one (`https://ghp_...@host/`, the token as the user, no password), RFC 3986
deprecates the `user:password` form there, and a user name hidden by mistake costs nothing, a token shown
by mistake costs the token. For every other scheme it is a user name and shown: `postgresql://user@host/db`
names a role whose password libpq reads elsewhere (`~/.pgpass`, `PGPASSWORD`), and hiding it would hide
which account a store is opened with.

`masked(uri)` is the URI as messages, logs, MLflow tags and API answers show it; `has_secret(uri)` says
whether it differs from the URI for that reason; `scrubbed(text, uris)` hides the secrets of `uris`
wherever they appear in `text` (an exception's message that quotes a URL); `masked_arg` is one word of
a command line (`embinit.tracking.provenance`)."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

HIDDEN = "***"
MIN_SCRUBBED = 4   # `scrubbed` hides secrets of this many characters or more
# Names of query parameters and command-line flags whose value is a secret (psycopg's `password`,
# `sslpassword`; Ray's `--redis-password`; tokens and API keys). `sslkey` is a path, not a secret.
_SECRET_NAME = r"[\w.-]*(?:password|passwd|pwd|token|secret|api[_-]?key)[\w.-]*"
_SECRET_QUERY = re.compile(rf"([?&]{_SECRET_NAME})=([^&#]*)", re.I)
_SECRET_FLAG = re.compile(rf"^(--?{_SECRET_NAME})=(.*)$", re.I | re.S)
# user:password@ of an authority SQLAlchemy cannot parse (`postgresql://u:pw@[::1/db`): the password is
# everything up to the last '@' before the path
_USERINFO = re.compile(r"(://[^/?#:@]*:)([^/?#]*)@")
# the userinfo of an http(s)/ws(s) URL, up to the last '@' of its authority: a token when it has no ':'
# (the module docstring says why these schemes only)
_WEB_USERINFO = re.compile(r"^((?:https?|wss?)://)([^/?#]*)@", re.I)


def _password(uri: str) -> str | None:
    """The password of `uri`'s userinfo as written (percent-encoded), None when it has none."""
    found = _USERINFO.search(uri)
    return found.group(2) if found and found.group(2) else None


def _token(uri: str) -> str | None:
    """The bare token of an http(s)/ws(s) URL's userinfo as written, None when it has none."""
    found = _WEB_USERINFO.match(uri)
    return found.group(2) if found and found.group(2) and ":" not in found.group(2) else None


def masked(uri: str) -> str:
    """A URI fit for messages and logs: a URL's password or bare token and its query's secrets hidden (shown
    as given otherwise)."""
    from sqlalchemy.engine import make_url

    try:
        shown = make_url(uri).render_as_string(hide_password=True) if _password(uri) else uri
    except Exception:  # not a URL SQLAlchemy parses: the userinfo's password all the same
        shown = _USERINFO.sub(rf"\1{HIDDEN}@", uri, count=1)
    if _password(shown) not in (None, HIDDEN):   # a form SQLAlchemy read otherwise (`http://u:p@h`)
        shown = _USERINFO.sub(rf"\1{HIDDEN}@", shown, count=1)
    if _token(shown):
        shown = _WEB_USERINFO.sub(rf"\1{HIDDEN}@", shown, count=1)
    return _SECRET_QUERY.sub(rf"\1={HIDDEN}", shown)


def has_secret(uri: str) -> bool:
    """Whether `uri` holds a password, a bare token or a secret query value (what `masked` hides)."""
    return bool(_password(uri) or _token(uri)) or any(v for _, v in _SECRET_QUERY.findall(uri))


def secrets_of(uri: str) -> list[str]:
    """The secret values `uri` holds, each as written and percent-decoded."""
    values = [v for v in [_password(uri), _token(uri), *(v for _, v in _SECRET_QUERY.findall(uri))] if v]
    return sorted({form for v in values for form in (v, unquote(v), quote(unquote(v), safe="")) if form},
                  key=len, reverse=True)


def scrubbed(text: str, uris: list[str | None]) -> str:
    """`text` with every secret of `uris` (passwords, bare tokens, secret query values) hidden, however it is quoted
    there: for messages that may quote a URL (an exception's, a driver's error)."""
    for uri in uris:
        # a secret of 1-3 characters protects nothing and would blot out ordinary words
        for secret in [s for s in secrets_of(uri) if len(s) >= MIN_SCRUBBED] if uri else []:
            text = text.replace(secret, HIDDEN)
    return text


def masked_arg(arg: str) -> str:
    """One word of a command line with its secrets hidden: a URL (`--tracking-uri postgresql://u:PW@h/db`,
    `KEY=URL`, `--flag=URL`) and a secret flag's value (`--redis-password=PW`)."""
    flag = _SECRET_FLAG.match(arg)
    if flag:
        return f"{flag.group(1)}={HIDDEN}"
    if "://" not in arg:
        return arg
    key, eq, value = arg.partition("=")
    if eq and "://" not in key:
        return f"{key}={masked(value)}"
    return masked(arg)


def is_secret_flag(arg: str) -> bool:
    """Whether `arg` is a flag whose next word is a secret (`--redis-password PW`)."""
    return bool(re.fullmatch(rf"--?{_SECRET_NAME}", arg, re.I))
