// genmesh::Q4KMatMul: y = x W^T with W in GGUF Q4_K blocks and x quantised per 256 to int8 (Q8_K) at run time.
//
// Inputs:  x       f32 [..., K]              (K a multiple of 256)
//          blocks  u8  [N, K/256 * 144]      the file's Q4_K super-blocks, row n = output n: f16 d, f16 dmin,
//                                            12 bytes of 6-bit scales sc[s] and minimums mn[s] of the 8
//                                            sub-blocks of 32 (ggml's get_scale_min_k4 packing), 128 bytes of
//                                            nibbles: bytes 32c..32c+31 hold sub-block 2c in their low nibbles
//                                            and 2c+1 in their high ones; w = d*sc[s]*q - dmin*mn[s]
// Output:  y       f32 [..., N]
//
// Per super-block of 256 inputs: x ~= dx * qx (qx int8, dx = max|x| / 127 over the 256), bx[s] = sum of qx over
// sub-block s, and
//     sum_j w_j x_j ~= dx * (d * sum_s sc[s] * sum_{j in s} q_j qx_j  -  dmin * sum_s mn[s] * bx[s])
// Both sums over s are integers: _mm256_maddubs_epi16 (u8 q x s8 qx -> i16 pairs, |pair| <= 2*15*127), then
// _mm256_madd_epi16 with the sub-block's scale broadcast (-> i32, |lane| <= 8 * 2*3810*63 < 2^23 per
// super-block); the minimums' sum is one 128-bit madd of the eight mn with the eight bx. So one float
// multiply-add per super-block and output for the products, one for the minimums.

#include "q4k_matmul.hpp"

#include "q8k.hpp"

#include <vector>

namespace genmesh {

constexpr size_t BLOCK_BYTES = 144;  // f16 d, f16 dmin, 12 bytes of scales and minimums, 128 of nibbles

// The eight 6-bit scales and minimums of a super-block from its 12 packed bytes (ggml's get_scale_min_k4):
// sub-blocks 0..3 in the low 6 bits of bytes 0..3 (scales) and 4..7 (minimums); 4..7 in the nibbles of bytes
// 8..11 with their top 2 bits in the top bits of bytes 0..7.
static inline void scales_mins(const uint8_t* p, uint8_t* sc, int16_t* mn) {
    for (size_t j = 0; j < 4; ++j) {
        sc[j] = p[j] & 63;
        mn[j] = p[j + 4] & 63;
        sc[j + 4] = (p[j + 8] & 0x0F) | ((p[j] >> 6) << 4);
        mn[j + 4] = (p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4);
    }
}

// ----------------------------------------------------------------------------------------------- scalar path
static void rows_scalar(const Q8_K& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                        size_t n1) {
    const size_t nsb = K / QK_K;
    for (size_t n = n0; n < n1; ++n) {
        for (size_t m = 0; m < M; ++m) {
            const int8_t* qx = a.q.data() + m * K;
            float acc = 0.f;
            for (size_t b = 0; b < nsb; ++b) {
                const uint8_t* blk = w + (n * nsb + b) * BLOCK_BYTES;
                uint8_t sc[SUB];
                int16_t mn[SUB];
                scales_mins(blk + 4, sc, mn);
                int isum = 0, imin = 0;
                for (size_t s = 0; s < SUB; ++s) {
                    const uint8_t* nib = blk + 16 + 32 * (s / 2);
                    const int8_t* xs = qx + b * QK_K + 32 * s;
                    int dot = 0;
                    for (size_t j = 0; j < 32; ++j) dot += (s % 2 ? nib[j] >> 4 : nib[j] & 0x0F) * xs[j];
                    isum += sc[s] * dot;
                    imin += mn[s] * a.bsum[(m * nsb + b) * SUB + s];
                }
                const float d = half_to_float(load_u16(blk)), dmin = half_to_float(load_u16(blk + 2));
                acc += a.d[m * nsb + b] * (d * (float)isum - dmin * (float)imin);
            }
            y[m * N + n] = acc;
        }
    }
}

// ------------------------------------------------------------------------------------------------- AVX2 path
// scales_mins with four 32-bit words instead of a loop over bytes: bytes 0..7 of the result are the eight scales,
// 8..15 the eight minimums (each < 64).
static inline __m128i scales_mins_vec(const uint8_t* p) {
    uint32_t a, b, c;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + 4, 4);
    std::memcpy(&c, p + 8, 4);
    constexpr uint32_t six = 0x3F3F3F3F, four = 0x0F0F0F0F, two = 0x03030303;
    const uint32_t sc03 = a & six, mn03 = b & six;
    const uint32_t sc47 = (c & four) | (((a >> 6) & two) << 4), mn47 = ((c >> 4) & four) | (((b >> 6) & two) << 4);
    return _mm_set_epi32((int)mn47, (int)mn03, (int)sc47, (int)sc03);
}

