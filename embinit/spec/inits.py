"""A spec's embedding inits: `InitEntry` (one init per side) and the init-library queries the spec
needs (canonical string, source family, paper label). Parsing init specs never imports torch."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator

from embinit.errors import EmbinitError
from embinit.init.registry import (DEFAULT_OOV, SOURCE_FAMILIES, InitSpecError, oov_applies, parse_init_spec,
                                   parse_sigma_target)
from embinit.spec.models import _Strict
from embinit.spec.path_fields import PathStr
from embinit.spec.problems import InitFieldError


# Axes that are not hyperparameters but a transform appended to the target (only) table's init, e.g.
# `axes: {sigma: [0.25x, 1x, 4x, 16x]}` trains every init at each rescale target (the dose-response study).
INIT_AXES = {"sigma": "rescale"}


def init_axis_problem(name: str, value: Any) -> str | None:
    """Why `value` is not a value of the init axis `name` (None when it is)."""
    try:
        parse_sigma_target(str(value).strip().lower())
    except InitSpecError as e:
        return str(e)
    return None


def family_default(source: str) -> str | None:
    """The family's default location (a hub id for BERT/T5), None for file formats."""
    entry = SOURCE_FAMILIES.get(source)
    return entry.default if entry is not None else None


def init_string(spec: str | dict[str, Any]) -> str:
    """The canonical string form of an init spec (what `TrialConfig.init` holds): `glove+standardize`."""
    return str(parse_init_spec(spec))


def source_name(init: str | dict[str, Any] | None) -> str | None:
    """The pretrained source family an init spec draws from (e.g. "glove"), None for random inits."""
    if init is None:
        return None
    parsed = parse_init_spec(init)
    return parsed.source if parsed.is_pretrained else None


def init_label(init: str | dict[str, Any] | None) -> str:
    return parse_init_spec(init).label if init is not None else "?"


# An init spec string is never empty (the schema says so too, so clients see the rule).
InitString = Annotated[str, Field(min_length=1)]


class InitEntry(_Strict):
    """One embedding init: a spec string or the init library's structured form, per side for
    translation (`tgt` = target/only table, `src` = source table; src None = same as tgt)."""

    tgt: InitString | dict[str, Any]
    src: InitString | dict[str, Any] | None = None
    pretrained: PathStr | None = None      # path/hub id for tgt's source (overrides the spec's)
    src_pretrained: PathStr | None = None
    label: str | None = None           # report label; default: the paper's label of tgt (and src), with its own
                                       # OOV rule where that is not the default (`GloVe oov=zeros`)

    @classmethod
    def shorthand(cls, entry: Any) -> Any:
        if isinstance(entry, str):
            return {"tgt": entry}
        if isinstance(entry, dict) and not ({"tgt", "src"} & set(entry)):
            return {"tgt": entry}  # the init library's structured spec for the only/target side
        return entry

    @field_validator("tgt", "src")
    @classmethod
    def _valid_init(cls, v):
        if v is None:
            return v
        try:
            parse_init_spec(v)
        except EmbinitError as e:
            # The structured form's key at fault becomes part of the path (`inits[2].transform`).
            field = getattr(e, "field", None) if isinstance(v, dict) else None
            raise InitFieldError(str(e), field) from None
        if isinstance(v, str) and not v.strip():
            raise ValueError("an init spec must not be empty")
        return v

    @field_validator("src")
    @classmethod
    def _one_oov_rule(cls, v, info: ValidationInfo):
        """A trial has one OOV rule (`oov`), for both tables: the target side's. A source side's own rule
        that differs would be ignored, so it is refused: where the source table has rows a rule fills, to
        be given on the target side; where it has none (a random init, `match`), as a rule that does
        nothing (moving it to the target side would change the target table), unless it is the default rule
        written out."""
        tgt = info.data.get("tgt")
        own = v.get("oov") if isinstance(v, dict) else None
        if own is None or own == (tgt.get("oov") if isinstance(tgt, dict) else None):
            return v
        if not oov_applies(v):
            if own == DEFAULT_OOV:   # the default written out: nothing to mislead
                return v
            raise InitFieldError(f"oov {own!r} on the source side does nothing: its table has no row for an OOV "
                                 f"rule to fill ({init_label(v)}: {no_oov_rows([v])}); remove it", "oov")
        raise InitFieldError(f"oov {own!r} on the source side: a trial has one OOV rule, for both tables; "
                             "give it on the target side (`tgt: {..., oov: ...}`) or as the task's `oov`", "oov")

    def tgt_str(self) -> str:
        return init_string(self.tgt)

    def src_str(self) -> str | None:
        return None if self.src is None else init_string(self.src)

    def side_option(self, side: str, name: str) -> Any:
        """An option (`pretrained`, `oov`, `lowercase`) given in a side's structured init spec."""
        spec = self.tgt if side == "tgt" else self.src
        return spec.get(name) if isinstance(spec, dict) else None

    def label_for(self, translation: bool = True) -> str:
        if self.label:
            return self.label
        tgt = init_label(self.tgt)
        if translation and self.src is not None:
            src = init_label(self.src)
            # The paper varies the target (English) table and keeps Xavier on the German side for GloVe.
            tgt = tgt if src in (tgt, "Xavier") else f"{tgt}|src:{src}"
        return tgt + self._oov_text(translation)

    def _oov_text(self, translation: bool) -> str:
        """` oov=zeros` (as the report writes an axis value) for the entry's own OOV rule, the target side's
        `oov` that its trials take, where it is not the default and a table of the entry has rows it fills
        (`oov_applies`); "" otherwise, so an init's label without a rule of its own is what it was."""
        sides = [self.tgt] + ([self.src] if translation and self.src is not None else [])
        return oov_text(self.side_option("tgt", "oov"), sides)


def no_oov_rows(sides: list[Any]) -> str:
    """Why the tables of init specs `sides` (none of which `oov_applies`) have no row for an OOV rule."""
    why = {"match replaces every row" if parse_init_spec(side).is_pretrained else "a random init draws every row"
           for side in sides}
    return " and ".join(sorted(why))


def oov_text(rule: str | None, sides: list[Any]) -> str:
    """` oov=RULE`, what a label says of an OOV rule that is not the default and fills rows of a table of
    `sides` (their init specs); "" otherwise. An init entry's label (`GloVe oov=zeros`) and `embinit
    train`'s summary both say a rule so."""
    if rule in (None, DEFAULT_OOV) or not any(oov_applies(side) for side in sides if side is not None):
        return ""
    return f" oov={rule}"


def with_init_axes(init: InitEntry, overrides: dict[str, Any]) -> InitEntry:
    """`init` with the init axes in `overrides` (popped from it) appended to its target side; the source
    side keeps the entry's init (for `xavier` alone: an explicit Xavier source table)."""
    tokens = [f"{INIT_AXES[name]}={str(overrides.pop(name)).strip().lower()}"
              for name in list(overrides) if name in INIT_AXES]
    if not tokens:
        return init
    tgt = init.tgt
    if isinstance(tgt, dict):
        extra = [tgt["transform"]] if tgt.get("transform") else []
        old = tgt.get("transforms") or []
        new_tgt = {k: v for k, v in tgt.items() if k != "transform"}
        new_tgt["transforms"] = extra + ([old] if isinstance(old, str) else list(old)) + tokens
    else:
        new_tgt = "+".join([tgt.strip(), *tokens])
    return init.model_copy(update={"tgt": new_tgt, "src": init.src if init.src is not None else init.tgt})
