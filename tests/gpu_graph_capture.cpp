// tests/gpu_graph_capture.cpp: StepGraph's memory and error rules (core/cuda/graph.h), one by one,
// on small hand-made steps; gpu_cuda_graph.cpp trains a real model through the same path.
//
// What each case would catch on a GPU:
//   - temporaries: a step that allocates and frees its own tensors becomes a graph with memory
//     nodes; it must replay more than once (the graph frees what it allocates, so the relaunch rule
//     of cudaGraphLaunch holds), give the same bytes each time, follow its static input, and leave
//     tandem's memory counters where they were;
//   - a host sync inside the step fails the capture naming the cause, closes the capture (no
//     allocation is booked to it any more) and leaves the stream usable for eager work and for a
//     new capture;
//   - an allocation after an earlier call broke the capture reports that capture error, not
//     "out of GPU memory" (core/storage.cpp);
//   - SGD's LR is read from device memory that set_lr writes between replays (optim/cuda/sgd.cu):
//     a frozen LR would repeat the captured one.
// Each step runs eagerly once before its capture, as graph.h asks (kernel modules load lazily).
// Values are chosen exact in f32 (powers of two), so the checks are equalities.
// Exits 77 (Skipped) only when the machine has no GPU (tests/support/main.cpp). StepGraph exists only
// in CUDA builds: a CPU-only build compiles no case here.
#ifdef TANDEM_WITH_CUDA
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/cuda/context.h"
#include "core/cuda/graph.h"
#include "core/graph_capture.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/storage.h"
#include "optim/optimizer.h"

using namespace tandem;

namespace {

constexpr int64_t kN = 4096;  // large enough that the pool cannot hide a missing allocation in slack

// out = (x + x) * x + 1, through three temporaries that die inside the step.
void body(const Tensor& x, Tensor& out) {
  Tensor twice = ops::add(x, x);
  Tensor prod = ops::mul(twice, x);
  out.copy_(ops::add_scalar(prod, 1.0f));
}

std::string capture_error(cuda::StepGraph& graph, const std::function<void()>& step) {
  try {
    graph.capture(step);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a step that allocates and frees temporaries replays twice with the same bytes and follows its input") {
  const Device gpu = Device::cuda(0);
  Tensor x = Tensor::full({kN}, 3.0, DType::F32, gpu);
  Tensor out = Tensor::zeros({kN}, DType::F32, gpu);
  body(x, out);  // the warm-up
  out.copy_(Tensor::zeros({kN}, DType::F32, gpu));
  cuda::synchronize();
  const int64_t before = memory_stats(gpu).current_bytes;
  cuda::StepGraph graph(0);
  graph.capture([&] { body(x, out); });
  REQUIRE(graph.captured());
  CHECK(graph.nodes() >= 3);  // three kernels at least, plus the allocation and free nodes
  CHECK(out.to_vector()[0] == 0.0f);  // the capture ran nothing
  CHECK(memory_stats(gpu).current_bytes == before);  // every block the step made died in it

  graph.replay();
  const std::vector<float> first = out.to_vector();
  graph.replay();
  const std::vector<float> second = out.to_vector();
  CHECK(first[0] == 19.0f);  // (3 + 3) * 3 + 1
  CHECK(first[kN - 1] == 19.0f);
  CHECK(first == second);

  x.copy_(Tensor::full({kN}, 0.5, DType::F32, gpu));  // the static input, written between replays
  graph.replay();
  CHECK(out.to_vector()[kN / 2] == 1.5f);  // (0.5 + 0.5) * 0.5 + 1
  CHECK(memory_stats(gpu).current_bytes == before);
}

TEST_CASE("a step that synchronises fails the capture with the reason; eager work and a new capture go on") {
  const Device gpu = Device::cuda(0);
  Tensor a = Tensor::ones({kN}, DType::F32, gpu);
  Tensor out = Tensor::zeros({kN}, DType::F32, gpu);
  body(a, out);  // the warm-up of both captures below
  cuda::StepGraph broken(0);
  const std::string message = capture_error(broken, [&] {
    Tensor t = ops::add(a, a);
    cuda::synchronize();  // waits on the host for a stream that runs nothing while it captures
    out.copy_(t);
  });
  INFO(message);
  CHECK(message.find("capturing the training step as a CUDA graph failed") != std::string::npos);
  CHECK(message.find("cudaErrorStreamCapture") != std::string::npos);  // CUDA's own name for it
  CHECK(message.find(" -> ") != std::string::npos);                    // and graph.cpp's explanation
  CHECK_FALSE(broken.captured());
  CHECK_FALSE(graph_capture::active());  // the capture is closed: later blocks are ordinary ones

  CHECK(ops::add(a, a).to_vector()[7] == 2.0f);  // the stream runs eager work again
  out.copy_(Tensor::zeros({kN}, DType::F32, gpu));  // so that only the replay can write the 3s
  cuda::StepGraph graph(0);
  graph.capture([&] { body(a, out); });
  graph.replay();
  CHECK(out.to_vector()[0] == 3.0f);  // (1 + 1) * 1 + 1
}

TEST_CASE("an allocation in a capture that an earlier call broke names the capture error, not memory") {
  const Device gpu = Device::cuda(0);
  cuda::StepGraph graph(0);
  const std::string message = capture_error(graph, [&] {
    try {
      cuda::synchronize();  // breaks the capture; a careless step might swallow the error...
    } catch (const Error&) {
    }
    Tensor t = Tensor::empty({kN}, DType::F32, gpu);  // ...and the next allocation must not blame memory
  });
  INFO(message);
  CHECK(message.find("inside a CUDA graph capture failed") != std::string::npos);
  CHECK(message.find("out of GPU memory") == std::string::npos);
  CHECK_FALSE(graph.captured());
  CHECK(Tensor::ones({8}, DType::F32, gpu).to_vector()[0] == 1.0f);
}

TEST_CASE("a replayed SGD step reads the LR that set_lr wrote after the capture") {
  const Device gpu = Device::cuda(0);
  Tensor p = Tensor::full({kN}, 4.0, DType::F32, gpu);
  p.set_requires_grad(true);
  p.set_grad(Tensor::ones({kN}, DType::F32, gpu));  // a fixed gradient of 1: p -= lr each step
  optim::OptimizerOptions oo;
  oo.lr = 0.5, oo.momentum = 0.0, oo.weight_decay = 0.0;
  auto opt = optim::make_optimizer("sgd", {{"p", p}}, oo);
  opt->step();  // eager: builds the chunk table and the device-side LR (4 -> 3.5)
  opt->step();  // 3.5 -> 3
  opt->set_lr(0.25);
  cuda::StepGraph graph(0);
  graph.capture([&] { opt->step(); });
  CHECK(p.to_vector()[0] == 3.0f);  // the capture ran nothing
  graph.replay();
  CHECK(p.to_vector()[0] == 2.75f);
  opt->set_lr(0.125);  // after the capture: only the device-side value can carry it into the graph
  graph.replay();
  const std::vector<float> v = p.to_vector();
  CHECK(v[0] == 2.625f);  // a frozen LR would give 2.5
  CHECK(v[kN - 1] == 2.625f);
}

#endif  // TANDEM_WITH_CUDA
