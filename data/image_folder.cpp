// data/image_folder.cpp: directory scan (std::filesystem) and decode + transform per sample.
#include "data/image_folder.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/check.h"

namespace tandem::data {
namespace fs = std::filesystem;

ImageFolder::ImageFolder(const std::string& split_dir, ImageFolderOptions opt) : opt_(std::move(opt)) {
  std::error_code ec;
  TANDEM_CHECK(fs::is_directory(split_dir, ec), "image folder ", split_dir,
               " does not exist or is not a directory; expected <root>/train/<class>/*.JPEG "
               "(generate a small one with make_dataset --out DIR)");
  for (const auto& entry : fs::directory_iterator(split_dir)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  // std::string compares with char_traits<char>, i.e. bytes as unsigned: Python's code-point order
  // for ASCII and UTF-8 names alike.
  std::sort(classes_.begin(), classes_.end());
  TANDEM_CHECK(!classes_.empty(), "image folder ", split_dir, " has no class sub-folders; expected ",
               split_dir, "/<class>/<image files>");

  for (size_t k = 0; k < classes_.size(); ++k) {
    fs::path class_dir = fs::path(split_dir) / classes_[k];
    // (folder, file name) pairs sorted as torchvision's sorted(os.walk(...)) + sorted(fnames) visits
    // them: by the folder's full path string first, then by name within the folder.
    std::vector<std::pair<std::string, std::string>> found;
    for (auto it = fs::recursive_directory_iterator(class_dir, fs::directory_options::follow_directory_symlink);
         it != fs::recursive_directory_iterator(); ++it) {
      if (it->is_directory()) continue;
      if (has_image_extension(it->path().string()))
        found.emplace_back(it->path().parent_path().string(), it->path().filename().string());
    }
    std::sort(found.begin(), found.end());
    for (const auto& [folder, name] : found) {
      files_.push_back((fs::path(folder) / name).string());
      labels_.push_back(static_cast<int64_t>(k));
    }
  }
  TANDEM_CHECK(!files_.empty(), "image folder ", split_dir, " has ", classes_.size(),
               " class folders but no .jpg/.jpeg/.png/.bmp files in them");
  TANDEM_CHECK(opt_.transform.size > 0, "transform size must be positive, got ", opt_.transform.size);
}

bool ImageFolder::get(int64_t index, const SampleKey& key, float* out, int64_t* label, std::string* error) const {
  TANDEM_CHECK(index >= 0 && index < size(), "ImageFolder index ", index, " out of range [0, ", size(), ")");
  Image img;
  if (!try_decode_file(files_[index], img, error)) return false;
  if (opt_.train) {
    SampleRng rng(key.seed, key.epoch, index);
    train_transform(img, opt_.transform, rng, out);
  } else {
    val_transform(img, opt_.transform, out);
  }
  *label = labels_[index];
  return true;
}

}  // namespace tandem::data
