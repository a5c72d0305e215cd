// dist/tp/shard.cpp: the BERT layout and the slicing and joining of state dicts (see shard.h).
#include "dist/tp/shard.h"

#include <algorithm>
#include <string>

namespace tandem::dist::tp {
namespace {

// [rows, cols] view of a tensor split along dim (0: rows = shape[0]; 1: a matrix).
Shape as_matrix(const Shape& s, int dim) {
  const int64_t n = shape_numel(s);
  return dim == 0 ? Shape{s[0], s[0] ? n / s[0] : 0} : Shape{s[0], s[1]};
}

// Columns [start, start + size) of every row of a [rows, cols] host tensor, as a new host tensor.
Tensor columns_of(const Tensor& m, int64_t start, int64_t size) {
  const int64_t rows = m.size(0), cols = m.size(1);
  const size_t es = dtype_size(m.dtype());
  Tensor out = Tensor::empty({rows, size}, m.dtype());
  const char* src = static_cast<const char*>(m.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < rows; ++i)
    std::copy_n(src + (i * cols + start) * es, size * es, dst + i * size * es);
  return out;
}

Tensor slice_of(const Tensor& full, const Split& s, ShardRange r) {
  Tensor host = full.device().is_cpu() ? full.detach() : full.detach().to(Device::cpu());
  Shape shape = full.shape();
  shape[s.dim] = r.size;
  Tensor m = host.view(as_matrix(full.shape(), s.dim));
  Tensor part = s.dim == 0 ? m.slice(r.start, r.start + r.size).clone() : columns_of(m, r.start, r.size);
  part = part.view(shape);
  return full.device().is_cpu() ? part : part.to(full.device());
}

// Joins rank-ordered host parts (each [rows_r, cols] for dim 0, [rows, cols_r] for dim 1).
Tensor join(const std::vector<Tensor>& parts, const Split& s, const Shape& full_shape) {
  Tensor out = Tensor::empty(full_shape, parts[0].dtype());
  const size_t es = dtype_size(out.dtype());
  char* dst = static_cast<char*>(out.data_ptr());
  if (s.dim == 0) {
    size_t at = 0;
    for (const Tensor& p : parts) {
      std::copy_n(static_cast<const char*>(p.data_ptr()), p.nbytes(), dst + at);
      at += p.nbytes();
    }
    return out;
  }
  const int64_t rows = full_shape[0], cols = full_shape[1];
  int64_t start = 0;
  for (const Tensor& p : parts) {
    const int64_t w = p.size(1);
    const char* src = static_cast<const char*>(p.data_ptr());
    for (int64_t i = 0; i < rows; ++i) std::copy_n(src + i * w * es, w * es, dst + (i * cols + start) * es);
    start += w;
  }
  return out;
}

Shape canonical_shape(const Shape& shard, const Split& s) {
  Shape full = shard;
  full[s.dim] = s.full;
  return full;
}

}  // namespace

ShardRange Split::range(int rank, int ranks) const {
  return vocab ? vocab_shard(full, rank, ranks) : even_shard(full, rank, ranks, "a split dimension");
}

TpLayout bert_tp_layout(const BertConfig& cfg) {
  TpLayout l;
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
  l["bert.embeddings.word_embeddings.weight"] = {0, V, true};
  l["cls.predictions.bias"] = {0, V, true};
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = "bert.encoder.layer." + std::to_string(i) + ".";
    for (const char* qkv : {"query", "key", "value"}) {
      l[p + "attention.self." + qkv + ".weight"] = {0, H, false};
      l[p + "attention.self." + qkv + ".bias"] = {0, H, false};
    }
    l[p + "attention.output.dense.weight"] = {1, H, false};
    l[p + "intermediate.dense.weight"] = {0, I, false};
    l[p + "intermediate.dense.bias"] = {0, I, false};
    l[p + "output.dense.weight"] = {1, I, false};
  }
  return l;
}