// SCALE_SHUFFLE[s]: the pshufb mask that spreads byte s of each 128-bit half as i16 over all 16 lanes (the
// sub-block's scale for its madd, from one register instead of a broadcast per sub-block).
alignas(32) static const uint8_t SCALE_SHUFFLE[SUB][32] = {
#define GENMESH_SPREAD(s) \
    {s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, \
     s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80}
    GENMESH_SPREAD(0), GENMESH_SPREAD(1), GENMESH_SPREAD(2), GENMESH_SPREAD(3),
    GENMESH_SPREAD(4), GENMESH_SPREAD(5), GENMESH_SPREAD(6), GENMESH_SPREAD(7),
#undef GENMESH_SPREAD
};

// y[m0..m0+R][n..n+C]: per super-block, each 32 bytes of nibbles of a weight row serve R activation rows (its two
// sub-blocks: one maddubs and one madd with the scale spread by a pshufb each), into C x R integer accumulators;
// then one FMA per output for the products and one for the minimums (their madd's four i32 in the low half).
template <size_t C, size_t R>
__attribute__((target("avx2,fma,f16c"))) static void tile_avx2(const Q8_K& a, const uint8_t* w, float* y,
                                                               size_t m0, size_t K, size_t N, size_t n) {
    const size_t nsb = K / QK_K, row = nsb * BLOCK_BYTES;
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 acc[C][R];
    for (size_t c = 0; c < C; ++c)
        for (size_t r = 0; r < R; ++r) acc[c][r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nsb; ++b) {
        const uint8_t* blk0 = w + n * row + b * BLOCK_BYTES;
        for (size_t c = 0; c < C; ++c) {
            const uint8_t* blk = blk0 + c * row;
            const char* next = (const char*)(blk + C * row);  // the next tile's rows: the prefetcher alone lags
            _mm_prefetch(next, _MM_HINT_T0);
            _mm_prefetch(next + 64, _MM_HINT_T0);
            _mm_prefetch(next + 128, _MM_HINT_T0);
            const __m128i sm = scales_mins_vec(blk + 4);
            const __m256i sc = _mm256_broadcastsi128_si256(sm);
            __m256i isum[R];
            for (size_t r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
            for (size_t j = 0; j < 4; ++j) {
                const __m256i raw = _mm256_loadu_si256((const __m256i*)(blk + 16 + 32 * j));
                const __m256i lo = _mm256_and_si256(raw, low), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
                const __m256i sl = _mm256_shuffle_epi8(sc, _mm256_load_si256((const __m256i*)SCALE_SHUFFLE[2 * j]));
                const __m256i sh =
                    _mm256_shuffle_epi8(sc, _mm256_load_si256((const __m256i*)SCALE_SHUFFLE[2 * j + 1]));
                for (size_t r = 0; r < R; ++r) {
                    const int8_t* qx = a.q.data() + (m0 + r) * K + b * QK_K + 64 * j;
                    const __m256i pl =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i*)qx)), sl);
                    const __m256i ph =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i*)(qx + 32))), sh);
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(pl, ph));
                }
                keep_order(isum);
            }
            const float d = f16(blk), dmin = f16(blk + 2);
            const __m128i mn = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
            for (size_t r = 0; r < R; ++r) {
                const float dx = a.d[(m0 + r) * nsb + b];
                const __m128i bx = _mm_loadu_si128((const __m128i*)(a.bsum.data() + ((m0 + r) * nsb + b) * SUB));
                acc[c][r] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(isum[r]), acc[c][r]);
                // the minimums' four partial sums in the low half of the accumulator (no horizontal sum here)
                const __m128i p = _mm_madd_epi16(mn, bx);
                acc[c][r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dx), _mm256_cvtepi32_ps(_mm256_zextsi128_si256(p)),
                                             acc[c][r]);
            }
        }
    }
    for (size_t c = 0; c < C; ++c)
        for (size_t r = 0; r < R; ++r) y[(m0 + r) * N + n + c] = hsum8(acc[c][r]);
}

