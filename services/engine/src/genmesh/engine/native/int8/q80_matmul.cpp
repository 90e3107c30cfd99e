// genmesh::Q80MatMul: y = x W^T with W in GGUF Q8_0 blocks and x quantised per block of 32 to int8 (llama.cpp's
// Q8_0) at run time.
//
// Inputs:  x       f32 [..., K]              (K a multiple of 32)
//          blocks  u8  [N, K/32 * 34]        the file's Q8_0 blocks, row n = output n: f16 d, 32 int8 q; w = d * q
// Output:  y       f32 [..., N]
//
// Per block b of 32 inputs: x ~= dx * qx (qx int8, dx = max|x| / 127), and
//     sum_j w_j x_j ~= d dx * sum_j q_j qx_j
// Both factors are signed, and _mm256_maddubs_epi16 takes one unsigned: llama.cpp's sign trick, maddubs(|q|,
// sign(qx, q)) (|q| <= 128 as u8, so |pair| <= 2*128*127 = 32,512: no saturation), then _mm256_madd_epi16 with
// ones (-> 8 x i32), one convert and one FMA with d dx per block and output. Tiles of C weight rows x R activation
// rows (q8k.hpp's kquant_tiles): |q| of a weight block is made once for R rows, each activation block loaded once
// for C weight rows.

#include "q80_matmul.hpp"

#include <vector>

#include "q8k.hpp"

namespace genmesh {

constexpr size_t QK = 32;           // weights per block
constexpr size_t BLOCK_BYTES = 34;  // f16 d, 32 int8

// The activations of one call, quantised: q [M][K] int8, d [M][K/32] f32.
struct Q8_0 {
    std::vector<int8_t> q;
    std::vector<float> d;
};

// ----------------------------------------------------------------------------------------------- scalar path
static void rows_scalar(const Q8_0& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                        size_t n1) {
    const size_t nb = K / QK;
    for (size_t n = n0; n < n1; ++n) {
        const uint8_t* row = w + n * nb * BLOCK_BYTES;
        for (size_t m = 0; m < M; ++m) {
            const int8_t* qx = a.q.data() + m * K;
            const float* dx = a.d.data() + m * nb;
            float acc = 0.f;
            for (size_t b = 0; b < nb; ++b) {
                const uint8_t* blk = row + b * BLOCK_BYTES;
                const int8_t* q = (const int8_t*)(blk + 2);
                int isum = 0;
                for (size_t j = 0; j < QK; ++j) isum += q[j] * qx[b * QK + j];
                acc += half_to_float(load_u16(blk)) * dx[b] * (float)isum;
            }
            y[m * N + n] = acc;
        }
    }
}

// ------------------------------------------------------------------------------------------------- AVX2 path
// y[m0..m0+R][n..n+C]: per block, |q| and q of C weight rows in registers serve R activation rows.
template <size_t C, size_t R>
__attribute__((target("avx2,fma,f16c"))) static void tile_avx2(const Q8_0& a, const uint8_t* w, float* y,
                                                               size_t m0, size_t K, size_t N, size_t n) {
    const size_t nb = K / QK, row = nb * BLOCK_BYTES;
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t* qx0 = a.q.data() + m0 * K;
    const float* dx0 = a.d.data() + m0 * nb;
    __m256 acc[C][R];
    for (size_t c = 0; c < C; ++c)
        for (size_t r = 0; r < R; ++r) acc[c][r] = _mm256_setzero_ps();
    // The tile's C rows are C * row contiguous bytes, and the tiles follow each other: per block, the next C * 34
    // bytes of the tile two on are prefetched, every cache line of them (the hardware prefetcher alone, or one
    // line per row and block as Q41MatMul's tiles, left the loads waiting: one layer 576 -> 49,152 at M = 1,
    // 5.4 and 3.4 ms against 1.4, CPU time, 1 thread, Zen 4)
    const char* ahead = (const char*)(w + (n + 2 * C) * row);
    for (size_t b = 0; b < nb; ++b) {
        for (size_t line = 0; line < C * BLOCK_BYTES + 64; line += 64)
            _mm_prefetch(ahead + b * C * BLOCK_BYTES + line, _MM_HINT_T0);
        __m256i qw[C], aw[C];
        __m256 dw[C];
        for (size_t c = 0; c < C; ++c) {
            const uint8_t* blk = w + (n + c) * row + b * BLOCK_BYTES;
            dw[c] = _mm256_set1_ps(f16(blk));
            qw[c] = _mm256_loadu_si256((const __m256i*)(blk + 2));
            aw[c] = _mm256_sign_epi8(qw[c], qw[c]);  // |q| (-128 -> 128 as u8)
        }
        for (size_t r = 0; r < R; ++r) {
            const __m256i qx = _mm256_loadu_si256((const __m256i*)(qx0 + r * K + b * QK));
            const __m256 dx = _mm256_broadcast_ss(dx0 + r * nb + b);
            for (size_t c = 0; c < C; ++c) {
                const __m256i p16 = _mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(qx, qw[c]));
                const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                acc[c][r] = _mm256_fmadd_ps(_mm256_mul_ps(dw[c], dx), p, acc[c][r]);
            }
        }
    }
    for (size_t c = 0; c < C; ++c)
        for (size_t r = 0; r < R; ++r) y[(m0 + r) * N + n + c] = hsum8(acc[c][r]);
}

