"""The reproduction document's order: `Reproduction` is the runs read (`ReproductionData`) and the
sections in the order docs/reproduction.md shows them. No section reads another's output, so this is
the only place the order is written."""

from __future__ import annotations

from embinit.reproduction.beyond import beyond_sections
from embinit.reproduction.blog import blog_section
from embinit.reproduction.data import ReproductionData
from embinit.reproduction.export import Section
from embinit.reproduction.findings import findings_section
from embinit.reproduction.runs import how_it_was_run
from embinit.reproduction.similarity import similarity_section
from embinit.reproduction.table4 import table4_section
from embinit.reproduction.tables import settings, table1, table2, table3


class Reproduction(ReproductionData):
    def build(self) -> list[Section]:
        return [settings(self), table1(self), table2(self), table3(self), table4_section(self),
                similarity_section(self), blog_section(self), findings_section(self), *beyond_sections(self),
                how_it_was_run(self)]
