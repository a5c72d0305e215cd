// data/image_folder.cpp: directory scan (std::filesystem), class list mapping, and decode +
// transform per sample.
#include "data/image_folder.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "core/check.h"

namespace tandem::data {
namespace fs = std::filesystem;

namespace {

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// The image files below class_dir, hidden entries skipped, in torchvision's sorted(os.walk()) order:
// by the folder's full path string first, then by name within the folder.
std::vector<std::string> scan_class(const fs::path& class_dir, int64_t& not_images, std::string& example) {
  std::vector<std::pair<std::string, std::string>> found;
  for (auto it = fs::recursive_directory_iterator(class_dir, fs::directory_options::follow_directory_symlink);
       it != fs::recursive_directory_iterator(); ++it) {
    if (hidden(it->path())) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory()) continue;
    if (has_image_extension(it->path().string())) {
      found.emplace_back(it->path().parent_path().string(), it->path().filename().string());
    } else {
      if (not_images++ == 0) example = it->path().string();
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> files;
  files.reserve(found.size());
  for (const auto& [folder, name] : found) files.push_back((fs::path(folder) / name).string());
  return files;
}

}  // namespace

ImageFolder::ImageFolder(const std::string& split_dir, ImageFolderOptions opt) : opt_(std::move(opt)) {
  std::error_code ec;
  TANDEM_CHECK(fs::is_directory(split_dir, ec), "image folder ", split_dir,
               " does not exist or is not a directory; expected <root>/train/<class>/*.JPEG "
               "(the make_dataset tool generates a small one)");
  std::vector<std::string> folders;
  for (const auto& entry : fs::directory_iterator(split_dir))
    if (entry.is_directory() && !hidden(entry.path())) folders.push_back(entry.path().filename().string());
  // std::string compares with char_traits<char>, i.e. bytes as unsigned: Python's code-point order
  // for ASCII and UTF-8 names alike.
  std::sort(folders.begin(), folders.end());
  TANDEM_CHECK(!folders.empty(), "image folder ", split_dir, " has no class sub-folders (hidden ones do not count); ",
               "expected ", split_dir, "/<class>/<image files>");

  classes_ = opt_.classes.empty() ? folders : opt_.classes;
  std::map<std::string, int64_t> index_of;
  for (size_t k = 0; k < classes_.size(); ++k)  // folder names are unique, so only a given list can repeat
    TANDEM_CHECK(index_of.emplace(classes_[k], static_cast<int64_t>(k)).second, "image folder ", split_dir,
                 ": the given class list names class '", classes_[k],
                 "' twice; pass the training split's classes() unchanged");

  // Samples in the split's own folder order (torchvision sorts class_to_idx's names), whatever the
  // order of a given list, so sample indices do not depend on where the list came from.
  for (const std::string& name : folders) {
    const fs::path class_dir = fs::path(split_dir) / name;
    auto it = index_of.find(name);
    TANDEM_CHECK(it != index_of.end(), "image folder ", split_dir, " has class folder ", class_dir.string(),
                 ", which is not one of the ", classes_.size(),
                 " classes of the given class list (ImageFolderOptions::classes: the training split's); every "
                 "folder here must also be a class folder of the training split, by name: remove or rename it, "
                 "or add the class to the training split and train again");
    std::vector<std::string> files = scan_class(class_dir, not_images_, not_image_example_);
    TANDEM_CHECK(!files.empty(), "class folder ", class_dir.string(),
                 " has no .jpg/.jpeg/.png/.bmp file below it (hidden files and folders do not count); "
                 "add its images or remove the folder");
    for (std::string& f : files) {
      files_.push_back(std::move(f));
      labels_.push_back(it->second);
    }
  }
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
