// apps/bench_ops_cpu_gemm.h: bench_ops' CPU GEMM library rows (included by apps/bench_ops.cpp only).
//
// Every GEMM shape one training step of the CPU peer's rows runs (apps/scripts/cpu_peer.py):
// bert_small at seq 128, batch 8 (1,024 tokens, hidden 512, FFN 2,048, 8 heads of 64, the MLM head on
// the ~15 % masked rows, 152 of them, and its tied 30,522-word decoder), ResNet-18's FC at batch 32 and
// VGG-16's classifier at batch 16; each linear's forward (x w^T: NT), input gradient (dy w: NN) and
// weight gradient (dy^T x: TN), and attention's batched GEMMs (8 x 8 = 64 heads), in the row-major
// layouts and transposes tandem's matmul passes (core/ops/matmul/matmul.cpp), f32, timed three or four
// ways, interleaved (one call of each per repetition), medians reported:
//   openblas  cblas_sgemm, one call per batch entry: what core/ops/matmul/cpu.cpp runs;
//   dnnl_sgemm oneDNN's BLAS-like entry point (row-major), one call per batch entry;
//   matmul    oneDNN's matmul primitive on tandem's strided layouts, built once (a cached primitive),
//             one call for the whole batch;
//   packed    the matmul primitive with B in oneDNN's own layout (format any), reordered once before
//             timing: the ceiling of a packed-weight path (a training step would pay the reorder every
//             step, since the weights change). Unbatched rows only.
// `count` is how many times one step runs the shape; the per-model totals weigh each row by it, the
// figure that decides a library choice (the time a step spends in GEMMs).
#pragma once
#include <cblas.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "apps/bench_ops_cpu_timing.h"  // defines: interleaved_median_ms, DirectPrimitive

#if TANDEM_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tandem::cpu_bench {

struct CpuGemmShape {
  const char* model;
  std::string name;
  int count;  // per training step
  bool ta, tb;
  int64_t batch, m, n, k;
};

// bert_small (layers/models/bert.cpp: L4 H512 A8, FFN 4H) at seq 128 x batch 8; masked rows: 15 % of
// the 126 predictable positions per sequence (data/text_dataset.h), 19 x 8.
inline std::vector<CpuGemmShape> cpu_gemm_shapes() {
  constexpr int64_t T = 1024, H = 512, F = 2048, V = 30522, Mk = 152, L = 4, BH = 64, S = 128, D = 64;
  std::vector<CpuGemmShape> s;
  auto linear = [&](const char* model, const char* name, int count, int64_t m, int64_t out, int64_t in) {
    const std::string n = name;
    s.push_back({model, n + " fwd", count, false, true, 1, m, out, in});
    s.push_back({model, n + " dx", count, false, false, 1, m, in, out});
    s.push_back({model, n + " dw", count, true, false, 1, out, in, m});
  };
  linear("bert_small", "QKV", L, T, 3 * H, H);
  linear("bert_small", "attn-out", L, T, H, H);
  linear("bert_small", "FFN1", L, T, F, H);
  linear("bert_small", "FFN2", L, T, H, F);
  // scores = q k^T, out = p v; backward: dq = ds k, dk = ds^T q, dp = dout v^T, dv = p^T dout
  s.push_back({"bert_small", "attn q k^T", L, false, true, BH, S, S, D});
  s.push_back({"bert_small", "attn p v", L, false, false, BH, S, D, S});
  s.push_back({"bert_small", "attn dq", L, false, false, BH, S, D, S});
  s.push_back({"bert_small", "attn dk", L, true, false, BH, S, D, S});
  s.push_back({"bert_small", "attn dp", L, false, true, BH, S, S, D});
  s.push_back({"bert_small", "attn dv", L, true, false, BH, S, D, S});
  linear("bert_small", "MLM transform", 1, Mk, H, H);
  linear("bert_small", "MLM decoder", 1, Mk, V, H);
  linear("resnet18", "FC", 1, 32, 1000, 512);
  linear("vgg16", "FC1", 1, 16, 4096, 512 * 7 * 7);
  linear("vgg16", "FC2", 1, 16, 4096, 4096);
  linear("vgg16", "FC3", 1, 16, 1000, 4096);
  return s;
}

#if TANDEM_HAVE_ONEDNN
// oneDNN's matmul primitive for one shape: A, B, C as tandem stores them (strides express the
// transposes), built once; `packed_b` leaves B's layout to oneDNN and reorders it once.
class DirectMatmul : public DirectPrimitive {
 public:
  DirectMatmul(const CpuGemmShape& s, const float* a, const float* b, float* c, bool packed_b) {
    using md = dnnl::memory::desc;
    const auto f32 = dnnl::memory::data_type::f32;
    const int64_t M = s.m, N = s.n, K = s.k, B = s.batch;
    // op(A) [M, K]: stored [M, K] (strides K, 1) or [K, M] (strides 1, M); likewise op(B) [K, N].
    md a_md({B, M, K}, f32, {M * K, s.ta ? 1 : K, s.ta ? M : 1});
    md b_user({B, K, N}, f32, {K * N, s.tb ? 1 : N, s.tb ? K : 1});
    md c_md({B, M, N}, f32, {M * N, N, 1});
    md b_md = packed_b ? md({B, K, N}, f32, dnnl::memory::format_tag::any) : b_user;
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng_);
    prim_ = dnnl::matmul(pd);
    dnnl::memory bm(b_user, eng_, const_cast<float*>(b));
    if (packed_b && pd.weights_desc() != b_user) {
      dnnl::memory packed(pd.weights_desc(), eng_);
      dnnl::reorder(bm, packed).execute(stream_, bm, packed);
      stream_.wait();
      bm = packed;
    }
    args_ = {{DNNL_ARG_SRC, dnnl::memory(a_md, eng_, const_cast<float*>(a))},
             {DNNL_ARG_WEIGHTS, bm},
             {DNNL_ARG_DST, dnnl::memory(c_md, eng_, c)}};
  }
};
#endif

