// BlockMatMul's shape inference and evaluate(), shared by every block format; the extension's entry point.
#include "block_matmul.hpp"

#include <openvino/core/extension.hpp>
#include <openvino/core/op_extension.hpp>

#include "q41_matmul.hpp"
#include "q4k_matmul.hpp"
#include "q6k_matmul.hpp"
#include "q80_matmul.hpp"

namespace genmesh {

ov::PartialShape BlockOp::validate_inputs() {
    const size_t qk = block_weights(), bytes = block_bytes();
    NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::f32, "x must be f32");
    NODE_VALIDATION_CHECK(this, m_kernel == "auto" || m_kernel == "avx2" || m_kernel == "scalar",
                          "kernel must be auto, avx2 or scalar, not ", m_kernel);
    const auto& xs = get_input_partial_shape(0);
    NODE_VALIDATION_CHECK(this, xs.rank().is_static() && xs.rank().get_length() >= 1, "x needs a rank");
    const auto& k = xs[xs.rank().get_length() - 1];
    if (k.is_static()) NODE_VALIDATION_CHECK(this, k.get_length() % qk == 0, "K must be a multiple of ", qk);
    for (size_t i = 1; i < get_input_size(); ++i) {
        NODE_VALIDATION_CHECK(this, get_input_element_type(i) == ov::element::u8, "blocks must be u8");
        const auto& ws = get_input_partial_shape(i);
        NODE_VALIDATION_CHECK(this, ws.rank().is_static() && ws.rank().get_length() == 2, "blocks must be 2-D");
        if (k.is_static() && ws[1].is_static())
            NODE_VALIDATION_CHECK(this, (size_t)ws[1].get_length() == k.get_length() / qk * bytes,
                                  "blocks row must hold K/", qk, " ", format(), " blocks of ", bytes, " bytes");
    }
    return xs;
}

Kernel BlockOp::kernel() const {
    if (m_kernel == "avx2" || (m_kernel == "auto" && cpu_has_avx2())) {
        OPENVINO_ASSERT(cpu_has_avx2(), get_type_name(), ": kernel avx2 on a CPU without AVX2/FMA/F16C");
        return Kernel::Avx2;
    }
    return Kernel::Scalar;
}

void BlockMatMul::validate_and_infer_types() {
    NODE_VALIDATION_CHECK(this, get_input_size() >= 2, "takes x and at least one blocks input");
    const ov::PartialShape xs = validate_inputs();
    for (size_t i = 1; i < get_input_size(); ++i) {  // blocks_i -> output i - 1
        auto out = xs;
        out[out.rank().get_length() - 1] = get_input_partial_shape(i)[0];
        set_output_type(i - 1, ov::element::f32, out);
    }
}

bool BlockMatMul::evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
    const auto& x = inputs[0];
    const ov::Shape xs = x.get_shape();
    const size_t K = xs.back();
    const size_t M = K ? ov::shape_size(xs) / K : 0;
    const Kernel kernel = this->kernel();
    std::vector<const uint8_t*> ws;
    std::vector<float*> ys;
    std::vector<size_t> Ns;
    for (size_t i = 1; i < inputs.size(); ++i) {
        const size_t N = inputs[i].get_shape()[0];
        ov::Shape ys_i = xs;
        ys_i.back() = N;
        outputs[i - 1].set_shape(ys_i);
        ws.push_back(inputs[i].data<const uint8_t>());
        ys.push_back(N && M ? outputs[i - 1].data<float>() : nullptr);
        Ns.push_back(M ? N : 0);
    }
    if (M) multiply_group(x.data<const float>(), ws, ys, M, K, Ns, kernel);
    return true;
}

void BlockSwiGLU::validate_and_infer_types() {
    NODE_VALIDATION_CHECK(this, get_input_size() == 3, "takes x, the gate's blocks and the up's blocks");
    const ov::PartialShape xs = validate_inputs();
    NODE_VALIDATION_CHECK(this, get_input_partial_shape(1).compatible(get_input_partial_shape(2)),
                          "the gate's and the up's blocks must have one shape");
    auto out = xs;
    out[out.rank().get_length() - 1] = get_input_partial_shape(1)[0];
    set_output_type(0, ov::element::f32, out);
}

bool BlockSwiGLU::evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
    const ov::Shape xs = inputs[0].get_shape();
    const size_t K = xs.back(), N = inputs[1].get_shape()[0];
    const size_t M = K ? ov::shape_size(xs) / K : 0;
    ov::Shape ys = xs;
    ys.back() = N;
    outputs[0].set_shape(ys);
    if (M && N)
        swiglu(inputs[0].data<const float>(), inputs[1].data<const uint8_t>(), inputs[2].data<const uint8_t>(),
               outputs[0].data<float>(), M, K, N, kernel());
    return true;
}

}  // namespace genmesh

OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>({
    std::make_shared<ov::OpExtension<genmesh::Q41MatMul>>(),
    std::make_shared<ov::OpExtension<genmesh::Q41X8MatMul>>(),
    std::make_shared<ov::OpExtension<genmesh::Q41SwiGLU>>(),
    std::make_shared<ov::OpExtension<genmesh::Q4KMatMul>>(),
    std::make_shared<ov::OpExtension<genmesh::Q4KX8MatMul>>(),
    std::make_shared<ov::OpExtension<genmesh::Q6KMatMul>>(),
    std::make_shared<ov::OpExtension<genmesh::Q6KX8MatMul>>(),
    std::make_shared<ov::OpExtension<genmesh::Q80MatMul>>(),
}));
