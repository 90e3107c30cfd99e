// Feasibility driver (issue 56): Q4_K at decode sizes, today's kernel against the eight-column kernel on blocks
// already interleaved eight rows at a time (packed once, outside the timing), from memory.
//
//   a   q4k_matmul as the op runs it (row tiles below 8 rows, per-task repack from 8 rows)
//   b   the eight-column kernel (group_tile_avx2) over blocks pre-packed in its run-time scratch layout
//       (1,472 bytes per super-block and 8 columns: +28 % over the file's 8 x 144 = 1,152)
//   c   q4k_x8_matmul (the Q4KX8MatMul op's kernel) over its interleaved layout (1,184 bytes per super-block and 8
//       columns: the dword-transposed nibbles, the 6-bit scales and minimums as bytes, d and dmin as f16), packed
//       here by q4k_x8_pack.hpp (the op's IR is packed by genmesh.engine.native.q41_op.pack_q4k_x8; the shapes here
//       are multiples of 8, so no tail)
//
// Each round runs every variant in turn (interleaved), for each shape and M; every call reads a different copy of
// the weights (>= 256 MB of copies per variant), so nothing stays in cache. Figures: ns per super-block and output
// column, and GB/s counted on the file's bytes (144 per super-block and column) for every variant.
//
// Build (the op's sources included, so the driver sees its static kernels):
//   OV=.venv/lib/python3.11/site-packages/openvino
//   g++ -O3 -std=c++17 -I services/engine/src/genmesh/engine/native/int8 -I $OV/include
//       scripts/int8_probe/q4k_x8_driver.cpp -o /tmp/q4k_x8 -L $OV/libs -l:libopenvino.so.2641 -l:libtbb.so.12
//       -Wl,-rpath,$OV/libs          (one line; OV an absolute path)
// Run: [RMAX=4|3|2] /tmp/q4k_x8 THREADS ROUNDS [SECONDS_PER_CASE]   (RMAX: b's largest row tile)
#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "q4k_matmul.cpp"
#include "driver_timing.hpp"
#include "q4k_x8_pack.hpp"

using namespace genmesh;

namespace {

constexpr size_t CBYTES = X8_BYTES;  // layout c, per super-block and group of 8

// the largest tile of activation rows for the grouped kernels (env RMAX; 4 by default)
const size_t rmax = getenv("RMAX") ? (size_t)atoi(getenv("RMAX")) : 4;

// every group of 8 columns over all M rows in tiles of 4 (or 3: RMAX), 2, 1 rows; the groups split over the threads
// as the op
template <class GroupTile>
void grouped(const float* x, const uint8_t* packed, size_t gbytes, size_t M, size_t K, size_t N,
             GroupTile tile) {
    Q8_K a;
    quantise_q8_k(x, M, K, Kernel::Avx2, a);
    const size_t nsb = K / QK_K;
    parallel_columns(N, 8, M, [&](size_t n0, size_t n1) {
        for (size_t n = n0; n < n1; n += 8) {
            const uint8_t* p = packed + (n / 8) * nsb * gbytes;
            size_t m = 0;
            if (rmax >= 4)
                for (; m + 4 <= M; m += 4) tile(std::integral_constant<size_t, 4>{}, a, p, m, n);
            if (rmax >= 3)
                for (; m + 3 <= M; m += 3) tile(std::integral_constant<size_t, 3>{}, a, p, m, n);
            for (; m + 2 <= M; m += 2) tile(std::integral_constant<size_t, 2>{}, a, p, m, n);
            for (; m < M; ++m) tile(std::integral_constant<size_t, 1>{}, a, p, m, n);
        }
    });
}

struct Shape {
    size_t K, N;
    std::vector<uint8_t> rows, packed, compact;  // copies of the weights in each layout
    size_t copies;
};

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int rounds = argc > 2 ? atoi(argv[2]) : 3;
    const double seconds = argc > 3 ? atof(argv[3]) : 0.4;
    const size_t Ms[] = {1, 2, 3, 4, 6};
    std::vector<Shape> shapes;
    for (auto [K, N] : std::vector<std::pair<size_t, size_t>>{{1536, 8960}, {8960, 1536}, {1536, 1536}, {1536, 256}})
        shapes.push_back({K, N, {}, {}, {}, 0});
    std::mt19937 rng(1);
    for (auto& s : shapes) {
        const size_t nsb = s.K / QK_K, bytes = s.N * nsb * BLOCK_BYTES;
        s.copies = std::max<size_t>(2, (size_t)(256e6 / bytes));
        s.rows.resize(bytes * s.copies);
        for (auto& v : s.rows) v = (uint8_t)rng();
        for (size_t i = 0; i < s.N * nsb * s.copies; ++i) {  // small positive f16 d and dmin
            const uint16_t h = 0x1800 + (rng() & 0x3ff);
            std::memcpy(s.rows.data() + i * BLOCK_BYTES, &h, 2);
            std::memcpy(s.rows.data() + i * BLOCK_BYTES + 2, &h, 2);
        }
        s.packed.resize(s.N / 8 * nsb * GROUP_BYTES * s.copies);
        s.compact.resize(s.N / 8 * nsb * CBYTES * s.copies);
        for (size_t c = 0; c < s.copies; ++c)
            for (size_t n = 0; n < s.N; n += 8) {
                repack_group(s.rows.data() + c * bytes, nsb, n,
                             s.packed.data() + (c * s.N / 8 + n / 8) * nsb * GROUP_BYTES);
                pack_q4k_x8_group(s.rows.data() + c * bytes, nsb, n,
                             s.compact.data() + (c * s.N / 8 + n / 8) * nsb * CBYTES);
            }
    }
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
    std::normal_distribution<float> nd;
    const char* names[] = {"a", "b", "c"};
    for (int round = 0; round < rounds; ++round) {
        char what[64];
        snprintf(what, sizeof what, "RMAX %zu round %d threads %d", rmax, round, threads);
        driver::print_round(what);
        for (auto& s : shapes) {
            const size_t nsb = s.K / QK_K, bytes = s.N * nsb * BLOCK_BYTES;
            for (size_t M : Ms) {
                std::vector<float> x(M * s.K), y[3];
                for (auto& v : x) v = nd(rng);
                for (int v = 0; v < 3; ++v) {
                    y[v].assign(M * s.N, 0.f);
                    auto call = [&](size_t copy) {
                        if (v == 0)
                            q4k_matmul(x.data(), s.rows.data() + copy * bytes, y[v].data(), M, s.K, s.N, Kernel::Avx2);
                        else if (v == 1)
                            grouped(x.data(), s.packed.data() + copy * s.N / 8 * nsb * GROUP_BYTES, GROUP_BYTES, M,
                                    s.K, s.N, [&](auto R, const Q8_K& a, const uint8_t* p, size_t m,
                                                                  size_t n) {
                                        group_tile_avx2<decltype(R)::value>(a, p, y[v].data(), m, s.K, s.N, n);
                                    });
                        else
                            q4k_x8_matmul(x.data(), s.compact.data() + copy * s.N / 8 * nsb * CBYTES, y[v].data(), M,
                                          s.K, s.N, Kernel::Avx2);
                    };
                    driver::time_case(names[v], s.K, s.N, M, threads, seconds, 20, s.copies, bytes, call, y[v], y[0]);
                }
            }
        }
    }
}
