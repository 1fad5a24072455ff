"""Tasks: data loading, tokenization, vocabularies and caching (`load_task` -> `TaskData`).

    from embinit.tasks import load_task
    data = load_task("multi30k", data_dir="data/multi30k", tokenizer="spacy", min_freq=2)

Modules: `raw` (task layouts, RawData), `local` (raw files on disk), `hub` (Hugging Face `datasets`),
`synthetic` (generated tasks), `tokenization`, `build` (tokenize + vocabularies), `cache`, `load`.
"""

from embinit.tasks.data import TaskData
from embinit.tasks.load import load_task

__all__ = ["TaskData", "load_task"]
