"""Which folders embinit trusts to hold pickles it loads (task cache entries, `init_from` checkpoints).

Unpickling runs code, so a process that serves other people's specs (the service's experiment drivers
and their trials) names its roots in `$EMBINIT_TRUSTED_ROOTS` (paths separated by `os.pathsep`): a
pickle whose real location (symlinks resolved) lies outside every root is then never loaded, and never
written; the sweep's write locations (Tune's storage, checkpoint folders, locks, KNN snapshots) are checked
again where they are used (`check_writable`), since a root's folder can be swapped for a symlink later.
Without the variable (the CLI, a user's own machine) every path is trusted.
"""

from __future__ import annotations

import os
from pathlib import Path

from embinit.cache_root import cache_root

TRUSTED_ROOTS_ENV = "EMBINIT_TRUSTED_ROOTS"


def trusted_roots() -> list[Path] | None:
    """The configured roots (real paths), None when the variable is unset (all trusted)."""
    value = os.environ.get(TRUSTED_ROOTS_ENV)
    if value is None:
        return None
    # embinit's own default cache folder is not something a spec can name, so it stays trusted.
    default = cache_root()
    return [Path(os.path.realpath(p)) for p in [*value.split(os.pathsep), default] if p]


def opened_path(fileobj) -> str:
    """The real path of an open file, as the kernel resolved it when it was opened: checking this one,
    not the name, leaves no window for a symlink swapped in between the check and the read."""
    fd_link = f"/proc/self/fd/{fileobj.fileno()}"
    return os.readlink(fd_link) if os.path.islink(fd_link) else os.path.realpath(fileobj.name)


def escapes(path: str | Path) -> bool:
    """Whether `path` is named inside a trusted root but really (symlinks resolved now) lies outside
    every root: a folder of a root swapped for a symlink after the spec was checked. Paths named outside
    the roots (embinit's own defaults, which no spec chooses) and the CLI (no roots) never escape."""
    roots = trusted_roots()
    if roots is None:
        return False
    named = Path(os.path.abspath(path))
    if not any(named.is_relative_to(root) for root in roots):
        return False
    return not is_trusted(path)


def check_writable(path: str | Path, what: str) -> Path:
    """`path` with every symlink resolved at the moment of use, to be written through; EmbinitError
    when it `escapes` the trusted roots."""
    if escapes(path):
        from embinit.errors import EmbinitError
        raise EmbinitError(f"{what} {path} leads to {os.path.realpath(path)}, outside the trusted roots; "
                           f"nothing is written there")
    return Path(os.path.realpath(path))


def is_trusted(path: str | Path) -> bool:
    """Whether `path`, with every symlink resolved, lies inside a trusted root."""
    roots = trusted_roots()
    if roots is None:
        return True
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(root) for root in roots)
