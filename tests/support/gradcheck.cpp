// tests/support/gradcheck.cpp: see gradcheck.h.
#include "tests/support/gradcheck.h"

#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/random.h"

namespace tandem::testing {

Tensor rand_f64(const Shape& shape, uint64_t seed, double lo, double hi, bool requires_grad) {
  Generator g(seed);
  Tensor t = Tensor::empty(shape, DType::F64);
  uniform_(t, lo, hi, g);
  t.set_requires_grad(requires_grad);
  return t;
}

std::string gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                      const GradcheckOptions& opt) {
  for (Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) t.set_grad(Tensor());
  Tensor out = f(inputs);
  Generator g(opt.seed);
  Tensor w = Tensor::empty(out.shape(), DType::F64);
  uniform_(w, -1.0, 1.0, g);
  std::vector<double> wv = w.to_vector_f64();
  out.backward(w);

  auto probe = [&]() {
    autograd::NoGradGuard ng;
    std::vector<double> o = f(inputs).to_vector_f64();
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * wv[i];
    return s;
  };

  std::ostringstream err;
  int bad = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor grad = x.grad();
    if (!grad.defined()) {
      err << "input " << k << ": no gradient reached it\n";
      ++bad;
      continue;
    }
    std::vector<double> analytic = grad.to_vector_f64();
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double orig = p[i];
      p[i] = orig + opt.eps;
      double lp = probe();
      p[i] = orig - opt.eps;
      double lm = probe();
      p[i] = orig;
      double numeric = (lp - lm) / (2 * opt.eps);
      double diff = std::fabs(analytic[i] - numeric);
      if (!(diff <= opt.atol + opt.rtol * std::fabs(numeric))) {
        if (bad < 8)
          err << "input " << k << " index " << i << ": analytic " << analytic[i] << " numeric " << numeric
              << " (diff " << diff << ")\n";
        ++bad;
      }
    }
  }
  if (bad) err << bad << " mismatching element(s)";
  return err.str();
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  TANDEM_CHECK(a.size() == b.size(), "max_abs_diff: the lists differ in length (", a.size(), " vs ", b.size(), ")");
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::fmax(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace tandem::testing
