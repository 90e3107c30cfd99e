// genmesh::Q80MatMul: the file's Q8_0 blocks (f16 d, 32 int8 per 32 weights) times the activations quantised per
// 32 to int8 (llama.cpp's Q8_0). Kernels in q80_matmul.cpp.
#pragma once

#include "block_matmul.hpp"

namespace genmesh {

void q80_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);

class Q80MatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q80MatMul", "genmesh", BlockMatMul);

    GENMESH_BLOCK_MATMUL_CTORS(Q80MatMul)

protected:
    size_t block_weights() const override { return 32; }
    size_t block_bytes() const override { return 34; }
    const char* format() const override { return "Q8_0"; }
    void multiply(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N,
                  Kernel kernel) const override {
        q80_matmul(x, w, y, M, K, N, kernel);
    }
};

}  // namespace genmesh
