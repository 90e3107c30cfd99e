// genmesh::Q4KMatMul: the file's Q4_K blocks (144 bytes per 256 weights) times the activations quantised per 256
// to int8 with sums per 32 (llama.cpp's Q8_K). Kernels in q4k_matmul.cpp.
#pragma once

#include "block_matmul.hpp"

namespace genmesh {

void q4k_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);

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

}  // namespace genmesh
