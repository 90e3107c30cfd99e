// genmesh::Q4KMatMul: the file's Q4_K blocks (144 bytes per 256 weights) times the activations quantised per 256
// to int8 with sums per 32 (llama.cpp's Q8_K). Kernels in q4k_matmul.cpp.
#pragma once

#include "block_matmul.hpp"

namespace genmesh {

void q4k_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);

class Q4KMatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q4KMatMul", "genmesh", BlockMatMul);

    Q4KMatMul() = default;
    Q4KMatMul(const ov::Output<ov::Node>& x, const ov::Output<ov::Node>& blocks, std::string kernel = "auto")
        : BlockMatMul(x, blocks, std::move(kernel)) {
        constructor_validate_and_infer_types();
    }
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        OPENVINO_ASSERT(args.size() == 2, "Q4KMatMul takes 2 inputs");
        return std::make_shared<Q4KMatMul>(args[0], args[1], m_kernel);
    }

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
