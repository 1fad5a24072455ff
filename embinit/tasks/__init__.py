"""Tasks: data loading, tokenization, vocabularies and caching (`load_task` -> `TaskData`).

    from embinit.tasks import load_task
    data = load_task("multi30k", data_dir="data/multi30k", tokenizer="spacy", min_freq=2)

Modules: `raw` (task layouts, RawData), `local` (raw files on disk), `hub` (Hugging Face `datasets`),
`synthetic` (generated tasks), `tokenization`, `build` (tokenize + vocabularies), `cache`, `load`.

`load_task` and `TaskData` are imported on first use (PEP 562), so that importing one submodule does
not load the others: `embinit.config` and `service.paths` read the tokenizer registry
(`tokenization.TOKENIZERS`) without loading the task pipeline, which imports `embinit.config` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embinit.tasks.data import TaskData
    from embinit.tasks.load import load_task

__all__ = ["TaskData", "load_task"]


def __getattr__(name: str):
    if name == "load_task":
        from embinit.tasks.load import load_task
        return load_task
    if name == "TaskData":
        from embinit.tasks.data import TaskData
        return TaskData
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
