// genmesh::Q41MatMul: the file's Q4_1 blocks (f16 d, f16 m, 16 bytes of nibbles per 32 weights) times the
// activations quantised per 32 to int8 (Q8_1). Kernels in q41_matmul.cpp.
#pragma once

#include "block_matmul.hpp"

namespace genmesh {

void q41_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);
// ys[i] = x ws[i]^T (Ns[i] columns) for the matrices of one input: x quantised once, one parallel loop over all
// their columns; each column's arithmetic is q41_matmul's
void q41_matmul_group(const float* x, const std::vector<const uint8_t*>& ws, const std::vector<float*>& ys, size_t M,
                      size_t K, const std::vector<size_t>& Ns, Kernel kernel);
// The same products over the blocks interleaved eight columns at a time (Q41X8MatMul's layout, q41_matmul.cpp)
void q41_x8_matmul(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N, Kernel kernel);
void q41_x8_matmul_group(const float* x, const std::vector<const uint8_t*>& ws, const std::vector<float*>& ys,
                         size_t M, size_t K, const std::vector<size_t>& Ns, Kernel kernel);
// y = silu(x wg^T) * (x wu^T) (N columns each): x quantised once, each column's gate and up products in one task,
// bit for bit q41_matmul's; the SiLU in f32
void q41_swiglu(const float* x, const uint8_t* wg, const uint8_t* wu, float* y, size_t M, size_t K, size_t N,
                Kernel kernel);

class Q41MatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q41MatMul", "genmesh", BlockMatMul);

    GENMESH_BLOCK_MATMUL_CTORS(Q41MatMul)

protected:
    size_t block_weights() const override { return 32; }
    size_t block_bytes() const override { return 20; }
    const char* format() const override { return "Q4_1"; }
    void multiply(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N,
                  Kernel kernel) const override {
        q41_matmul(x, w, y, M, K, N, kernel);
    }
    void multiply_group(const float* x, const std::vector<const uint8_t*>& ws, const std::vector<float*>& ys,
                        size_t M, size_t K, const std::vector<size_t>& Ns, Kernel kernel) const override {
        q41_matmul_group(x, ws, ys, M, K, Ns, kernel);
    }
};

// genmesh::Q41X8MatMul: the same Q4_1 weights (and groups), written eight output columns at a time, 20 bytes per
// block and column as the file's (blocks u8 [N, K/32*20]): per group of eight columns and block 160 bytes (the
// nibbles as dwords of the eight columns side by side, then their f16 d and f16 m), the last N % 8 columns in the
// file's layout. The AVX2 kernel reads a group as it lies, where Q41MatMul transposes the file's blocks at run time
// (decode) or repacks them per task (M > 4); the products are Q41MatMul's, bit for bit. A new type name, so that
// an IR of the file's layout cannot be read as this one. Packed by genmesh.engine.native.q41_op.pack_q41_x8.
class Q41X8MatMul : public BlockMatMul {
public:
    OPENVINO_OP("Q41X8MatMul", "genmesh", BlockMatMul);

    GENMESH_BLOCK_MATMUL_CTORS(Q41X8MatMul)

protected:
    size_t block_weights() const override { return 32; }
    size_t block_bytes() const override { return 20; }
    const char* format() const override { return "Q4_1 x8"; }
    void multiply(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N,
                  Kernel kernel) const override {
        q41_x8_matmul(x, w, y, M, K, N, kernel);
    }
    void multiply_group(const float* x, const std::vector<const uint8_t*>& ws, const std::vector<float*>& ys,
                        size_t M, size_t K, const std::vector<size_t>& Ns, Kernel kernel) const override {
        q41_x8_matmul_group(x, ws, ys, M, K, Ns, kernel);
    }
};

// genmesh::Q41SwiGLU(x, gate_blocks, up_blocks) -> silu(x Wg^T) * (x Wu^T): a gated MLP's gate/up over Q4_1 blocks.
class Q41SwiGLU : public BlockSwiGLU {
public:
    OPENVINO_OP("Q41SwiGLU", "genmesh", BlockSwiGLU);

    GENMESH_BLOCK_SWIGLU_CTORS(Q41SwiGLU)

protected:
    size_t block_weights() const override { return 32; }
    size_t block_bytes() const override { return 20; }
    const char* format() const override { return "Q4_1"; }
    void swiglu(const float* x, const uint8_t* wg, const uint8_t* wu, float* y, size_t M, size_t K, size_t N,
                Kernel kernel) const override {
        q41_swiglu(x, wg, wu, y, M, K, N, kernel);
    }
};

}  // namespace genmesh
