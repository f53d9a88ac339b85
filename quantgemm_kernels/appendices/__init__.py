"""The appendices' code, apart from the kernel package's core.

Nothing in ``quantgemm_kernels`` imports these modules; each is imported by its appendix, its
tests and its command line. Each builds its own small extension (or none) on first use, so that
the core extension binds quantize, dequantize and gemm only.

* :mod:`.misaligned` (appendix B): misaligned loads of Q4_0 quants, the fault shown in a child
  process and the legal loads measured; extension ``csrc/appendix_b/`` (CUDA only).
* :mod:`.simulation` (appendix C): a numpy simulation that matches an INT8 conv1d + SiLU kernel bit
  for bit, and what a float simulation gets wrong; extension ``csrc/appendix_c/``.
* :mod:`.fused_quant` (appendix D): per-token quantization fused with SlideSparse's slide, a
  Triton kernel (``_fused_quant_triton``) against its torch specification; no C++ extension.
"""
