"""Init specs: what the user writes (`glove+standardize`, or a dict) and the paper's label for it.

Grammar of the short form: `SOURCE[+TRANSFORM]...`, e.g. `xavier`, `glove`, `glove+standardize`,
`bert+match`, `t5+shuffle`. SOURCE is a random init (`INITS`) or a pretrained source family
(`SOURCES`); transforms (`TRANSFORMS`) apply in order and only to pretrained sources, except those
marked `any_source` (`rescale`). A transform with an argument is written `NAME=ARG`: `glove+rescale=4x`.
The structured form is a dict with the keys of `InitSpec` (`source`, `transform` or `transforms`, `oov`, `lowercase`,
`pretrained`, `name`); unknown keys are an error.

Labels follow the paper (section 3.4): `standardize` appends `_Xavier` (GloVe -> GloVe_Xavier),
`match` prefixes `Xavier_` (BERT -> Xavier_BERT), `shuffle` appends `_Shuffled` (T5 -> T5_Shuffled),
`shuffle_elements` appends `_ShuffledElements` (GloVe -> GloVe_ShuffledElements), `rescale=4x` appends
`@4x` (GloVe_Shuffled@4x).
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

from embinit.errors import EmbinitError, unknown_name


class InitSpecError(EmbinitError):
    """An invalid init spec; `field` names the structured form's key at fault (`source`, `transform`,
    `oov`), None when the problem is the spec as a whole."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Entry:
    """One registry name: its label in reports, its one-line description and its function.

    `function` is "module:attribute", imported on first use (`load()`), so that parsing and validating
    init specs never imports torch. For a transform, `label` formats the source's label ("{}_Xavier").
    """

    label: str
    description: str
    function: str = ""           # sources have none: table.py picks a loader by file format
    default: str | None = None   # sources: the default location (path or hub id)
    subword: bool = False        # sources: a Hugging Face model that brings its own tokenizer
    argument: str = ""           # transforms: the required `NAME=ARG` argument's grammar ("" = none)
    any_source: bool = False     # transforms: also applies to random inits (the whole drawn table)
    takes_pe: bool = False       # transforms: targets a statistic of the PE table, so build_table passes
                                 # its `pe` (embinit.stats.PETable) as the keyword `pe`
    covers_all: bool = False     # transforms: replaces every row of the table, so no row is left for an
                                 # OOV rule to fill (`oov_applies`)

    def load(self) -> Callable:
        module, attribute = self.function.split(":")
        return getattr(importlib.import_module(module), attribute)


def _random(name: str, label: str, description: str) -> Entry:
    return Entry(label, description, f"embinit.init.random:{name}")


RANDOM_INITS = {
    "xavier": _random("xavier", "Xavier",
                      "i.i.d. U(-sqrt(6/(N+D)), +sqrt(6/(N+D))), as in the paper (Glorot & Bengio 2010)"),
    "xavier_normal": _random("xavier_normal", "XavierNormal",
                             "i.i.d. N(0, 2/(N+D)): Xavier's variance with a normal shape"),
    "normal": _random("normal", "Normal", "i.i.d. N(0, 0.02^2), GPT-style"),
}

SOURCE_FAMILIES = {
    "glove": Entry("GloVe", "GloVe text file `word v1 ... vD` (or .gz, or a .zip holding it)"),
    "word2vec": Entry("Word2Vec", "word2vec text with an `N D` header, or binary (.bin; told by the content); "
                                  "or .gz, or a .zip holding it"),
    "fasttext": Entry("FastText", "fastText .vec text with an `N D` header (or .gz, or a .zip holding it)"),
    "npy": Entry("Pretrained", "a .npy matrix [V, D] plus its vocabulary file (X.vocab.txt)"),
    "bert": Entry("BERT", "BERT input embeddings + WordPiece tokenizer (D=768)", default="bert-base-uncased",
                  subword=True),
    "mbert": Entry("mBERT", "multilingual BERT embeddings (D=768)", default="bert-base-multilingual-cased",
                   subword=True),
    "t5": Entry("T5", "T5 shared embeddings + SentencePiece tokenizer (t5-small, D=512)", default="t5-small",
                subword=True),
    "mt5": Entry("mT5", "multilingual T5 embeddings (mt5-base, D=768)", default="google/mt5-base", subword=True),
    "hf": Entry("Pretrained", "any Hugging Face model folder or hub id: input embeddings + tokenizer",
                subword=True),
    "pretrained": Entry("Pretrained", "any of the above, format detected from the path"),
}

