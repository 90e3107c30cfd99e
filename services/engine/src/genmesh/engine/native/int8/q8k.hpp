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

// Eight columns' 32 bytes v[c] as eight vectors out[g] (32 bytes apart): dword c of out[g] = dword g of v[c]
// (the eight-column kernels' layout: one broadcast activation dword then serves all eight columns).
__attribute__((target("avx2,fma,f16c"))) inline void transpose_dwords_8x8(const __m256i* v, uint8_t* out) {
    __m256i t[8], u[8];
    for (size_t c = 0; c < 8; c += 2) {
        t[c] = _mm256_unpacklo_epi32(v[c], v[c + 1]);
        t[c + 1] = _mm256_unpackhi_epi32(v[c], v[c + 1]);
    }
    for (size_t c = 0; c < 8; c += 4) {
        u[c] = _mm256_unpacklo_epi64(t[c], t[c + 2]);
        u[c + 1] = _mm256_unpackhi_epi64(t[c], t[c + 2]);
        u[c + 2] = _mm256_unpacklo_epi64(t[c + 1], t[c + 3]);
        u[c + 3] = _mm256_unpackhi_epi64(t[c + 1], t[c + 3]);
    }
    // u[k] (k < 4) holds dwords g = k and g = k + 4 of columns 0..3 in its two halves, u[k + 4] of 4..7
    for (size_t k = 0; k < 4; ++k) {
        _mm256_storeu_si256((__m256i*)(out + k * 32), _mm256_permute2x128_si256(u[k], u[k + 4], 0x20));
        _mm256_storeu_si256((__m256i*)(out + (k + 4) * 32), _mm256_permute2x128_si256(u[k], u[k + 4], 0x31));
    }
}

// Rows m0..m1 in tiles of R = 4, then 2, then 1 activation rows: row_tile(R, m) for each (R: std::integral_constant).
// THREE: three rows left are one tile of 3 (the eight-column kernels at decode sizes: a draft's three verified rows,
// or 3 and 7 sequences, read the weights once instead of twice).
template <bool THREE = false, class RowTile>
void row_tiles(size_t m0, size_t m1, RowTile row_tile) {
    size_t m = m0;
    for (; m + 4 <= m1; m += 4) row_tile(std::integral_constant<size_t, 4>{}, m);
    if constexpr (THREE) {
        if (m + 3 == m1) {
            row_tile(std::integral_constant<size_t, 3>{}, m);
            return;
        }
    }
    for (; m + 2 <= m1; m += 2) row_tile(std::integral_constant<size_t, 2>{}, m);
    for (; m < m1; ++m) row_tile(std::integral_constant<size_t, 1>{}, m);
}

// The AVX2 K-quant kernels' loop over a task's columns n0..n1 and all M rows: activation rows in chunks of 64 (64
// rows of K int8 stay in L2 while the task's weight rows pass); per chunk, tiles of C weight rows x R activation
// rows: C = 4 where fewer than 4 rows (decode), else 2 (then 1 for an odd column), R = 4 (then 2, then 1 for the
// rest: two or three rows share one pass over the weights' nibbles and scales).
// tile(C, R, m, n) computes y[m..m+R][n..n+C] (C, R: std::integral_constant, for the kernel's template).
template <class Tile>
void kquant_tiles(size_t M, size_t n0, size_t n1, Tile tile) {
    constexpr size_t ROWS = 4, M_CHUNK = 64;
    auto columns = [&](auto C, size_t m0, size_t m1, size_t n) {
        row_tiles(m0, m1, [&](auto R, size_t m) { tile(C, R, m, n); });
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

// A task's columns n0..n1 for all M rows: from group_rows rows on, each whole group of eight columns repacked once
// (repack(n, scratch)) and passed by group_tile(R, scratch, m, n) in tiles of R = 4 rows (then 1); the other
// columns (and every column below group_rows rows) by kquant_tiles.
template <class Repack, class GroupTile, class Tile>
void kquant_rows(size_t M, size_t nsb, size_t group_bytes, size_t group_rows, size_t n0, size_t n1, Repack repack,
                 GroupTile group_tile, Tile tile) {
    if (M >= group_rows) {
        std::vector<uint8_t> packed(nsb * group_bytes);
        const size_t n8 = n0 + (n1 - n0) / 8 * 8;
        for (size_t n = n0; n < n8; n += 8) {
            repack(n, packed.data());
            size_t m = 0;
            for (; m + 4 <= M; m += 4) group_tile(std::integral_constant<size_t, 4>{}, packed.data(), m, n);
            for (; m < M; ++m) group_tile(std::integral_constant<size_t, 1>{}, packed.data(), m, n);
        }
        n0 = n8;
    }
    kquant_tiles(M, n0, n1, tile);
}

}  // namespace genmesh
