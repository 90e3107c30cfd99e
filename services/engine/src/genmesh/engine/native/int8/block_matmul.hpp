// What the genmesh int8 ops share: f16 reading, the CPU test, the activations' quantisation per 32 to int8 (Q8_0,
// Q8_1), the threading over output columns, and the op class itself (BlockMatMul: x f32 [..., K] times a matrix of
// GGUF blocks u8 [N, K/QK * BYTES], transposed). Each block format (q41_matmul.cpp: Q4_1; q4k_matmul.cpp: Q4_K;
// q6k_matmul.cpp: Q6_K; q80_matmul.cpp: Q8_0) is a BlockMatMul with its own type name, block size and product.
#pragma once

#include <immintrin.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <openvino/op/op.hpp>
#include <openvino/runtime/tensor.hpp>
#include <string>
#include <vector>

namespace genmesh {

enum class Kernel { Scalar, Avx2 };

inline bool cpu_has_avx2() {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

inline uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

inline int32_t load_i32(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// f16 -> f32 without F16C (the scalar path must run on any x86-64).
inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) {
                mant <<= 1;
                --exp;
            }
            bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000 | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// ------------------------------------------------------------------------------ activations to int8, per 32
// 32 values as int8 q = nearest-even(x * id) (|x * id| <= 127 by the caller's choice of id); returns sum(q).
inline int quantise32_scalar(const float* x, float id, int8_t* q) {
    int sum = 0;
    for (size_t j = 0; j < 32; ++j) {
        const int v = (int)std::nearbyint(x[j] * id);  // round half to even, as the AVX2 path
        q[j] = (int8_t)v;
        sum += v;
    }
    return sum;
}

inline float amax_scalar(const float* x, size_t n) {
    float amax = 0.f;
    for (size_t j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
    return amax;
}

__attribute__((target("avx2,fma,f16c"))) inline float hsum8(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

__attribute__((target("avx2,fma,f16c"))) inline float f16(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

// max |x| over n values (n a multiple of 8)
__attribute__((target("avx2,fma,f16c"))) inline float amax_avx2(const float* x, size_t n) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    __m256 amax = _mm256_setzero_ps();
    for (size_t i = 0; i < n; i += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

// quantise32_scalar with AVX2 (the same values: nearest even, saturating packs that never saturate).
__attribute__((target("avx2,fma,f16c"))) inline int quantise32_avx2(const float* x, float id, int8_t* q) {
    const __m256 vid = _mm256_set1_ps(id);
    __m256i i32[4];
    for (int i = 0; i < 4; ++i) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), vid));
    __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_hadd_epi32(s4, s4);
    s4 = _mm_hadd_epi32(s4, s4);
    // pack i32 -> i16 -> i8 (saturating; |v| <= 127 already); packs interleave 128-bit lanes: undo it
    const __m256i p16a = _mm256_packs_epi32(i32[0], i32[1]), p16b = _mm256_packs_epi32(i32[2], i32[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i*)q, p8);
    return _mm_cvtsi128_si32(s4);
}

// One activation row x [K] per block of 32 (llama.cpp's Q8_0): d[b] = max|x| / 127 and q = nearest-even(x / d[b]);
// where s is not null, also Q8_1's s[b] = d[b] * sum(q) of the block.
template <Kernel k>
void quantise_row_32(const float* x, size_t K, int8_t* q, float* d, float* s) {
    for (size_t b = 0; b < K / 32; ++b) {
        const float* xb = x + b * 32;
        float amax;
        if constexpr (k == Kernel::Avx2)
            amax = amax_avx2(xb, 32);
        else
            amax = amax_scalar(xb, 32);
        const float db = amax / 127.f, id = db != 0.f ? 1.f / db : 0.f;
        int sum;
        if constexpr (k == Kernel::Avx2)
            sum = quantise32_avx2(xb, id, q + b * 32);
        else
            sum = quantise32_scalar(xb, id, q + b * 32);
        d[b] = db;
        if (s) s[b] = db * (float)sum;
    }
}

// ------------------------------------------------------------------------------------------ SiLU(g) * u, f32
// y[i] = g[i] / (1 + exp(-g[i])) * u[i]: the SwiGLU ops' epilogue (BlockSwiGLU). exp as std::exp (scalar) or a
// Cephes-style range reduction and degree-5 polynomial (AVX2: within 2 ulp of expf over the clamped range; the
// argument clamped to +-88 so that 1 + exp never overflows: silu(g) -> 0 for g < -88, g for g > 88).
inline void silu_mul_scalar(const float* g, const float* u, float* y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 exp_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.f)), _mm256_set1_ps(88.f));
    // x = k ln2 + r, |r| <= ln2/2; ln2 in two parts (Cody-Waite) so that r is exact to f32
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    // times 2^k (|k| <= 127: a normal exponent)
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma,f16c"))) inline void silu_mul_avx2(const float* g, const float* u, float* y,
                                                                   size_t n) {
    const __m256 one = _mm256_set1_ps(1.f), sign = _mm256_set1_ps(-0.f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = exp_avx2(_mm256_xor_ps(gv, sign));  // exp(-g)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    if (i < n) silu_mul_scalar(g + i, u + i, y + i, n - i);
}

// ------------------------------------------------------------------------------------- integer sums in order
// GCC reassociates a chain of integer adds (s += maddubs(w_g, x_g) over a block's eight dwords) into a tree of adds
// (shorter latency), so every product of the chain is live at once. At four activation rows that is more than
// AVX2's 16 registers: the kernels spilled their products to the stack and read them back (Q4KX8MatMul's four-row
// tile: 98 stack accesses; one layer at M = 32 ... 128 ran at 130-150 G multiply-adds a second on two Sapphire
// Rapids cores). keep_order after each step takes the accumulators in registers through an empty asm, so the
// chain stays in program order; it emits no instruction. The sums are integers: the same bits either way.
__attribute__((target("avx2"), always_inline)) inline void keep_order(__m256i& v) { __asm__("" : "+x"(v)); }

template <size_t R>
__attribute__((target("avx2"), always_inline)) inline void keep_order(__m256i (&v)[R]) {
    for (size_t r = 0; r < R; ++r) __asm__("" : "+x"(v[r]));
}

// ------------------------------------------------------------------------------------------ weight prefetch
// The interleaved kernels (Q4KX8MatMul, Q6KX8MatMul) read one contiguous stream per group of eight columns and
// prefetch it a few super-blocks ahead. On Intel cores into L2 (T1), elsewhere into L1 (T0, as tuned on AMD Zen 4).
// On Sapphire Rapids with the kernels' AVX2 code, an L1 prefetch left Q4KX8MatMul at M = 1 slower than the file
// layout's row kernel; into L2 it is 1.11-1.49x faster per shape (scripts/int8_probe/q4k_x8_driver.cpp, from
// memory, both cores) and the 1.5B's c=1 went from 1.04x to 1.21x llama-server (docs/int8-avx2.md). The other
// kernels' prefetches (rows of the file's layout, Q4_1 and its interleaved layout, Q8_0) stay in L1: not measured
// faster on Intel (Q41X8MatMul's was measured, and was slower: q41_matmul.cpp).
inline const bool PREFETCH_TO_L2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
}();