TRANSFORM_INFO = {
    "standardize": Entry("{}_Xavier", "Pretrained_Xavier (eq. 1): (x - mean_p) * sigma_x / sigma_p on the found rows",
                         "embinit.init.transforms:standardize"),
    "match": Entry("Xavier_{}", "Xavier_Pretrained (eq. 4): a Xavier table rescaled to the pretrained mean/std "
                   "(all rows)", "embinit.init.transforms:match", covers_all=True),
    "shuffle": Entry("{}_Shuffled", "Pretrained_Shuffled: permute the found rows and the columns (seeded); values "
                     "unchanged", "embinit.init.transforms:shuffle"),
    "shuffle_elements": Entry("{}_ShuffledElements", "Pretrained_Shuffled by elements (the paper's Finding 3 "
                              "wording): permute all values of the found rows as one list (seeded); values "
                              "unchanged, rows broken up", "embinit.init.transforms:shuffle_elements"),
    "rescale": Entry("{}@{arg}", "rescale=TARGET: center the rows and scale them to a target std: an absolute "
                     "sigma (rescale=0.05), a multiple of Xavier's sigma (rescale=4x) or a target absorption "
                     "ratio (rescale=absorption:0.5); any source, random inits included",
                     "embinit.init.rescale:rescale", argument="SIGMA | Kx | absorption:R (positive numbers)",
                     any_source=True, takes_pe=True),
}


def _oov(function: str, description: str) -> Entry:
    return Entry("", description, f"embinit.init.oov:{function}")


OOV_INFO = {
    "xavier": _oov("xavier_rows", "rows the source lacks keep Xavier values (embinit's default; the paper "
                                "never says how it filled missing rows)"),
    "mean": _oov("mean_rows", "mean of the found rows (after the transform)"),
    "mean_cov": _oov("mean_cov_rows", "sampled from N(mean, covariance) of the found rows (after the transform)"),
    "subword_mean": _oov("subword_mean_rows",
                         "mean of the source rows of the pieces the source tokenizer splits the token into"),
    "zeros": _oov("zero_rows", "zero vectors"),
    "focus": Entry("", "FOCUS-style (Dobler & de Melo 2023): sparsemax(cosine similarity of fastText vectors "
                   "trained on the task's training text) mix of the found rows (after the transform)",
                   "embinit.init.focus:focus_rows"),
}

DEFAULT_OOV = "xavier"
SPEC_KEYS = ("source", "transform", "transforms", "oov", "lowercase", "pretrained", "name")


@dataclass(frozen=True)
class InitSpec:
    """A parsed init spec. `pretrained` and `oov` here are defaults that `build_table` may override."""

    source: str
    transforms: tuple[str, ...] = ()
    oov: str | None = None
    lowercase: bool = False       # look up token.lower() when the exact token is missing
    pretrained: str | None = None  # path or hub id; None -> the family's default (if any)
    name: str | None = None       # label for the source in reports (default: the family's label)

    @property
    def is_pretrained(self) -> bool:
        return self.source in SOURCE_FAMILIES

    @property
    def is_subword(self) -> bool:
        """True when the source is a Hugging Face model that brings its own tokenizer. The generic
        `pretrained` alias reports False: its format is known only once the path is inspected."""
        return self.is_pretrained and SOURCE_FAMILIES[self.source].subword

    @property
    def transform(self) -> str | None:
        return self.transforms[0] if self.transforms else None

    @property
    def label(self) -> str:
        base = self.name or (SOURCE_FAMILIES[self.source] if self.is_pretrained
                             else RANDOM_INITS[self.source]).label
        for t in self.transforms:
            name, _, arg = t.partition("=")
            base = TRANSFORM_INFO[name].label.format(base, arg=arg)
        return base

    def __str__(self) -> str:
        return "+".join((self.source,) + self.transforms)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["transforms"] = list(self.transforms)
        return d


def _check_name(kind: str, name: Any, valid, field: str) -> str:
    if not isinstance(name, str) or name not in valid:
        raise InitSpecError(str(unknown_name(kind, str(name), valid)), field)
    return name


def parse_sigma_target(arg: str) -> tuple[str, float]:
    """`rescale`'s argument: ("sigma", 0.05) | ("xavier", 4.0) from "4x" | ("absorption", 0.5)."""
    kind, text = ("absorption", arg.split(":", 1)[1]) if arg.startswith("absorption:") else (
        ("xavier", arg[:-1]) if arg.endswith("x") else ("sigma", arg))
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InitSpecError(f"rescale target {arg!r} is not {TRANSFORM_INFO['rescale'].argument}, e.g. "
                           "rescale=0.05, rescale=4x or rescale=absorption:0.5", "transform")
    return kind, value


