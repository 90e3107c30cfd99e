// genmesh::Q41MatMul: y = x W^T with W in GGUF Q4_1 blocks and x quantised per block of 32 to int8
// (Q8_1) at run time. A custom OpenVINO operation (opset "genmesh"): the CPU plugin runs it through its
// Reference node, which calls evaluate().
//
// Inputs:  x       f32 [..., K]                  (K a multiple of 32)
//          blocks  u8  [N, K/32 * 20]            the file's Q4_1 blocks, row n = output n:
//                                                f16 d, f16 m, 16 bytes of nibbles (byte j: element j in
//                                                its low nibble, element j+16 in its high one), w = d*q + m
// Output:  y       f32 [..., N]
// Attribute kernel: "auto" (AVX2 where the CPU has it, else scalar), "avx2", "scalar".
//
// Per block b of 32 inputs: x ~= dx * qx (qx int8, dx = max|x| / 127), sx = dx * sum(qx), and
//     sum_j w_j x_j ~= d dx * sum_j q_j qx_j + m sx
// The integer sums are _mm256_maddubs_epi16 (u8 q x s8 qx -> 16 pairs of i16; |pair| <= 2*15*127, no
// saturation) and _mm256_madd_epi16 (-> 8 x i32); then float multiply-adds per block. The AVX2 kernel takes
// eight output columns at a time (their blocks transposed so that one maddubs serves all eight and one madd,
// convert and FMA finish a block for all eight); the last N % 8 columns take a per-column tile.
// genmesh::Q41X8MatMul: the same products over the blocks stored in that transposed order (the interleaved layout,
// below), so the kernel reads them as they lie.

#include "q41_matmul.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace genmesh {

constexpr size_t QK = 32;          // weights per block
constexpr size_t BLOCK_BYTES = 20;  // f16 d, f16 m, 16 bytes of nibbles
constexpr size_t ROWS = 4;          // activation rows per pass over a weight block (register tile)
constexpr size_t M_CHUNK = 64;      // activation rows per pass over a task's weight rows (cache tile)

// The activations of one call, quantised: qx [M][K] int8, dx and sx [M][K/32] f32.
struct Q8_1 {
    std::vector<int8_t> q;
    std::vector<float> d, s;
};

// ----------------------------------------------------------------------------------------------- scalar path
static void rows_scalar(const Q8_1& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                        size_t n1) {
    const size_t nb = K / QK;
    for (size_t n = n0; n < n1; ++n) {
        const uint8_t* row = w + n * nb * BLOCK_BYTES;
        for (size_t m = 0; m < M; ++m) {
            const int8_t* qx = a.q.data() + m * K;
            const float* dx = a.d.data() + m * nb;
            const float* sx = a.s.data() + m * nb;
            float acc = 0.f;
            for (size_t b = 0; b < nb; ++b) {
                const uint8_t* blk = row + b * BLOCK_BYTES;
                const float d = half_to_float(load_u16(blk)), mn = half_to_float(load_u16(blk + 2));
                int isum = 0;
                for (size_t j = 0; j < 16; ++j) {
                    isum += (blk[4 + j] & 0x0F) * qx[b * QK + j];
                    isum += (blk[4 + j] >> 4) * qx[b * QK + j + 16];
                }
                acc += d * dx[b] * (float)isum + mn * sx[b];
            }
            y[m * N + n] = acc;
        }
    }
}

// ------------------------------------------------------------------------------------------------- AVX2 path
// One weight block as 32 unsigned bytes in element order: low nibbles (elements 0..15) then high ones.
__attribute__((target("avx2,fma,f16c"))) static inline __m256i unpack_q4(const uint8_t* nibbles) {
    const __m128i raw = _mm_loadu_si128((const __m128i*)nibbles);
    const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F));
    return _mm256_set_m128i(hi, lo);
}

// sum_b mw[b] * sx[b] over nb blocks (the minimums' term), 8 blocks per step.
__attribute__((target("avx2,fma,f16c"))) static inline float dot_f32(const float* a, const float* b, size_t n) {
    __m256 acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float out = hsum8(acc);
    for (; i < n; ++i) out += a[i] * b[i];
    return out;
}

