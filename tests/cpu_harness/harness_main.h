// tests/cpu_harness/harness_main.h: the driver shared by harness.cpp (chapter 4's kernels, Q8_1
// activations) and k_quants_harness.cpp (chapter 8's, Q8_K activations). Each defines its kernel
// table and calls harness_main<its activation block, its block size>(...).
//
//   <harness> <kernel> <in.bin> <out.bin>
//   in.bin:  problems back to back, each int32 N, M, K, then A as activation blocks [N, K/QKA] and W
//            as blocks of the kernel's weight format [M, K/QKA], as quantize() stores them
//   out.bin: for each problem, float32 C [N, M]
// The M columns are computed in three uneven parts, as the binding's thread split would call the
// kernel, so m_begin > 0 and ranges that are no multiple of a tile are exercised.
// "<harness> --list" prints the SIMD path the compiler chose, then the kernels it holds.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "gemm.h"

struct HarnessEntry {
    const char* name;
    CpuGemmFn fn;
    size_t w_block_bytes;
};

static bool read_all(FILE* f, void* dst, size_t n) { return fread(dst, 1, n, f) == n; }

template <class ABlock, int QKA, size_t NK>
int harness_main(int argc, char** argv, const HarnessEntry (&kernels)[NK], const char* simd_path) {
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        printf("simd %s\n", simd_path);
        for (const HarnessEntry& e : kernels) printf("%s\n", e.name);
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s <kernel> <in.bin> <out.bin> | --list\n", argv[0]);
        return 2;
    }
    const HarnessEntry* k = nullptr;
    for (const HarnessEntry& e : kernels)
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
        if (nmk[0] < 1 || nmk[1] < 1 || nmk[2] < QKA || nmk[2] % QKA) {
            fprintf(stderr, "problem %d: bad N, M, K (%d, %d, %d)\n", problem, nmk[0], nmk[1], nmk[2]);
            return 2;
        }
        const int N = nmk[0], M = nmk[1], K = nmk[2], nb = K / QKA;
        std::vector<ABlock> A((size_t)N * nb);
        std::vector<unsigned char> W((size_t)M * nb * k->w_block_bytes);
        if (!read_all(in, A.data(), A.size() * sizeof(ABlock)) || !read_all(in, W.data(), W.size())) {
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
