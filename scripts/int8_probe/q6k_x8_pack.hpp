// The Q6KX8MatMul layout for the drivers (q6k_x8_driver.cpp, x8_old_new_driver.cpp): one group of eight columns
// n..n+7 of the file's rows, interleaved as genmesh.engine.native.q41_op.pack_q6k_x8 packs the IR (X8_BYTES per
// super-block: the file's bytes, moved). Include after q6k_matmul.cpp.
#pragma once

#include <cstring>

inline void pack_q6k_x8_group(const uint8_t* w, size_t nsb, size_t n, uint8_t* out) {
    using namespace genmesh;
    const size_t row = nsb * BLOCK_BYTES;
    for (size_t b = 0; b < nsb; ++b) {
        uint8_t* o = out + b * X8_BYTES;
        for (size_t c = 0; c < GROUP; ++c) {
            const uint8_t* blk = w + (n + c) * row + b * BLOCK_BYTES;
            for (size_t v = 0; v < 4; ++v)
                for (size_t q = 0; q < 8; ++q) std::memcpy(o + (8 * v + q) * 32 + 4 * c, blk + 32 * v + 4 * q, 4);
            for (size_t h = 0; h < 2; ++h)
                for (size_t q = 0; q < 8; ++q)
                    std::memcpy(o + 1024 + (8 * h + q) * 32 + 4 * c, blk + 128 + 32 * h + 4 * q, 4);
            for (size_t t = 0; t < 8; ++t) std::memcpy(o + 1536 + 16 * t + 2 * c, blk + 192 + 2 * t, 2);
            std::memcpy(o + 1664 + 2 * c, blk + 208, 2);
        }
    }
}
