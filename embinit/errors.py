"""User-facing errors.

Anything a user can cause (a bad file, an unknown name, an invalid spec) raises `EmbinitError` with a
one-line message that names the problem and the offending value. The CLI prints it without a traceback
and exits non-zero; the service turns it into a 4xx.
"""


class EmbinitError(Exception):
    """A problem with the user's input, reported as one clear line."""


def unknown_name(kind: str, name: str, valid) -> EmbinitError:
    """The error for a name that is not in a registry, listing the valid ones."""
    return EmbinitError(f"{name!r} is not a registered {kind}; choose from {sorted(valid)}")