inline void prefetch_weights(const void* p) {
    if (PREFETCH_TO_L2)
        _mm_prefetch((const char*)p, _MM_HINT_T1);
    else
        _mm_prefetch((const char*)p, _MM_HINT_T0);
}

// -------------------------------------------------------------------------------------------------- threading
// fn(m) for every activation row m (the quantisation), over OpenVINO's TBB arena (both cores).
// At most one grain of rows (decode: M = 1 ... 16) runs here, in this thread: TBB would make it one task anyway, and
// its parallel_for costs a task and a wait per op node.
template <class Fn>
void parallel_rows(size_t M, Fn fn) {
    constexpr size_t grain = 16;
    if (M <= grain) {
        for (size_t m = 0; m < M; ++m) fn(m);
        return;
    }
    tbb::parallel_for(tbb::blocked_range<size_t>(0, M, grain), [&](const tbb::blocked_range<size_t>& r) {
        for (size_t m = r.begin(); m != r.end(); ++m) fn(m);
    });
}

// The parallel loops' grain over `groups` groups of columns for M activation rows. Decode (M <= DECODE_ROWS) runs an
// op in tens of microseconds, and up to 128 tasks (groups / 64) cost the engine more than they balanced there:
// SmolLM2 at one stream, each engine alone in turn (6 rounds), 0.90x the time per output token with groups / 8 (eight
// to sixteen tasks; groups / 2, 4, 16: 0.92-0.94x beside a running twin). From more rows on the finer grain stays: the
// coarse one showed no gain there (the 1.5B's kernels alone at M = 32 ... 512 0.97-1.03x; the 1.5B at c=32 against
// llama-server 1.78x with it, 1.87x before, in other hours: docs/int8-avx2.md).
constexpr size_t DECODE_ROWS = 4;
inline size_t column_grain(size_t groups, size_t M) {
    return std::max<size_t>(1, groups / (M <= DECODE_ROWS ? 8 : 64));
}

