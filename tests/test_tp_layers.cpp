// tests/test_tp_layers.cpp: tensor parallelism's pieces (dist/tp/), ranks as threads, in f64.
//
// Each piece against the unsplit computation it replaces, on 1 to 4 ranks:
//   - the grid's coordinates and groups;
//   - the f/g operators and the last-dim gather/scatter, forward and backward, in closed form;
//   - ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding: output, input gradient and
//     the shards of the parameter gradients equal the unsplit layer's (Linear, Embedding) to 1e-12;
//     their own init is the shard of the unsplit layer's init from the same seed, bit for bit;
//   - vocab_parallel_cross_entropy equals ops::cross_entropy on the whole logits (ignore_index
//     rows too, an uneven vocabulary split), and passes a finite-difference check on 1 and 2 ranks;
//   - ops::embedding_shard's gradient check.
// f64 on the CPU: the sums differ only in order (1e-12 covers it); a wrong shard, a missing or
// doubled all-reduce is off by O(1).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/ops/ops.h"
#include "dist/tp/cross_entropy.h"
#include "dist/tp/grid.h"
#include "dist/tp/layers.h"
#include "dist/tp/mappings.h"
#include "dist/tp/shard.h"
#include "dist/transport/comm_thread.h"
#include "layers/layers.h"
#include "checkpoint/state_dict.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::dist::tp;
using testing::gradcheck;
using testing::rand_f64;

namespace {

double max_abs(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}
std::vector<double> vals(const Tensor& t) { return t.to_vector_f64(); }

// Rank r's slice of `full` along `dim` (0 or 1), the way a TP layer holds it.
Tensor shard(const Tensor& full, int dim, ShardRange r) {
  Shape s = full.shape();
  const int64_t rows = full.size(0), cols = full.numel() / rows;
  std::vector<double> v = full.to_vector_f64(), out;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (dim == 0 ? (i >= r.start && i < r.start + r.size) : (j >= r.start && j < r.start + r.size))
        out.push_back(v[i * cols + j]);
  s[dim] = r.size;
  return Tensor::from_vector_f64(out, s, full.dtype());
}

Tensor f64(Tensor t) { return t.to(DType::F64); }

// What a TP linear layer is compared with: Linear(in, out) in f64, its output yref for
// xr = rand_f64({3, in}, x_seed) and its gradients of sum(yref * G), G = rand_f64({3, out}, x_seed + 1).
struct LinearReference {
  Linear& lin;
  Tensor xr, G, yref;
};

// For 1, 2 and 4 ranks and both values of the layer's option `flag`: the reference drawn from `seed`,
// and `body` given a generator of the same seed to draw the TP layer from (its init must then be the
// shard of Linear's).
void against_linear(int64_t in, int64_t out, uint64_t seed, uint64_t x_seed,
                    const std::function<void(Communicator&, bool flag, Generator& g, const LinearReference&)>& body) {
  for (int n : {1, 2, 4}) {
    for (bool flag : {false, true}) {
      CAPTURE(n);
      CAPTURE(flag);
      run_ranks(n, [&](Communicator& c) {
        Generator g_ref(seed), g(seed);
        Linear ref(in, out, true, &g_ref);
        ref.to(DType::F64);
        Tensor xr = rand_f64({3, in}, x_seed), G = rand_f64({3, out}, x_seed + 1, -1, 1, false);
        Tensor yref = ref.forward(xr);
        ops::sum(ops::mul(yref, G)).backward();
        body(c, flag, g, LinearReference{ref, xr, G, yref});
      });
    }
  }
}

}  // namespace

