"""Analyses that ask *why* an init helps or hurts; each reads tables and checkpoints, never trains.

- `analogy` / `table4`: 3CosAdd word analogies and the paper's Table-4 transformation chain
  (`evaluate_analogies`, `load_questions`, `apply_chain`, `run_table4`);
- `similarity` / `neighbours`: KNN match similarity between two spaces, blocked exact top-k
  (`knn_match_similarity`, `knn`);
- `probe`: how much position information survives x·sqrt(D) + PE (`probe_table`, `probe_checkpoint`,
  `probe_init`);
- `callbacks`: the registry of analyses a trial logs during training (`ANALYSES`, `make_callbacks`); one
  module per callback: `similarity_callback` (`SimilarityCallback`), `probe_callback` (`ProbeCallback`),
  with `snapshots` (the K-NN snapshot files, `similarity_curve`) and `trial_context` (what they read);
- `sources`: tables from checkpoints, vector files and MLflow runs (`load_embeddings`).
"""

from embinit.analysis.analogy import AnalogyResult, evaluate_analogies, load_questions, parse_questions
from embinit.analysis.callbacks import ANALYSES, make_callbacks
from embinit.analysis.neighbours import knn
from embinit.analysis.probe import probe_checkpoint, probe_init, probe_table
from embinit.analysis.probe_callback import ProbeCallback
from embinit.analysis.similarity import SimilarityResult, align, knn_match_similarity
from embinit.analysis.similarity_callback import SimilarityCallback
from embinit.analysis.snapshots import similarity_curve
from embinit.analysis.sources import Embeddings, load_embeddings
from embinit.analysis.table4 import TABLE4_ROWS, apply_chain, chain_label, run_table4

__all__ = ["ANALYSES", "AnalogyResult", "Embeddings", "ProbeCallback", "SimilarityCallback", "SimilarityResult",
           "TABLE4_ROWS", "align", "apply_chain", "chain_label", "evaluate_analogies", "knn",
           "knn_match_similarity", "load_embeddings", "load_questions", "make_callbacks",
           "parse_questions", "probe_checkpoint", "probe_init", "probe_table", "run_table4",
           "similarity_curve"]