def reads_pe_table(spec: Any) -> bool:
    """Whether the table of an init spec depends on the PE table it is built against (`build_table(pe=...)`):
    it has a `rescale=absorption:R`. An invalid spec: False (the trainer refuses it with its own message)."""
    try:
        transforms = parse_init_spec(spec).transforms
    except EmbinitError:
        return False
    return any(TRANSFORM_INFO[name].takes_pe and parse_sigma_target(arg)[0] == "absorption"
               for name, _, arg in (t.partition("=") for t in transforms))


def oov_applies(spec: Any) -> bool:
    """Whether the table of an init spec can have rows an OOV rule fills: a pretrained source's, unless a
    transform replaces every row (`match`). A random init draws every row; for those tables the rule
    changes nothing. An invalid spec: True (the trainer refuses it with its own message)."""
    try:
        parsed = parse_init_spec(spec)
    except EmbinitError:
        return True
    return parsed.is_pretrained and not any(TRANSFORM_INFO[t.partition("=")[0]].covers_all
                                            for t in parsed.transforms)


def _check_transform(token: Any) -> str:
    """A transform token, `NAME` or `NAME=ARG`; the argument is required exactly when the entry has one."""
    name, eq, arg = str(token).partition("=") if isinstance(token, str) else (token, "", "")
    _check_name("transform", name, TRANSFORM_INFO, "transform")
    grammar = TRANSFORM_INFO[name].argument
    if grammar and not arg:
        raise InitSpecError(f"transform {name!r} needs a target: {name}={grammar}, e.g. {name}=4x", "transform")
    if eq and not grammar:
        raise InitSpecError(f"transform {name!r} takes no argument, got {token!r}", "transform")
    if name == "rescale":
        parse_sigma_target(arg)
    return token


def _validated(source: str, transforms, oov, lowercase, pretrained, name) -> InitSpec:
    """The InitSpec, or one InitSpecError naming each part that is wrong (`glvoe+standardise`: both the
    source and the transform, not the source alone and the transform one fix later)."""
    problems: list[InitSpecError] = []

    def check(fn, *args) -> None:
        try:
            fn(*args)
        except InitSpecError as e:
            problems.append(e)
    check(_check_name, "init", source, list(RANDOM_INITS) + list(SOURCE_FAMILIES), "source")
    transforms = tuple(transforms)
    for t in transforms:
        check(_check_transform, t)
    if oov is not None:
        check(_check_name, "oov rule", oov, OOV_INFO, "oov")
    if not isinstance(lowercase, bool):
        problems.append(InitSpecError(f"init spec 'lowercase' must be true or false, got {lowercase!r}"))
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise InitSpecError("; ".join(map(str, problems)))
    fixed = [t for t in transforms if not TRANSFORM_INFO[t.partition("=")[0]].any_source]
    if fixed and source in RANDOM_INITS:
        raise InitSpecError(f"transform {fixed[0]!r} applies to pretrained sources, not to the random "
                           f"init {source!r}; pretrained sources: {sorted(SOURCE_FAMILIES)}")
    return InitSpec(source, transforms, oov, lowercase, pretrained, name)


def _from_string(text: str) -> InitSpec:
    parts = [p.strip().lower() for p in text.strip().split("+")]
    if not parts or any(not p for p in parts):
        raise InitSpecError(f"cannot parse init spec {text!r}; expected SOURCE[+TRANSFORM], e.g. glove+standardize")
    return _validated(parts[0], parts[1:], None, False, None, None)


def _from_mapping(data: Mapping[str, Any]) -> InitSpec:
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise InitSpecError(f"unknown init spec keys {unknown}; valid: {list(SPEC_KEYS)}")
    if "source" not in data:
        raise InitSpecError(f"init spec {dict(data)!r} has no 'source'", "source")
    transforms = data.get("transforms") or []
    if isinstance(transforms, str):
        transforms = [transforms]
    if data.get("transform"):
        transforms = [data["transform"], *transforms]
    return _validated(data["source"], transforms, data.get("oov"), data.get("lowercase", False),
                      data.get("pretrained"), data.get("name"))


def parse_init_spec(spec: "str | Mapping[str, Any] | InitSpec") -> InitSpec:
    """Parse a short string, a dict, or an InitSpec (re-validated) into an InitSpec."""
    if isinstance(spec, InitSpec):
        return _validated(spec.source, spec.transforms, spec.oov, spec.lowercase, spec.pretrained,
                          spec.name)
    if isinstance(spec, str):
        return _from_string(spec)
    if isinstance(spec, Mapping):
        return _from_mapping(spec)
    raise InitSpecError(f"init spec must be a string or a mapping, got {type(spec).__name__}: {spec!r}")
