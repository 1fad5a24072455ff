"""A hand-made embedding space and analogy questions over it, for the analogy evaluation and its CLI."""

# gender along axis 1, royalty along axis 2, country/capital along axes 3-5.
VECS = {
    "man": [1, 0, 0, 0, 0, 0], "woman": [0, 1, 0, 0, 0, 0],
    "king": [1, 0, 1, 0, 0, 0], "queen": [0, 1, 1, 0, 0, 0],
    "boy": [1, 0, 0, 0, 0, 0.3], "girl": [0, 1, 0, 0, 0, 0.3],
    "france": [0, 0, 0, 1, 0, 0], "paris": [0, 0, 0, 1, 1, 0],
    "italy": [0, 0, 0, 0, 0, 1], "rome": [0, 0, 0, 0, 1, 1],
    "slow": [0.5, 0.5, 0, 0, 0, 0.2], "slowly": [0.5, 0.5, 0.9, 0, 0, 0.2],
}
QUESTIONS = """: capital-common-countries
france paris italy rome
Italy Rome France Paris
france paris spain madrid
: family
man woman king queen
man woman boy girl
king queen man woman
this line is invalid here
: gram1-adjective-to-adverb
man king slow slowly
"""
