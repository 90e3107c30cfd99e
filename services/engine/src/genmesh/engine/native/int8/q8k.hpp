// Activations for the K-quant ops (Q4KMatMul, Q6KMatMul), as llama.cpp's Q8_K: per super-block of 256 values, one
// scale d = max|x| / 127 and int8 q (nearest even), with the sums of q per 32 (Q4_K's minimums) and, on request,
// per 16 (Q6_K's offset of 32).
#pragma once

#include <type_traits>
#include <vector>

#include "block_matmul.hpp"

namespace genmesh {

constexpr size_t QK_K = 256;  // weights per super-block
constexpr size_t SUB = 8;     // sub-blocks of 32 per super-block

// q [M][K] int8, d [M][K/256] f32, bsum [M][K/256][8] and bsum16 [M][K/256][16] i16 (|.| <= 4064).
struct Q8_K {
    std::vector<int8_t> q;
    std::vector<float> d;
    std::vector<int16_t> bsum, bsum16;
};

// One activation row: per super-block, d, q and the sums per 32 (and per 16 where bsum16 is not null).
template <Kernel k>
void quantise_q8_k_row(const float* x, size_t K, int8_t* q, float* d, int16_t* bsum, int16_t* bsum16) {
    for (size_t b = 0; b < K / QK_K; ++b) {
        const float* xb = x + b * QK_K;
        float amax;
        if constexpr (k == Kernel::Avx2)
            amax = amax_avx2(xb, QK_K);
        else
            amax = amax_scalar(xb, QK_K);
        const float db = amax / 127.f, id = db != 0.f ? 1.f / db : 0.f;
        d[b] = db;
        for (size_t s = 0; s < SUB; ++s) {
            int8_t* qs = q + b * QK_K + 32 * s;
            int sum;
            if constexpr (k == Kernel::Avx2)
                sum = quantise32_avx2(xb + 32 * s, id, qs);
            else
                sum = quantise32_scalar(xb + 32 * s, id, qs);
            bsum[b * SUB + s] = (int16_t)sum;
            if (bsum16) {
                int half = 0;
                for (size_t j = 0; j < 16; ++j) half += qs[j];
                bsum16[b * 2 * SUB + 2 * s] = (int16_t)half;
                bsum16[b * 2 * SUB + 2 * s + 1] = (int16_t)(sum - half);
            }
        }
    }
}

// All M rows of x [M][K] into a (both cores).
inline void quantise_q8_k(const float* x, size_t M, size_t K, Kernel kernel, Q8_K& a, bool sums16 = false) {
    const size_t nsb = K / QK_K;
    a.q.resize(M * K);
    a.d.resize(M * nsb);
    a.bsum.resize(M * nsb * SUB);
    a.bsum16.resize(sums16 ? M * nsb * 2 * SUB : 0);
    auto row = kernel == Kernel::Avx2 ? quantise_q8_k_row<Kernel::Avx2> : quantise_q8_k_row<Kernel::Scalar>;
    parallel_rows(M, [&](size_t m) {
        row(x + m * K, K, a.q.data() + m * K, a.d.data() + m * nsb, a.bsum.data() + m * nsb * SUB,
            sums16 ? a.bsum16.data() + m * nsb * 2 * SUB : nullptr);
    });
}

// The AVX2 K-quant kernels' loop over a task's columns n0..n1 and all M rows: activation rows in chunks of 64 (64
// rows of K int8 stay in L2 while the task's weight rows pass); per chunk, tiles of C weight rows x R activation
// rows: C = 4 where fewer than 4 rows (decode), else 2 (then 1 for an odd column), R = 4 (then 1 for the rest).
// tile(C, R, m, n) computes y[m..m+R][n..n+C] (C, R: std::integral_constant, for the kernel's template).
template <class Tile>
void kquant_tiles(size_t M, size_t n0, size_t n1, Tile tile) {
    constexpr size_t ROWS = 4, M_CHUNK = 64;
    auto columns = [&](auto C, size_t m0, size_t m1, size_t n) {
        size_t m = m0;
        for (; m + ROWS <= m1; m += ROWS) tile(C, std::integral_constant<size_t, ROWS>{}, m, n);
        for (; m < m1; ++m) tile(C, std::integral_constant<size_t, 1>{}, m, n);
    };
    for (size_t m0 = 0; m0 < M; m0 += M_CHUNK) {
        const size_t m1 = std::min(M, m0 + M_CHUNK);
        size_t n = n0;
        if (m1 - m0 < ROWS)
            for (; n + 4 <= n1; n += 4) columns(std::integral_constant<size_t, 4>{}, m0, m1, n);
        for (; n + 2 <= n1; n += 2) columns(std::integral_constant<size_t, 2>{}, m0, m1, n);
        for (; n < n1; ++n) columns(std::integral_constant<size_t, 1>{}, m0, m1, n);
    }
}

}  // namespace genmesh
