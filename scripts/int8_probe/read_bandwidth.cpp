// How fast this machine reads memory with AVX2 loads: the ceiling of a decode step that reads every weight once
// (issue 56: "the fraction of the measured bandwidth limit").
//
//   g++ -O2 -mavx2 -pthread scripts/int8_probe/read_bandwidth.cpp -o /tmp/read_bandwidth
//   /tmp/read_bandwidth [threads=2] [MiB=1024] [passes=5]
//
// Each thread sums its own slice of one buffer (MiB in all, far beyond the caches) with 256-bit loads, four
// independent sums so the adds do not wait on each other. Every pass is timed from the threads' common start to
// the last one's end; the best pass is printed in GB/s (10^9 bytes a second), with the median beside it.

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

static int64_t sum_slice(const __m256i* p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a = _mm256_add_epi64(a, _mm256_load_si256(p + i));
        b = _mm256_add_epi64(b, _mm256_load_si256(p + i + 1));
        c = _mm256_add_epi64(c, _mm256_load_si256(p + i + 2));
        d = _mm256_add_epi64(d, _mm256_load_si256(p + i + 3));
    }
    for (; i < n; ++i) a = _mm256_add_epi64(a, _mm256_load_si256(p + i));  // a slice's last vectors
    alignas(32) int64_t out[4];
    _mm256_store_si256((__m256i*)out, _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    return out[0] + out[1] + out[2] + out[3];
}

int main(int argc, char** argv) {
    const size_t threads = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 2;
    const size_t mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1024;
    const size_t passes = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 5;
    if (threads == 0 || mib == 0 || passes == 0) {
        std::fprintf(stderr, "usage: read_bandwidth [threads>0] [MiB>0] [passes>0]\n");
        return 2;
    }
    const size_t bytes = mib << 20, vectors = bytes / sizeof(__m256i);
    auto* buf = static_cast<__m256i*>(std::aligned_alloc(64, bytes));
    if (buf == nullptr) {
        std::fprintf(stderr, "cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < bytes / 8; ++i) reinterpret_cast<int64_t*>(buf)[i] = (int64_t)i;  // every page touched
    std::vector<double> gbs;
    int64_t check = 0;
    for (size_t pass = 0; pass < passes; ++pass) {
        std::vector<int64_t> sums(threads);
        std::vector<std::thread> pool;
        const auto t0 = std::chrono::steady_clock::now();
        for (size_t t = 0; t < threads; ++t) {
            const size_t lo = vectors * t / threads, hi = vectors * (t + 1) / threads;
            pool.emplace_back([&, t, lo, hi] { sums[t] = sum_slice(buf + lo, hi - lo); });
        }
        for (auto& th : pool) th.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        gbs.push_back(bytes / s / 1e9);
        for (int64_t v : sums) check += v;
    }
    std::vector<double> sorted = gbs;
    std::sort(sorted.begin(), sorted.end());
    std::printf("threads %zu, %zu MiB, %zu passes: best %.1f GB/s, median %.1f GB/s (check %lld)\n", threads, mib,
                passes, sorted.back(), sorted[sorted.size() / 2], (long long)check);
    std::free(buf);
    return 0;
}
