// Driver (issue 56): one commit's eight-column K-quant kernels against another's, in one process, from memory.
//
// The op's source at two commits (OLD_SRC, NEW_SRC: string literals naming q4k_matmul.cpp or q6k_matmul.cpp; KQ = 4
// or 6 says which), the old one compiled into namespace gm_old; both run Q4KX8MatMul's / Q6KX8MatMul's product on
// the same interleaved blocks (the 1.5B's shapes), every call another copy of the weights (>= 256 MB of copies, so
// nothing stays in cache). Each round runs old and new in turn per shape and M, old first in even rounds and new
// first in odd ones (the first of a pair runs a little slower). Figures: driver_timing.hpp's per variant, then a
// line "same" with max|y_new - y_old| / max|y_old| (0: the same sums in the same order).
//
// Build (one line; OV an absolute path; OLD an older checkout's int8 directory, e.g. from git worktree or git show):
//   g++ -O3 -std=c++17 -DKQ=4 -DOLD_SRC='"<OLD>/q4k_matmul.cpp"'
//       -DNEW_SRC='"services/engine/src/genmesh/engine/native/int8/q4k_matmul.cpp"' -I scripts/int8_probe
//       -I $OV/include scripts/int8_probe/x8_old_new_driver.cpp -o /tmp/x8_old_new -L $OV/libs
//       -l:libopenvino.so.2641 -l:libtbb.so.12 -Wl,-rpath,$OV/libs
// (the OLD directory needs the headers of its commit beside the source). Run: /tmp/x8_old_new THREADS ROUNDS
// [SECONDS_PER_CASE [M,M,...]]; the figure is the new/old ratio of the medians, per round.
#include <tbb/global_control.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>

#define genmesh gm_old
#include OLD_SRC
#undef genmesh
#include NEW_SRC
#include "driver_timing.hpp"
#if KQ == 4
#include "q4k_x8_pack.hpp"
#define X8_MATMUL q4k_x8_matmul
#define PACK_GROUP pack_q4k_x8_group
#else
#include "q6k_x8_pack.hpp"
#define X8_MATMUL q6k_x8_matmul
#define PACK_GROUP pack_q6k_x8_group
#endif

using namespace genmesh;

namespace {

struct Shape {
    size_t K, N, copies, bytes;  // bytes: one copy's interleaved blocks
    std::vector<uint8_t> x8;
};

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int rounds = argc > 2 ? atoi(argv[2]) : 3;
    const double seconds = argc > 3 ? atof(argv[3]) : 0.3;
    std::vector<size_t> Ms = {1, 2, 3, 4};
    if (argc > 4) {
        Ms.clear();
        std::stringstream ss(argv[4]);
        for (std::string t; std::getline(ss, t, ',');) Ms.push_back((size_t)atoi(t.c_str()));
    }
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
#if KQ == 4
    const std::vector<std::pair<size_t, size_t>> dims = {{1536, 8960}, {8960, 1536}, {1536, 1536}, {1536, 256}};
#else
    const std::vector<std::pair<size_t, size_t>> dims = {{8960, 1536}, {1536, 256}};
#endif
    std::vector<Shape> shapes;
    for (auto [K, N] : dims) {
        const size_t nsb = K / QK_K, file = N * nsb * BLOCK_BYTES;
        Shape s{K, N, std::max<size_t>(2, (size_t)(256e6 / file)), N / GROUP * nsb * X8_BYTES, {}};
        std::vector<uint8_t> rows(file);
        s.x8.resize(s.bytes * s.copies);
        for (size_t c = 0; c < s.copies; ++c) {
            for (auto& v : rows) v = (uint8_t)rng();
            for (size_t i = 0; i < N * nsb; ++i) {  // small positive f16 scales
                const uint16_t h = 0x1800 + (rng() & 0x3ff);
#if KQ == 4
                std::memcpy(rows.data() + i * BLOCK_BYTES, &h, 2);
                std::memcpy(rows.data() + i * BLOCK_BYTES + 2, &h, 2);
#else
                std::memcpy(rows.data() + i * BLOCK_BYTES + 208, &h, 2);
#endif
            }
            for (size_t n = 0; n < N; n += GROUP)
                PACK_GROUP(rows.data(), nsb, n, s.x8.data() + c * s.bytes + n / GROUP * nsb * X8_BYTES);
        }
        shapes.push_back(std::move(s));
    }
    for (int round = 0; round < rounds; ++round) {
        char what[64];
        snprintf(what, sizeof what, "round %d threads %d %s first", round, threads, round % 2 ? "new" : "old");
        driver::print_round(what);
        for (auto& s : shapes)
            for (size_t M : Ms) {
                std::vector<float> x(M * s.K), y[2];
                for (auto& v : x) v = nd(rng);
                for (auto& v : y) v.assign(M * s.N, 0.f);
                const size_t file = s.N * (s.K / QK_K) * BLOCK_BYTES;
                for (int i = 0; i < 2; ++i) {
                    const int v = round % 2 ? 1 - i : i;  // 0: old, 1: new
                    auto call = [&](size_t c) {
                        const uint8_t* w = s.x8.data() + c * s.bytes;
                        if (v == 0)
                            gm_old::X8_MATMUL(x.data(), w, y[0].data(), M, s.K, s.N, gm_old::Kernel::Avx2);
                        else
                            X8_MATMUL(x.data(), w, y[1].data(), M, s.K, s.N, Kernel::Avx2);
                    };
                    driver::time_case(v ? "new" : "old", s.K, s.N, M, threads, seconds, 20, s.copies, file, call, y[v],
                                      y[v]);
                }
                double err = 0, ref = 0;
                for (size_t i = 0; i < y[0].size(); ++i) {
                    err = std::max(err, (double)std::fabs(y[1][i] - y[0][i]));
                    ref = std::max(ref, (double)std::fabs(y[0][i]));
                }
                printf("same K=%zu N=%zu M=%zu: max|y_new-y_old|/max|y_old| %.1e\n", s.K, s.N, M, err / ref);
            }
    }
}
