// Fused CPU batch_norm_add_relu / batch_norm_relu against the composition, forward + backward, at
// ResNet-18 64 px batch 32's BN shapes, alternated within one process; thread CPU time per call.
#include <time.h>
#include <algorithm>
#include <cstdio>
#include <vector>
#include "core/ops/ops.h"
#include "core/random.h"
#include "core/threads.h"
using namespace tandem;
static double cpu_ms() { timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }
static double wall_ms() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }
int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  set_cpu_threads(CpuThreads{threads, 2, "bench"});
  Generator g(1);
  struct Shape4 { int64_t n, h, w, c; };
  std::vector<Shape4> shapes = {{32, 16, 16, 64}, {32, 8, 8, 128}, {32, 4, 4, 256}, {32, 2, 2, 512}};
  for (bool add : {false, true}) for (auto s : shapes) {
    Shape sh{s.n, s.h, s.w, s.c};
    Tensor x0 = randn(sh, g), z0 = randn(sh, g), dy = randn(sh, g);
    Tensor w = Tensor::ones({s.c}).set_requires_grad(true), b = Tensor::zeros({s.c}).set_requires_grad(true);
    Tensor rm = Tensor::zeros({s.c}), rv = Tensor::ones({s.c});
    std::vector<double> t[2], tw[2];
    for (int rep = 0; rep < 60; ++rep)
      for (int fused = 0; fused < 2; ++fused) {
        Tensor x = x0.detach().set_requires_grad(true), z = z0.detach().set_requires_grad(true);
        double c0 = cpu_ms(), w0 = wall_ms();
        Tensor y;
        if (fused) y = add ? ops::batch_norm_add_relu(x, z, w, b, rm, rv, true) : ops::batch_norm_relu(x, w, b, rm, rv, true);
        else { y = ops::batch_norm(x, w, b, rm, rv, true); if (add) y = ops::add(y, z); ops::relu_(y); }
        y.backward(dy);
        t[fused].push_back(cpu_ms() - c0); tw[fused].push_back(wall_ms() - w0);
      }
    for (int f = 0; f < 2; ++f) { std::sort(t[f].begin(), t[f].end()); std::sort(tw[f].begin(), tw[f].end()); }
    printf("%s [%ld,%ld,%ld,%ld] t%d: composed %.3f ms cpu (%.3f wall), fused %.3f ms cpu (%.3f wall): %.2fx cpu, %.2fx wall\n",
           add ? "add_relu" : "relu    ", s.n, s.h, s.w, s.c, threads, t[0][30], tw[0][30], t[1][30], tw[1][30],
           t[0][30] / t[1][30], tw[0][30] / tw[1][30]);
  }
}