// y[m][n] for rows m0..m0+R and C weight rows from n: each unpacked weight block serves R activation rows,
// each loaded activation block C weight rows (C x R accumulators in registers). The minimums' term is a
// float dot product of the tile's block minimums (kept in mw) with the activations' block sums.
template <size_t C, size_t R>
__attribute__((target("avx2,fma,f16c"))) static void tile_avx2(const Q8_1& a, const uint8_t* w, float* y,
                                                               size_t m0, size_t K, size_t N, size_t n,
                                                               float* mw) {
    const size_t nb = K / QK;
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t* qx0 = a.q.data() + m0 * K;
    const float* dx0 = a.d.data() + m0 * nb;
    __m256 acc[C][R];
    for (size_t c = 0; c < C; ++c)
        for (size_t r = 0; r < R; ++r) acc[c][r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
        __m256i qw[C];
        __m256 dw[C];
        for (size_t c = 0; c < C; ++c) {
            const uint8_t* blk = w + ((n + c) * nb + b) * BLOCK_BYTES;
            // the next tile's rows (C rows on): the hardware prefetcher alone left the weight loads waiting
            if (b % 3 == 0) _mm_prefetch((const char*)(blk + C * nb * BLOCK_BYTES), _MM_HINT_T0);
            dw[c] = _mm256_set1_ps(f16(blk));
            mw[c * nb + b] = f16(blk + 2);
            qw[c] = unpack_q4(blk + 4);
        }
        for (size_t r = 0; r < R; ++r) {
            const __m256i qx = _mm256_loadu_si256((const __m256i*)(qx0 + r * K + b * QK));
            const __m256 dx = _mm256_broadcast_ss(dx0 + r * nb + b);
            for (size_t c = 0; c < C; ++c) {
                const __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(qw[c], qx), ones);
                acc[c][r] = _mm256_fmadd_ps(_mm256_mul_ps(dw[c], dx), _mm256_cvtepi32_ps(p32), acc[c][r]);
            }
        }
    }
    for (size_t c = 0; c < C; ++c)
        for (size_t r = 0; r < R; ++r)
            y[(m0 + r) * N + n + c] = hsum8(acc[c][r]) + dot_f32(mw + c * nb, a.s.data() + (m0 + r) * nb, nb);
}

template <size_t C>
static void weight_rows_avx2(const Q8_1& a, const uint8_t* w, float* y, size_t m0, size_t m1, size_t K, size_t N,
                             size_t n, float* mw) {
    size_t m = m0;
    for (; m + ROWS <= m1; m += ROWS) tile_avx2<C, ROWS>(a, w, y, m, K, N, n, mw);
    for (; m < m1; ++m) tile_avx2<C, 1>(a, w, y, m, K, N, n, mw);
}

// ------------------------------------------------------------------------------ AVX2 path, eight columns at once
// Eight output columns at once (every M; the last N % 8 columns take the tiles above). Per block, the eight
// weight rows n..n+7 are transposed (gather_block) into
//   nib[g] (g = 0..3)  32 bytes: dword c = column c's nibble bytes 4g..4g+3 (elements 4g..4g+3 in the low
//                      nibbles, 16+4g..16+4g+3 in the high ones)
//   d, m               8 f32: the columns' scales and minimums
// straight from the file's layout in registers where at most 4 activation rows use each block (one tile:
// decode, small batches), else once per task into a scratch buffer of the thread (never the whole matrix:
// nb * 192 bytes) that all M rows then pass over.
// Per row and block, the activation's dword of elements 4g..4g+3 is broadcast, so one maddubs serves all eight
// columns (8 maddubs per 32 x 8 products, as before), their i16 sums add without overflow (8 * 2*15*127 =
// 30,480 < 2^15), and one madd, one convert and two FMAs (scale and minimum) per block finish eight columns
// at once, with no horizontal sum: about half the vector instructions of the row-by-row tile above.
constexpr size_t GROUP = 8;                              // output columns per repacked group
constexpr size_t GROUP_BYTES = 4 * 32 + 2 * GROUP * 4;  // nibbles + f32 d + f32 m, per block

// Block b of the eight columns n..n+7 from the file's layout (blk: column n's block b; row: bytes per weight row):
// nib[g], 32-bit lane c = column c's nibble bytes 4g..4g+3; the scales and minimums as f32.
struct GroupBlock {
    __m256i nib[4];
    __m256 d, m;
};

