"""`embinit experiments`: list, follow, read, cancel and submit experiments of an `embinit serve` API.

A thin client of the HTTP API, like `ray job` or the `mlflow` CLI: each subcommand is one request;
`--json` prints the API's answer as-is.

The API is `--url` (default `EMBINIT_API_URL`, else http://127.0.0.1:8000); the bearer token is `--token`
(default `EMBINIT_API_TOKEN`, the variable the server reads its own token from)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import quote
from pathlib import Path

from embinit.cli.arg_types import http_url
from embinit.commands import command
from embinit.errors import EmbinitError, ListedError

DEFAULT_URL = "http://127.0.0.1:8000"


def register(subparsers) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", type=http_url, default=None,
                        help=f"the API (default: EMBINIT_API_URL, else {DEFAULT_URL})")
    common.add_argument("--token", default=None, help="bearer token (default: EMBINIT_API_TOKEN)")
    p = subparsers.add_parser("experiments", help="submit, list, follow, read and cancel experiments of an `embinit "
                                                  "serve` API", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = sub.add_parser("list", parents=[common], help="experiments, newest first")
    s.add_argument("--status", choices=("queued", "running", "succeeded", "failed", "cancelled"))
    s.add_argument("--limit", type=int, default=50)
    s.add_argument("--json", action="store_true", help="the API's JSON")
    s.set_defaults(func=_list)
    s = sub.add_parser("status", parents=[common], help="one experiment's state, counts, progress and ETA, "
                                                        "and its running trials")
    s.add_argument("id")
    s.add_argument("--json", action="store_true", help="the API's JSON (with the spec)")
    s.add_argument("--watch", action="store_true", help="print it again every --every seconds until it ends")
    s.add_argument("--every", type=float, default=5.0, metavar="S", help="seconds between --watch reads (5)")
    s.set_defaults(func=_status)
    s = sub.add_parser("results", parents=[common], help="Table 1 of an experiment")
    s.add_argument("id")
    s.add_argument("--format", choices=("markdown", "csv", "json", "latex"), default="markdown")
    s.add_argument("--baseline", metavar="LABEL", default=None, help="compare each init with this one "
                   "(default Xavier)")
    s.set_defaults(func=_results)
    s = sub.add_parser("cancel", parents=[common], help="stop an experiment (finished trials stay)")
    s.add_argument("id")
    s.set_defaults(func=_cancel)
    s = sub.add_parser("submit", parents=[common], help="submit a spec file (YAML or JSON)")
    s.add_argument("spec", type=Path)
    s.add_argument("--rerun", action="store_true", help="start again even if this spec was submitted")
    s.set_defaults(func=_submit)


def _detail(body: bytes) -> list[str]:
    """What an answer's body says is wrong: one item, or a 422's every problem (of a spec, or of a query
    parameter) one each."""
    try:
        detail = json.loads(body).get("detail", body.decode())
    except (ValueError, AttributeError):
        return [body.decode(errors="replace").strip()[:500]]
    if isinstance(detail, list):
        return [f"{_loc(d['loc'])}: {d['msg']}" if d.get("loc") else d.get("msg", str(d)) for d in detail]
    return [str(detail)]


def _loc(loc) -> str:
    """A problem's place: a spec's field path as it comes, a request parameter's (`query.limit`) name
    alone; a list (`["query", "limit"]`, from an API older than the one 422 shape) the same way."""
    parts = [str(p) for p in loc] if isinstance(loc, list) else str(loc).split(".", 1)
    if parts[:1] in (["query"], ["path"]) and len(parts) > 1:
        parts = parts[1:]
    return ".".join(parts)


def request(args, method: str, path: str, body: bytes | None = None,
            content_type: str | None = None) -> tuple[int, bytes, str]:
    """(status, body, content type) of one request; errors as `EmbinitError` naming the API."""
    try:   # --url is checked by argparse; the variable is checked here
        base = http_url(args.url or os.environ.get("EMBINIT_API_URL") or DEFAULT_URL)
    except argparse.ArgumentTypeError as e:
        raise EmbinitError(f"EMBINIT_API_URL: {e}") from None
    token = args.token or os.environ.get("EMBINIT_API_TOKEN")
    req = urllib.request.Request(base + path, data=body, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read(), r.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        detail = _detail(e.read())
        if e.code == 401:
            hint = "pass --token or set EMBINIT_API_TOKEN" if not token else "check --token / EMBINIT_API_TOKEN"
            raise EmbinitError(f"{base} refused the request ({'; '.join(detail)}); {hint}") from None
        raise ListedError(f"{method} {base}{path}: {e.code}", detail) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise EmbinitError(f"cannot reach the embinit API at {base} ({reason}); start it with "
                           f"`{command('embinit', 'serve')}` or point --url / EMBINIT_API_URL at it") from None


def _json(args, method: str, path: str, **kw) -> dict:
    return json.loads(request(args, method, path, **kw)[1])


def _counts(exp: dict) -> str:
    c = exp.get("counts", {})
    done = c.get("finished", 0) + c.get("reused", 0)
    text = f"{done}/{exp['n_trials']} done"
    extra = [f"{c[k]} {k}" for k in ("running", "failed", "cancelled", "reused") if c.get(k)]
    return text + (f" ({', '.join(extra)})" if extra else "")


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{s:02d}s"


def _list(args) -> int:
    query = f"?limit={args.limit}" + (f"&status={args.status}" if args.status else "")
    page = _json(args, "GET", "/experiments" + query)
    if args.json:
        print(json.dumps(page, indent=2))
        return 0
    rows = [("ID", "NAME", "STATUS", "TRIALS", "PROGRESS", "ETA", "CREATED")]
    for e in page["items"]:
        rows.append((e["id"], e["name"], e["status"], _counts(e), f"{e['progress']:.0%}", _eta(e.get("eta_s")),
                     e["created_at"][:19].replace("T", " ")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    if page["total"] > len(page["items"]):
        print(f"({len(page['items'])} of {page['total']}; --limit shows more)")
    return 0


def _print_status(e: dict) -> None:
    # a cancel still under way says so; once the experiment has ended its status says what happened
    stopping = e.get("cancel_requested") and e["status"] not in TERMINAL
    print(f"{e['id']}  {e['name']}  {e['status']}{'  (cancel requested)' if stopping else ''}")
    print(f"  trials: {_counts(e)}, progress {e['progress']:.0%}, ETA {_eta(e.get('eta_s'))}")
    mlflow = e.get("mlflow") or {}
    print(f"  MLflow: experiment {mlflow.get('experiment_name')!r} in {mlflow.get('tracking_uri')}"
          + (f"  {mlflow['url']}" if mlflow.get("url") else ""))
    if e.get("error"):
        print(f"  error: {e['error']}")
    rows = [(t.get("trial", "?"), t.get("epoch", "-"), t.get("best", "-"), t.get("eta", "?"))
            for t in e.get("running_trials") or []]
    if rows:
        metrics = {t.get("metric") for t in e["running_trials"]}
        best = f"best {metrics.pop()}" if len(metrics) == 1 and None not in metrics else "best so far"
        rows.insert(0, ("running trial", "epoch", best, "ETA"))
        widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
        for r in rows:
            print("    " + "  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())


TERMINAL = ("succeeded", "failed", "cancelled")


def _status(args) -> int:
    while True:
        exp = _json(args, "GET", f"/experiments/{args.id}")
        if args.json:
            print(json.dumps(exp, indent=2))
        else:
            _print_status(exp)
        if not args.watch or exp["status"] in TERMINAL:
            return 0
        sys.stdout.flush()
        time.sleep(max(0.1, args.every))
        print()


def _results(args) -> int:
    query = f"format={args.format}" + (f"&baseline={quote(args.baseline)}" if args.baseline else "")
    _, body, _ = request(args, "GET", f"/experiments/{args.id}/results?{query}")
    text = body.decode()
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _cancel(args) -> int:
    exp = _json(args, "DELETE", f"/experiments/{args.id}")
    print(f"cancel requested for {exp['id']}")
    _print_status(exp)
    return 0


def _submit(args) -> int:
    try:
        body = args.spec.read_bytes()
    except OSError as e:
        raise EmbinitError(f"cannot read spec file {str(args.spec)!r}: {e.strerror}") from None
    kind = "application/json" if args.spec.suffix == ".json" else "application/yaml"
    status, answer, _ = request(args, "POST", "/experiments" + ("?rerun=true" if args.rerun else ""),
                                body=body, content_type=kind)
    sub = json.loads(answer)
    # the API it was submitted to, where --url named it (a bare status command would ask the default one);
    # a --token is not printed (it would stay in the terminal and the logs)
    url = ("--url", args.url) if args.url else ()
    print(f"{'submitted' if sub['created'] else 'already submitted'}: {sub['id']} ({sub['n_trials']} trials, "
          f"{sub['status']}); follow it with `{command('embinit', 'experiments', 'status', sub['id'], *url)}`")
    for notice in sub.get("notices") or []:
        print(f"  note: {notice}")
    return 0
