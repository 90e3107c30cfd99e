// Driver (issue 56): Q4KX8MatMul at batched-decode and prefill sizes (M = 4 ... 128), compute-bound, from cache.
//
//   tiles   x8_tile_avx2 over every row (the op's kernel below X8_UNPACK_ROWS rows)
//   op      q4k_x8_matmul as the op runs it (from X8_UNPACK_ROWS rows each group unpacked once per task)
//
// Both over the same interleaved blocks (packed once by q4k_x8_pack.hpp, as genmesh.engine.native.q41_op
// packs the IR), the 1.5B's four Q4_K shapes; each round runs both in turn per shape and M. Figures: the per-call
// median, G multiply-adds a second, and max|y_op - y_tiles| (0: the same integer sums, the same float order).
// Built against an older checkout's sources (-I <old>/services/.../int8), it measures that commit's kernels: the
// figures in docs/int8-avx2.md compare this commit's build with its parent's.
//
// Build (one line; OV an absolute path):
//   OV=.venv/lib/python3.11/site-packages/openvino
//   g++ -O3 -std=c++17 -I services/engine/src/genmesh/engine/native/int8 -I $OV/include
//       scripts/int8_probe/q4k_rows_driver.cpp -o /tmp/q4k_rows -L $OV/libs -l:libopenvino.so.2641 -l:libtbb.so.12
//       -Wl,-rpath,$OV/libs
// Run: /tmp/q4k_rows THREADS ROUNDS [SECONDS_PER_CASE [M,M,...]]
#include <tbb/global_control.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "q4k_matmul.cpp"
#include "driver_timing.hpp"
#include "q4k_x8_pack.hpp"

using namespace genmesh;

namespace {

// x8_tile_avx2 over every row, split over the threads as the op
void tiles(const float* x, const uint8_t* w, float* y, size_t M, size_t K, size_t N) {
    Q8_K a;
    quantise_q8_k(x, M, K, Kernel::Avx2, a);
    const size_t nsb = K / QK_K;
    parallel_columns(N, GROUP, M, [&](size_t n0, size_t n1) {
        for (size_t n = n0; n < n1; n += GROUP)
            row_tiles(0, M, [&](auto R, size_t m) {
                x8_tile_avx2<decltype(R)::value>(a, w + (n / GROUP) * nsb * X8_BYTES, y, m, K, N, n);
            });
    });
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int rounds = argc > 2 ? atoi(argv[2]) : 3;
    const double seconds = argc > 3 ? atof(argv[3]) : 0.3;
    std::vector<size_t> Ms = {4, 8, 16, 32, 128};
    if (argc > 4) {
        Ms.clear();
        for (char* p = strtok(argv[4], ","); p; p = strtok(nullptr, ",")) Ms.push_back((size_t)atoi(p));
    }
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    struct Shape {
        size_t K, N;
        std::vector<uint8_t> x8;
    };
    std::vector<Shape> shapes;
    for (auto [K, N] : std::vector<std::pair<size_t, size_t>>{{1536, 8960}, {8960, 1536}, {1536, 1536}, {1536, 256}}) {
        const size_t nsb = K / QK_K;
        std::vector<uint8_t> rows(N * nsb * BLOCK_BYTES);
        for (auto& v : rows) v = (uint8_t)rng();
        for (size_t i = 0; i < N * nsb; ++i) {  // small positive f16 d and dmin
            const uint16_t h = 0x1800 + (rng() & 0x3ff);
            std::memcpy(rows.data() + i * BLOCK_BYTES, &h, 2);
            std::memcpy(rows.data() + i * BLOCK_BYTES + 2, &h, 2);
        }
        Shape s{K, N, std::vector<uint8_t>(N / GROUP * nsb * X8_BYTES)};
        for (size_t n = 0; n < N; n += GROUP)
            pack_q4k_x8_group(rows.data(), nsb, n, s.x8.data() + n / GROUP * nsb * X8_BYTES);
        shapes.push_back(std::move(s));
    }
    for (int round = 0; round < rounds; ++round) {
        char what[64];
        snprintf(what, sizeof what, "round %d threads %d", round, threads);
        driver::print_round(what);
        for (auto& s : shapes)
            for (size_t M : Ms) {
                std::vector<float> x(M * s.K), y[2];
                for (auto& v : x) v = nd(rng);
                double med[2];
                for (int v = 0; v < 2; ++v) {
                    y[v].assign(M * s.N, 0.f);
                    std::vector<double> ts;
                    const double t0 = driver::now();
                    while (driver::now() - t0 < seconds || ts.size() < 5) {
                        const double t = driver::now();
                        if (v == 0)
                            tiles(x.data(), s.x8.data(), y[v].data(), M, s.K, s.N);
                        else
                            q4k_x8_matmul(x.data(), s.x8.data(), y[v].data(), M, s.K, s.N, Kernel::Avx2);
                        ts.push_back(driver::now() - t);
                    }
                    std::sort(ts.begin(), ts.end());
                    med[v] = ts[ts.size() / 2];
                }
                double diff = 0;
                for (size_t i = 0; i < y[0].size(); ++i) diff = std::max(diff, (double)std::fabs(y[1][i] - y[0][i]));
                const double macs = (double)M * s.K * s.N;
                printf("K=%zu N=%zu M=%zu thr=%d: tiles %.4f ms %.1f GMAC/s | op %.4f ms %.1f GMAC/s | op/tiles %.3f | "
                       "max|y_op-y_tiles| %.1e\n",
                       s.K, s.N, M, threads, med[0] * 1e3, macs / med[0] / 1e9, med[1] * 1e3, macs / med[1] / 1e9,
                       med[1] / med[0], diff);
                fflush(stdout);
            }
    }
}