TEST_CASE("grid: TP innermost - TP groups are adjacent ranks, DP groups stride by T") {
  CHECK(grid_coords(5, 2).tp_rank == 1);
  CHECK(grid_coords(5, 2).dp_rank == 2);
  CHECK(grid_coords(3, 4).tp_rank == 3);
  CHECK(grid_coords(3, 4).dp_rank == 0);
  for (int tp : {1, 2, 4}) {
    CAPTURE(tp);
    run_ranks(4, [tp](Communicator& world) {
      Grid g(world, tp);
      CHECK(g.tp_size() == tp);
      CHECK(g.dp_size() == 4 / tp);
      CHECK(g.tp_rank() == world.rank() % tp);
      CHECK(g.dp_rank() == world.rank() / tp);
      // Who is in my groups: gather world ranks over each.
      Tensor me = Tensor::full({1}, world.rank(), DType::I64);
      Tensor tps = Tensor::empty({tp}, DType::I64), dps = Tensor::empty({4 / tp}, DType::I64);
      g.tp().all_gather(me, tps)->wait();
      g.dp().all_gather(me, dps)->wait();
      for (int t = 0; t < tp; ++t) CHECK(tps.to_vector_i64()[t] == g.dp_rank() * tp + t);
      for (int d = 0; d < 4 / tp; ++d) CHECK(dps.to_vector_i64()[d] == d * tp + g.tp_rank());
    });
  }
  run_ranks(3, [](Communicator& world) {
    CHECK_THROWS_WITH_AS(Grid(world, 2), doctest::Contains("must divide the world size 3"), Error);
  });
}

TEST_CASE("f, g, gather and scatter: forward and backward in closed form") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    run_ranks(n, [n](Communicator& c) {
      const int r = c.rank();
      // f: identity forward; backward sums every rank's gradient. Rank r weights y by (r + 1).
      Tensor x = rand_f64({2, 3}, 11);
      Tensor y = copy_to_tp_region(x, c);
      CHECK(max_abs(vals(y), vals(x)) == 0);
      ops::sum(ops::scale(y, float(r + 1))).backward();
      for (double g : vals(x.grad())) CHECK(g == doctest::Approx(n * (n + 1) / 2.0));
      // g: all-reduce forward; identity backward.
      Tensor a = Tensor::full({2, 3}, r + 1, DType::F64).set_requires_grad(true);
      Tensor s = reduce_from_tp_region(ops::mul(a, Tensor::full({2, 3}, 1.0, DType::F64)), c);
      for (double v : vals(s)) CHECK(v == n * (n + 1) / 2.0);
      ops::sum(ops::scale(s, 3.0f)).backward();
      for (double g : vals(a.grad())) CHECK(g == 3.0);
      // gather: rank t's columns land at [2t, 2t + 2); backward keeps this rank's columns.
      Tensor p = Tensor::full({3, 2}, r, DType::F64).set_requires_grad(true);
      Tensor whole = gather_from_tp_region(p, c);
      REQUIRE(whole.shape() == Shape{3, 2 * n});
      std::vector<double> w = vals(whole);
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 2 * n; ++j) CHECK(w[i * 2 * n + j] == j / 2);
      Tensor G = rand_f64({3, 2 * n}, 21, -1, 1, false);
      ops::sum(ops::mul(whole, G)).backward();
      CHECK(max_abs(vals(p.grad()), vals(shard(G, 1, {2 * r, 2}))) == 0);
      // scatter: this rank's columns forward; backward gathers every rank's gradient.
      Tensor q = rand_f64({3, 2 * n}, 31);
      Tensor mine = scatter_to_tp_region(q, c);
      CHECK(max_abs(vals(mine), vals(shard(q, 1, {2 * r, 2}))) == 0);
      ops::sum(ops::scale(mine, float(r + 1))).backward();
      std::vector<double> gq = vals(q.grad());
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 2 * n; ++j) CHECK(gq[i * 2 * n + j] == j / 2 + 1);
    });
  }
}

TEST_CASE("ColumnParallelLinear == Linear: output, input gradient, weight and bias gradient shards") {
  against_linear(5, 8, 5, 41, [](Communicator& c, bool gather, Generator& g, const LinearReference& ref) {
    ColumnParallelLinear tp(5, 8, c, {true, gather}, &g);
    // Its own init is the shard of Linear's, drawn from the same seed.
    CHECK(max_abs(vals(f64(tp.weight())), vals(shard(ref.lin.weight(), 0, tp.rows()))) == 0);
    CHECK(max_abs(vals(f64(tp.bias())), vals(shard(ref.lin.bias(), 0, tp.rows()))) == 0);
    tp.to(DType::F64);
    Tensor x = rand_f64({3, 5}, 41);
    Tensor y = tp.forward(x);
    if (gather) {
      CHECK(max_abs(vals(y), vals(ref.yref)) < 1e-12);
      ops::sum(ops::mul(y, ref.G)).backward();
    } else {
      CHECK(max_abs(vals(y), vals(shard(ref.yref, 1, tp.rows()))) < 1e-12);
      ops::sum(ops::mul(y, shard(ref.G, 1, tp.rows()))).backward();
    }
    CHECK(max_abs(vals(x.grad()), vals(ref.xr.grad())) < 1e-12);  // f summed the slices' contributions
    CHECK(max_abs(vals(tp.weight().grad()), vals(shard(ref.lin.weight().grad(), 0, tp.rows()))) < 1e-12);
    CHECK(max_abs(vals(tp.bias().grad()), vals(shard(ref.lin.bias().grad(), 0, tp.rows()))) < 1e-12);
  });
}

