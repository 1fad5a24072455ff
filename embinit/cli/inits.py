"""`embinit inits`: the registered random inits, pretrained sources, transforms and OOV rules."""

from __future__ import annotations

import json

SECTIONS = (("inits", "random inits"), ("sources", "pretrained sources"),
            ("transforms", "transforms (SOURCE+TRANSFORM)"), ("oov_rules", "oov rules (--oov)"))


def register(subparsers) -> None:
    p = subparsers.add_parser("inits", help="list init strategies, sources, transforms and OOV rules")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.set_defaults(func=run)


def run(args) -> int:
    from embinit.init import DESCRIPTIONS, SOURCES
    if args.json:
        print(json.dumps(DESCRIPTIONS, indent=2))
        return 0
    width = max(len(n) for d in DESCRIPTIONS.values() for n in d)
    for key, title in SECTIONS:
        print(f"{title}:")
        for name, desc in DESCRIPTIONS[key].items():
            default = f" [default: {SOURCES[name]}]" if key == "sources" and SOURCES.get(name) else ""
            print(f"  {name:<{width}}  {desc}{default}")
        print()
    print("examples: xavier, glove+standardize (GloVe_Xavier), bert+match (Xavier_BERT), t5+shuffle (T5_Shuffled)")
    return 0