// ------------------------------------------------------------------------------ AVX2 path, eight columns at once
// Where M >= GROUP_ROWS, each group of eight output columns is repacked per super-block (once per task, into a
// scratch of K/256 * GROUP_BYTES) so that one maddubs serves all eight columns, as Q41MatMul's M > 1 kernel:
//   nib[j][g] (j = 0..3, g = 0..7)  32 bytes: dword c = column c's nibble bytes 32j + 4g .. +3 (sub-block 2j's
//                                   elements 4g..4g+3 in the low nibbles, 2j+1's in the high ones)
//   sc[s] (s = 0..7)                8 x i32: column c's scale of sub-block s in both i16 halves
//   mn[t] (t = 0..3)                8 x i32: column c's minimums of sub-blocks 2t (low i16) and 2t+1 (high)
//   d, dmin                         8 x f32
// Per activation row and sub-block, the row's dword of elements 4g..4g+3 is broadcast: 8 maddubs add in i16 (8 *
// 2*15*127 = 30,480 < 2^15) to the sub-block's sums for eight columns, one madd with sc[s] gives them in i32; per
// super-block the minimums are 4 madds of mn[t] with the row's (bx[2t], bx[2t+1]) broadcast; two FMAs finish it.
constexpr size_t GROUP = 8;
// From this many rows on the repack pays (one thread, AVX2, Zen 4, ns per super-block and column, L2-resident
// 1,536 x 1,536 / 1,536 x 8,960 from memory: rows 4 / 8 / 16: this kernel 18.6 / 28.7 / 50.3 and 29.5 / 40.8 /
// 65.3, the tiles above 20.4 / 40.7 / 81.9 and 22.3 / 46.4 / 91.5: at 4 rows the repack's burst of loads costs
// more than it saves; with the scales repacked by vector (scales_mins_vec, a transpose); 24 before that)
constexpr size_t GROUP_ROWS = 8;
constexpr size_t GROUP_BYTES = 4 * 8 * 32 + 8 * 32 + 4 * 32 + 2 * 32;  // nibbles, scales, minimums, d, dmin

