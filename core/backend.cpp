// core/backend.cpp: the process-wide backend settings and their scope (see backend.h).
#include "core/backend.h"

#include <atomic>

#include "core/check.h"  // defines: TANDEM_CHECK

namespace tandem {
namespace {

// One atomic per field: an op reads a few of them per call, without a lock.
struct Settings {
  std::atomic<bool> deterministic{BackendConfig{}.deterministic};
  std::atomic<bool> cudnn_batchnorm{BackendConfig{}.cudnn_batchnorm};
  std::atomic<bool> conv_bias_fusion{BackendConfig{}.conv_bias_fusion};
  std::atomic<bool> conv_bn_fusion{BackendConfig{}.conv_bn_fusion};
  std::atomic<bool> allow_tf32{BackendConfig{}.allow_tf32};
  std::atomic<bool> fused_grad_accumulation{BackendConfig{}.fused_grad_accumulation};
  std::atomic<bool> cpu_onednn{BackendConfig{}.cpu_onednn};
  std::atomic<bool> cpu_onednn_sgemm{BackendConfig{}.cpu_onednn_sgemm};
  std::atomic<int64_t> conv_workspace_limit{BackendConfig{}.conv_workspace_limit};
};

Settings& settings() {
  static Settings s;
  return s;
}

void apply(const BackendConfig& c) {
  Settings& s = settings();
  s.deterministic.store(c.deterministic);
  s.cudnn_batchnorm.store(c.cudnn_batchnorm);
  s.conv_bias_fusion.store(c.conv_bias_fusion);
  s.conv_bn_fusion.store(c.conv_bn_fusion);
  s.allow_tf32.store(c.allow_tf32);
  s.fused_grad_accumulation.store(c.fused_grad_accumulation);
  s.cpu_onednn.store(c.cpu_onednn);
  s.cpu_onednn_sgemm.store(c.cpu_onednn_sgemm);
  s.conv_workspace_limit.store(c.conv_workspace_limit);
}

}  // namespace

BackendConfig backend() {
  const Settings& s = settings();
  BackendConfig c;
  c.deterministic = s.deterministic.load();
  c.cudnn_batchnorm = s.cudnn_batchnorm.load();
  c.conv_bias_fusion = s.conv_bias_fusion.load();
  c.conv_bn_fusion = s.conv_bn_fusion.load();
  c.allow_tf32 = s.allow_tf32.load();
  c.fused_grad_accumulation = s.fused_grad_accumulation.load();
  c.cpu_onednn = s.cpu_onednn.load();
  c.cpu_onednn_sgemm = s.cpu_onednn_sgemm.load();
  c.conv_workspace_limit = s.conv_workspace_limit.load();
  return c;
}

BackendScope::BackendScope(const BackendConfig& config) : previous_(backend()) {
  TANDEM_CHECK(config.conv_workspace_limit >= 0, "BackendConfig::conv_workspace_limit must be >= 0 bytes, got ",
               config.conv_workspace_limit);
  apply(config);
}

BackendScope::~BackendScope() { apply(previous_); }

}  // namespace tandem