// fn(n0, n1) over the N output columns split in groups of `group` (the kernels' unit): each task reads its weight
// rows once and all M activation rows.
template <class Fn>
void parallel_columns(size_t N, size_t group, size_t M, Fn fn) {
    const size_t groups = (N + group - 1) / group;
    const size_t grain = column_grain(groups, M);
    tbb::parallel_for(tbb::blocked_range<size_t>(0, groups, grain), [&](const tbb::blocked_range<size_t>& r) {
        fn(r.begin() * group, std::min(N, r.end() * group));
    });
}

// fn(i, n0, n1) over the output columns of several matrices (Ns[i] columns each: a grouped op's outputs) in one
// parallel loop: each matrix's columns split in groups of `group` from its own column 0, as parallel_columns splits
// one matrix, so every column takes the same kernel (and the same arithmetic) as in an op of its own.
template <class Fn>
void parallel_segments(const std::vector<size_t>& Ns, size_t group, size_t M, Fn fn) {
    std::vector<size_t> first(Ns.size() + 1, 0);  // first[i]: matrix i's first group in the concatenation
    for (size_t i = 0; i < Ns.size(); ++i) first[i + 1] = first[i] + (Ns[i] + group - 1) / group;
    const size_t groups = first.back();
    const size_t grain = column_grain(groups, M);
    tbb::parallel_for(tbb::blocked_range<size_t>(0, groups, grain), [&](const tbb::blocked_range<size_t>& r) {
        for (size_t i = 0; i < Ns.size(); ++i) {
            const size_t g0 = std::max(r.begin(), first[i]), g1 = std::min(r.end(), first[i + 1]);
            if (g0 < g1) fn(i, (g0 - first[i]) * group, std::min(Ns[i], (g1 - first[i]) * group));
        }
    });
}

// --------------------------------------------------------------------------------------------------- the op
// y = x W^T, W the GGUF blocks of one format. Attribute kernel: "auto" (AVX2 where the CPU has AVX2, FMA and
// F16C, else scalar), "avx2", "scalar". A format is a subclass: its block size (weights and bytes), its product.
//
// Grouped: (x, blocks_0, ..., blocks_{g-1}) -> (y_0, ..., y_{g-1}), y_i = x W_i^T: the matrices that read one input
// (a layer's q/k/v, its gate/up) as one node, so the CPU plugin runs one Reference node instead of g and the format
// may quantise x once (multiply_group). With one blocks input it is the per-matrix op.
// What the block ops share: the kernel attribute, the format's block size, and the checks of x and the blocks inputs.
class BlockOp : public ov::op::Op {
public:
    OPENVINO_OP("BlockOp", "genmesh");

    BlockOp() = default;
    BlockOp(const ov::OutputVector& args, std::string kernel) : Op(args), m_kernel(std::move(kernel)) {}

    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("kernel", m_kernel);
        return true;
    }
    bool has_evaluate() const override { return true; }

