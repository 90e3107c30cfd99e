// genmesh::Q6KMatMul: y = x W^T with W in GGUF Q6_K blocks and x quantised per 256 to int8 (Q8_K) at run time.
//
// Inputs:  x       f32 [..., K]              (K a multiple of 256)
//          blocks  u8  [N, K/256 * 210]      the file's Q6_K super-blocks, row n = output n: 128 bytes ql (low
//                                            nibbles), 64 bytes qh (2-bit highs), 16 int8 scales sc[s] of the
//                                            sub-blocks of 16, f16 d; w = d * sc[s] * (q - 32), q = 6 bits
// Output:  y       f32 [..., N]
//
// ggml's layout: per half h (128 weights), element 32l + i (l = 0..3, i = 0..31) has its low 4 bits in
// ql[64h + i] (l = 0: low nibble, 2: high nibble) or ql[64h + 32 + i] (l = 1, 3), and its high 2 bits in bits 2l,
// 2l+1 of qh[32h + i]; it belongs to sub-block 8h + 2l + i/16.
// Per super-block: x ~= dx * qx, bx[s] = sum of qx over sub-block s (of 16), and
//     sum_j w_j x_j ~= dx * d * sum_s sc[s] * (sum_{j in s} q_j qx_j - 32 bx[s])
// The q (0..63, unsigned) times qx are _mm256_maddubs_epi16 (|pair| <= 2*63*127 = 16,002: no saturation); one
// _mm256_madd_epi16 with the two sub-blocks' scales (i16 lanes 0..7: sub-block 2l, 8..15: 2l+1) per 32; the
// offset's sum is one madd of the 16 scales with the 16 bx. One float multiply-add per super-block and output.

#include "q6k_matmul.hpp"

#include "q8k.hpp"

namespace genmesh {

constexpr size_t BLOCK_BYTES = 210;  // 128 ql, 64 qh, 16 int8 scales, f16 d

// ----------------------------------------------------------------------------------------------- scalar path
// sum_s sc[s] * sum_{j in s} (q_j - 32) qx_j of one file-layout block and the activations' super-block xs
static int block_dot(const uint8_t* blk, const int8_t* xs) {
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t* sc = (const int8_t*)(blk + 192);
    int isum = 0;
    for (size_t h = 0; h < 2; ++h)
        for (size_t l = 0; l < 4; ++l)
            for (size_t half = 0; half < 2; ++half) {
                int dot = 0;
                for (size_t i = 16 * half; i < 16 * half + 16; ++i) {
                    const uint8_t lo = ql[64 * h + 32 * (l % 2) + i];
                    const int hi = (qh[32 * h + i] >> (2 * l)) & 3;
                    const int q = ((l < 2 ? lo : lo >> 4) & 0x0F) | (hi << 4);
                    dot += (q - 32) * xs[128 * h + 32 * l + i];
                }
                isum += sc[8 * h + 2 * l + half] * dot;
            }
    return isum;
}

static void rows_scalar(const Q8_K& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                        size_t n1) {
    const size_t nsb = K / QK_K;
    for (size_t n = n0; n < n1; ++n) {
        for (size_t m = 0; m < M; ++m) {
            const int8_t* qx = a.q.data() + m * K;
            float acc = 0.f;
            for (size_t b = 0; b < nsb; ++b) {
                const uint8_t* blk = w + (n * nsb + b) * BLOCK_BYTES;
                acc += a.d[m * nsb + b] * half_to_float(load_u16(blk + 208)) * (float)block_dot(blk, qx + b * QK_K);
            }
            y[m * N + n] = acc;
        }
    }
}

// ------------------------------------------------------------------------------------------------- AVX2 path
// Half h of a block as four vectors of 32 six-bit values (0..63): q[l] = elements 128h + 32l .. +31.
__attribute__((target("avx2,fma,f16c"))) static inline void values_avx2(const uint8_t* blk, size_t h, __m256i* q) {
    const __m256i low = _mm256_set1_epi8(0x0F), high = _mm256_set1_epi8(0x30);
    const __m256i ql0 = _mm256_loadu_si256((const __m256i*)(blk + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256((const __m256i*)(blk + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 128 + 32 * h));
    // bits 2l, 2l+1 of qh moved to bits 4, 5 of each byte (16-bit shifts; the mask drops what crossed a byte)
    q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low), _mm256_and_si256(_mm256_slli_epi16(qh, 4), high));
    q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low), _mm256_and_si256(_mm256_slli_epi16(qh, 2), high));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low), _mm256_and_si256(qh, high));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low),
                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), high));
}