__attribute__((target("avx2,fma,f16c"))) static void repack_group(const uint8_t* w, size_t nsb, size_t n,
                                                                  uint8_t* out) {
    const size_t row = nsb * BLOCK_BYTES;
    for (size_t b = 0; b < nsb; ++b) {
        uint8_t* o = out + b * GROUP_BYTES;
        for (size_t c = 0; c < GROUP; ++c) {  // the next group's rows (the hardware prefetcher lags 8 streams)
            const char* next = (const char*)(w + (n + GROUP + c) * row + b * BLOCK_BYTES);
            for (size_t line = 0; line < BLOCK_BYTES; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
        }
        for (size_t j = 0; j < 4; ++j) {  // an 8 x 8 transpose of dwords per 32 bytes of nibbles
            __m256i v[8];
            for (size_t c = 0; c < GROUP; ++c)
                v[c] = _mm256_loadu_si256((const __m256i*)(w + (n + c) * row + b * BLOCK_BYTES + 16 + 32 * j));
            transpose_dwords_8x8(v, o + 8 * j * 32);
        }
        // per column: its eight scales as i16 pairs (s, s) and its minimums as pairs (m[2t], m[2t+1]); then
        // transposed so that dword c holds column c's
        __m256i scv[GROUP], mnv[GROUP];
        float* d = (float*)(o + 1024 + 8 * 32 + 4 * 32);
        for (size_t c = 0; c < GROUP; ++c) {
            const uint8_t* blk = w + (n + c) * row + b * BLOCK_BYTES;
            const __m128i sm = scales_mins_vec(blk + 4);
            const __m256i s32 = _mm256_cvtepu8_epi32(sm);  // the eight scales, one per dword
            scv[c] = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));
            mnv[c] = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
            d[c] = f16(blk);
            d[8 + c] = f16(blk + 2);
        }
        transpose_dwords_8x8(scv, o + 1024);
        alignas(32) uint8_t mins[8 * 32];  // rows 4..7 are the zero upper halves
        transpose_dwords_8x8(mnv, mins);
        std::memcpy(o + 1024 + 8 * 32, mins, 4 * 32);
    }
}

// One activation row m's super-block b for eight columns: the minimums' sum (4 madds of mn[t], column c's
// (mn[2t], mn[2t+1]) as the i16 pair of dword c, with the row's (bx[2t], bx[2t+1]) broadcast), then two FMAs.
__attribute__((target("avx2,fma,f16c"))) static inline __m256 group_super_block(const Q8_K& a, size_t m, size_t nsb,
                                                                                size_t b, const __m256i* mn,
                                                                                __m256 d, __m256 dmin, __m256i isum,
                                                                                __m256 acc) {
    const int16_t* bx = a.bsum.data() + (m * nsb + b) * SUB;
    __m256i im = _mm256_setzero_si256();
    for (size_t t = 0; t < 4; ++t) {
        int32_t pair;
        std::memcpy(&pair, bx + 2 * t, 4);
        im = _mm256_add_epi32(im, _mm256_madd_epi16(mn[t], _mm256_set1_epi32(pair)));
    }
    const __m256 dx = _mm256_set1_ps(a.d[m * nsb + b]);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(im), acc);
}

template <size_t R>
__attribute__((target("avx2,fma,f16c"))) static void group_tile_avx2(const Q8_K& a, const uint8_t* packed,
                                                                     float* y, size_t m0, size_t K, size_t N,
                                                                     size_t n) {
    const size_t nsb = K / QK_K;
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 acc[R];
    for (size_t r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nsb; ++b) {
        const uint8_t* o = packed + b * GROUP_BYTES;
        const int32_t* sc = (const int32_t*)(o + 1024);
        __m256i isum[R];
        for (size_t r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
        for (size_t s = 0; s < SUB; ++s) {
            const size_t j = s / 2;
            __m256i s16[R];
            for (size_t r = 0; r < R; ++r) s16[r] = _mm256_setzero_si256();
            for (size_t g = 0; g < 8; ++g) {
                const __m256i raw = _mm256_loadu_si256((const __m256i*)(o + (8 * j + g) * 32));
                const __m256i wv =
                    _mm256_and_si256(s % 2 ? _mm256_srli_epi16(raw, 4) : raw, low);  // sub-block 2j: low nibbles
                for (size_t r = 0; r < R; ++r) {
                    const int8_t* qx = a.q.data() + (m0 + r) * K + b * QK_K + 32 * s + 4 * g;
                    s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(wv, _mm256_set1_epi32(load_i32(qx))));
                }
                keep_order(s16);
            }
            const __m256i scale = _mm256_loadu_si256((const __m256i*)(sc + 8 * s));
            for (size_t r = 0; r < R; ++r) isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(s16[r], scale));
        }
        const int32_t* mn = sc + 64;
        __m256i mnv[4];
        for (size_t t = 0; t < 4; ++t) mnv[t] = _mm256_loadu_si256((const __m256i*)(mn + 8 * t));
        const __m256 d = _mm256_loadu_ps((const float*)(mn + 32)), dmin = _mm256_loadu_ps((const float*)(mn + 40));
        for (size_t r = 0; r < R; ++r) acc[r] = group_super_block(a, m0 + r, nsb, b, mnv, d, dmin, isum[r], acc[r]);
    }
    for (size_t r = 0; r < R; ++r) _mm256_storeu_ps(y + (m0 + r) * N + n, acc[r]);
}

