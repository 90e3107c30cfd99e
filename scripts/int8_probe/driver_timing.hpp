// The feasibility drivers' timing (q4k_x8_driver.cpp, q6k_x8_driver.cpp): one case timed from memory and printed.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

namespace driver {

inline double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "# <what> load a b c": the round's header with /proc/loadavg
inline void print_round(const char* what) {
    double load[3] = {0, 0, 0};
    if (FILE* f = fopen("/proc/loadavg", "r")) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(f);
    }
    printf("# %s load %.2f %.2f %.2f\n", what, load[0], load[1], load[2]);
}

// Calls call(copy) for `seconds` (and at least min_calls times), copy cycling over `copies` copies of the weights
// (each `bytes` long on the file's layout, N columns of nsb super-blocks), then call(0) once more so that y holds
// copy 0's output; prints the per-call median and 10th percentile (ms, GB/s on `bytes`, ns per super-block and
// column) and max|y - y0| / max|y0|.
template <class Call>
void time_case(const char* name, size_t K, size_t N, size_t M, int threads, double seconds, size_t min_calls,
               size_t copies, size_t bytes, Call call, const std::vector<float>& y, const std::vector<float>& y0) {
    const size_t nsb = K / 256;
    std::vector<double> ts;
    size_t calls = 0;
    const double t0 = now();
    while (now() - t0 < seconds || calls < min_calls) {
        const double t = now();
        call(calls % copies);
        ts.push_back(now() - t);
        ++calls;
    }
    call(0);
    std::sort(ts.begin(), ts.end());
    const double med = ts[ts.size() / 2], p10 = ts[ts.size() / 10];
    double err = 0, ref = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        err = std::max(err, (double)std::fabs(y[i] - y0[i]));
        ref = std::max(ref, (double)std::fabs(y0[i]));
    }
    printf("%s K=%zu N=%zu M=%zu thr=%d: median %.4f ms p10 %.4f ms | GB/s med %.1f p10 %.1f | "
           "ns/sb-col med %.2f p10 %.2f | max|y-y_a|/max|y_a| %.1e\n",
           name, K, N, M, threads, med * 1e3, p10 * 1e3, bytes / med / 1e9, bytes / p10 / 1e9, med * 1e9 / (N * nsb),
           p10 * 1e9 / (N * nsb), err / ref);
    fflush(stdout);
}

}  // namespace driver
