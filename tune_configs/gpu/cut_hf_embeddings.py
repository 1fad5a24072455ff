"""Cut a Hugging Face model folder to what an embinit init reads from it: the config, the tokenizer files
and the input-embedding matrix alone, so that it travels to the GPU machine (all-MiniLM-L6-v2: 87 MB of
weights, 45 MB of embedding). The matrix keeps its name and every value: embinit reads only that tensor
from `model.safetensors` (`embinit.init.hf._weight_from_safetensors`), so the tables are unchanged.

    python tune_configs/gpu/cut_hf_embeddings.py all-MiniLM-L6-v2/ OUT/all-MiniLM-L6-v2/
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

KEEP = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
        "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "added_tokens.json")


def cut(src: Path, dest: Path) -> tuple[str, tuple[int, ...]]:
    from safetensors import safe_open
    from safetensors.torch import save_file

    from embinit.init.hf import embedding_tensor   # the tensor embinit's loader reads, found the same way
    found = embedding_tensor(src)
    if found is None:
        sys.exit(f"cut_hf_embeddings: no input-embedding tensor found in {src}'s safetensors")
    file, key = found
    with safe_open(str(file), "pt") as st:
        tensor = st.get_tensor(key)
    dest.mkdir(parents=True, exist_ok=True)
    for name in KEEP:
        if (src / name).is_file():
            shutil.copy2(src / name, dest / name)
    save_file({key: tensor.contiguous()}, str(dest / "model.safetensors"))
    return key, tuple(tensor.shape)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    problems = [f"{args.source / f}: missing" for f in ("config.json", "model.safetensors")
                if not (args.source / f).is_file()]
    if args.dest.resolve() == args.source.resolve():
        problems.append("the destination is the source")
    if problems:
        sys.exit("cut_hf_embeddings: " + "; ".join(problems))
    key, shape = cut(args.source, args.dest)
    print(f"{args.dest}: {key} {list(shape)} and the tokenizer files")


if __name__ == "__main__":
    main()