// `models`: run the rows of these models (comma-separated names, "all": every row).
inline void cpu_gemm_part(int reps, bool process_cpu, const std::string& models, nlohmann::json& rows) {
  std::printf("\nCPU GEMM libraries, f32, per step of the peer rows (ms, median of %d interleaved; %s clock)\n"
              "  model       GEMM                  ta tb batch     m     n     k  count   openblas  dnnl_sgemm"
              "     matmul     packed\n",
              reps, process_cpu ? "process CPU" : "wall");
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<double>> total;  // model -> per-library sum of count x ms
  for (const CpuGemmShape& s : cpu_gemm_shapes()) {
    if (models != "all" && ("," + models + ",").find("," + std::string(s.model) + ",") == std::string::npos) continue;
    const int64_t sa = s.m * s.k, sb = s.k * s.n, sc = s.m * s.n;
    std::vector<float> a(s.batch * sa), b(s.batch * sb), c(s.batch * sc);
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * static_cast<float>(i % 97);
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.001f * static_cast<float>(i % 89);
    const int lda = static_cast<int>(s.ta ? s.m : s.k), ldb = static_cast<int>(s.tb ? s.k : s.n);
    auto blas = [&] {
      for (int64_t i = 0; i < s.batch; ++i)
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n,
                    s.k, 1.0f, a.data() + i * sa, lda, b.data() + i * sb, ldb, 0.0f, c.data() + i * sc, s.n);
    };
    std::vector<double> ms;
#if TANDEM_HAVE_ONEDNN
    auto sgemm = [&] {
      for (int64_t i = 0; i < s.batch; ++i)
        dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a.data() + i * sa, lda,
                   b.data() + i * sb, ldb, 0.0f, c.data() + i * sc, s.n);
    };
    DirectMatmul mm(s, a.data(), b.data(), c.data(), false);
    if (s.batch == 1) {
      DirectMatmul packed(s, a.data(), b.data(), c.data(), true);
      ms = interleaved_median_ms(reps, process_cpu, blas, sgemm, [&] { mm.run(); }, [&] { packed.run(); });
    } else {
      ms = interleaved_median_ms(reps, process_cpu, blas, sgemm, [&] { mm.run(); });
      ms.push_back(0);
    }
#else
    ms = interleaved_median_ms(reps, process_cpu, blas);
    ms.resize(4, 0.0);
#endif
    std::printf("  %-11s %-21s  %c  %c %5lld %5lld %5lld %5lld %6d %10.3f %11.3f %10.3f %10.3f\n", s.model, s.name.c_str(),
                s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', (long long)s.batch, (long long)s.m, (long long)s.n,
                (long long)s.k, s.count, ms[0], ms[1], ms[2], ms[3]);
    auto& t = total[s.model];
    if (t.empty()) order.push_back(s.model), t.assign(4, 0.0);
    for (int i = 0; i < 4; ++i) t[i] += s.count * (ms[i] > 0 ? ms[i] : ms[0]);  // packed: batched rows count as openblas
    rows.push_back({{"part", "cpu_gemm_lib"}, {"model", s.model}, {"name", s.name}, {"ta", s.ta}, {"tb", s.tb},
                    {"batch", s.batch}, {"m", s.m}, {"n", s.n}, {"k", s.k}, {"count", s.count},
                    {"openblas_ms", ms[0]}, {"dnnl_sgemm_ms", ms[1]}, {"matmul_ms", ms[2]}, {"packed_ms", ms[3]}});
  }
  std::printf("  per step (sum of count x median, ms):\n");
  for (const std::string& m : order) {
    const auto& t = total[m];
    std::printf("  %-11s openblas %9.1f   dnnl_sgemm %9.1f (%.2fx)   matmul %9.1f (%.2fx)   packed %9.1f (%.2fx)\n",
                m.c_str(), t[0], t[1], t[0] / t[1], t[2], t[0] / t[2], t[3], t[0] / t[3]);
    rows.push_back({{"part", "cpu_gemm_lib_total"}, {"model", m}, {"openblas_ms", t[0]}, {"dnnl_sgemm_ms", t[1]},
                    {"matmul_ms", t[2]}, {"packed_ms", t[3]}});
  }
}

}  // namespace tandem::cpu_bench
