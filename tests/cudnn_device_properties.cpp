// tests/cudnn_device_properties.cpp: writes the current GPU's cuDNN device properties (the JSON of
// CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, cuDNN >= 9.8) to the file named on the command line, so
// that tests/cpu_cudnn_graphs.cpp can plan every graph for that GPU on a machine without one. The GPU
// session runs it first (apps/scripts/gpu_session.sh); an H100's file belongs in
// tests/data/cudnn/h100_device_properties.json. Not a ctest entry: it needs the GPU it describes.
// Usage: cudnn_device_properties OUT.json [device]. Exit 0 written, 1 failed (the reason on stderr),
// 2 usage.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#if defined(TANDEM_HAVE_CUDNN_FRONTEND) && TANDEM_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: %s OUT.json [device]\n  writes the GPU's cuDNN device properties (JSON) for "
                 "deviceless plan building (tests/cpu_cudnn_graphs.cpp)\n", argv[0]);
    return 2;
  }
#if !(defined(TANDEM_HAVE_CUDNN_FRONTEND) && TANDEM_HAVE_CUDNN_FRONTEND)
  std::fprintf(stderr, "cudnn_device_properties: built without the cuDNN frontend headers (apps/scripts/setup.sh "
               "fetches them); nothing written\n");
  return 1;
#else
  namespace fe = cudnn_frontend;
  const int device = argc == 3 ? std::atoi(argv[2]) : 0;
  auto props = std::make_shared<fe::DeviceProperties>();
  std::vector<uint8_t> json;
  fe::error_t e = props->set_device_id(device).build();
  if (e.is_good()) e = props->serialize(json);
  if (e.is_bad()) {
    std::fprintf(stderr, "cudnn_device_properties: cuDNN %zu could not describe device %d: %s\n", cudnnGetVersion(),
                 device, e.get_message().c_str());
    return 1;
  }
  // The JSON may end in the C string's terminator: the file holds the text only.
  while (!json.empty() && json.back() == 0) json.pop_back();
  std::ofstream out(argv[1], std::ios::binary);
  out.write(reinterpret_cast<const char*>(json.data()), static_cast<std::streamsize>(json.size()));
  out << '\n';
  if (!out.flush()) {
    std::fprintf(stderr, "cudnn_device_properties: could not write %s\n", argv[1]);
    return 1;
  }
  std::printf("cudnn_device_properties: device %d's properties (cuDNN %zu) in %s\n", device, cudnnGetVersion(),
              argv[1]);
  return 0;
#endif
}
