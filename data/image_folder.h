// data/image_folder.h: torchvision-style ImageFolder over one split (e.g. <root>/train), labelled
// with one class list for all splits.
//
// Layout: <split>/<class>/<...>/<file>. Class folders are sorted by name in byte order (Python's
// sorted() on str, which torchvision uses). Files are found recursively below each class folder
// and ordered as torchvision's sorted(os.walk()) visits them: by containing folder (full path
// string), then by file name. So class/z.jpg comes before class/sub/a.jpg, and sample indices match
// torchvision's on every machine and rank (for trees without hidden entries, see below). A file
// counts as an image when its extension is .jpg, .jpeg, .png or .bmp in any letter case; anything
// else (README, .DS_Store) is ignored.
//
// Hidden entries (a name starting with '.') are ignored at every level: a class folder such as
// train/.ipynb_checkpoints is no class, and a hidden file or folder below a class folder holds no
// samples (macOS's ._x.jpg resource forks, Jupyter's checkpoint copies). torchvision counts them
// (vision issue #2831), which shifts every label by one; Hugging Face's imagefolder skips them too.
//
// Labels: with ImageFolderOptions::classes empty (the training split), the class list is the
// split's own folders and class k is the k-th folder. Every other split (val/, a resumed run) is
// given that list (train's classes(), or the one a checkpoint saved) and maps each folder to its
// index in it by name: a class that the split lacks simply has no samples, so a val/ missing a class
// keeps train's labels; a folder that is not in the list is an error naming it. num_classes() is the
// list's size either way. A class folder with no image file below it is an error naming it
// (torchvision refuses it too): a class with no samples is almost always a copy gone wrong.
//
// Construction only lists directories; decoding happens in get(), in the loader's worker threads.
// Augmentation is keyed by (seed, epoch, sample index) (data/transforms.h SampleRng).
#pragma once
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/transforms.h"

namespace tandem::data {

struct ImageFolderOptions {
  bool train = true;             // true: RandomResizedCrop + flip; false: resize + centre crop
  TransformOptions transform{};  // size 224 and ImageNet normalisation by default
  // The class list to label with, class k = classes[k]: empty (default) builds it from this split's
  // folders; otherwise pass the training split's classes() (or a checkpoint's saved list).
  std::vector<std::string> classes{};
};

class ImageFolder : public Dataset {
 public:
  // Throws tandem::Error when `split_dir` is missing, has no class folders, has a class folder with
  // no image below it, or (given a class list) has a folder that is not in the list.
  ImageFolder(const std::string& split_dir, ImageFolderOptions opt = {});

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int num_classes() const override { return static_cast<int>(classes_.size()); }
  Shape sample_shape() const override { return {opt_.transform.size, opt_.transform.size, 3}; }
  bool get(int64_t index, const SampleKey& key, float* out, int64_t* label, std::string* error) const override;
  std::string describe(int64_t index) const override { return files_.at(index); }

  // The class list labels index into: the given one, or this split's sorted folder names. Save it
  // with a checkpoint, and pass it to every other split.
  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<std::string>& files() const { return files_; }  // full paths, by index
  const std::vector<int64_t>& labels() const { return labels_; }    // class of each file
  // Files below the class folders that are not images tandem decodes (.webp, .gif, .tif, notes):
  // left out of the split, counted so the trainer can say so; the first one as an example.
  int64_t not_images() const { return not_images_; }
  const std::string& not_image_example() const { return not_image_example_; }

 private:
  ImageFolderOptions opt_;
  int64_t not_images_ = 0;
  std::string not_image_example_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
};

}  // namespace tandem::data