// PAIR_SHUFFLE[l]: the pshufb mask that spreads i16 lane 2l of the low 128-bit half over the low half's eight
// lanes and i16 lane 2l+1 of the high half over the high half's (a madd's scales for sub-blocks 2l and 2l+1 of a
// 32-value vector, from one register holding a half's eight scales in both halves).
alignas(32) static const uint8_t PAIR_SHUFFLE[4][32] = {
#define GENMESH_PAIR(l)                                                                                           \
    {4 * l, 4 * l + 1, 4 * l, 4 * l + 1, 4 * l, 4 * l + 1, 4 * l, 4 * l + 1,                                     \
     4 * l, 4 * l + 1, 4 * l, 4 * l + 1, 4 * l, 4 * l + 1, 4 * l, 4 * l + 1,                                     \
     4 * l + 2, 4 * l + 3, 4 * l + 2, 4 * l + 3, 4 * l + 2, 4 * l + 3, 4 * l + 2, 4 * l + 3,                     \
     4 * l + 2, 4 * l + 3, 4 * l + 2, 4 * l + 3, 4 * l + 2, 4 * l + 3, 4 * l + 2, 4 * l + 3}
    GENMESH_PAIR(0), GENMESH_PAIR(1), GENMESH_PAIR(2), GENMESH_PAIR(3),
#undef GENMESH_PAIR
};

// y[m0..m0+R][n..n+C]: per super-block and half, the four 32-weight vectors of q of a weight row are built once
// (nibbles | highs << 4) and serve R activation rows; the scales are widened once per super-block and spread to
// each madd by a pshufb.
template <size_t C, size_t R>
__attribute__((target("avx2,fma,f16c"))) static void tile_avx2(const Q8_K& a, const uint8_t* w, float* y,
                                                               size_t m0, size_t K, size_t N, size_t n) {
    const size_t nsb = K / QK_K, row = nsb * BLOCK_BYTES;
    __m256 acc[C][R];
    for (size_t c = 0; c < C; ++c)
        for (size_t r = 0; r < R; ++r) acc[c][r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nsb; ++b) {
        const uint8_t* blk0 = w + n * row + b * BLOCK_BYTES;
        for (size_t c = 0; c < C; ++c) {
            const uint8_t* blk = blk0 + c * row;
            const char* next = (const char*)(blk + C * row);  // the next tile's rows
            for (size_t line = 0; line < BLOCK_BYTES; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(blk + 192)));
            __m256i isum[R];
            for (size_t r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
            for (size_t h = 0; h < 2; ++h) {
                // this half's eight scales in both 128-bit halves
                const __m256i sch = h ? _mm256_permute4x64_epi64(sc16, 0xEE) : _mm256_permute4x64_epi64(sc16, 0x44);
                __m256i q[4];
                values_avx2(blk, h, q);
                for (size_t l = 0; l < 4; ++l) {
                    const __m256i s = _mm256_shuffle_epi8(sch, _mm256_load_si256((const __m256i*)PAIR_SHUFFLE[l]));
                    for (size_t r = 0; r < R; ++r) {
                        const int8_t* qx = a.q.data() + (m0 + r) * K + b * QK_K + 128 * h + 32 * l;
                        const __m256i p = _mm256_maddubs_epi16(q[l], _mm256_loadu_si256((const __m256i*)qx));
                        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, s));
                    }
                    keep_order(isum);
                }
            }
            const float d = f16(blk + 208);
            for (size_t r = 0; r < R; ++r) {
                const __m256i bx =
                    _mm256_loadu_si256((const __m256i*)(a.bsum16.data() + ((m0 + r) * nsb + b) * 2 * SUB));
                const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bx), 5);  // 32 * sc[s] * bx[s]
                const float dx = a.d[(m0 + r) * nsb + b];
                const __m256 p = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], offset));
                acc[c][r] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), p, acc[c][r]);
            }
        }
    }
    for (size_t c = 0; c < C; ++c)
        for (size_t r = 0; r < R; ++r) y[(m0 + r) * N + n + c] = hsum8(acc[c][r]);
}

