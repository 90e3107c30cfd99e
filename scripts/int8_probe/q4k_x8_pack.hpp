// The Q4KX8MatMul layout for the drivers (q4k_x8_driver.cpp, q4k_rows_driver.cpp): one group of eight columns
// n..n+7 of the file's rows, interleaved as genmesh.engine.native.q41_op.pack_q4k_x8 packs the IR (X8_BYTES per
// super-block). Include after q4k_matmul.cpp.
#pragma once

__attribute__((target("avx2,fma,f16c"))) inline void pack_q4k_x8_group(const uint8_t* w, size_t nsb, size_t n,
                                                                       uint8_t* out) {
    using namespace genmesh;
    const size_t row = nsb * BLOCK_BYTES;
    for (size_t b = 0; b < nsb; ++b) {
        uint8_t* o = out + b * X8_BYTES;
        for (size_t j = 0; j < 4; ++j) {
            __m256i v[8];
            for (size_t c = 0; c < GROUP; ++c)
                v[c] = _mm256_loadu_si256((const __m256i*)(w + (n + c) * row + b * BLOCK_BYTES + 16 + 32 * j));
            transpose_dwords_8x8(v, o + 8 * j * 32);
        }
        for (size_t c = 0; c < GROUP; ++c) {
            const uint8_t* blk = w + (n + c) * row + b * BLOCK_BYTES;
            alignas(16) uint8_t sm[16];
            _mm_store_si128((__m128i*)sm, scales_mins_vec(blk + 4));
            for (size_t s = 0; s < SUB; ++s) o[1024 + 8 * s + c] = sm[s];
            for (size_t t = 0; t < 4; ++t)
                for (size_t k = 0; k < 2; ++k) o[1088 + 16 * t + 2 * c + k] = sm[8 + 2 * t + k];
            std::memcpy(o + 1152 + 2 * c, blk, 2);
            std::memcpy(o + 1168 + 2 * c, blk + 2, 2);
        }
    }
}
