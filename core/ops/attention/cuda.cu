// core/ops/attention/cuda.cu: no kernels today. The reference path's scale-mask-softmax(-dropout)
// kernels moved to core/ops/attention/cuda_softmax.cu (rewritten for bandwidth: a warp per row with
// the row in registers); the flash path is core/ops/attention/cuda_flash.cu.
