// parallel.h: the CPU kernels' threads, from torch's intra-op pool (bindings.cpp only; the kernel
// files stay single-threaded and torch-free).
//
// qg_parallel_for(begin, end, grain, f) is at::parallel_for: f(b, e) on chunks of [begin, end),
// at most torch.get_num_threads() of them, so torch.set_num_threads() sets the kernels' threads.
// One catch. A torch built with OpenMP (AT_PARALLEL_OPENMP: the Linux and macOS wheels) implements
// at::parallel_for inline in its headers, as `#pragma omp parallel`: in an extension compiled
// without OpenMP the pragma is dropped and every chunk runs on the calling thread, silently
// (pytorch/pytorch#161320 spells out the condition: AT_PARALLEL_OPENMP and _OPENMP both). So
//  * where the compiler takes -fopenmp (GCC; _build.py adds it), at::parallel_for runs on torch's
//    own OpenMP threads: the runtime torch loaded, sized by torch.set_num_threads;
//  * where it does not (Apple clang has no OpenMP), the same chunks as at::parallel_for's run on
//    std::threads, as many as at::get_num_threads() says: torch.set_num_threads still decides;
//  * a torch with its native pool (AT_PARALLEL_NATIVE) needs neither: its at::parallel_for is compiled
//    into libtorch.
// Each output is computed by one chunk with the same code whatever the split, so the result does
// not depend on the number of threads (tests/test_threads.py checks both).
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
#define QG_PARALLEL_STD_THREADS 1
#endif

// How the chunks are run in this build: "openmp" (torch's OpenMP pool), "native" (torch's native
// pool) or "std::thread" (the fallback above).
inline const char* qg_parallel_mode() {
#if QG_PARALLEL_STD_THREADS
    return "std::thread";
#elif AT_PARALLEL_OPENMP
    return "openmp";
#else
    return "native";
#endif
}

template <class F>
void qg_parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
#if QG_PARALLEL_STD_THREADS
    // at::parallel_for's split: min(threads, ceil(range / grain)) chunks of ceil(range / chunks).
    if (begin >= end) return;
    const int64_t range = end - begin, g = std::max<int64_t>(grain, 1);
    const int64_t chunks = std::min<int64_t>(at::in_parallel_region() ? 1 : at::get_num_threads(), (range + g - 1) / g);
    if (chunks <= 1) {
        f(begin, end);
        return;
    }
    const int64_t step = (range + chunks - 1) / chunks;
    std::vector<std::exception_ptr> errors(chunks);
    std::vector<std::thread> threads;
    threads.reserve(chunks - 1);
    auto run = [&](int64_t c) {
        try {
            const int64_t b = begin + c * step;
            if (b < end) f(b, std::min(end, b + step));
        } catch (...) { errors[c] = std::current_exception(); }
    };
    for (int64_t c = 1; c < chunks; c++) threads.emplace_back(run, c);
    run(0);  // the calling thread takes the first chunk, as OpenMP's master thread does
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
#else
    at::parallel_for(begin, end, grain, f);
#endif
}
