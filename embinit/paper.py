"""The paper's published numbers (Kim, Balasubramanian, Kang, arXiv 2407.12514), transcribed from its
tables for side-by-side comparison in `embinit reproduction`. Rows are keyed by *role*: the init with the
pretrained source's name replaced by `P` (`P`, `P_Xavier`, `P_Shuffled`, `Xavier_P`, `Xavier`), so one
table serves every source (the paper's GloVe or BERT row beside embinit's GloVe-50d or MiniLM row).

Only numbers the paper prints are here; a cell it does not print is absent (shown as "—").
"""

from __future__ import annotations

# Table 1 (and Table 7 for Xavier_P): (mean, σ, mean best epoch) of the reported metric.
# Multi30k: test BLEU at the lowest-validation-loss epoch; SST-2: best validation accuracy (%).
TABLE1: dict[tuple[str, str], dict[str, tuple[float, float, float]]] = {
    ("multi30k", "GloVe"): {"Xavier": (37.3, 0.4, 11.7), "P": (34.1, 0.7, 20.0), "P_Xavier": (38.7, 0.3, 12.3)},
    ("sst2", "GloVe"): {"Xavier": (82.7, 0.5, 1.3), "P": (82.3, 0.7, 3.8), "P_Xavier": (83.6, 0.2, 1.0)},
    ("sst2", "BERT"): {"Xavier": (81.5, 1.0, 1.4), "P": (83.3, 0.5, 1.6), "P_Xavier": (81.6, 0.7, 1.0),
                       "P_Shuffled": (81.8, 0.6, 1.6), "Xavier_P": (82.0, 1.0, 1.8)},
    ("multi30k", "BERT"): {"Xavier": (39.9, 0.6, 7.8), "P": (39.4, 0.4, 8.3), "P_Xavier": (40.2, 0.5, 8.3),
                           "P_Shuffled": (38.3, 0.6, 9.0), "Xavier_P": (37.9, 0.4, 8.5)},
}

# Table 2 (and Table 8 for Xavier_P): (min, max, mean, σ) of the encoder table, as printed (rounded).
TABLE2: dict[tuple[str, str], dict[str, tuple[float, float, float, float]]] = {
    ("multi30k", "GloVe"): {"Xavier": (-0.03, 0.03, 0.0, 0.02), "P": (-3.9, 4.8, 0.05, 0.37),
                            "P_Xavier": (-0.12, 0.26, 0.0, 0.02)},
    ("sst2", "GloVe"): {"Xavier": (-0.02, 0.02, 0.0, 0.01), "P": (-3.9, 3.9, -0.01, 0.37),
                        "P_Xavier": (-0.13, 0.13, 0.0, 0.01)},
    ("sst2", "BERT"): {"Xavier": (-0.02, 0.02, 0.0, 0.01), "P": (-0.95, 0.73, -0.03, 0.04),
                       "P_Xavier": (-0.28, 0.23, 0.0, 0.01), "Xavier_P": (-0.10, 0.05, -0.03, 0.04)},
}

# Table 6: the Section-6 (Multi30k, GloVe 300d) table, raw and x sqrt(D), and the position encodings.
TABLE6: dict[str, tuple[float, float, float, float]] = {
    "Xavier": (-0.027, 0.027, 0.0, 0.016), "Xavier (scaled)": (-0.47, 0.47, 0.0, 0.27),
    "P": (-3.93, 4.82, 0.053, 0.37), "P (scaled)": (-68.1, 83.4, 0.91, 6.39),
    "P_Xavier": (-0.17, 0.20, 0.0, 0.016), "P_Xavier (scaled)": (-2.94, 3.51, 0.0, 0.27),
    "Pos. Enc.": (-1.0, 1.0, 0.131, 0.67),
}

# Table 3 (Multi30k, GloVe): (init role, embeddings trainable, position encoding) ->
# (lowest validation loss, its mean epoch, test BLEU, BLEU σ).
TABLE3: dict[tuple[str, bool, bool], tuple[float, float, float, float]] = {
    ("Xavier", False, False): (1.98, 18.67, 28.3, 0.08), ("Xavier", True, False): (1.93, 9.33, 29.6, 0.53),
    ("Xavier", False, True): (1.77, 20.00, 34.6, 0.5), ("Xavier", True, True): (1.61, 11.67, 37.3, 0.42),
    ("P", False, False): (1.73, 18.00, 31.2, 0.18), ("P", True, False): (1.72, 19.00, 31.9, 0.34),
    ("P", False, True): (1.64, 19.67, 33.9, 0.43), ("P", True, True): (1.62, 20.00, 34.1, 0.66),
    ("P_Xavier", False, False): (1.73, 18.67, 31.2, 0.19), ("P_Xavier", True, False): (1.85, 9.00, 31.2, 0.92),
    ("P_Xavier", False, True): (1.53, 20.00, 36.4, 0.23), ("P_Xavier", True, True): (1.55, 12.33, 38.7, 0.27),
}

# The paper's settings, for the "what differs here" lines.
SETTINGS: dict[tuple[str, str], dict[str, object]] = {
    ("multi30k", "GloVe"): {"d_model": 300, "heads": 10, "layers": 3, "epochs": 20, "batch_size": 64,
                            "lr": 2e-4, "seeds": 4, "source": "GloVe 300d",
                            "vocab": "7.8k de / 5.9k en (min freq 2)"},
    ("sst2", "BERT"): {"d_model": 768, "heads": 8, "layers": 3, "epochs": 5, "batch_size": 128, "lr": 1e-4,
                       "seeds": 5, "source": "bert-base-uncased", "vocab": "11k WordPiece (min freq 2)"},
}
