"""cuBLAS fp16 (torch.matmul) on one shape for Nsight Compute, 8 weight copies rotated: argv N M K."""
import sys, torch
N, M, K = (int(x) for x in sys.argv[1:4])
g = torch.Generator().manual_seed(0)
A = torch.randn(N, K, generator=g).cuda().half()
Ws = [torch.randn(M, K, generator=g).cuda().half() for _ in range(8)]
for i in range(10):
    torch.matmul(A, Ws[i % 8].t())
torch.cuda.synchronize()
