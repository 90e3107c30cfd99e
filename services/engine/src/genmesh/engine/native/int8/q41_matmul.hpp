// genmesh::Q41MatMul: the file's Q4_1 blocks (f16 d, f16 m, 16 bytes of nibbles per 32 weights) times the
// activations quantised per 32 to int8 (Q8_1). Kernels in q41_matmul.cpp.
#pragma once

#include "block_matmul.hpp"

namespace genmesh {

void q41_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);

class Q41MatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q41MatMul", "genmesh", BlockMatMul);

    Q41MatMul() = default;
    Q41MatMul(const ov::Output<ov::Node>& x, const ov::Output<ov::Node>& blocks, std::string kernel = "auto")
        : BlockMatMul(x, blocks, std::move(kernel)) {
        constructor_validate_and_infer_types();
    }
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        OPENVINO_ASSERT(args.size() == 2, "Q41MatMul takes 2 inputs");
        return std::make_shared<Q41MatMul>(args[0], args[1], m_kernel);
    }

protected:
    size_t block_weights() const override { return 32; }
    size_t block_bytes() const override { return 20; }
    const char* format() const override { return "Q4_1"; }
    void multiply(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N,
                  Kernel kernel) const override {
        q41_matmul(x, w, y, M, K, N, kernel);
    }
};

}  // namespace genmesh
