"""The reproduction report (docs/reproduction.md): the paper's Tables 1-4 beside embinit's own runs, read
from MLflow alone, with mean, σ, n and 95% CIs, a verdict on each of the paper's three findings computed
from the numbers, the KNN match similarity between seeds, and the wall-clock of every run.

Inputs (all MLflow experiments in one tracking store):
- translation and classification groups (`Group`): sweeps of one task x {Xavier, P, P_Xavier,
  P_Shuffled, Xavier_P} x seeds, P a pretrained source (GloVe, MiniLM...). Rows are matched to the
  paper's by *role* (the label with the source's name replaced by `P`, embinit.paper);
- the Table-3 ablation: trials of the translation group's experiment whose configs switch
  `train_embeddings` / `pos_encoding` (cells are read from each trial's config, so a cell shared with
  the main sweep is the same run);
- Table 4: runs of kind `analogy` (`embinit analogy --table4 --log-experiment NAME`), one per seed of
  the random positions (the newest of a seed logged again; runs of one configuration, the others named
  and left out: `embinit.reproduction.table4_runs`);
- KNN match similarity: the `sim/knn_<metric>_mean` history the sweep's `analyses.similarity` logs on
  every seed but the reference one, its interval over the pairs given that one reference seed; its K and
  neighbour measure as each run recorded them, else from the spec.yaml of the sweep run that trained it
  (`embinit.reproduction.knn_settings`).

Verdicts compare two inits by a − b with a 95% interval: the paired t interval on per-seed differences
(seeds are paired across inits: one seed, one data order) of the seeds both inits share, Welch's only
where they share none (`embinit.comparison`, also used by the report).
"reproduces" when the interval lies on the paper's side of 0, "contradicts" on the other side,
"inconclusive" when it includes 0 and its half-width is larger than the difference the paper reports
(`compare.verdict` has the other readings: on par, does not reproduce); every finding is
checked on the task metric and on the best validation loss, and a disagreement between them is marked.
"""

from embinit.reproduction.compare import paired, verdict, welch
from embinit.reproduction.export import Section, render, write_exports
from embinit.reproduction.inputs import ROLE_TEXT, ROLES, Group, Inputs, Trial, load_trials, role_of
from embinit.reproduction.document import Reproduction

__all__ = ["ROLES", "ROLE_TEXT", "Group", "Inputs", "Reproduction", "Section", "Trial", "load_trials", "render",
           "paired", "role_of", "verdict", "welch", "write_exports"]
