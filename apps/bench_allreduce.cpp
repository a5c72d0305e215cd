// apps/bench_allreduce.cpp: all-reduce time and bandwidth over message sizes, per backend (and the
// parameter server's push and pull: --collective ps).
//
//   mpiexec -n 4 bench_allreduce --max-bytes 64M --json allreduce.json
//
// For each size (8 B, 16 B, ... doubling up to --max-bytes, 256 MiB by default) and backend
// (MPI on CPU tensors; NCCL on GPU tensors when a GPU is present) it times --reps all-reduces
// (after --warmup untimed ones), each started after a barrier, and reports the median. Bandwidths
// follow nccl-tests (doc/PERFORMANCE.md there):
//   algbw = bytes / time
//   busbw = algbw * 2 (n - 1) / n   - what each link carries in a ring all-reduce, comparable
//                                     across world sizes and with the hardware's link speed.
// Times are averaged over ranks. The table shows why dist/ buckets gradients: small messages are
// latency-bound (tiny busbw); only messages of megabytes approach the link's bandwidth.
// --in-flight K starts K all-reduces of the size at once and waits for all (algbw counts K x bytes):
// the pattern of DDP's reducer where the link is much slower than backward - every bucket is issued
// before the first one ends, and the communication thread runs them back to back, with no barrier
// between (dist/transport/comm_mpi.cpp). Over MPICH/UCX's TCP that ran at a quarter less than one
// all-reduce after a barrier (the 2026-11-28 emulated-link study, emulated_links_4).
// --collective ps times the parameter server's push and pull instead (dist/extras/parameter_server.h
// with one server): a reduce of the bytes to rank 0, then a broadcast from it, each cut into
// --piece-bytes pieces all in flight at once, as the server sends them. Its busbw is 2 (n - 1) bytes
// / time: the server's bytes in and out per second, which the what-if's push-and-pull formula
// (apps/whatif/model.h ps_push_pull_ms) moves at the link's rate. So busbw over the link's payload rate
// is the push and pull's efficiency alone on that link, their host work included
// (Network::ps_efficiency).
// copy_GBps (CPU sweep, in every entry): --copy-bytes copied by Tensor::copy_ on each rank (median
// of --reps, averaged over ranks), before the all-reduces - the memory-copy rate the what-if model
// charges dist/'s own copies at (apps/whatif/model.h, Network::copy_GBps), under the same load.
// 64 MiB by default: past a last-level cache (the 2-core study VM's is 32 MiB; 8 MiB copied at
// 9-21 GB/s there, 32-64 MiB at 4.6-4.8), as a step's copies of a model's gradients stream.
// Ending: under a launcher the job's exit is agreed, so dist::finalize gets the status: should
// MPI_Finalize not return in 10 s (MPICH over UCX's TCP can spin closing its connections) the
// rank exits with it instead of hanging, as the trainers do. An error ends every rank with status 1.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/host_cache.h"
#include "dist/transport/bootstrap.h"
#ifdef TANDEM_WITH_CUDA
#include "core/cuda/context.h"
#endif

using namespace tandem;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The median over `reps` runs (after `warmup` untimed ones) of `run` on `device`'s communicator, each
// started after a barrier and ended when the device is done, in seconds averaged over ranks.
double median_seconds(Device device, int warmup, int reps, const std::function<void()>& run) {
  dist::Communicator& cpu = dist::comm_for(Device::cpu());
  std::vector<double> secs;
  for (int i = 0; i < warmup + reps; ++i) {
    cpu.barrier("bench barrier")->wait();
    auto t0 = std::chrono::steady_clock::now();
    run();
#ifdef TANDEM_WITH_CUDA
    if (device.is_cuda()) cuda::synchronize();  // wait() only ordered the compute stream
#endif
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) secs.push_back(s);
  }
  Tensor m = Tensor::from_vector({static_cast<float>(median(secs))}, {1});
  cpu.all_reduce(m, dist::ReduceOp::Avg, "bench average")->wait();
  return m.item();
}

void wait_all(std::vector<dist::WorkPtr>& works) {
  for (dist::WorkPtr& w : works) w->wait();
  works.clear();
}