__attribute__((target("avx2,fma,f16c"))) static inline GroupBlock gather_block(const uint8_t* blk, size_t row) {
    __m256i col[4], head[4];  // lane 0: column c's 16 nibble bytes (its f16 d | m << 16), lane 1: column c+4's
    for (size_t c = 0; c < 4; ++c) {
        col[c] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)(blk + c * row + 4))),
            _mm_loadu_si128((const __m128i*)(blk + (c + 4) * row + 4)), 1);
        uint32_t h0, h1;
        std::memcpy(&h0, blk + c * row, 4);
        std::memcpy(&h1, blk + (c + 4) * row, 4);
        head[c] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtsi32_si128((int)h0)),
                                          _mm_cvtsi32_si128((int)h1), 1);
    }
    GroupBlock g;
    const __m256i t0 = _mm256_unpacklo_epi32(col[0], col[1]), t1 = _mm256_unpackhi_epi32(col[0], col[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(col[2], col[3]), t3 = _mm256_unpackhi_epi32(col[2], col[3]);
    g.nib[0] = _mm256_unpacklo_epi64(t0, t2);
    g.nib[1] = _mm256_unpackhi_epi64(t0, t2);
    g.nib[2] = _mm256_unpacklo_epi64(t1, t3);
    g.nib[3] = _mm256_unpackhi_epi64(t1, t3);
    // lanes [d|m of columns 0..3 | of 4..7] -> u16 [d0..3, m0..3 | d4..7, m4..7] -> [d0..7 | m0..7] -> f32
    const __m256i hm = _mm256_unpacklo_epi64(_mm256_unpacklo_epi32(head[0], head[1]),
                                             _mm256_unpacklo_epi32(head[2], head[3]));
    __m256i p = _mm256_packus_epi32(_mm256_and_si256(hm, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(hm, 16));
    p = _mm256_permute4x64_epi64(p, 0xD8);
    g.d = _mm256_cvtph_ps(_mm256_castsi256_si128(p));
    g.m = _mm256_cvtph_ps(_mm256_extracti128_si256(p, 1));
    return g;
}

__attribute__((target("avx2,fma,f16c"))) static void repack_group(const uint8_t* w, size_t nb, size_t n,
                                                                  uint8_t* out) {
    const size_t row = nb * BLOCK_BYTES;
    for (size_t b = 0; b < nb; ++b) {
        const GroupBlock g = gather_block(w + n * row + b * BLOCK_BYTES, row);
        uint8_t* o = out + b * GROUP_BYTES;
        for (size_t i = 0; i < 4; ++i) _mm256_storeu_si256((__m256i*)(o + 32 * i), g.nib[i]);
        _mm256_storeu_ps((float*)(o + 128), g.d);
        _mm256_storeu_ps((float*)(o + 160), g.m);
    }
}

// Where a group tile reads its eight columns' blocks from (each gives the same GroupBlock, so the same products):
//   File     the file's weight rows n..n+7 (gather_block per block: decode, each block used once, no scratch)
//   Scratch  repack_group's layout in the task's scratch (M > 4 rows over the file's layout: f32 d and m)
//   X8       Q41X8MatMul's layout in the IR: per block 128 bytes of nibbles as gather_block leaves them, then the
//            eight columns' f16 d and f16 m (X8_BLOCK_BYTES = 160, the file's 8 x 20 bytes)
enum class Src { File, Scratch, X8 };
constexpr size_t X8_BLOCK_BYTES = 4 * 32 + 2 * GROUP * 2;  // per block of a group of eight columns

// y[m0..m0+R][n..n+8] from one group of eight columns: the eight weight vectors of a block stay in registers for
// R rows. src: the file's weight row n (Src::File), the repacked group (Scratch) or the interleaved group (X8).
template <size_t R, Src From>
__attribute__((target("avx2,fma,f16c"))) static void group_tile_avx2(const Q8_1& a, const uint8_t* src, float* y,
                                                                     size_t m0, size_t K, size_t N, size_t n,
                                                                     const uint8_t* next) {
    const size_t nb = K / QK;
    const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0F);
    const int8_t* qx0 = a.q.data() + m0 * K;
    const float* dx0 = a.d.data() + m0 * nb;
    const float* sx0 = a.s.data() + m0 * nb;
    __m256 acc[R];
    for (size_t r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
        // the next group's weight rows, while this one computes (its repack would otherwise wait on memory)
        // X8: every line of the next group's block (160 bytes: 3 lines from b * 160), into L1 on every CPU, not
        // prefetch_weights' L2 on Intel: there L2 was not faster (a one-off copy of the q41_x8 driver with both hints,
        // 110 MB of copies: gate/up at M = 1 0.030 against 0.027 ms), and one line per two blocks gained nothing in the
        // pipeline (docs/int8-avx2.md)
        if constexpr (From == Src::X8) {
            if (next)
                for (size_t l = 0; l < 3; ++l)
                    _mm_prefetch((const char*)(next + b * X8_BLOCK_BYTES + 64 * l), _MM_HINT_T0);
        } else if (next && b % 3 == 0) {
            for (size_t c = 0; c < GROUP; ++c)
                _mm_prefetch((const char*)(next + c * nb * BLOCK_BYTES + b * BLOCK_BYTES), _MM_HINT_T0);
        }
        GroupBlock gb;
        if constexpr (From == Src::File) {
            gb = gather_block(src + b * BLOCK_BYTES, nb * BLOCK_BYTES);
        } else if constexpr (From == Src::X8) {
            const uint8_t* o = src + b * X8_BLOCK_BYTES;
            for (size_t g = 0; g < 4; ++g) gb.nib[g] = _mm256_loadu_si256((const __m256i*)(o + 32 * g));
            gb.d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(o + 128)));
            gb.m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(o + 144)));
        } else {
            const uint8_t* o = src + b * GROUP_BYTES;
            for (size_t g = 0; g < 4; ++g) gb.nib[g] = _mm256_loadu_si256((const __m256i*)(o + 32 * g));
            gb.d = _mm256_loadu_ps((const float*)(o + 128));
            gb.m = _mm256_loadu_ps((const float*)(o + 160));
        }
        __m256i wv[8];
        for (size_t g = 0; g < 4; ++g) {
            wv[g] = _mm256_and_si256(gb.nib[g], low);
            wv[g + 4] = _mm256_and_si256(_mm256_srli_epi16(gb.nib[g], 4), low);
        }
        const __m256 dw = gb.d, mw = gb.m;
        for (size_t r = 0; r < R; ++r) {
            const int8_t* qx = qx0 + r * K + b * QK;
            __m256i s = _mm256_maddubs_epi16(wv[0], _mm256_set1_epi32(load_i32(qx)));
            for (size_t g = 1; g < 4; ++g) {
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(wv[g], _mm256_set1_epi32(load_i32(qx + 4 * g))));
                if constexpr (R >= 3) keep_order(s);  // one or two rows: not measured faster
            }
            for (size_t g = 0; g < 4; ++g) {
                s = _mm256_add_epi16(s,
                                     _mm256_maddubs_epi16(wv[g + 4], _mm256_set1_epi32(load_i32(qx + 16 + 4 * g))));
                if constexpr (R >= 3) keep_order(s);  // one or two rows: not measured faster
            }
            const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones));
            acc[r] = _mm256_fmadd_ps(p, _mm256_mul_ps(dw, _mm256_broadcast_ss(dx0 + r * nb + b)), acc[r]);
            acc[r] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(sx0 + r * nb + b), acc[r]);
        }
    }
    for (size_t r = 0; r < R; ++r) _mm256_storeu_ps(y + (m0 + r) * N + n, acc[r]);
}