TEST_CASE("RowParallelLinear == Linear: the partial sums all-reduced, the bias added once") {
  against_linear(8, 5, 6, 51, [](Communicator& c, bool parallel_in, Generator& g, const LinearReference& ref) {
    RowParallelLinear tp(8, 5, c, {true, parallel_in}, &g);
    CHECK(max_abs(vals(f64(tp.weight())), vals(shard(ref.lin.weight(), 1, tp.columns()))) == 0);
    CHECK(max_abs(vals(f64(tp.bias())), vals(ref.lin.bias())) == 0);
    tp.to(DType::F64);
    Tensor x = parallel_in ? shard(rand_f64({3, 8}, 51, -1, 1, false), 1, tp.columns()).set_requires_grad(true)
                           : rand_f64({3, 8}, 51);
    Tensor y = tp.forward(x);
    CHECK(max_abs(vals(y), vals(ref.yref)) < 1e-12);
    ops::sum(ops::mul(y, ref.G)).backward();
    const std::vector<double> want_dx = parallel_in ? vals(shard(ref.xr.grad(), 1, tp.columns())) : vals(ref.xr.grad());
    CHECK(max_abs(vals(x.grad()), want_dx) < 1e-12);
    CHECK(max_abs(vals(tp.weight().grad()), vals(shard(ref.lin.weight().grad(), 1, tp.columns()))) < 1e-12);
    CHECK(max_abs(vals(tp.bias().grad()), vals(ref.lin.bias().grad())) < 1e-12);  // whole, on every rank
  });
}

TEST_CASE("VocabParallelEmbedding == Embedding, with an uneven vocabulary split") {
  CHECK(vocab_shard(11, 0, 4).start == 0);
  CHECK(vocab_shard(11, 0, 4).size == 3);
  CHECK(vocab_shard(11, 3, 4).start == 9);
  CHECK(vocab_shard(11, 3, 4).size == 2);
  CHECK_THROWS_WITH_AS(even_shard(10, 0, 4, "num_attention_heads"), doctest::Contains("num_attention_heads (10)"),
                       Error);
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    run_ranks(n, [](Communicator& c) {
      Generator g1(7), g2(7);
      Embedding ref(11, 3, &g1);
      VocabParallelEmbedding tp(11, 3, c, &g2);
      CHECK(max_abs(vals(f64(tp.weight())), vals(shard(f64(ref.weight()), 0, tp.rows()))) == 0);
      ref.to(DType::F64);
      tp.to(DType::F64);
      Tensor ids = Tensor::from_vector_i64({0, 10, 3, 3, 7, 5, 2, 9, 1, 6}, {2, 5});
      Tensor G = rand_f64({2, 5, 3}, 61, -1, 1, false);
      Tensor yref = ref.forward(ids);
      ops::sum(ops::mul(yref, G)).backward();
      Tensor y = tp.forward(ids);
      CHECK(max_abs(vals(y), vals(yref)) == 0);  // one nonzero term per element: exact
      ops::sum(ops::mul(y, G)).backward();
      CHECK(max_abs(vals(tp.weight().grad()), vals(shard(ref.weight().grad(), 0, tp.rows()))) == 0);
      CHECK_THROWS_WITH_AS(tp.forward(Tensor::from_vector_i64({11}, {1, 1})), doctest::Contains("outside the whole "
                           "table's [0, 11)"), Error);
    });
  }
}