// Median seconds of `in_flight` all-reduces of `bytes` bytes of `dtype` on `device`, all started at
// once and then waited for (1: one at a time), averaged over ranks.
double time_allreduce(Device device, DType dtype, size_t bytes, int warmup, int reps, int in_flight) {
  dist::Communicator& comm = dist::comm_for(device);
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(bytes / dtype_size(dtype)));
  std::vector<Tensor> t;
  for (int k = 0; k < in_flight; ++k) t.push_back(Tensor::ones({n}, dtype, device));
  return median_seconds(device, warmup, reps, [&] {
    std::vector<dist::WorkPtr> works;
    for (Tensor& x : t) works.push_back(comm.all_reduce(x, dist::ReduceOp::Sum, "bench allreduce"));
    wait_all(works);
  });
}

// Median seconds of the parameter server's push and pull of `bytes` bytes with one server (rank 0):
// the reduce of every piece, all in flight, then the broadcast of every piece, averaged over ranks.
double time_push_pull(Device device, DType dtype, size_t bytes, size_t piece_bytes, int warmup, int reps) {
  dist::Communicator& comm = dist::comm_for(device);
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(bytes / dtype_size(dtype)));
  const int64_t piece = std::max<int64_t>(1, static_cast<int64_t>(piece_bytes / dtype_size(dtype)));
  Tensor t = Tensor::ones({n}, dtype, device);
  std::vector<Tensor> views;
  for (int64_t a = 0; a < n; a += piece) views.push_back(t.slice(a, std::min(n, a + piece)));
  return median_seconds(device, warmup, reps, [&] {
    std::vector<dist::WorkPtr> works;
    for (Tensor& v : views) works.push_back(comm.reduce(v, 0, dist::ReduceOp::Sum, "bench push"));
    wait_all(works);
    for (Tensor& v : views) works.push_back(comm.broadcast(v, 0, "bench pull"));
    wait_all(works);
  });
}

// Median seconds of one Tensor::copy_ of `bytes` bytes on the CPU, averaged over ranks.
double time_copy(DType dtype, size_t bytes, int warmup, int reps) {
  dist::Communicator& cpu = dist::comm_for(Device::cpu());
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(bytes / dtype_size(dtype)));
  Tensor src = Tensor::ones({n}, dtype, Device::cpu()), dst = Tensor::zeros({n}, dtype, Device::cpu());
  std::vector<double> secs;
  for (int i = 0; i < warmup + reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    dst.copy_(src);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) secs.push_back(s);
  }
  Tensor m = Tensor::from_vector({static_cast<float>(median(secs))}, {1});
  cpu.all_reduce(m, dist::ReduceOp::Avg, "bench copy average")->wait();
  return m.item();
}

