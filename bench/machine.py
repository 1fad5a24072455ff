"""What every benchmark records of the machine it ran on: the CPU model as `lscpu` names it."""

from __future__ import annotations

from embinit.provenance import cpu_model  # noqa: F401  (the benches' name for it)