protected:
    virtual size_t block_weights() const = 0;  // weights per block (32, 256)
    virtual size_t block_bytes() const = 0;
    virtual const char* format() const = 0;  // "Q4_1", "Q4_K": for messages
    // checks the kernel attribute, x (f32, K a multiple of the block) and blocks inputs 1 .. inputs-1 (u8, 2-D,
    // K/qk blocks a row); returns x's shape
    ov::PartialShape validate_inputs();
    Kernel kernel() const;  // the kernel a call runs ("auto": AVX2 where the CPU has AVX2, FMA and F16C)
    std::string m_kernel = "auto";
};

class BlockMatMul : public BlockOp {
public:
    OPENVINO_OP("BlockMatMul", "genmesh", BlockOp);

    BlockMatMul() = default;
    BlockMatMul(const ov::OutputVector& args, std::string kernel) : BlockOp(args, std::move(kernel)) {}

    void validate_and_infer_types() override;
    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override;

protected:
    virtual void multiply(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N,
                          Kernel kernel) const = 0;
    // ys[i] = x ws[i]^T (Ns[i] columns) for every matrix of a group; by default one multiply each
    virtual void multiply_group(const float* x, const std::vector<const uint8_t*>& ws, const std::vector<float*>& ys,
                                size_t M, size_t K, const std::vector<size_t>& Ns, Kernel kernel) const {
        for (size_t i = 0; i < ws.size(); ++i)
            if (Ns[i]) multiply(x, ws[i], ys[i], M, K, Ns[i], kernel);
    }
};

// y = silu(x Wg^T) * (x Wu^T), Wg and Wu GGUF blocks of one format with the same shape: a gated MLP's gate and up
// matrices and its SiLU(gate) * up as one node, (x, gate_blocks, up_blocks) -> y [..., N]. The CPU plugin does not
// merge the SiLU into the multiply when gate and up are two outputs of one node (docs/int8-avx2.md), so the op
// does it: each output column's gate and up products in one task of one parallel loop, the SiLU in f32 after
// them. A type of its own (not an attribute of the MatMul op): one output where the MatMul has one per matrix.
class BlockSwiGLU : public BlockOp {
public:
    OPENVINO_OP("BlockSwiGLU", "genmesh", BlockOp);

    BlockSwiGLU() = default;
    BlockSwiGLU(const ov::OutputVector& args, std::string kernel) : BlockOp(args, std::move(kernel)) {}

    void validate_and_infer_types() override;
    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override;

protected:
    virtual void swiglu(const float* x, const uint8_t* wg, const uint8_t* wu, float* y, size_t M, size_t K, size_t N,
                        Kernel kernel) const = 0;
};

#define GENMESH_BLOCK_SWIGLU_CTORS(Name)                                                                         \
    Name() = default;                                                                                            \
    Name(const ov::OutputVector& args, std::string kernel) : BlockSwiGLU(args, std::move(kernel)) {              \
        constructor_validate_and_infer_types();                                                                  \
    }                                                                                                            \
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {               \
        OPENVINO_ASSERT(args.size() == 3, #Name " takes x, the gate's blocks and the up's blocks");              \
        return std::make_shared<Name>(args, m_kernel);                                                           \
    }

// The op class of one format (its type name, block size and product), grouped or not.
#define GENMESH_BLOCK_MATMUL_CTORS(Name)                                                                         \
    Name() = default;                                                                                            \
    Name(const ov::Output<ov::Node>& x, const ov::Output<ov::Node>& blocks, std::string kernel = "auto")         \
        : BlockMatMul({x, blocks}, std::move(kernel)) {                                                          \
        constructor_validate_and_infer_types();                                                                  \
    }                                                                                                            \
    Name(const ov::OutputVector& args, std::string kernel) : BlockMatMul(args, std::move(kernel)) {              \
        constructor_validate_and_infer_types();                                                                  \
    }                                                                                                            \
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {               \
        OPENVINO_ASSERT(args.size() >= 2, #Name " takes x and at least one blocks input");                       \
        return std::make_shared<Name>(args, m_kernel);                                                           \
    }

}  // namespace genmesh