// All M rows of the group of eight columns n from src (laid out as From says) in tiles of four rows, then one of 3, 2
// or 1; the first tile prefetches `next` (the next weight rows this task reads).
template <Src From>
static void group_rows_avx2(const Q8_1& a, const uint8_t* src, float* y, size_t M, size_t K, size_t N, size_t n,
                            const uint8_t* next) {
    size_t m = 0;
    for (; m + 4 <= M; m += 4, next = nullptr) group_tile_avx2<4, From>(a, src, y, m, K, N, n, next);
    switch (M - m) {
        case 3: group_tile_avx2<3, From>(a, src, y, m, K, N, n, next); break;
        case 2: group_tile_avx2<2, From>(a, src, y, m, K, N, n, next); break;
        case 1: group_tile_avx2<1, From>(a, src, y, m, K, N, n, next); break;
        default: break;
    }
}

// All M rows of the group of eight columns n (M > 4): its blocks repacked into `packed` (the task's scratch), then
// four rows per tile.
static void packed_group_avx2(const Q8_1& a, const uint8_t* w, uint8_t* packed, float* y, size_t M, size_t K,
                              size_t N, size_t n, const uint8_t* next) {
    repack_group(w, K / QK, n, packed);
    group_rows_avx2<Src::Scratch>(a, packed, y, M, K, N, n, next);
}

