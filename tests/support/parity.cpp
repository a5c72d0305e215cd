// tests/support/parity.cpp: see parity.h.
#include "tests/support/parity.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/ops/copy/copy.h"
#include "core/random.h"

namespace tandem::testing {

std::string compare_values(const std::string& what, const std::vector<float>& ref, const std::vector<float>& got,
                           Tolerance tol) {
  std::ostringstream err;
  if (ref.size() != got.size()) {
    err << what << ": size " << got.size() << " vs reference " << ref.size() << "\n";
    return err.str();
  }
  int bad = 0;
  double worst = 0, scale = 0;
  for (float r : ref)
    if (std::isfinite(r)) scale = std::max(scale, static_cast<double>(std::fabs(r)));
  for (size_t i = 0; i < ref.size(); ++i) {
    if (tol.nonfinite_equal && !std::isfinite(ref[i]) &&
        (std::isnan(ref[i]) ? std::isnan(got[i]) : got[i] == ref[i]))
      continue;
    double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    double lim = tol.atol + tol.rtol * std::fabs(ref[i]) + tol.max_rel * scale;
    if (!(d <= lim)) {  // also catches NaN
      if (bad < 6) err << what << "[" << i << "]: gpu " << got[i] << " cpu " << ref[i] << " diff " << d << "\n";
      ++bad;
      worst = std::max(worst, d);
    }
  }
  if (bad) err << what << ": " << bad << "/" << ref.size() << " mismatches (rtol " << tol.rtol << ", atol "
               << tol.atol << ", max_rel " << tol.max_rel << " of " << scale << ": " << tol.why << ")\n";
  return err.str();
}

std::string parity_check(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                         const std::vector<Tensor>& inputs, DType dtype, Tolerance tol,
                         std::vector<size_t> no_grad_inputs, uint64_t seed) {
  auto wants_grad = [&](size_t i) {
    return is_floating(inputs[i].dtype()) &&
           std::find(no_grad_inputs.begin(), no_grad_inputs.end(), i) == no_grad_inputs.end();
  };
  auto round_trip = [&](const Tensor& t) {
    return is_floating(t.dtype()) ? ops::cast_raw(ops::cast_raw(t, dtype), DType::F32) : t.clone();
  };
  std::vector<Tensor> cpu_in, gpu_in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor c = round_trip(inputs[i]);
    Tensor g = (is_floating(c.dtype()) ? ops::cast_raw(c, dtype) : c).to(Device::cuda(0));
    if (wants_grad(i)) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
    }
    cpu_in.push_back(c);
    gpu_in.push_back(g);
  }
  std::vector<Tensor> cpu_out = f(cpu_in);
  std::vector<Tensor> gpu_out = f(gpu_in);
  std::ostringstream report;
  Generator gen(seed);
  std::vector<Tensor> cpu_roots, cpu_grads, gpu_roots, gpu_grads;
  for (size_t k = 0; k < cpu_out.size(); ++k) {
    report << compare_values("output " + std::to_string(k), cpu_out[k].to_vector(), gpu_out[k].to_vector(), tol);
    if (cpu_out[k].requires_grad() && is_floating(cpu_out[k].dtype())) {
      Tensor w = round_trip(randn(cpu_out[k].shape(), gen));
      cpu_roots.push_back(cpu_out[k]);
      cpu_grads.push_back(w);
      gpu_roots.push_back(gpu_out[k]);
      gpu_grads.push_back(ops::cast_raw(w, gpu_out[k].dtype()).to(Device::cuda(0)));
    }
  }
  if (!cpu_roots.empty()) {
    autograd::backward(cpu_roots, cpu_grads);
    autograd::backward(gpu_roots, gpu_grads);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!wants_grad(i)) continue;
      if (!cpu_in[i].grad().defined() || !gpu_in[i].grad().defined()) {
        report << "input " << i << ": gradient missing on " << (cpu_in[i].grad().defined() ? "gpu" : "cpu") << "\n";
        continue;
      }
      report << compare_values("grad of input " + std::to_string(i), cpu_in[i].grad().to_vector(),
                               gpu_in[i].grad().to_vector(), tol);
    }
  }
  return report.str();
}

}  // namespace tandem::testing