const Split* split_of(const TpLayout& layout, const std::string& key, const Shape& shape, bool canonical, int rank,
                      int ranks) {
  // AMP's f32 masters and the EMA's averages are keyed by their parameter behind a prefix.
  std::string name = key;
  for (const std::string prefix : {"amp.master.", "ema."})
    if (key.rfind(prefix, 0) == 0) name = key.substr(prefix.size());
  // The parameter this key belongs to: the key itself, or its longest prefix that ends before a '.'.
  const Split* s = nullptr;
  for (;;) {
    auto it = layout.find(name);
    if (it != layout.end()) {
      s = &it->second;
      break;
    }
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos) return nullptr;
    name.resize(dot);
  }
  // Split only what has the parameter's (canonical or shard) extent along the split dimension.
  if (static_cast<int>(shape.size()) <= s->dim) return nullptr;
  return shape[s->dim] == (canonical ? s->full : s->range(rank, ranks).size) ? s : nullptr;
}

NamedTensors shard_state_dict(const NamedTensors& canonical, const TpLayout& layout, int rank, int ranks) {
  NamedTensors out;
  out.reserve(canonical.size());
  for (const auto& [key, t] : canonical) {
    const Split* s = split_of(layout, key, t.shape(), true, rank, ranks);
    out.emplace_back(key, s ? slice_of(t, *s, s->range(rank, ranks)) : t);
  }
  return out;
}

NamedTensors assemble_state_dict(const std::vector<NamedTensors>& shards, const TpLayout& layout) {
  TANDEM_CHECK(!shards.empty(), "assemble_state_dict: no shards");
  const int ranks = static_cast<int>(shards.size());
  NamedTensors out;
  for (size_t i = 0; i < shards[0].size(); ++i) {
    const auto& [key, t0] = shards[0][i];
    const Split* s = split_of(layout, key, t0.shape(), false, 0, ranks);
    if (!s) {
      out.emplace_back(key, t0.device().is_cpu() ? t0 : t0.to(Device::cpu()));
      continue;
    }
    std::vector<Tensor> parts;
    for (int r = 0; r < ranks; ++r) {
      TANDEM_CHECK(i < shards[r].size() && shards[r][i].first == key, "assemble_state_dict: rank ", r,
                   "'s shards do not list '", key, "' at position ", i, "; every rank must hold the same names in "
                   "the same order");
      const Tensor& t = shards[r][i].second;
      TANDEM_CHECK(t.dim() > s->dim && t.size(s->dim) == s->range(r, ranks).size, "assemble_state_dict: rank ", r,
                   "'s '", key, "' is ", t.str(), ", not its shard of ", s->full, " along dimension ", s->dim);
      parts.push_back(t.device().is_cpu() ? t.detach() : t.detach().to(Device::cpu()));
    }
    out.emplace_back(key, join(parts, *s, canonical_shape(t0.shape(), *s)));
  }
  return out;
}

NamedTensors gather_state_dict(const NamedTensors& mine, const TpLayout& layout, Communicator& tp) {
  const int ranks = tp.size(), rank = tp.rank();
  NamedTensors out;
  for (const auto& [key, t] : mine) {
    const Split* s = split_of(layout, key, t.shape(), false, rank, ranks);
    if (!s) {
      out.emplace_back(key, t.device().is_cpu() ? t.detach() : t.detach().to(Device::cpu()));
      continue;
    }
    // Every rank sends the largest shard's element count (the uneven vocabulary split pads the
    // smaller shards at the end), then each part is cut back to its own size.
    const Shape full = canonical_shape(t.shape(), *s);
    const int64_t other = shape_numel(full) / s->full;  // elements per unit of the split dimension
    int64_t widest = 0;
    for (int r = 0; r < ranks; ++r) widest = std::max(widest, s->range(r, ranks).size);
    const Device d = tp.device();
    Tensor send = Tensor::zeros({widest * other}, t.dtype(), d);
    // A shard is contiguous in its own shape (rows of a dim-0 split; [rows, cols_r] of a dim-1 one),
    // which is the order join() reads each part in.
    send.slice(0, t.numel()).copy_(t.detach().view({t.numel()}));
    Tensor all = Tensor::empty({ranks * widest * other}, t.dtype(), d);
    tp.all_gather(send, all, "tp gather_state_dict " + key)->wait();
    Tensor host = all.to(Device::cpu());
    std::vector<Tensor> parts;
    for (int r = 0; r < ranks; ++r) {
      Shape part_shape = full;
      part_shape[s->dim] = s->range(r, ranks).size;
      parts.push_back(host.slice(r * widest * other, r * widest * other + shape_numel(part_shape)).view(part_shape));
    }
    out.emplace_back(key, join(parts, *s, full));
  }
  return out;
}

}  // namespace tandem::dist::tp