// All M rows over the groups of eight columns in n0..n1 (n1 - n0 a multiple of 8), the next group's weight rows
// prefetched while one computes (without it the repack waited on memory: 2.1 against 0.9 ms at M = 2 above).
static void groups_avx2(const Q8_1& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                        size_t n1) {
    const size_t nb = K / QK, row = nb * BLOCK_BYTES;
    if (M <= 4) {  // one tile of rows: each weight block is used once, straight from the file's layout
        for (size_t n = n0; n < n1; n += GROUP) {
            const uint8_t* next = n + GROUP < n1 ? w + (n + GROUP) * row : nullptr;
            if (M == 4) group_tile_avx2<4, Src::File>(a, w + n * row, y, 0, K, N, n, next);
            if (M == 3) group_tile_avx2<3, Src::File>(a, w + n * row, y, 0, K, N, n, next);
            if (M == 2) group_tile_avx2<2, Src::File>(a, w + n * row, y, 0, K, N, n, next);
            if (M == 1) group_tile_avx2<1, Src::File>(a, w + n * row, y, 0, K, N, n, next);
        }
        return;
    }
    std::vector<uint8_t> packed(nb * GROUP_BYTES);
    for (size_t n = n0; n < n1; n += GROUP)
        packed_group_avx2(a, w, packed.data(), y, M, K, N, n, n + GROUP < n1 ? w + (n + GROUP) * row : nullptr);
}

// Activation rows in chunks of M_CHUNK (64 rows of K int8 stay in L2 while the task's weight rows pass).
static void rows_avx2(const Q8_1& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                      size_t n1) {
    // whole groups of eight columns (every M: at M = 1 too they take less time than the tiles below: one layer
    // of 1,536 -> 8,960, 0.51-0.57 against 0.69-0.71 ms, Zen 4); the last N % 8 columns by the tiles below
    const size_t n8 = n0 + (n1 - n0) / GROUP * GROUP;
    groups_avx2(a, w, y, M, K, N, n0, n8);
    n0 = n8;
    if (n0 == n1) return;
    std::vector<float> mw(4 * (K / QK));
    for (size_t m0 = 0; m0 < M; m0 += M_CHUNK) {
        const size_t m1 = std::min(M, m0 + M_CHUNK);
        size_t n = n0;
        if (m1 - m0 < ROWS)  // decode: 4 weight rows at once, 4 independent accumulator chains per row
            for (; n + 4 <= n1; n += 4) weight_rows_avx2<4>(a, w, y, m0, m1, K, N, n, mw.data());
        for (; n + 2 <= n1; n += 2) weight_rows_avx2<2>(a, w, y, m0, m1, K, N, n, mw.data());
        for (; n < n1; ++n) weight_rows_avx2<1>(a, w, y, m0, m1, K, N, n, mw.data());
    }
}

// ------------------------------------------------------------------------------------------------- the product
// x's M rows quantised per block of 32 (Q8_1: int8 values, d, and d * their sum), the rows in parallel
static Q8_1 quantise_q8_1(const float* x, size_t M, size_t K, Kernel kernel) {
    const size_t nb = K / QK;
    Q8_1 a;
    a.q.resize(M * K);
    a.d.resize(M * nb);
    a.s.resize(M * nb);
    auto quantise = kernel == Kernel::Avx2 ? quantise_row_32<Kernel::Avx2> : quantise_row_32<Kernel::Scalar>;
    parallel_rows(M, [&](size_t m) {
        quantise(x + m * K, K, a.q.data() + m * K, a.d.data() + m * nb, a.s.data() + m * nb);
    });
    return a;
}

// The columns n0..n1 of one matrix over all M rows, in one layout (the file's: rows_avx2 / rows_scalar; the
// interleaved: x8_rows_avx2 / x8_rows_scalar)
using Rows = void (*)(const Q8_1&, const uint8_t*, float*, size_t, size_t, size_t, size_t, size_t);

// x quantised once; every matrix's output columns split in groups of eight (the AVX2 kernel's unit), all in one loop
static void matmul_group(const float* x, const std::vector<const uint8_t*>& ws, const std::vector<float*>& ys,
                         size_t M, size_t K, const std::vector<size_t>& Ns, Kernel kernel, Rows rows) {
    if (M == 0) return;
    const Q8_1 a = quantise_q8_1(x, M, K, kernel);
    parallel_segments(Ns, GROUP, M,
                      [&](size_t i, size_t n0, size_t n1) { rows(a, ws[i], ys[i], M, K, Ns[i], n0, n1); });
}

