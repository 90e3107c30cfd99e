// Feasibility driver (issue 56): Q6_K at the 1.5B's shapes, today's kernel against the eight-column kernel on blocks
// already interleaved eight columns at a time (packed once, outside the timing), from memory.
//
//   a   q6k_matmul as Q6KMatMul runs it (row tiles below 24 rows, per-task repack from 24 rows)
//   c   q6k_x8_matmul (the Q6KX8MatMul op's kernel) over its interleaved layout (1,680 bytes per super-block and 8
//       columns, the file's 8 x 210 moved: the ql and qh bytes as dwords of the eight columns side by side, the
//       int8 scales as [pair][column][2], the eight f16 d), packed here by q6k_x8_pack.hpp (the op's IR is packed by
//       genmesh.engine.native.q41_op.pack_q6k_x8; the shapes here are multiples of 8, so no tail)
//
// Shapes: the 1.5B's Q6_K matrices: ffn_down 8,960 -> 1,536 and attn_v 1,536 -> 256 (half the layers each), the
// output head 1,536 -> 151,936 (tied to the embedding). Each round runs both variants in turn (interleaved), for
// each shape and M; every call reads a different copy of the weights (>= 256 MB of copies per variant; 2 copies of
// the head), so nothing stays in cache. Figures: ns per super-block and output column, GB/s on the 210 bytes.
//
// Build (the op's sources included, so the driver sees its static kernels):
//   OV=.venv/lib/python3.11/site-packages/openvino
//   g++ -O3 -std=c++17 -I services/engine/src/genmesh/engine/native/int8 -I $OV/include
//       scripts/int8_probe/q6k_x8_driver.cpp -o /tmp/q6k_x8 -L $OV/libs -l:libopenvino.so.2641 -l:libtbb.so.12
//       -Wl,-rpath,$OV/libs          (one line; OV an absolute path)
// Run: /tmp/q6k_x8 THREADS ROUNDS [SECONDS_PER_CASE] [M,M,...]
#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "q6k_matmul.cpp"
#include "driver_timing.hpp"
#include "q6k_x8_pack.hpp"

using namespace genmesh;

namespace {

struct Shape {
    size_t K, N;
    std::vector<uint8_t> rows, x8;  // copies of the weights in each layout
    size_t copies;
};

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int rounds = argc > 2 ? atoi(argv[2]) : 3;
    const double seconds = argc > 3 ? atof(argv[3]) : 0.3;
    std::vector<size_t> Ms = {1, 2, 4, 6, 8, 32};
    if (argc > 4) {
        Ms.clear();
        std::stringstream ss(argv[4]);
        for (std::string t; std::getline(ss, t, ',');) Ms.push_back((size_t)atoi(t.c_str()));
    }
    std::vector<Shape> shapes;
    for (auto [K, N] : std::vector<std::pair<size_t, size_t>>{{8960, 1536}, {1536, 256}, {1536, 151936}})
        shapes.push_back({K, N, {}, {}, 0});
    std::mt19937 rng(1);
    for (auto& s : shapes) {
        const size_t nsb = s.K / QK_K, bytes = s.N * nsb * BLOCK_BYTES;
        s.copies = std::max<size_t>(2, (size_t)(256e6 / bytes));
        s.rows.resize(bytes * s.copies);
        for (auto& v : s.rows) v = (uint8_t)rng();
        for (size_t i = 0; i < s.N * nsb * s.copies; ++i) {  // small positive f16 d
            const uint16_t h = 0x1800 + (rng() & 0x3ff);
            std::memcpy(s.rows.data() + i * BLOCK_BYTES + 208, &h, 2);
        }
        s.x8.resize(bytes * s.copies);
        for (size_t c = 0; c < s.copies; ++c)
            for (size_t n = 0; n < s.N; n += 8)
                pack_q6k_x8_group(s.rows.data() + c * bytes, nsb, n, s.x8.data() + c * bytes + n * nsb * BLOCK_BYTES);
    }
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
    std::normal_distribution<float> nd;
    const char* names[] = {"a", "c"};
    for (int round = 0; round < rounds; ++round) {
        char what[64];
        snprintf(what, sizeof what, "round %d threads %d", round, threads);
        driver::print_round(what);
        for (auto& s : shapes) {
            const size_t nsb = s.K / QK_K, bytes = s.N * nsb * BLOCK_BYTES;
            for (size_t M : Ms) {
                std::vector<float> x(M * s.K), y[2];
                for (auto& v : x) v = nd(rng);
                for (int v = 0; v < 2; ++v) {
                    y[v].assign(M * s.N, 0.f);
                    auto call = [&](size_t copy) {
                        if (v == 0)
                            q6k_matmul(x.data(), s.rows.data() + copy * bytes, y[v].data(), M, s.K, s.N, Kernel::Avx2);
                        else
                            q6k_x8_matmul(x.data(), s.x8.data() + copy * bytes, y[v].data(), M, s.K, s.N,
                                          Kernel::Avx2);
                    };
                    driver::time_case(names[v], s.K, s.N, M, threads, seconds, 5, s.copies, bytes, call, y[v], y[0]);
                }
            }
        }
    }
}
