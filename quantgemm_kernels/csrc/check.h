// check.h: the error helpers every binding shares (bindings.cpp, appendix_b/, appendix_c/).
//
// qg_str(parts...) builds a message, QG_CHECK(cond, parts...) throws it as a std::runtime_error
// (a Python RuntimeError), check_launch() turns a failed CUDA launch into one.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/string_view.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#ifdef WITH_CUDA
#include <cuda_runtime_api.h>
#endif

// Error messages are built without iostreams: strings as they are, numbers with std::to_string,
// torch types by name. On the course's GPU image (torch 2.11.0+cu130, g++ 13.3, Python 3.12) the
// extension ends up with its own static copy of libstdc++ (792 exported symbols, no libstdc++.so
// in ldd), and formatting a number through an ostream there (c10::str) crashed the process with a
// segmentation fault, while the same throw with a message of strings only raised cleanly
// (book/robustness.md). qg_str sidesteps the locale machinery that crash lives in.
inline void qg_append(std::string& s, const char* v) { s += v; }
inline void qg_append(std::string& s, const std::string& v) { s += v; }
inline void qg_append(std::string& s, c10::string_view v) { s.append(v.data(), v.size()); }
inline void qg_append(std::string& s, char v) { s += v; }
inline void qg_append(std::string& s, at::ScalarType v) { s += c10::toString(v); }
inline void qg_append(std::string& s, const c10::Device& v) {
    s += c10::DeviceTypeName(v.type(), /*lower_case=*/true);
    if (v.has_index()) s += ":" + std::to_string(v.index());
}
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
inline void qg_append(std::string& s, T v) {
    s += std::to_string(v);
}
template <class T, std::enable_if_t<std::is_enum_v<T>, int> = 0>
inline void qg_append(std::string& s, T v) {
    s += std::to_string(static_cast<long long>(v));
}
template <class... Args>
std::string qg_str(const Args&... args) {
    std::string s;
    (qg_append(s, args), ...);
    return s;
}

// QG_CHECK(cond, message parts...): throw std::runtime_error (a Python RuntimeError). The Python
// layers (api.py, the appendix modules) have already raised a precise TypeError/ValueError for
// anything a user can pass; these checks guard direct calls of the torch.ops operators before
// memory is touched.
#define QG_CHECK(cond, ...)                                         \
    do {                                                            \
        if (!(cond)) throw std::runtime_error(qg_str(__VA_ARGS__)); \
    } while (0)

#ifdef WITH_CUDA
// A failed launch (bad configuration, or an error left by an earlier kernel) becomes an exception.
inline void check_launch() {
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) throw std::runtime_error(qg_str("CUDA launch failed: ", cudaGetErrorString(err)));
}
#endif
