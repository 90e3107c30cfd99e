// genmesh::Q6KMatMul: the file's Q6_K blocks (210 bytes per 256 weights) times the activations quantised per 256
// to int8 with sums per 16 (llama.cpp's Q8_K). Kernels in q6k_matmul.cpp.
#pragma once

#include "block_matmul.hpp"

namespace genmesh {

void q6k_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);
// The same product over the blocks interleaved eight columns at a time (Q6KX8MatMul's layout, q6k_matmul.cpp).
void q6k_x8_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);

class Q6KMatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q6KMatMul", "genmesh", BlockMatMul);

    GENMESH_BLOCK_MATMUL_CTORS(Q6KMatMul)

protected:
    size_t block_weights() const override { return 256; }
    size_t block_bytes() const override { return 210; }
    const char* format() const override { return "Q6_K"; }
    void multiply(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N,
                  Kernel kernel) const override {
        q6k_matmul(x, w, y, M, K, N, kernel);
    }
};

// genmesh::Q6KX8MatMul: the same Q6_K weights, written eight output columns at a time (the file's 210 bytes per
// super-block and column, moved: blocks u8 [N, K/256*210]): per group of eight columns and super-block 1,680 bytes
// (the low-nibble and high-bit bytes as dwords of the eight columns side by side, the int8 scales as pairs
// [sub-block pair][column][2], the eight f16 d), the last N % 8 columns in the file's layout. A new type name, so
// that an IR of the file's layout cannot be read as this one. Layout and kernels in q6k_matmul.cpp; packed by
// genmesh.engine.native.q41_op.
class Q6KX8MatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q6KX8MatMul", "genmesh", BlockMatMul);

    GENMESH_BLOCK_MATMUL_CTORS(Q6KX8MatMul)

protected:
    size_t block_weights() const override { return 256; }
    size_t block_bytes() const override { return 210; }
    const char* format() const override { return "Q6_K x8"; }
    void multiply(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N,
                  Kernel kernel) const override {
        q6k_x8_matmul(x, w, y, M, K, N, kernel);
    }
};

}  // namespace genmesh