void q41_matmul_group(const float* x, const std::vector<const uint8_t*>& ws, const std::vector<float*>& ys, size_t M,
                      size_t K, const std::vector<size_t>& Ns, Kernel kernel) {
    matmul_group(x, ws, ys, M, K, Ns, kernel, kernel == Kernel::Avx2 ? rows_avx2 : rows_scalar);
}

void q41_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel) {
    if (N) q41_matmul_group(x, {w}, {y}, M, K, {N}, kernel);
}

// ------------------------------------------------------------------------------------- the interleaved layout
// Q41X8MatMul's blocks, u8 [N, K/32 * 20] as the file's: the groups of eight columns 0..N8 (N8 = N - N % 8) first,
// group n/8 at byte n * row (row = K/32 * 20: a group takes its eight columns' bytes), X8_BLOCK_BYTES per block
// (Src::X8); then the last N % 8 columns in the file's layout, column n at byte n * row as in the file. The AVX2
// kernel reads a group's blocks as they lie (no gather: decode) and needs no scratch (no repack: M > 4); every
// product is Q41MatMul's, tile for tile, so the outputs are bit for bit the file layout's.

// Group n..n+7 of the interleaved layout back in the file's layout (the scalar kernel's input): eight rows of nb
// blocks into out.
static void x8_group_to_file(const uint8_t* src, size_t nb, uint8_t* out) {
    const size_t row = nb * BLOCK_BYTES;
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t* o = src + b * X8_BLOCK_BYTES;
        for (size_t c = 0; c < GROUP; ++c) {
            uint8_t* blk = out + c * row + b * BLOCK_BYTES;
            std::memcpy(blk, o + 128 + 2 * c, 2);
            std::memcpy(blk + 2, o + 144 + 2 * c, 2);
            for (size_t g = 0; g < 4; ++g) std::memcpy(blk + 4 + 4 * g, o + 32 * g + 4 * c, 4);
        }
    }
}

// Columns n0..n1 (n0 a multiple of 8) of the interleaved layout: each group back in the file's layout in the
// thread's scratch, then rows_scalar; the last N % 8 columns straight from the file's layout.
static void x8_rows_scalar(const Q8_1& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                           size_t n1) {
    const size_t nb = K / QK, row = nb * BLOCK_BYTES, n8 = std::min(n1, N / GROUP * GROUP);
    thread_local std::vector<uint8_t> file;
    if (file.size() < GROUP * row) file.resize(GROUP * row);
    size_t n = n0;
    for (; n < n8; n += GROUP) {
        x8_group_to_file(w + n * row, nb, file.data());
        rows_scalar(a, file.data(), y + n, M, K, N, 0, GROUP);
    }
    if (n < n1) rows_scalar(a, w, y, M, K, N, n, n1);
}

// Columns n0..n1 (n0 a multiple of 8) of the interleaved layout: per group, all M rows in tiles of 4, then 3, 2 or
// 1 (Q41MatMul's tiles: one tile of M rows at M <= 4), the next group prefetched during the first; the last N % 8
// columns by rows_avx2 from the file's layout.
static void x8_rows_avx2(const Q8_1& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                         size_t n1) {
    const size_t row = K / QK * BLOCK_BYTES, n8 = std::min(n1, N / GROUP * GROUP);
    size_t n = n0;
    for (; n < n8; n += GROUP) {
        const uint8_t* group = w + n * row;
        group_rows_avx2<Src::X8>(a, group, y, M, K, N, n, n + GROUP < n8 ? group + GROUP * row : nullptr);
    }
    if (n < n1) rows_avx2(a, w, y, M, K, N, n, n1);
}

void q41_x8_matmul_group(const float* x, const std::vector<const uint8_t*>& ws, const std::vector<float*>& ys,
                         size_t M, size_t K, const std::vector<size_t>& Ns, Kernel kernel) {
    matmul_group(x, ws, ys, M, K, Ns, kernel, kernel == Kernel::Avx2 ? x8_rows_avx2 : x8_rows_scalar);
}

void q41_x8_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel) {
    if (N) q41_x8_matmul_group(x, {w}, {y}, M, K, {N}, kernel);
}

