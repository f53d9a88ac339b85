"""One kernel of ours on one shape for Nsight Compute: 8 weight copies rotated; argv kernel N M K [fp16]."""
import sys, torch
import quantgemm_kernels as qk
from quantgemm_kernels.testing import quantize_weights
name = sys.argv[1]
N, M, K = (int(x) for x in sys.argv[2:5])
g = torch.Generator().manual_seed(0)
A = torch.randn(N, K, generator=g).cuda()
if len(sys.argv) > 5:
    A = A.half()
W0 = quantize_weights(torch.randn(M, K, generator=g).cuda(), name.split("_")[1] + "_" + name.split("_")[2])
Ws = [W0.clone() for _ in range(8)]
for i in range(10):
    qk.gemm(A, Ws[i % 8], name)
torch.cuda.synchronize()
