// data/image_folder.h: torchvision-style ImageFolder over one split (e.g. <root>/train).
//
// Layout: <split>/<class>/<...>/<file>. Class folders are sorted by name in byte order (Python's
// sorted() on str, which torchvision uses), and class k is the k-th folder. Files are found
// recursively below each class folder and ordered as torchvision's sorted(os.walk()) visits them:
// by containing folder (full path string), then by file name. So class/z.jpg comes before
// class/sub/a.jpg, and sample indices match torchvision's on every machine and rank. A file counts as an image when its extension is .jpg, .jpeg, .png or .bmp in
// any letter case; anything else (README, .DS_Store) is ignored. Hidden folders are not skipped,
// as in torchvision. Empty class folders are kept (the class exists, it just has no samples).
//
// Construction only lists directories; decoding happens in get(), in the loader's worker threads.
#pragma once
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/transforms.h"

namespace tandem::data {

struct ImageFolderOptions {
  bool train = true;             // true: RandomResizedCrop + flip; false: resize + centre crop
  TransformOptions transform{};  // size 224 and ImageNet normalisation by default
};

class ImageFolder : public Dataset {
 public:
  // Throws tandem::Error when `split_dir` is missing, has no class folders, or holds no images.
  ImageFolder(const std::string& split_dir, ImageFolderOptions opt = {});

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int num_classes() const override { return static_cast<int>(classes_.size()); }
  Shape sample_shape() const override { return {opt_.transform.size, opt_.transform.size, 3}; }
  bool get(int64_t index, const SampleKey& key, float* out, int64_t* label, std::string* error) const override;
  std::string describe(int64_t index) const override { return files_.at(index); }

  const std::vector<std::string>& classes() const { return classes_; }  // sorted folder names
  const std::vector<std::string>& files() const { return files_; }      // full paths, by index
  const std::vector<int64_t>& labels() const { return labels_; }        // class of each file

 private:
  ImageFolderOptions opt_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
};

}  // namespace tandem::data
