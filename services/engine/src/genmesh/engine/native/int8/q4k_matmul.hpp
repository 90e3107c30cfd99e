// genmesh::Q4KMatMul: the file's Q4_K blocks (144 bytes per 256 weights) times the activations quantised per 256
// to int8 with sums per 32 (llama.cpp's Q8_K). Kernels in q4k_matmul.cpp.
#pragma once

#include "block_matmul.hpp"

namespace genmesh {

void q4k_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);
// The same product over the blocks interleaved eight columns at a time (Q4KX8MatMul's layout, q4k_matmul.cpp).
void q4k_x8_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);

class Q4KMatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q4KMatMul", "genmesh", BlockMatMul);

    GENMESH_BLOCK_MATMUL_CTORS(Q4KMatMul)

protected:
    size_t block_weights() const override { return 256; }
    size_t block_bytes() const override { return 144; }
    const char* format() const override { return "Q4_K"; }
    void multiply(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N,
                  Kernel kernel) const override {
        q4k_matmul(x, w, y, M, K, N, kernel);
    }
};

// genmesh::Q4KX8MatMul: the same Q4_K weights, written eight output columns at a time (148 bytes per super-block
// and column, so blocks u8 [N, K/256*148]): per group of eight columns and super-block 1,184 bytes (the nibbles as
// dwords of the eight columns side by side, the 6-bit scales and minimums as bytes, d and dmin as f16), the last
// N % 8 columns in the file's layout (144 bytes) then zeros. A new type name, so that an IR of the file's layout
// cannot be read as this one. Layout and kernels in q4k_matmul.cpp; packed by genmesh.engine.native.q41_op.
class Q4KX8MatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q4KX8MatMul", "genmesh", BlockMatMul);

    GENMESH_BLOCK_MATMUL_CTORS(Q4KX8MatMul)

protected:
    size_t block_weights() const override { return 256; }
    size_t block_bytes() const override { return 148; }
    const char* format() const override { return "Q4_K x8"; }
    void multiply(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N,
                  Kernel kernel) const override {
        q4k_x8_matmul(x, w, y, M, K, N, kernel);
    }
};

}  // namespace genmesh