// ------------------------------------------------------------------------------ AVX2 path, eight columns at once
// From GROUP_ROWS rows on, each group of eight columns is repacked once per task (q8k.hpp's kquant_rows), per block:
//   v[g] (g = 0..7)   32 bytes: dword c = column c's int8 q of elements 4g .. 4g+3
//   a[g]              the same as |q| (u8)
//   d                 8 x f32
// so per row and block one broadcast activation dword per g serves all eight columns: sign, maddubs and madd per
// four elements of eight columns, then one convert and one FMA per block for the eight (the row tiles: one each per
// block and column, and a horizontal sum per output).
constexpr size_t GROUP_ROWS = 8;
constexpr size_t GROUP_BYTES = 8 * 32 + 8 * 32 + 32;

__attribute__((target("avx2,fma,f16c"))) static void repack_group(const uint8_t* w, size_t nb, size_t n,
                                                                  uint8_t* out) {
    const size_t row = nb * BLOCK_BYTES;
    const char* ahead = (const char*)(w + (n + 8) * row);  // the next group's rows, spread over the blocks (as tiles)
    for (size_t b = 0; b < nb; ++b) {
        for (size_t line = 0; line < 8 * BLOCK_BYTES + 64; line += 64)
            _mm_prefetch(ahead + b * 8 * BLOCK_BYTES + line, _MM_HINT_T0);
        uint8_t* o = out + b * GROUP_BYTES;
        __m256i v[8];
        float* d = (float*)(o + 512);
        for (size_t c = 0; c < 8; ++c) {
            const uint8_t* blk = w + (n + c) * row + b * BLOCK_BYTES;
            v[c] = _mm256_loadu_si256((const __m256i*)(blk + 2));
            d[c] = f16(blk);
        }
        transpose_dwords_8x8(v, o);
        for (size_t g = 0; g < 8; ++g) {
            const __m256i q = _mm256_loadu_si256((const __m256i*)(o + 32 * g));
            _mm256_storeu_si256((__m256i*)(o + 256 + 32 * g), _mm256_abs_epi8(q));  // -128 -> 128 as u8
        }
    }
}

template <size_t R>
__attribute__((target("avx2,fma,f16c"))) static void group_tile_avx2(const Q8_0& a, const uint8_t* packed,
                                                                     float* y, size_t m0, size_t K, size_t N,
                                                                     size_t n) {
    const size_t nb = K / QK;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[R];
    for (size_t r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t* o = packed + b * GROUP_BYTES;
        __m256i isum[R];
        for (size_t r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
        for (size_t g = 0; g < 8; ++g) {
            const __m256i q = _mm256_loadu_si256((const __m256i*)(o + 32 * g));
            const __m256i aq = _mm256_loadu_si256((const __m256i*)(o + 256 + 32 * g));
            for (size_t r = 0; r < R; ++r) {
                const __m256i qx = _mm256_set1_epi32(load_i32(a.q.data() + (m0 + r) * K + b * QK + 4 * g));
                const __m256i p16 = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(qx, q));
                isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p16, ones));
            }
            keep_order(isum);
        }
        const __m256 d = _mm256_loadu_ps((const float*)(o + 512));
        for (size_t r = 0; r < R; ++r) {
            const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(a.d[(m0 + r) * nb + b]));
            acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum[r]), acc[r]);
        }
    }
    for (size_t r = 0; r < R; ++r) _mm256_storeu_ps(y + (m0 + r) * N + n, acc[r]);
}

static void rows_avx2(const Q8_0& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                      size_t n1) {
    const size_t nb = K / QK;
    kquant_rows(
        M, nb, GROUP_BYTES, GROUP_ROWS, n0, n1, [&](size_t n, uint8_t* out) { repack_group(w, nb, n, out); },
        [&](auto R, const uint8_t* packed, size_t m, size_t n) {
            group_tile_avx2<decltype(R)::value>(a, packed, y, m, K, N, n);
        },
        [&](auto C, auto R, size_t m, size_t n) {
            tile_avx2<decltype(C)::value, decltype(R)::value>(a, w, y, m, K, N, n);
        });
}

// ------------------------------------------------------------------------------------------------- the product
void q80_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel) {
    const size_t nb = K / QK;
    Q8_0 a;
    a.q.resize(M * K);
    a.d.resize(M * nb);
    auto quantise = kernel == Kernel::Avx2 ? quantise_row_32<Kernel::Avx2> : quantise_row_32<Kernel::Scalar>;
    parallel_rows(M, [&](size_t m) { quantise(x + m * K, K, a.q.data() + m * K, a.d.data() + m * nb, nullptr); });
    auto rows = kernel == Kernel::Avx2 ? rows_avx2 : rows_scalar;
    parallel_columns(N, 8, M, [&](size_t n0, size_t n1) { rows(a, w, y, M, K, N, n0, n1); });
}

}  // namespace genmesh
