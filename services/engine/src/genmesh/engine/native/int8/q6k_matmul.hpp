// genmesh::Q6KMatMul: the file's Q6_K blocks (210 bytes per 256 weights) times the activations quantised per 256
// to int8 with sums per 16 (llama.cpp's Q8_K). Kernels in q6k_matmul.cpp.
#pragma once

#include "block_matmul.hpp"

namespace genmesh {

void q6k_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);

class Q6KMatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q6KMatMul", "genmesh", BlockMatMul);

    Q6KMatMul() = default;
    Q6KMatMul(const ov::Output<ov::Node>& x, const ov::Output<ov::Node>& blocks, std::string kernel = "auto")
        : BlockMatMul(x, blocks, std::move(kernel)) {
        constructor_validate_and_infer_types();
    }
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        OPENVINO_ASSERT(args.size() == 2, "Q6KMatMul takes 2 inputs");
        return std::make_shared<Q6KMatMul>(args[0], args[1], m_kernel);
    }

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
