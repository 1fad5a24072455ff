"""The word-vector files a spec names, read through once before any trial starts.

A trial reads its pretrained file when it builds its table, and the loaders check every line there
(embinit.init.vectors: a line without a word and D values, a word that is not UTF-8, a header's N that
is not the number of rows). A broken file found that way fails each trial of the init after the sweep
has started (and after other inits' trials have trained). So the spec's check reads each local vector
file it names once, the same parse (`vectors.read_through`: the one of `vectors.words`, holding no word;
the `.npy` matrix and its vocabulary), and lists its problems with the others, at the field that names
the file. The values of rows no trial needs are
not parsed (nor are they by the trials): a needed row's bad value is still a trial's error.

One pass costs about 0.5 s per 170 MB (GloVe 6B 50d, AMD EPYC), ~8 s for a 2.2M-word 300d file (3.6 GB,
page-cached; GloVe 840B is 5.6 GB). A file is read once per process for a given `content_hash.stamp`,
so the CLI's check and the sweep's start do not read it twice; and a file found sound is marked on disk
by its content (`embinit.sound_marks`: the sha256 the trial keys hold anyway, and embinit's source), so
a rerun, a dry run or a restarted service does not read it again. Hub ids and model
folders are not read here (`hf`: their weights load in the trial).
"""

from __future__ import annotations

import os
from pathlib import Path

from embinit import sound_marks
from embinit.content_hash import stamp
from embinit.errors import EmbinitError

_VECTOR_FIELDS = ("pretrained", "src_pretrained")
_read: dict[tuple, list[str]] = {}   # `content_hash.stamp` of the real path -> its problems


# the similarity analysis's fixed reference: a checkpoint (.pt, .pth), else a vector file its trials read
# (embinit.analysis.sources.load_embeddings); a .npy's vocabulary is optional there, so only text and
# word2vec files are read through
_REFERENCE, _NOT_READ_AS_REFERENCE = "analyses.similarity.reference", (".pt", ".pth", ".npy")


def _names_vectors(where: str, path: Path) -> bool:
    """Whether the field at `where` (`pretrained.glove`, `inits[1].tgt.pretrained`, the similarity's
    reference) names a vector file `path` to read through."""
    if where == _REFERENCE:
        return path.suffix not in _NOT_READ_AS_REFERENCE
    return any(part.split("[")[0] in _VECTOR_FIELDS for part in where.split("."))


def file_problems(path: Path) -> list[str]:
    """The problems that make the vector file at `path` unreadable whatever vocabulary a trial needs ([]
    when none); `vector_file_problems` passes files only (a model folder is the trial's to read)."""
    from embinit.init import source_files
    try:
        fmt = source_files.detect_format(path)
        if fmt == "npy":   # its shape and its vocabulary file (memory-mapped: cheap, so read each time)
            source_files.read_npy_vocab(path, source_files.load_npy_matrix(path).shape[0])
            return []
    except EmbinitError as e:
        return [str(e)]
    real = Path(os.path.realpath(path))
    memo = stamp(real, real.stat())
    if memo not in _read:
        mark = sound_marks.mark_for("vectors", [real])
        if sound_marks.marked(mark):
            _read[memo] = []
        else:
            from embinit.init import vectors   # torch: not imported when the mark answers (~1 s)
            try:
                vectors.read_through(path)
                _read[memo] = []
                sound_marks.make(mark)
            except EmbinitError as e:
                _read[memo] = [str(e)]
    return _read[memo]


def _checkpoint_problem(path: Path) -> str | None:
    """Why an `init_from` file is no checkpoint (not the zip archive torch.save writes), read from its first
    bytes without loading it: every trial would fail on it."""
    from embinit.checkpoint_files import not_a_checkpoint
    with open(path, "rb") as f:
        return not_a_checkpoint(f)


def vector_file_problems(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(where, problem) for each local vector file of `pairs` (field path, value: `ExperimentSpec.paths()`)
    that a trial could not read; a path that does not exist is `missing_paths`' to say."""
    out = []
    for where, value in pairs:
        path = Path(value).expanduser()
        if path.is_file() and _names_vectors(where, path):
            out += [(where, problem) for problem in file_problems(path)]
        elif path.is_file() and where.rsplit(".", 1)[-1].split("[")[0] == "init_from":
            out += [(where, f"{path}: {why}") for why in [_checkpoint_problem(path)] if why]
        elif path.is_dir() and _names_vectors(where, path):   # a model folder: its tokenizer's package
            from embinit.tasks.tokenization import sentencepiece_problem
            out += [(where, why) for why in [sentencepiece_problem(path)] if why]
        elif where.rsplit(".", 1)[-1].split("[")[0] == "tokenizer":   # a file, a folder without a tokenizer
            from embinit.tasks.tokenization import local_tokenizer_problem
            out += [(where, why) for why in [local_tokenizer_problem(value)] if why]
    return out
