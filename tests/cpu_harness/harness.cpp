// A torch-free driver for the chapter-4 CPU kernels (csrc/cpu/04_w4a8/*.cpp), so that they can be
// compiled for another architecture (aarch64) and run under emulation (qemu-user) by
// tests/test_cpu_cross.py, which writes the inputs and compares the outputs with the numpy reference.
//
//   harness <kernel> <in.bin> <out.bin>
//   in.bin:  problems back to back, each int32 N, M, K, then A as Q8_1 blocks [N, K/32] and W as
//            blocks of the kernel's weight format [M, K/32], as quantize() stores them
//   out.bin: for each problem, float32 C [N, M]
// The M columns are computed in three uneven parts, as the binding's thread split would call the
// kernel, so m_begin > 0 and ranges that are no multiple of a tile are exercised.
// "harness --list" prints the kernels it holds and the SIMD path the compiler chose.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cpu/04_w4a8/w_q8_1.h"

// clang-format off
#define QG_HARNESS_KERNELS(X)                                                                                   \
    X(cpu_q4_0_q8_1_naive, block_q4_0) X(cpu_q4_0_q8_1_blocked, block_q4_0) X(cpu_q4_0_q8_1_simd, block_q4_0) \
    X(cpu_q4_0_q8_1_stationary, block_q4_0)                                                                     \
    X(cpu_q8_0_q8_1_naive, block_q8_0) X(cpu_q8_0_q8_1_blocked, block_q8_0) X(cpu_q8_0_q8_1_simd, block_q8_0) \
    X(cpu_q8_0_q8_1_stationary, block_q8_0)                                                                     \
    X(cpu_q4_1_q8_1_naive, block_q4_1) X(cpu_q4_1_q8_1_blocked, block_q4_1) X(cpu_q4_1_q8_1_simd, block_q4_1)
// clang-format on

#define DECLARE(name, block) void name(const GemmProblem& p, int m_begin, int m_end);
QG_HARNESS_KERNELS(DECLARE)

struct Entry {
    const char* name;
    CpuGemmFn fn;
    size_t w_block_bytes;
};
#define ENTRY(name, block) {#name, name, sizeof(block)},
static const Entry KERNELS[] = {QG_HARNESS_KERNELS(ENTRY)};

static bool read_all(FILE* f, void* dst, size_t n) { return fread(dst, 1, n, f) == n; }

int main(int argc, char** argv) {
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        printf("simd %s\n", simd_path_04_w4a8());
        for (const Entry& e : KERNELS) printf("%s\n", e.name);
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s <kernel> <in.bin> <out.bin> | --list\n", argv[0]);
        return 2;
    }
    const Entry* k = nullptr;
    for (const Entry& e : KERNELS)
        if (!strcmp(e.name, argv[1])) k = &e;
    if (!k) {
        fprintf(stderr, "unknown kernel %s\n", argv[1]);
        return 2;
    }
    FILE* in = fopen(argv[2], "rb");
    FILE* out = fopen(argv[3], "wb");
    if (!in || !out) {
        perror(!in ? argv[2] : argv[3]);
        return 2;
    }
    int32_t nmk[3];
    for (int problem = 0; read_all(in, nmk, sizeof nmk); problem++) {
        if (nmk[0] < 1 || nmk[1] < 1 || nmk[2] < QK || nmk[2] % QK) {
            fprintf(stderr, "problem %d: bad N, M, K (%d, %d, %d)\n", problem, nmk[0], nmk[1], nmk[2]);
            return 2;
        }
        const int N = nmk[0], M = nmk[1], K = nmk[2], nb = K / QK;
        std::vector<block_q8_1> A((size_t)N * nb);
        std::vector<unsigned char> W((size_t)M * nb * k->w_block_bytes);
        if (!read_all(in, A.data(), A.size() * sizeof(block_q8_1)) || !read_all(in, W.data(), W.size())) {
            fprintf(stderr, "problem %d: input ends early\n", problem);
            return 2;
        }
        std::vector<float> C((size_t)N * M, -12345.0f);  // poison: every output must be written
        GemmProblem p{A.data(), W.data(), C.data(), N, M, K};
        const int cut1 = M / 3, cut2 = M - M / 4;  // three uneven parts (some empty when M is small)
        k->fn(p, 0, cut1);
        k->fn(p, cut1, cut2);
        k->fn(p, cut2, M);
        if (fwrite(C.data(), sizeof(float), C.size(), out) != C.size()) {
            perror(argv[3]);
            return 2;
        }
    }
    if (!feof(in)) {
        fprintf(stderr, "%s: trailing bytes\n", argv[2]);
        return 2;
    }
    fclose(in);
    fclose(out);
    return 0;
}