static void rows_avx2(const Q8_K& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                      size_t n1) {
    const size_t nsb = K / QK_K;
    kquant_rows(
        M, nsb, GROUP_BYTES, GROUP_ROWS, n0, n1, [&](size_t n, uint8_t* out) { repack_group(w, nsb, n, out); },
        [&](auto R, const uint8_t* packed, size_t m, size_t n) {
            group_tile_avx2<decltype(R)::value>(a, packed, y, m, K, N, n);
        },
        [&](auto C, auto R, size_t m, size_t n) {
            tile_avx2<decltype(C)::value, decltype(R)::value>(a, w, y, m, K, N, n);
        });
}

// ----------------------------------------------------------- the blocks interleaved eight columns (Q4KX8MatMul)
// Per group of eight columns (n = 8g .. 8g+7) and super-block b, X8_BYTES at (g * K/256 + b) * X8_BYTES:
//   0     nib[j][q] (j = 0..3, q = 0..7)   32 bytes: dword c = column c's nibble bytes 32j + 4q .. +3 (as repack_group)
//   1024  sc[s][c] (s = 0..7)              the 6-bit scales, one byte each
//   1088  mn[t][c][k] (t = 0..3, k = 0, 1)  the minimums of sub-blocks 2t + k, one byte each
//   1152  d[c], 1168 dmin[c]               f16, as the file's
// then the last N % 8 columns in the file's layout (N % 8 rows of K/256 * 144 bytes) and N % 8 * K/256 * 4 zero
// bytes: N * K/256 * 148 bytes in all (2.8 % more than the file's 144). Written at IR-build time
// (genmesh.engine.native.q41_op.pack_q4k_x8). One contiguous stream per task, and no per-call repack: every M takes
// the eight-column products (one broadcast activation dword and one maddubs for eight columns); the scales need a
// widening and a shift per sub-block instead of repack_group's transposes.
constexpr size_t X8_BYTES = 1024 + 64 + 64 + 32, X8_COLUMN_BYTES = X8_BYTES / GROUP;
// the software prefetch's distance: 4 super-blocks of the group's stream (the next group's where the group ends;
// driver scripts/int8_probe/q4k_x8_driver.cpp, Zen 4: M = 1 from memory 25 against 28 ns summed over the 1.5B's
// four shapes, at 0 / 2 super-blocks, both cores under load 3-3.6: noisy)
constexpr size_t X8_PREFETCH = 4 * X8_BYTES;

