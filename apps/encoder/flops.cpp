// apps/encoder/flops.cpp: FLOPs per token and the per-rank peak (see flops.h for the conventions).
#include "apps/encoder/flops.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tandem::apps::encoder {

double train_flops_per_token(const BertConfig& cfg, int64_t parameters, int64_t seq_len) {
  return 6.0 * static_cast<double>(parameters) +
         12.0 * static_cast<double>(cfg.num_hidden_layers * cfg.hidden_size * seq_len);
}

namespace {

// Dense f32 (no tensor cores) peaks in TFLOP/s from NVIDIA's data sheets (SXM parts).
PeakFlops gpu_peak(Device dev) {
  PeakFlops p;
#ifdef TANDEM_WITH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev.index) != cudaSuccess) return p;
  const std::string name = prop.name;
  struct Known { const char* key; double tflops; };
  for (Known k : {Known{"H200", 66.9}, Known{"H100", 66.9}, Known{"A100", 19.5}, Known{"L40S", 91.6},
                  Known{"V100", 15.7}}) {
    if (name.find(k.key) != std::string::npos) {
      p.flops = k.tflops * 1e12;
      p.source = name + " f32 data sheet";
      return p;
    }
  }
  p.source = name + ": unknown peak (pass --peak-tflops)";
#else
  (void)dev;
#endif
  return p;
}

PeakFlops cpu_peak(int ranks_per_node) {
  PeakFlops p;
  std::ifstream in("/proc/cpuinfo");
  double mhz = 0;
  int family = 0;
  std::string flags, vendor;
  auto value = [](const std::string& line) { return line.substr(line.find(':') + 1); };
  for (std::string line; std::getline(in, line);) {
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) mhz = std::atof(value(line).c_str());
    if (family == 0 && line.rfind("cpu family", 0) == 0) family = std::atoi(value(line).c_str());
    if (vendor.empty() && line.rfind("vendor_id", 0) == 0) vendor = value(line);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line + " ";
  }
  if (mhz <= 0) return p;
  const bool avx512 = flags.find(" avx512f ") != std::string::npos;
  // AMD Zen 4 (family 25) runs AVX-512 on 256-bit units: no more FLOPs per cycle than AVX2.
  const bool half_width_avx512 = vendor.find("AMD") != std::string::npos && family <= 25;
  const bool avx2_fma = flags.find(" avx2 ") != std::string::npos && flags.find(" fma ") != std::string::npos;
  const double per_cycle = avx512 && !half_width_avx512 ? 64 : (avx512 || avx2_fma) ? 32 : 8;
  int threads = 0;
  if (const char* t = std::getenv("OPENBLAS_NUM_THREADS")) threads = std::atoi(t);
  if (threads <= 0)
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, ranks_per_node));
  p.flops = mhz * 1e6 * per_cycle * threads;
  p.source = "cpu estimate: " + std::to_string(static_cast<int>(mhz)) + " MHz x " +
             std::to_string(static_cast<int>(per_cycle)) + " f32 FLOP/cycle x " + std::to_string(threads) +
             " thread(s)";
  return p;
}

}  // namespace

PeakFlops peak_flops(Device dev, double peak_tflops_flag, int ranks_per_node) {
  if (peak_tflops_flag > 0) return {peak_tflops_flag * 1e12, "--peak-tflops"};
  return dev.is_cuda() ? gpu_peak(dev) : cpu_peak(ranks_per_node);
}

}  // namespace tandem::apps::encoder
