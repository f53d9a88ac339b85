// A torch-free driver for the chapter-8 CPU kernels (csrc/cpu/08_k_quants/*.cpp), so that they can
// be compiled for another instruction set (AVX2, portable, aarch64 NEON with and without the dot
// product extension; aarch64 run under qemu-user) by tests/test_cpu_cross_k_quants.py, which writes
// the inputs and compares the outputs with the numpy reference. Activations are Q8_K blocks; the
// driver itself, and the file formats, are in harness_main.h.
#include "harness_main.h"

#define QG_K_HARNESS_KERNELS(X)        \
    X(cpu_q4_k_q8_k_naive, block_q4_k) \
    X(cpu_q6_k_q8_k_naive, block_q6_k) X(cpu_q4_k_q8_k_simd, block_q4_k) X(cpu_q6_k_q8_k_simd, block_q6_k)

#define DECLARE(name, block) void name(const GemmProblem& p, int m_begin, int m_end);
QG_K_HARNESS_KERNELS(DECLARE)
const char* simd_path_08_k_quants();  // 08_k_quants/2_simd.cpp

#define ENTRY(name, block) {#name, name, sizeof(block)},
static const HarnessEntry KERNELS[] = {QG_K_HARNESS_KERNELS(ENTRY)};

int main(int argc, char** argv) { return harness_main<block_q8_k, QK_K>(argc, argv, KERNELS, simd_path_08_k_quants()); }
