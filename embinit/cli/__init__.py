"""The `embinit` command line.

Every module in this package that defines `register(subparsers)` contributes its subcommands; the
module adds a parser and sets `func` (a callable taking the parsed args and returning an exit code).
User errors (`EmbinitError`) print on stderr with exit code 2, never a traceback: one line, or one line
per problem where an error lists several (an invalid spec's, the API's 422).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from embinit.errors import EmbinitError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embinit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and isinstance(getattr(args, "overrides", None), list) and all(
            "=" in e and not e.startswith("-") for e in extra):
        args.overrides += extra          # `embinit run SPEC --dry-run epochs=2`: overrides after an option
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    args.command_line = argv is None   # the process's own command (`embinit run` may supervise its driver)
    try:
        return int(args.func(args) or 0)
    except EmbinitError as e:
        print(f"embinit: error: {e.listing()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("embinit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # output piped into e.g. `head`, which closed early: not an error of ours
        sys.stderr.close()
        return 0
    except Exception as e:   # a store damaged past its schema, found only when a query reaches the damage
        from embinit.tracking.store_check import damage_found, damaged_message
        if (words := damage_found(e)) is None:
            raise
        print(f"embinit: error: {damaged_message(getattr(args, 'tracking_uri', None), words)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
