// apps/encoder/flops.cpp: FLOPs per token and the per-rank peak (see flops.h for the conventions).
#include "apps/encoder/flops.h"

#include <algorithm>
#include <cstdio>
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

MatmulPrecision matmul_precision(const std::string& amp, bool allow_tf32) {
  if (amp == "bf16") return MatmulPrecision::BF16;
  if (amp == "fp16") return MatmulPrecision::F16;
  return allow_tf32 ? MatmulPrecision::TF32 : MatmulPrecision::F32;
}

const char* matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::F32: return "f32";
    case MatmulPrecision::TF32: return "tf32";
    case MatmulPrecision::BF16: return "bf16";
    case MatmulPrecision::F16: return "fp16";
  }
  return "?";
}

double mfu(double tokens_per_s_per_rank, double flops_per_token, double peak_flops) {
  return peak_flops > 0 ? tokens_per_s_per_rank * flops_per_token / peak_flops : 0;
}

namespace {

// Dense peaks in TFLOP/s (NVIDIA quotes tensor-core figures "with sparsity" first: these are the
// dense ones, half of those). f32: the CUDA cores (SIMT FMA); tf32 and bf16/fp16: the tensor cores,
// f32 accumulation (what cuBLASLt and cuDNN use for bf16 training; GeForce cards run fp16
// accumulation twice as fast, which training does not use). 0: no such tensor cores.
struct Tflops {
  double f32, tf32, bf16, fp16;
};
struct GpuPeak {
  const char* key;     // matched against the device name as a whole word ("A10" is not "A100")
  const char* part;    // what the row describes
  Tflops tflops;
  const char* source;  // nullptr: "NVIDIA <key> data sheet"
};
// Parts with one die and clocks share their figures, written once: GH200 and H200 SXM run H100
// SXM5's tensor cores; the two NVL parts are alike (their sparse figures halved).
constexpr Tflops kHopperSxm{66.9, 494.7, 989.4, 989.4};
constexpr Tflops kHopperNvl{60.0, 417.5, 835.5, 835.5};
constexpr const char* kH100Paper = "NVIDIA H100 Tensor Core GPU Architecture whitepaper, table 1";
// Order matters where one key is a word of another part's name: the NVL and PCIe H100/H200 rows
// come before the SXM ones, which match on "H100"/"H200" alone (cudaGetDeviceProperties names the
// SXM5 part "NVIDIA H100 80GB HBM3").
constexpr GpuPeak kGpuPeaks[] = {
    {"GH200", "GH200 (an H100 SXM5-class GPU)", kHopperSxm, "NVIDIA GH200 data sheet; H100 whitepaper table 1"},
    {"H100 NVL", "H100 NVL", kHopperNvl, "NVIDIA H100 NVL data sheet (sparse figures halved)"},
    {"H100 PCIe", "H100 PCIe", {51.2, 378.0, 756.0, 756.0}, kH100Paper},
    {"H200 NVL", "H200 NVL", kHopperNvl, "NVIDIA H200 NVL data sheet (sparse figures halved)"},
    {"H100", "H100 SXM5", kHopperSxm, kH100Paper},
    {"H200", "H200 SXM (H100 SXM5's tensor cores and clocks)", kHopperSxm,
     "NVIDIA H200 data sheet; H100 whitepaper table 1"},
    {"A100", "A100 (SXM4 and PCIe, 40 and 80 GB)", {19.5, 156.0, 312.0, 312.0}, nullptr},
    {"A30", "A30", {10.3, 82.0, 165.0, 165.0}, nullptr},
    {"A10", "A10", {31.2, 62.5, 125.0, 125.0}, nullptr},
    {"L40S", "L40S", {91.6, 183.0, 362.05, 362.05}, nullptr},
    {"L40", "L40", {90.5, 90.5, 181.05, 181.05}, nullptr},
    {"L4", "L4", {30.3, 60.0, 121.0, 121.0}, nullptr},
    {"RTX 4090", "GeForce RTX 4090", {82.6, 82.6, 165.2, 165.2},
     "NVIDIA Ada Lovelace architecture whitepaper, appendix A (f32 accumulation)"},
    {"RTX 3090", "GeForce RTX 3090", {35.6, 35.6, 71.0, 71.0},
     "NVIDIA Ampere GA102 architecture whitepaper, appendix A (f32 accumulation)"},
    // Volta: fp16 tensor cores only; TF32 requests run as f32 there.
    {"V100-SXM2", "V100 SXM2", {15.7, 15.7, 0.0, 125.0}, "NVIDIA V100 data sheet"},
    {"V100-PCIE", "V100 PCIe", {14.0, 14.0, 0.0, 112.0}, "NVIDIA V100 data sheet"},
};

// `key` occurs in `name` followed by the end, a space or a '-' (so "A10" does not match "A100" or
// "A10G", nor "L4" "L40S").
bool names_part(const std::string& name, const std::string& key) {
  for (size_t at = name.find(key); at != std::string::npos; at = name.find(key, at + 1)) {
    const size_t end = at + key.size();
    if (end == name.size() || name[end] == ' ' || name[end] == '-') return true;
  }
  return false;
}

}  // namespace

PeakFlops gpu_peak(const std::string& name, MatmulPrecision p) {
  PeakFlops out;
  for (const GpuPeak& g : kGpuPeaks) {
    if (!names_part(name, g.key)) continue;
    const double tflops = p == MatmulPrecision::F32    ? g.tflops.f32
                          : p == MatmulPrecision::TF32 ? g.tflops.tf32
                          : p == MatmulPrecision::BF16 ? g.tflops.bf16
                                                       : g.tflops.fp16;
    const std::string what = p == MatmulPrecision::F32 ? "f32 (no tensor cores)"
                                                       : std::string(matmul_precision_name(p)) + " tensor cores";
    if (tflops <= 0) {
      out.source = name + ": the " + g.part + " has no " + what + " (pass --peak-tflops)";
      return out;
    }
    out.flops = tflops * 1e12;
    char b[64];
    std::snprintf(b, sizeof b, "%g", tflops);
    out.source = name + ": " + g.part + " dense " + what + " " + b + " TFLOP/s, " +
                 (g.source ? std::string(g.source) : "NVIDIA " + std::string(g.key) + " data sheet");
    return out;
  }
  out.source = name + ": not in the peak table (apps/encoder/flops.cpp): pass --peak-tflops";
  return out;
}

namespace {

PeakFlops device_peak(Device dev, MatmulPrecision p) {
#ifdef TANDEM_WITH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev.index) != cudaSuccess) return {0, "cudaGetDeviceProperties failed"};
  return gpu_peak(prop.name, p);
#else
  (void)dev, (void)p;
  return {};
#endif
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

PeakFlops peak_flops(Device dev, double peak_tflops_flag, int ranks_per_node, MatmulPrecision p) {
  if (peak_tflops_flag > 0) return {peak_tflops_flag * 1e12, "--peak-tflops"};
  return dev.is_cuda() ? device_peak(dev, p) : cpu_peak(ranks_per_node);
}

}  // namespace tandem::apps::encoder