// ------------------------------------------------------------------------------ AVX2 path, eight columns at once
// From GROUP_ROWS rows on, as Q4KMatMul's: each group of eight columns repacked per super-block into
//   v[8h + 2l .. ][g] (h = 0..1, l = 0..3, g = 0..7)  32 bytes: dword c = column c's six-bit values of elements
//                                                    128h + 32l + 4g .. +3 (g < 4: sub-block 8h+2l, else the next)
//   sc[s] (s = 0..15)   8 x i32: column c's scale of sub-block s in both i16 halves
//   sp[t] (t = 0..7)    8 x i32: column c's scales of sub-blocks 2t, 2t+1 (for the offset's madd with bx pairs)
//   d                   8 x f32
// Per row and sub-block of 16: 4 maddubs (i16 sums of two at a time: 2 * 2*63*127 = 32,004 < 2^15), 2 madds with
// sc[s]; the offset 32 * sum_s sc[s] bx[s] is 8 madds of sp[t] with the row's (bx[2t], bx[2t+1]) broadcast.
constexpr size_t GROUP = 8;
// From this many rows on the repack pays (as Q4KMatMul's; at 12 and 16 rows it won with the weights in L2 but not
// from memory: ns per super-block and column, 1,536 x 8,960, rows 16: this kernel 92-101, the tiles 90)
constexpr size_t GROUP_ROWS = 24;
constexpr size_t GROUP_BYTES = 8 * 8 * 32 + 16 * 32 + 8 * 32 + 32;  // values, scales, scale pairs, d

__attribute__((target("avx2,fma,f16c"))) static void repack_group(const uint8_t* w, size_t nsb, size_t n,
                                                                  uint8_t* out) {
    const size_t row = nsb * BLOCK_BYTES;
    for (size_t b = 0; b < nsb; ++b) {
        uint8_t* o = out + b * GROUP_BYTES;
        for (size_t c = 0; c < GROUP; ++c) {  // the next group's rows (the hardware prefetcher lags 8 streams)
            const char* next = (const char*)(w + (n + GROUP + c) * row + b * BLOCK_BYTES);
            for (size_t line = 0; line < BLOCK_BYTES; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
        }
        for (size_t h = 0; h < 2; ++h) {
            __m256i q[GROUP][4];
            for (size_t c = 0; c < GROUP; ++c) values_avx2(w + (n + c) * row + b * BLOCK_BYTES, h, q[c]);
            for (size_t l = 0; l < 4; ++l) {
                __m256i v[GROUP];
                for (size_t c = 0; c < GROUP; ++c) v[c] = q[c][l];
                transpose_dwords_8x8(v, o + (4 * h + l) * 8 * 32);
            }
        }
        // per column: its sixteen scales as i16 pairs (s, s) (two vectors) and as pairs (s[2t], s[2t+1]) (the
        // sixteen i16 themselves); then transposed so that dword c holds column c's
        __m256i sc0[GROUP], sc1[GROUP], sp[GROUP];
        float* d = (float*)(o + 2048 + 16 * 32 + 8 * 32);
        for (size_t c = 0; c < GROUP; ++c) {
            const uint8_t* blk = w + (n + c) * row + b * BLOCK_BYTES;
            const __m128i s8 = _mm_loadu_si128((const __m128i*)(blk + 192));
            sp[c] = _mm256_cvtepi8_epi16(s8);
            const __m256i s0 = _mm256_cvtepi8_epi32(s8), s1 = _mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8));
            const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
            sc0[c] = _mm256_or_si256(_mm256_and_si256(s0, lo16), _mm256_slli_epi32(s0, 16));
            sc1[c] = _mm256_or_si256(_mm256_and_si256(s1, lo16), _mm256_slli_epi32(s1, 16));
            d[c] = f16(blk + 208);
        }
        transpose_dwords_8x8(sc0, o + 2048);
        transpose_dwords_8x8(sc1, o + 2048 + 8 * 32);
        transpose_dwords_8x8(sp, o + 2048 + 16 * 32);
    }
}

