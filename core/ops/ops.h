// core/ops/ops.h: every differentiable op, in one include. Each header documents its op family.
#pragma once
#include "core/ops/copy.h"         // defines: cast, to_device, cast_raw, fill_
#include "core/ops/elementwise.h"  // defines: add, sub, mul, scale, relu, gelu, in-place add_/scale_/axpby_
