// apps/train/ddp_options.cpp: the DDP flags as dist::DdpOptions (see ddp_options.h).
#include "apps/train/ddp_options.h"

namespace tandem::apps {

dist::DdpOptions ddp_options(const DdpFlags& f) {
  dist::DdpOptions d;
  d.reducer.bucketing.first_bucket_bytes = static_cast<size_t>(f.first_bucket_mb * (1 << 20));
  d.reducer.bucketing.bucket_bytes = static_cast<size_t>(f.bucket_mb * (1 << 20));
  d.reducer.bucketed = f.bucketed;
  d.reducer.overlap = f.overlap;
  d.reducer.compression = f.compress == "bf16"   ? dist::Compression::BF16
                          : f.compress == "fp16" ? dist::Compression::F16
                                                 : dist::Compression::None;
  if (f.zero == 2) d.reducer.collective = dist::Collective::ReduceScatter;
  return d;
}

}  // namespace tandem::apps