template <size_t R>
__attribute__((target("avx2,fma,f16c"))) static void group_tile_avx2(const Q8_K& a, const uint8_t* packed,
                                                                     float* y, size_t m0, size_t K, size_t N,
                                                                     size_t n) {
    const size_t nsb = K / QK_K;
    __m256 acc[R];
    for (size_t r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nsb; ++b) {
        const uint8_t* o = packed + b * GROUP_BYTES;
        const int32_t* sc = (const int32_t*)(o + 2048);
        __m256i isum[R];
        for (size_t r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
        for (size_t s = 0; s < 16; ++s) {  // sub-block s: vectors 4s .. 4s+3 (elements 16s .. 16s+15)
            const __m256i scale = _mm256_loadu_si256((const __m256i*)(sc + 8 * s));
            for (size_t p = 0; p < 2; ++p) {
                const __m256i w0 = _mm256_loadu_si256((const __m256i*)(o + (4 * s + 2 * p) * 32));
                const __m256i w1 = _mm256_loadu_si256((const __m256i*)(o + (4 * s + 2 * p + 1) * 32));
                for (size_t r = 0; r < R; ++r) {
                    const int8_t* qx = a.q.data() + (m0 + r) * K + b * QK_K + 16 * s + 8 * p;
                    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, _mm256_set1_epi32(load_i32(qx))),
                                                         _mm256_maddubs_epi16(w1, _mm256_set1_epi32(load_i32(qx + 4))));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(s16, scale));
                }
            }
        }
        const int32_t* sp = sc + 128;
        const __m256 d = _mm256_loadu_ps((const float*)(sp + 64));
        for (size_t r = 0; r < R; ++r) {
            const int16_t* bx = a.bsum16.data() + ((m0 + r) * nsb + b) * 2 * SUB;
            __m256i off = _mm256_setzero_si256();
            for (size_t t = 0; t < 8; ++t) {
                int32_t pair;
                std::memcpy(&pair, bx + 2 * t, 4);
                off = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(sp + 8 * t)),
                                                               _mm256_set1_epi32(pair)));
            }
            const __m256 p = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], _mm256_slli_epi32(off, 5)));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(a.d[(m0 + r) * nsb + b])), p, acc[r]);
        }
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

// ----------------------------------------------------------- the blocks interleaved eight columns (Q6KX8MatMul)
// Per group of eight columns (n = 8g .. 8g+7) and super-block b, X8_BYTES (8 x 210: the file's bytes, moved) at
// (g * K/256 + b) * X8_BYTES:
//   0     ql[v][q] (v = 2h + j, h, j = 0..1; q = 0..7)  32 bytes: dword c = column c's ql bytes 64h + 32j + 4q .. +3
//   1024  qh[h][q] (h = 0..1, q = 0..7)                 32 bytes: dword c = column c's qh bytes 32h + 4q .. +3
//   1536  sc[t][c][k] (t = 0..7, k = 0..1)              the int8 scale of sub-block 2t + k of column c
//   1664  d[c]                                          f16, as the file's
// then the last N % 8 columns in the file's layout: N * K/256 * 210 bytes in all, as the file's. Written at IR-build
// time (genmesh.engine.native.q41_op.pack_q6k_x8). The values of a 32-byte vector are built as values_avx2 builds a
// row's (the same shifts and masks: dword c = column c's six-bit values of elements 128h + 32l + 4q .. +3, of
// sub-block 8h + 2l + q/4), so one broadcast activation dword and one maddubs serve eight columns; the scales of a
// sub-block pair widen by one vpmovsxbw to (sc[2t], sc[2t+1]) i16 pairs, the offset's madd operand, and a pshufb
// per sub-block spreads one of them to both i16 of each dword, the products' madd operand.
constexpr size_t X8_BYTES = GROUP * BLOCK_BYTES;
// the software prefetch's distance in the group's stream (as Q4KX8MatMul's: 4 super-blocks)
constexpr size_t X8_PREFETCH = 4 * X8_BYTES;