static void x8_scalar(const Q8_K& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                      size_t n1) {
    const size_t nsb = K / QK_K, n8 = N / GROUP * GROUP;
    for (size_t n = n0; n < std::min(n1, n8); ++n) {
        const size_t c = n % GROUP;
        for (size_t m = 0; m < M; ++m) {
            const int8_t* qx = a.q.data() + m * K;
            float acc = 0.f;
            for (size_t b = 0; b < nsb; ++b) {
                const uint8_t* o = w + ((n / GROUP) * nsb + b) * X8_BYTES;
                uint8_t nib[128];  // the column's nibble bytes as the file has them
                for (size_t dw = 0; dw < 32; ++dw) std::memcpy(nib + 4 * dw, o + dw * 32 + 4 * c, 4);
                int isum = 0, imin = 0;
                for (size_t s = 0; s < SUB; ++s) {
                    const int8_t* xs = qx + b * QK_K + 32 * s;
                    const uint8_t* ns = nib + 32 * (s / 2);
                    int dot = 0;
                    for (size_t i = 0; i < 32; ++i) dot += (s % 2 ? ns[i] >> 4 : ns[i] & 0x0F) * xs[i];
                    isum += o[1024 + 8 * s + c] * dot;
                    imin += o[1088 + 16 * (s / 2) + 2 * c + s % 2] * a.bsum[(m * nsb + b) * SUB + s];
                }
                const float d = half_to_float(load_u16(o + 1152 + 2 * c));
                const float dmin = half_to_float(load_u16(o + 1168 + 2 * c));
                acc += a.d[m * nsb + b] * (d * (float)isum - dmin * (float)imin);
            }
            y[m * N + n] = acc;
        }
    }
    if (n1 > n8)  // the tail in the file's layout
        rows_scalar(a, w + n8 * nsb * X8_COLUMN_BYTES, y + n8, M, K, N, std::max(n0, n8) - n8, n1 - n8);
}

// eight scale bytes -> eight (s, s) i16 pairs, one per dword (for a madd with eight columns' i16 pair sums)
__attribute__((target("avx2,fma,f16c"))) static inline __m256i x8_scales(const uint8_t* p) {
    const __m256i s32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)p));
    return _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));
}

// From X8_UNPACK_ROWS rows on (prefill chunks, batched decode of 20 and more), each group is first unpacked once
// per task into a scratch of K/256 * U_BYTES (15 KB at K = 1,536, 87 KB at K = 8,960: L2), which all its row
// tiles then read as it lies:
//   0     w[s][q] (s = 0..7, q = 0..7)   32 bytes: dword c = column c's elements 4q..4q+3 of sub-block s, one u8 each
//   2048  sc[s]                          x8_scales: column c's scale of sub-block s as the i16 pair of dword c
//   2304  mn[t] (t = 0..3)               column c's (mn[2t], mn[2t+1]) as the i16 pair of dword c
//   2432  d[c], 2464 dmin[c]             f32
// so a tile's inner loop is one load, a broadcast and a maddubs per row and 32 bytes, without the mask and shift
// per 32 bytes and tile, and the widening of the scales. The same integer sums in the same order: the same bits.
// (scripts/int8_probe/q4k_rows_driver.cpp, both Sapphire Rapids cores, from cache, the op against the interleaved
// tiles over every row: 0.82-0.93x the time at M = 32, 0.84-0.91x at 128, 0.89-1.0x at 20 and 24, 0.95-1.04x at 16.)
constexpr size_t X8_UNPACK_ROWS = 20;
constexpr size_t U_BYTES = 2048 + 256 + 128 + 64;

// Where x8_tile_avx2 reads a group's super-blocks from: the interleaved blocks as the IR has them (X8, X8_BYTES
// each), or the task's unpacked scratch (Unpacked, U_BYTES each).
enum class Src { X8, Unpacked };

