// genmesh::Q6KMatMul: the file's Q6_K blocks (210 bytes per 256 weights) times the activations quantised per 256
// to int8 with sums per 16 (llama.cpp's Q8_K). Kernels in q6k_matmul.cpp.
#pragma once

#include "block_matmul.hpp"

namespace genmesh {

void q6k_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);

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

}  // namespace genmesh