// One column c's super-block of a group in the file's layout (the scalar path's gather).
static void x8_block(const uint8_t* o, size_t c, uint8_t* blk) {
    for (size_t v = 0; v < 4; ++v)
        for (size_t q = 0; q < 8; ++q) std::memcpy(blk + 32 * v + 4 * q, o + (8 * v + q) * 32 + 4 * c, 4);
    for (size_t h = 0; h < 2; ++h)
        for (size_t q = 0; q < 8; ++q) std::memcpy(blk + 128 + 32 * h + 4 * q, o + 1024 + (8 * h + q) * 32 + 4 * c, 4);
    for (size_t t = 0; t < 8; ++t) std::memcpy(blk + 192 + 2 * t, o + 1536 + 16 * t + 2 * c, 2);
    std::memcpy(blk + 208, o + 1664 + 2 * c, 2);
}

static void x8_scalar(const Q8_K& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0,
                      size_t n1) {
    const size_t nsb = K / QK_K, n8 = N / GROUP * GROUP;
    for (size_t n = n0; n < std::min(n1, n8); ++n) {
        for (size_t m = 0; m < M; ++m) {
            const int8_t* qx = a.q.data() + m * K;
            float acc = 0.f;
            for (size_t b = 0; b < nsb; ++b) {
                uint8_t blk[BLOCK_BYTES];
                x8_block(w + ((n / GROUP) * nsb + b) * X8_BYTES, n % GROUP, blk);
                acc += a.d[m * nsb + b] * half_to_float(load_u16(blk + 208)) * (float)block_dot(blk, qx + b * QK_K);
            }
            y[m * N + n] = acc;
        }
    }
    if (n1 > n8)  // the tail in the file's layout
        rows_scalar(a, w + n8 * nsb * BLOCK_BYTES, y + n8, M, K, N, std::max(n0, n8) - n8, n1 - n8);
}

// X8_SPREAD[k]: the pshufb mask that copies i16 k of each dword to both of its i16 (sub-block 2t + k's scale of
// each column, from the (sc[2t], sc[2t+1]) pairs).
alignas(32) static const uint8_t X8_SPREAD[2][32] = {
#define GENMESH_SPREAD(k)                                                                                         \
    {2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 4 + 2 * k, 5 + 2 * k, 4 + 2 * k, 5 + 2 * k,                             \
     8 + 2 * k, 9 + 2 * k, 8 + 2 * k, 9 + 2 * k, 12 + 2 * k, 13 + 2 * k, 12 + 2 * k, 13 + 2 * k,                 \
     2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 4 + 2 * k, 5 + 2 * k, 4 + 2 * k, 5 + 2 * k,                             \
     8 + 2 * k, 9 + 2 * k, 8 + 2 * k, 9 + 2 * k, 12 + 2 * k, 13 + 2 * k, 12 + 2 * k, 13 + 2 * k}
    GENMESH_SPREAD(0), GENMESH_SPREAD(1),
#undef GENMESH_SPREAD
};

// The 32 six-bit values (8 columns x 4 elements) of vector l (elements 128h + 32l + 4q .. +3) of a group's block o.
__attribute__((target("avx2,fma,f16c"))) static inline __m256i x8_values(const uint8_t* o, size_t h, size_t l,
                                                                         size_t q) {
    const __m256i low = _mm256_set1_epi8(0x0F), high = _mm256_set1_epi8(0x30);
    const __m256i ql = _mm256_loadu_si256((const __m256i*)(o + (8 * (2 * h + l % 2) + q) * 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i*)(o + 1024 + (8 * h + q) * 32));
    const __m256i lo = l < 2 ? _mm256_and_si256(ql, low) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), low);
    __m256i hi;  // bits 2l, 2l+1 of qh to bits 4, 5
    if (l == 0)
        hi = _mm256_slli_epi16(qh, 4);
    else if (l == 1)
        hi = _mm256_slli_epi16(qh, 2);
    else if (l == 2)
        hi = qh;
    else
        hi = _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hi, high));
}