// y[m0..m0+R][n..n+8] from one group of eight columns: per sub-block and row, 8 maddubs (one broadcast activation
// dword each) summed in i16 for the eight columns, one madd with the eight scales (bytes widened to i16 pairs); the
// minimums and the FMAs as group_tile_avx2's (group_super_block). X8 with R < 4: both sub-blocks of a 32-byte load
// at once (a load and two masks per 32 bytes); else one sub-block at a time (fewer registers: the four rows' sums).
template <size_t R, Src From = Src::X8>
__attribute__((target("avx2,fma,f16c"))) static void x8_tile_avx2(const Q8_K& a, const uint8_t* group, float* y,
                                                                  size_t m0, size_t K, size_t N, size_t n) {
    constexpr bool X8 = From == Src::X8;
    const size_t nsb = K / QK_K;
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 acc[R];
    for (size_t r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nsb; ++b) {
        const uint8_t* o = group + b * (X8 ? X8_BYTES : U_BYTES);
        if constexpr (X8)
            for (size_t line = 0; line < X8_BYTES; line += 64)
                prefetch_weights(o + X8_PREFETCH + line);
        __m256i isum[R];
        for (size_t r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
        if constexpr (!X8 || R >= 4) {
            for (size_t s = 0; s < SUB; ++s) {
                __m256i s16[R];
                for (size_t r = 0; r < R; ++r) s16[r] = _mm256_setzero_si256();
                for (size_t q = 0; q < 8; ++q) {
                    __m256i wv;
                    if constexpr (X8) {
                        const __m256i raw = _mm256_loadu_si256((const __m256i*)(o + (8 * (s / 2) + q) * 32));
                        wv = _mm256_and_si256(s % 2 ? _mm256_srli_epi16(raw, 4) : raw, low);
                    } else {
                        wv = _mm256_loadu_si256((const __m256i*)(o + (8 * s + q) * 32));
                    }
                    for (size_t r = 0; r < R; ++r) {
                        const int8_t* qx = a.q.data() + (m0 + r) * K + b * QK_K + 32 * s + 4 * q;
                        s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(wv, _mm256_set1_epi32(load_i32(qx))));
                    }
                    keep_order(s16);
                }
                const __m256i sc =
                    X8 ? x8_scales(o + 1024 + 8 * s) : _mm256_loadu_si256((const __m256i*)(o + 2048 + 32 * s));
                for (size_t r = 0; r < R; ++r) isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(s16[r], sc));
            }
        } else {
            for (size_t j = 0; j < 4; ++j) {
                __m256i lo[R], hi[R];
                for (size_t r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_si256();
                for (size_t q = 0; q < 8; ++q) {
                    const __m256i raw = _mm256_loadu_si256((const __m256i*)(o + (8 * j + q) * 32));
                    const __m256i wl = _mm256_and_si256(raw, low);
                    const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
                    for (size_t r = 0; r < R; ++r) {
                        const int8_t* qx = a.q.data() + (m0 + r) * K + b * QK_K + 64 * j + 4 * q;
                        lo[r] = _mm256_add_epi16(lo[r], _mm256_maddubs_epi16(wl, _mm256_set1_epi32(load_i32(qx))));
                        hi[r] = _mm256_add_epi16(hi[r], _mm256_maddubs_epi16(wh, _mm256_set1_epi32(load_i32(qx + 32))));
                    }
                    keep_order(lo);
                    keep_order(hi);
                }
                const __m256i sl = x8_scales(o + 1024 + 16 * j), sh = x8_scales(o + 1024 + 16 * j + 8);
                for (size_t r = 0; r < R; ++r)
                    isum[r] = _mm256_add_epi32(
                        isum[r], _mm256_add_epi32(_mm256_madd_epi16(lo[r], sl), _mm256_madd_epi16(hi[r], sh)));
            }
        }
        __m256i mn[4];  // column c's (mn[2t], mn[2t+1]) as the i16 pair of dword c
        __m256 d, dmin;
        if constexpr (X8) {
            for (size_t t = 0; t < 4; ++t)
                mn[t] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(o + 1088 + 16 * t)));
            d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(o + 1152)));
            dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(o + 1168)));
        } else {
            for (size_t t = 0; t < 4; ++t) mn[t] = _mm256_loadu_si256((const __m256i*)(o + 2304 + 32 * t));
            d = _mm256_loadu_ps((const float*)(o + 2432));
            dmin = _mm256_loadu_ps((const float*)(o + 2464));
        }
        for (size_t r = 0; r < R; ++r) acc[r] = group_super_block(a, m0 + r, nsb, b, mn, d, dmin, isum[r], acc[r]);
    }
    for (size_t r = 0; r < R; ++r) _mm256_storeu_ps(y + (m0 + r) * N + n, acc[r]);
}

