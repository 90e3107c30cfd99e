// Driver (issue 56): Q4_1 at SmolLM2's shapes, Q41MatMul over the file's layout against Q41X8MatMul over the same
// blocks interleaved eight rows at a time (packed here once, outside the timing, with the kernel's own gather: the
// layout genmesh.engine.native.q41_op.pack_q41_x8 writes into the IR). Every call reads another copy of the weights,
// the copies together SET_MB (110: more than SmolLM2's 96 MB a token, so the weights come from beyond L2 as in
// the engine). Each round runs both in turn; figures: ms per call and GB/s on the file's bytes (20 per block and
// column), and max|y - y_file| / max|y_file| (0: the same products).
//
// Build (the op's sources included, so the driver sees its static functions):
//   OV=.venv/lib/python3.11/site-packages/openvino
//   g++ -O3 -std=c++17 -I services/engine/src/genmesh/engine/native/int8 -I scripts/int8_probe -I $OV/include
//       scripts/int8_probe/q41_x8_driver.cpp -o /tmp/q41_x8 -L $OV/libs -l:libopenvino.so.2641 -l:libtbb.so.12
//       -Wl,-rpath,$OV/libs          (one line; OV an absolute path)
// Run: /tmp/q41_x8 THREADS ROUNDS [SECONDS_PER_CASE [SET_MB [M,M,...]]]
#include <tbb/global_control.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>

#include "driver_timing.hpp"
#include "q41_matmul.cpp"

using namespace genmesh;

namespace {

// group n..n+7 of the file's rows w in the interleaved layout (Src::X8), as pack_q41_x8 writes it
__attribute__((target("avx2,fma,f16c"))) void pack_x8(const uint8_t* w, size_t nb, size_t n, uint8_t* out) {
    for (size_t b = 0; b < nb; ++b) {
        const GroupBlock g = gather_block(w + n * nb * BLOCK_BYTES + b * BLOCK_BYTES, nb * BLOCK_BYTES);
        uint8_t* o = out + b * X8_BLOCK_BYTES;
        for (size_t i = 0; i < 4; ++i) _mm256_storeu_si256((__m256i*)(o + 32 * i), g.nib[i]);
        _mm_storeu_si128((__m128i*)(o + 128), _mm256_cvtps_ph(g.d, 0));
        _mm_storeu_si128((__m128i*)(o + 144), _mm256_cvtps_ph(g.m, 0));
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s THREADS ROUNDS [SECONDS_PER_CASE [SET_MB [M,M,...]]]\n", argv[0]);
        return 2;
    }
    const int threads = atoi(argv[1]), rounds = atoi(argv[2]);
    const double seconds = argc > 3 ? atof(argv[3]) : 0.3, set_mb = argc > 4 ? atof(argv[4]) : 110;
    std::vector<size_t> ms;
    std::stringstream list(argc > 5 ? argv[5] : "1,8");
    for (std::string item; std::getline(list, item, ',');) ms.push_back(std::stoul(item));
    tbb::global_control control(tbb::global_control::max_allowed_parallelism, threads);
    const size_t shapes[][2] = {{576, 960}, {576, 576}, {576, 3072}, {1536, 576}};  // q/k/v, o, gate/up, down
    std::mt19937 rng(1);
    for (int r = 0; r < rounds; ++r) {
        driver::print_round("round");
        for (const auto& shape : shapes) {
            const size_t K = shape[0], N = shape[1], nb = K / QK, bytes = N * nb * BLOCK_BYTES;
            const size_t copies = std::max<size_t>(1, (size_t)(set_mb * 1e6 / bytes));
            std::vector<uint8_t> w(copies * bytes), x8(copies * bytes);
            for (auto& v : w) v = (uint8_t)rng();
            for (size_t i = 0; i < copies * N * nb; ++i) {  // f16 d ~ 2^-8 .. 2^-7, m ~ -(2^-8 .. 2^-7)
                const uint16_t d = 0x1c00 + (rng() & 0x3ff), m = 0x9c00 + (rng() & 0x3ff);
                std::memcpy(&w[i * BLOCK_BYTES], &d, 2);
                std::memcpy(&w[i * BLOCK_BYTES + 2], &m, 2);
            }
            for (size_t c = 0; c < copies; ++c)
                for (size_t n = 0; n < N; n += GROUP) pack_x8(&w[c * bytes], nb, n, &x8[c * bytes + n * nb * BLOCK_BYTES]);
            for (size_t M : ms) {
                std::vector<float> x(M * K), y0(M * N), y(M * N);
                for (auto& v : x) v = (float)(rng() % 2001) / 1000.0f - 1.0f;
                q41_matmul(x.data(), w.data(), y0.data(), M, K, N, Kernel::Avx2);
                // the time_case figure "ns/sb-col" is per 256 weights and column
                driver::time_case("file", K, N, M, threads, seconds, 50, copies, bytes, [&](size_t c) {
                    q41_matmul(x.data(), &w[c * bytes], y.data(), M, K, N, Kernel::Avx2);
                }, y, y0);
                driver::time_case("x8  ", K, N, M, threads, seconds, 50, copies, bytes, [&](size_t c) {
                    q41_x8_matmul(x.data(), &x8[c * bytes], y.data(), M, K, N, Kernel::Avx2);
                }, y, y0);
            }
        }
    }
}