// y[m0..m0+R][n..n+8] from one group's interleaved blocks: per sub-block of 16 and row, two pairs of maddubs (one
// broadcast activation dword each; a pair's i16 sums <= 2 * 2*63*127 = 32,004) and a madd of each pair with the
// sub-block's eight scales; per super-block the offset 32 * sum_s sc[s] bx[s] (8 madds of the (sc[2t], sc[2t+1])
// pairs with the row's (bx[2t], bx[2t+1]) broadcast) and one FMA.
template <size_t R>
__attribute__((target("avx2,fma,f16c"))) static void x8_tile_avx2(const Q8_K& a, const uint8_t* group, float* y,
                                                                  size_t m0, size_t K, size_t N, size_t n) {
    const size_t nsb = K / QK_K;
    const __m256i spread0 = _mm256_load_si256((const __m256i*)X8_SPREAD[0]);
    const __m256i spread1 = _mm256_load_si256((const __m256i*)X8_SPREAD[1]);
    __m256 acc[R];
    for (size_t r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nsb; ++b) {
        const uint8_t* o = group + b * X8_BYTES;
        for (size_t line = 0; line < X8_BYTES; line += 64)
            prefetch_weights(o + X8_PREFETCH + line);
        const int8_t* qx[R];
        for (size_t r = 0; r < R; ++r) qx[r] = a.q.data() + (m0 + r) * K + b * QK_K;
        __m256i isum[R];
        for (size_t r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
        for (size_t h = 0; h < 2; ++h)
            for (size_t l = 0; l < 4; ++l) {
                const __m256i sp = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(o + 1536 + 16 * (4 * h + l))));
                for (size_t k = 0; k < 2; ++k) {
                    const __m256i sc = _mm256_shuffle_epi8(sp, k ? spread1 : spread0);
                    for (size_t p = 0; p < 2; ++p) {
                        const size_t q = 4 * k + 2 * p, e = 128 * h + 32 * l + 4 * q;
                        const __m256i v0 = x8_values(o, h, l, q), v1 = x8_values(o, h, l, q + 1);
                        for (size_t r = 0; r < R; ++r) {
                            const __m256i s16 =
                                _mm256_add_epi16(_mm256_maddubs_epi16(v0, _mm256_set1_epi32(load_i32(qx[r] + e))),
                                                 _mm256_maddubs_epi16(v1, _mm256_set1_epi32(load_i32(qx[r] + e + 4))));
                            isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(s16, sc));
                        }
                    }
                }
            }
        __m256i off[R];
        for (size_t r = 0; r < R; ++r) off[r] = _mm256_setzero_si256();
        for (size_t t = 0; t < 8; ++t) {
            const __m256i sp = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(o + 1536 + 16 * t)));
            for (size_t r = 0; r < R; ++r) {
                int32_t pair;
                std::memcpy(&pair, a.bsum16.data() + ((m0 + r) * nsb + b) * 2 * SUB + 2 * t, 4);
                off[r] = _mm256_add_epi32(off[r], _mm256_madd_epi16(sp, _mm256_set1_epi32(pair)));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(o + 1664)));
        for (size_t r = 0; r < R; ++r) {
            const __m256 p = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], _mm256_slli_epi32(off[r], 5)));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(a.d[(m0 + r) * nsb + b])), p, acc[r]);
        }
    }
    for (size_t r = 0; r < R; ++r) _mm256_storeu_ps(y + (m0 + r) * N + n, acc[r]);
}