__attribute__((target("avx2,fma,f16c"))) static void unpack_x8_group(const uint8_t* group, size_t nsb,
                                                                     uint8_t* out) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    for (size_t b = 0; b < nsb; ++b) {
        const uint8_t* o = group + b * X8_BYTES;
        uint8_t* u = out + b * U_BYTES;
        for (size_t j = 0; j < 4; ++j)
            for (size_t q = 0; q < 8; ++q) {  // sub-block 2j in the low nibbles, 2j + 1 in the high ones
                const __m256i raw = _mm256_loadu_si256((const __m256i*)(o + (8 * j + q) * 32));
                _mm256_storeu_si256((__m256i*)(u + (16 * j + q) * 32), _mm256_and_si256(raw, low));
                _mm256_storeu_si256((__m256i*)(u + (16 * j + 8 + q) * 32),
                                    _mm256_and_si256(_mm256_srli_epi16(raw, 4), low));
            }
        for (size_t s = 0; s < SUB; ++s)
            _mm256_storeu_si256((__m256i*)(u + 2048 + 32 * s), x8_scales(o + 1024 + 8 * s));
        for (size_t t = 0; t < 4; ++t)
            _mm256_storeu_si256((__m256i*)(u + 2304 + 32 * t),
                                _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(o + 1088 + 16 * t))));
        _mm256_storeu_ps((float*)(u + 2432), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(o + 1152))));
        _mm256_storeu_ps((float*)(u + 2464), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(o + 1168))));
    }
}

// A task's columns n0..n1 (n0 a multiple of 8): each whole group over all M rows in tiles of 4, 2, 1 rows (three
// left: one tile of 3; from X8_UNPACK_ROWS rows on, unpacked first); the last N % 8 columns by the row tiles over
// their file-layout blocks.
static void x8_avx2(const Q8_K& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0, size_t n1) {
    const size_t nsb = K / QK_K, n8 = N / GROUP * GROUP;
    std::vector<uint8_t> unpacked(M >= X8_UNPACK_ROWS && n0 < n8 ? nsb * U_BYTES : 0);
    for (size_t n = n0; n < std::min(n1, n8); n += GROUP) {
        const uint8_t* group = w + (n / GROUP) * nsb * X8_BYTES;
        if (unpacked.empty()) {
            row_tiles<true>(0, M, [&](auto R, size_t m) { x8_tile_avx2<decltype(R)::value>(a, group, y, m, K, N, n); });
            continue;
        }
        unpack_x8_group(group, nsb, unpacked.data());
        row_tiles(0, M, [&](auto R, size_t m) {
            x8_tile_avx2<decltype(R)::value, Src::Unpacked>(a, unpacked.data(), y, m, K, N, n);
        });
    }
    if (n1 > n8) {
        const uint8_t* tail = w + n8 * nsb * X8_COLUMN_BYTES;
        kquant_tiles(M, std::max(n0, n8) - n8, n1 - n8, [&](auto C, auto R, size_t m, size_t n) {
            tile_avx2<decltype(C)::value, decltype(R)::value>(a, tail, y + n8, m, K, N, n);
        });
    }
}

// ------------------------------------------------------------------------------------------------- the product
void q4k_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel) {
    Q8_K a;
    auto rows = kernel == Kernel::Avx2 ? rows_avx2 : rows_scalar;
    quantise_q8_k(x, M, K, kernel, a);
    parallel_columns(N, 8, M, [&](size_t n0, size_t n1) { rows(a, w, y, M, K, N, n0, n1); });
}

void q4k_x8_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel) {
    Q8_K a;
    auto rows = kernel == Kernel::Avx2 ? x8_avx2 : x8_scalar;
    quantise_q8_k(x, M, K, kernel, a);
    parallel_columns(N, GROUP, M, [&](size_t n0, size_t n1) { rows(a, w, y, M, K, N, n0, n1); });
}

}  // namespace genmesh