size_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  if (unit == "K" || unit == "KiB") v *= 1024;
  else if (unit == "M" || unit == "MiB") v *= 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") v *= 1024.0 * 1024 * 1024;
  else TANDEM_CHECK(unit.empty() || unit == "B", "unknown size unit '", unit, "': use B, K, M or G (powers of 1024)");
  return static_cast<size_t>(v);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"All-reduce time, algbw and busbw over message sizes (MPI on CPU, NCCL on GPU)"};
  std::string max_bytes = "256M", min_bytes = "8", backend = "all", dtype_name = "f32", json_path;
  int warmup = 3, reps = 11, in_flight = 1;
  std::string copy_bytes = "64M", collective = "allreduce", piece_bytes = "16M";
  app.add_option("--min-bytes", min_bytes, "smallest message (B, K, M, G)")->capture_default_str();
  app.add_option("--max-bytes", max_bytes, "largest message; small values keep CI runs quick")->capture_default_str();
  app.add_option("--backend", backend, "mpi, nccl or all")->check(CLI::IsMember({"mpi", "nccl", "all"}))->capture_default_str();
  app.add_option("--dtype", dtype_name, "f32, f16 or bf16")->check(CLI::IsMember({"f32", "f16", "bf16"}))->capture_default_str();
  app.add_option("--warmup", warmup, "untimed all-reduces per size")->capture_default_str();
  app.add_option("--reps", reps, "timed all-reduces per size (the median is reported)")->capture_default_str();
  app.add_option("--copy-bytes", copy_bytes, "CPU: bytes of the memory-copy rate's copy (copy_GBps)")->capture_default_str();
  app.add_option("--in-flight", in_flight, "all-reduces of each size started at once (DDP's buckets)")
      ->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--collective", collective, "allreduce, or ps: the parameter server's push (reduce to rank 0) "
                 "and pull (broadcast from it)")->check(CLI::IsMember({"allreduce", "ps"}))->capture_default_str();
  app.add_option("--piece-bytes", piece_bytes, "ps: the pieces the push and pull are cut into (PsOptions::piece_bytes)")
      ->capture_default_str();
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);

  host_cache::keep_freed_heap();  // as the trainers run (core/host_cache.h)
  const dist::World& w = dist::init();
  try {
    const DType dtype = dtype_from_name(dtype_name);
    std::vector<std::pair<std::string, Device>> backends;
    if (backend != "nccl") backends.emplace_back("mpi/cpu", Device::cpu());
    if (backend != "mpi") {
      if (w.device.is_cuda()) backends.emplace_back(std::string(dist::comm_for(w.device).backend()) + "/gpu", w.device);
      else if (w.rank == 0) std::printf("# no GPU: skipping the NCCL sweep\n");
    }
    nlohmann::json results = nlohmann::json::array();
    const bool ps = collective == "ps";
    TANDEM_CHECK(!ps || in_flight == 1, "bench_allreduce: --in-flight is for all-reduces; --collective ps sends its "
                 "pieces in flight already (--piece-bytes)");
    const double bus_factor = ps ? 2.0 * (w.size - 1) : 2.0 * (w.size - 1) / w.size;
    double copy = 0;  // GB/s; measured once, for the CPU sweep's entries
    if (backend != "nccl") copy = parse_bytes(copy_bytes) / time_copy(dtype, parse_bytes(copy_bytes), warmup, reps) / 1e9;
    for (auto& [name, device] : backends) {
      if (w.rank == 0)
        std::printf("# %s, %d ranks, %s, %s\n%12s %12s %12s %12s %12s %12s\n", name.c_str(), w.size, dtype_name.c_str(),
                    ps ? "the parameter server's push and pull (busbw: 2 (n - 1) bytes / time)" : "all-reduce",
                    "bytes", "elements", "time_us", "algbw_GB/s", "busbw_GB/s", "copy_GB/s");
      for (size_t bytes = parse_bytes(min_bytes); bytes <= parse_bytes(max_bytes); bytes *= 2) {
        double s = ps ? time_push_pull(device, dtype, bytes, parse_bytes(piece_bytes), warmup, reps)
                      : time_allreduce(device, dtype, bytes, warmup, reps, in_flight);
        double algbw = static_cast<double>(bytes) * in_flight / s / 1e9;
        nlohmann::json e{{"backend", name}, {"ranks", w.size}, {"dtype", dtype_name}, {"bytes", bytes},
                         {"in_flight", in_flight}, {"collective", collective}, {"time_us", s * 1e6}, {"algbw_GBps", algbw},
                         {"busbw_GBps", algbw * bus_factor}};
        if (device.is_cpu()) e["copy_GBps"] = copy, e["copy_bytes"] = parse_bytes(copy_bytes);
        if (w.rank == 0) {
          std::printf("%12zu %12zu %12.1f %12.3f %12.3f %12.3f\n", bytes, bytes / dtype_size(dtype), s * 1e6, algbw,
                      algbw * bus_factor, device.is_cpu() ? copy : 0.0);
          std::fflush(stdout);
        }
        results.push_back(e);
      }
    }
    if (w.rank == 0 && !json_path.empty()) {
      std::ofstream f(json_path);
      TANDEM_CHECK(f.good(), "cannot write ", json_path);
      f << results.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    dist::finalize(1);
    return 1;
  }
  dist::finalize(0);  // with a deadline under a launcher (see the top of this file)
  return 0;
}
