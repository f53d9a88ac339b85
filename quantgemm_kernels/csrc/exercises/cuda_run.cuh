// Host-side helpers of the CUDA exercises: device buffers freed on every path, and a CUDA error
// turned into a message for the checker (qgex_run returns non-zero, the message in err).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

struct DevBuf {
    void* p = nullptr;
    ~DevBuf() {
        if (p) cudaFree(p);
    }
};

static inline int qgex_fail(cudaError_t e, const char* what, char* err, int err_len) {
    snprintf(err, err_len, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return 1;
}

#define QGEX_CHECK(call)                                                  \
    do {                                                                  \
        cudaError_t e_ = (call);                                          \
        if (e_ != cudaSuccess) return qgex_fail(e_, #call, err, err_len); \
    } while (0)

// Copy `bytes` of host memory to a new device buffer.
#define QGEX_UPLOAD(buf, host, bytes)                                             \
    do {                                                                          \
        QGEX_CHECK(cudaMalloc(&(buf).p, (bytes) > 0 ? (bytes) : 1));              \
        QGEX_CHECK(cudaMemcpy((buf).p, (host), (bytes), cudaMemcpyHostToDevice)); \
    } while (0)

// After a launch: the launch's own error, then the kernel's (an illegal address shows up here).
#define QGEX_FINISH_LAUNCH(what)                                         \
    do {                                                                 \
        QGEX_CHECK(cudaGetLastError());                                  \
        cudaError_t e_ = cudaDeviceSynchronize();                        \
        if (e_ != cudaSuccess) return qgex_fail(e_, what, err, err_len); \
    } while (0)