// One group's interleaved blocks expanded into repack_group's scratch layout (the values as bytes, the scales
// widened, d as f32): the same bytes as repack_group makes of the file's rows, from one contiguous stream.
__attribute__((target("avx2,fma,f16c"))) static void x8_expand(const uint8_t* group, size_t nsb, uint8_t* out) {
    const __m256i spread0 = _mm256_load_si256((const __m256i*)X8_SPREAD[0]);
    const __m256i spread1 = _mm256_load_si256((const __m256i*)X8_SPREAD[1]);
    for (size_t b = 0; b < nsb; ++b) {
        const uint8_t* o = group + b * X8_BYTES;
        uint8_t* e = out + b * GROUP_BYTES;
        for (size_t line = 0; line < X8_BYTES; line += 64)
            prefetch_weights(o + X8_PREFETCH + line);
        for (size_t h = 0; h < 2; ++h)
            for (size_t l = 0; l < 4; ++l)
                for (size_t q = 0; q < 8; ++q)
                    _mm256_storeu_si256((__m256i*)(e + (8 * (4 * h + l) + q) * 32), x8_values(o, h, l, q));
        for (size_t t = 0; t < 8; ++t) {
            const __m256i sp = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(o + 1536 + 16 * t)));
            _mm256_storeu_si256((__m256i*)(e + 2048 + 2 * t * 32), _mm256_shuffle_epi8(sp, spread0));
            _mm256_storeu_si256((__m256i*)(e + 2048 + (2 * t + 1) * 32), _mm256_shuffle_epi8(sp, spread1));
            _mm256_storeu_si256((__m256i*)(e + 2048 + 16 * 32 + t * 32), sp);
        }
        _mm256_storeu_ps((float*)(e + 2048 + 24 * 32), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(o + 1664))));
    }
}

// A task's columns n0..n1 (n0 a multiple of 8): each whole group over all M rows in tiles of 4, 2, 1 rows (three
// left: one tile of 3; from GROUP_ROWS rows on: expanded once per task and group, then group_tile_avx2's tiles, as
// Q6KMatMul's); the last N % 8 columns by the row tiles over their file-layout blocks.
static void x8_avx2(const Q8_K& a, const uint8_t* w, float* y, size_t M, size_t K, size_t N, size_t n0, size_t n1) {
    const size_t nsb = K / QK_K, n8 = N / GROUP * GROUP;
    std::vector<uint8_t> expanded(M >= GROUP_ROWS ? nsb * GROUP_BYTES : 0);
    for (size_t n = n0; n < std::min(n1, n8); n += GROUP) {
        const uint8_t* group = w + (n / GROUP) * nsb * X8_BYTES;
        if (M >= GROUP_ROWS) {
            x8_expand(group, nsb, expanded.data());
            size_t m = 0;
            for (; m + 4 <= M; m += 4) group_tile_avx2<4>(a, expanded.data(), y, m, K, N, n);
            for (; m < M; ++m) group_tile_avx2<1>(a, expanded.data(), y, m, K, N, n);
            continue;
        }
        row_tiles<true>(0, M, [&](auto R, size_t m) { x8_tile_avx2<decltype(R)::value>(a, group, y, m, K, N, n); });
    }
    if (n1 > n8) {
        const uint8_t* tail = w + n8 * nsb * BLOCK_BYTES;
        kquant_tiles(M, std::max(n0, n8) - n8, n1 - n8, [&](auto C, auto R, size_t m, size_t n) {
            tile_avx2<decltype(C)::value, decltype(R)::value>(a, tail, y + n8, m, K, N, n);
        });
    }
}

// ------------------------------------------------------------------------------------------------- the product
void q6k_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel) {
    Q8_K a;
    quantise_q8_k(x, M, K, kernel, a, true);
    auto rows = kernel == Kernel::Avx2 ? rows_avx2 : rows_scalar;
    parallel_columns(N, 8, M, [&](size_t n0, size_t n1) { rows(a, w, y, M, K, N, n0, n1); });
}

void q6k_x8_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel) {
    Q8_K a;
    quantise_q8_k(x, M, K, kernel, a, true);
    auto rows = kernel == Kernel::Avx2 ? x8_avx2 : x8_scalar;
    parallel_columns(N, GROUP, M, [&](size_t n0, size_t n1) { rows(a, w, y, M, K, N, n0, n1); });
}

}  // namespace genmesh