TEST_CASE("embedding_shard: other shards' rows read zeros and get no gradient; gradient check") {
  Tensor ids = Tensor::from_vector_i64({4, 1, 6, 5, 4, 2}, {2, 3});
  auto f = [&](const std::vector<Tensor>& in) { return ops::embedding_shard(ids, in[0], 3, 8); };
  CHECK(gradcheck(f, {rand_f64({3, 2}, 71)}) == "");  // rows 3, 4, 5 of 8
  Tensor table = rand_f64({3, 2}, 72);
  Tensor y = ops::embedding_shard(ids, table, 3, 8);
  std::vector<double> v = vals(y), t = vals(table);
  const int64_t want[] = {1, -1, -1, 2, 1, -1};  // local row, or -1 for a zero row
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 2; ++j) CHECK(v[i * 2 + j] == (want[i] < 0 ? 0.0 : t[want[i] * 2 + j]));
  y.backward(Tensor::ones(y.shape(), DType::F64));
  const std::vector<double> g = vals(table.grad());
  const double counts[] = {0, 2, 1};  // id 3 never, id 4 twice, id 5 once
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 2; ++j) CHECK(g[r * 2 + j] == counts[r]);
}

TEST_CASE("vocab_parallel_cross_entropy == cross_entropy on the whole logits (value and gradient)") {
  const std::vector<int64_t> labels = {3, -100, 10, 0, 7, 7, -100, 5};
  for (int n = 1; n <= 4; ++n) {
    for (DType dt : {DType::F64, DType::F32}) {
      CAPTURE(n);
      CAPTURE(dtype_name(dt));
      run_ranks(n, [&](Communicator& c) {
        const double tol = dt == DType::F64 ? 1e-12 : 1e-6;
        Tensor lab = Tensor::from_vector_i64(labels, {8});
        Tensor full = rand_f64({8, 11}, 81, -4, 4, false).to(dt).set_requires_grad(true);
        Tensor ref = ops::cross_entropy(full, lab, 0.0f, -100);
        ref.backward();
        const ShardRange r = vocab_shard(11, c.rank(), c.size());
        Tensor mine = shard(full.detach(), 1, r).to(dt).set_requires_grad(true);
        Tensor loss = vocab_parallel_cross_entropy(mine, lab, r.start, 11, c);
        CHECK(std::fabs(loss.item() - ref.item()) < tol);
        loss.backward();
        CHECK(max_abs(vals(mine.grad()), vals(shard(full.grad(), 1, r))) < tol);
      });
    }
  }
  run_ranks(2, [](Communicator& c) {
    // Every row ignored: 0, no collective (on every rank alike), still connected to the graph.
    Tensor mine = rand_f64({2, 3}, 82);
    Tensor loss = vocab_parallel_cross_entropy(mine, Tensor::from_vector_i64({-100, -100}, {2}), 3 * c.rank(), 6, c);
    CHECK(loss.item() == 0.0);
    CHECK_THROWS_WITH_AS(vocab_parallel_cross_entropy(mine, Tensor::from_vector_i64({6, 0}, {2}), 3 * c.rank(), 6, c),
                         doctest::Contains("label 6 at row 0 is outside [0, 6)"), Error);
  });
}

TEST_CASE("vocab_parallel_cross_entropy: finite-difference gradient check of the shard kernels") {
  // One rank: the combine sees one shard. With the whole vocabulary that is plain cross-entropy;
  // with columns [2, 6) of 9 (labels 0, 8: another shard's, target -1) it is the function the
  // kernels compute for a shard - lse over its columns minus its target logits - whose gradient
  // (softmax minus the local one-hot) must still match finite differences. Across ranks the
  // perturbations of one rank would move every rank's loss, so the multi-rank path is checked
  // against cross_entropy above instead.
  run_ranks(1, [](Communicator& c) {
    Tensor lab = Tensor::from_vector_i64({0, 6, 3, -100, 4}, {5});
    auto whole = [&](const std::vector<Tensor>& in) { return vocab_parallel_cross_entropy(in[0], lab, 0, 7, c); };
    CHECK(gradcheck(whole, {rand_f64({5, 7}, 91, -2, 2)}) == "");
    Tensor lab2 = Tensor::from_vector_i64({0, 5, 3, 8, 2}, {5});
    auto part = [&](const std::vector<Tensor>& in) { return vocab_parallel_cross_entropy(in[0], lab2, 2, 9, c); };
    CHECK(gradcheck(part, {rand_f64({5, 4}, 92, -2, 2)}) == "");
  });
}
