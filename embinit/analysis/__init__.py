"""Analyses that ask *why* an init helps or hurts; each reads tables and checkpoints, never trains.

- `analogy` / `table4`: 3CosAdd word analogies and the paper's Table-4 transformation chain
  (`evaluate_analogies`, `load_questions`, `apply_chain`, `run_table4`);
- `similarity` / `neighbours`: KNN match similarity between two spaces, blocked exact top-k
  (`knn_match_similarity`, `knn`);
- `probe`: how much position information survives x·sqrt(D) + PE (`probe_table`, `probe_checkpoint`,
  `probe_init`);
- `callbacks`: the trainer callbacks that log them during training (`SimilarityCallback`,
  `ProbeCallback`, `make_callbacks`, `similarity_curve`);
- `sources`: tables from checkpoints, vector files and MLflow runs (`load_embeddings`).
"""

from embinit.analysis.analogy import AnalogyResult, evaluate_analogies, load_questions, parse_questions
from embinit.analysis.callbacks import ProbeCallback, SimilarityCallback, make_callbacks, similarity_curve
from embinit.analysis.neighbours import knn
from embinit.analysis.probe import probe_checkpoint, probe_init, probe_table
from embinit.analysis.similarity import SimilarityResult, align, knn_match_similarity
from embinit.analysis.sources import Embeddings, load_embeddings
from embinit.analysis.table4 import TABLE4_ROWS, apply_chain, chain_label, run_table4

__all__ = ["AnalogyResult", "Embeddings", "ProbeCallback", "SimilarityCallback", "SimilarityResult",
           "TABLE4_ROWS", "align", "apply_chain", "chain_label", "evaluate_analogies", "knn",
           "knn_match_similarity", "load_embeddings", "load_questions", "make_callbacks",
           "parse_questions", "probe_checkpoint", "probe_init", "probe_table", "run_table4",
           "similarity_curve"]
