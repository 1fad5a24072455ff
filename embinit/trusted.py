"""Which folders embinit trusts to hold pickles it loads (task cache entries, `init_from` checkpoints).

Unpickling runs code, so a process that serves other people's specs (the service's experiment drivers
and their trials) names its roots in `$EMBINIT_TRUSTED_ROOTS` (paths separated by `os.pathsep`): a
pickle whose real location (symlinks resolved) lies outside every root is then never loaded, and never
written. Without the variable (the CLI, a user's own machine) every path is trusted.
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


def is_trusted(path: str | Path) -> bool:
    """Whether `path`, with every symlink resolved, lies inside a trusted root."""
    roots = trusted_roots()
    if roots is None:
        return True
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(root) for root in roots)