// ------------------------------------------------------------------------------------------- the SwiGLU product
// The gate's and the up's groups of eight columns 0..n8 in turn into g and u ([M][width]), each prefetching the other
// matrix's next weight rows (the gate's group n: the up's group n; the up's: the gate's group n + 8). Decode (M <= 4
// rows: one tile) takes the weights straight from the file's layout, as groups_avx2 does.
// M > 4: the same with each group repacked first (packed_group_avx2, as groups_avx2).
static void swiglu_groups_packed(const Q8_1& a, const uint8_t* wg, const uint8_t* wu, float* g, float* u, size_t M,
                                 size_t K, size_t width, size_t n8) {
    const size_t row = K / QK * BLOCK_BYTES;
    std::vector<uint8_t> packed(K / QK * GROUP_BYTES);
    for (size_t n = 0; n < n8; n += GROUP) {
        packed_group_avx2(a, wg, packed.data(), g, M, K, width, n, wu + n * row);
        packed_group_avx2(a, wu, packed.data(), u, M, K, width, n, n + GROUP < n8 ? wg + (n + GROUP) * row : nullptr);
    }
}

template <size_t R>
static void swiglu_groups_direct(const Q8_1& a, const uint8_t* wg, const uint8_t* wu, float* g, float* u, size_t K,
                                 size_t width, size_t n8) {
    const size_t row = K / QK * BLOCK_BYTES;
    for (size_t n = 0; n < n8; n += GROUP) {
        group_tile_avx2<R, Src::File>(a, wg + n * row, g, 0, K, width, n, wu + n * row);
        const uint8_t* next = n + GROUP < n8 ? wg + (n + GROUP) * row : nullptr;
        group_tile_avx2<R, Src::File>(a, wu + n * row, u, 0, K, width, n, next);
    }
}

// y = silu(x Wg^T) * (x Wu^T): x quantised once, one parallel loop over the N output columns in groups of eight;
// each task computes its columns' gate products, then their up products (the same kernels and arithmetic as
// q41_matmul_group's, so both are bit for bit the grouped op's outputs), then silu(g) * u in f32 into y.
void q41_swiglu(const float* x, const uint8_t* wg, const uint8_t* wu, float* y, size_t M, size_t K, size_t N,
                Kernel kernel) {
    if (M == 0 || N == 0) return;
    const size_t row = K / QK * BLOCK_BYTES;
    const Q8_1 a = quantise_q8_1(x, M, K, kernel);
    auto rows = kernel == Kernel::Avx2 ? rows_avx2 : rows_scalar;
    auto silu_mul = kernel == Kernel::Avx2 ? silu_mul_avx2 : silu_mul_scalar;
    parallel_columns(N, GROUP, M, [&](size_t n0, size_t n1) {
        const size_t width = n1 - n0;  // the task's columns, as a matrix of their own (columns 0..width)
        // the task's gate and up products: the thread's scratch (a task runs to its end without waiting, so no other
        // task of this thread uses it meanwhile; grown once, not allocated per task)
        thread_local std::vector<float> scratch;
        if (scratch.size() < 2 * M * width) scratch.resize(2 * M * width);
        float* g = scratch.data();
        float* u = g + M * width;
        size_t done = 0;  // gate and up group by group, each prefetching the other's next weight rows
        if (kernel == Kernel::Avx2) {
            done = width / GROUP * GROUP;
            if (M > 4) swiglu_groups_packed(a, wg + n0 * row, wu + n0 * row, g, u, M, K, width, done);
            if (M == 1) swiglu_groups_direct<1>(a, wg + n0 * row, wu + n0 * row, g, u, K, width, done);
            if (M == 2) swiglu_groups_direct<2>(a, wg + n0 * row, wu + n0 * row, g, u, K, width, done);
            if (M == 3) swiglu_groups_direct<3>(a, wg + n0 * row, wu + n0 * row, g, u, K, width, done);
            if (M == 4) swiglu_groups_direct<4>(a, wg + n0 * row, wu + n0 * row, g, u, K, width, done);
        }
        if (done < width) {
            rows(a, wg + n0 * row, g, M, K, width, done, width);
            rows(a, wu + n0 * row, u, M, K, width, done, width);
        }
        for (size_t m = 0; m < M; ++m) silu_mul(g + m * width, u + m * width, y + m * N + n0, width);
    });
}

}  // namespace genmesh
