// core/ops/ops.h: every differentiable op, in one include. Each header documents its op family.
#pragma once
#include "core/ops/attention.h"    // defines: attention, scale_mask_softmax, split_qkv_heads, merge_heads
#include "core/ops/batchnorm.h"    // defines: batch_norm (train/eval, running stats)
#include "core/ops/conv.h"         // defines: conv2d (NHWC, OHWI weights), Conv2dParams
#include "core/ops/copy.h"         // defines: cast, to_device, cast_raw, fill_
#include "core/ops/dropout.h"      // defines: dropout
#include "core/ops/elementwise.h"  // defines: add, sub, mul, scale, relu, gelu, in-place add_/scale_/axpby_
#include "core/ops/embedding.h"    // defines: embedding
#include "core/ops/loss.h"         // defines: cross_entropy (label smoothing), topk_correct
#include "core/ops/matmul.h"       // defines: linear, matmul
#include "core/ops/norm.h"         // defines: layer_norm
#include "core/ops/pool.h"         // defines: max_pool2d, avg_pool2d, adaptive_avg_pool2d, global_avg_pool
#include "core/ops/reduce.h"       // defines: sum, mean
#include "core/ops/shape.h"        // defines: reshape, flatten, concat_channels, transpose12
