// A torch-free driver for the chapter-4 CPU kernels (csrc/cpu/04_w4a8/*.cpp), so that they can be
// compiled for another architecture (aarch64) and run under emulation (qemu-user) by
// tests/test_cpu_cross.py, which writes the inputs and compares the outputs with the numpy reference.
// Activations are Q8_1 blocks; the driver itself, and the file formats, are in harness_main.h.
#include "harness_main.h"

#include "cpu/04_w4a8/w_q8_1.h"

// clang-format off
#define QG_HARNESS_KERNELS(X)                                                                                   \
    X(cpu_q4_0_q8_1_naive, block_q4_0) X(cpu_q4_0_q8_1_blocked, block_q4_0) X(cpu_q4_0_q8_1_simd, block_q4_0) \
    X(cpu_q4_0_q8_1_stationary, block_q4_0)                                                                     \
    X(cpu_q8_0_q8_1_naive, block_q8_0) X(cpu_q8_0_q8_1_blocked, block_q8_0) X(cpu_q8_0_q8_1_simd, block_q8_0) \
    X(cpu_q8_0_q8_1_stationary, block_q8_0)                                                                     \
    X(cpu_q4_1_q8_1_naive, block_q4_1) X(cpu_q4_1_q8_1_blocked, block_q4_1) X(cpu_q4_1_q8_1_simd, block_q4_1)  \
    X(cpu_q4_1_q8_1_stationary, block_q4_1)
// clang-format on

#define DECLARE(name, block) void name(const GemmProblem& p, int m_begin, int m_end);
QG_HARNESS_KERNELS(DECLARE)

#define ENTRY(name, block) {#name, name, sizeof(block)},
static const HarnessEntry KERNELS[] = {QG_HARNESS_KERNELS(ENTRY)};

int main(int argc, char** argv) { return harness_main<block_q8_1, QK>(argc, argv, KERNELS, simd_path_04_w4a8()); }
