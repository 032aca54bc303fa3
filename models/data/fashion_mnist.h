#pragma once
// Fashion-MNIST from Debian's dataset-fashion-mnist package, normalised like PyTorch's distributed tutorial:
// (pixel / 255 - 0.1307) / 0.3081.
//
//   Dataset train = load_fashion_mnist("/usr/share/datasets/fashion-mnist", "train");
//   // train.images f32 [60000, 1, 28, 28], train.labels i64 [60000]
#include <string>

#include "devices/tensor.h"

namespace troupe::models {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  Tensor images;  // f32 [N, 1, 28, 28], normalised
  Tensor labels;  // i64 [N]
  int64_t size() const { return labels.numel(); }
};

// split: "train" (60000 images) or "t10k" (10000); limit > 0: its first `limit` images only, the
// rest not read. IOError naming the path when a file is missing or corrupt; ValueError when images
// and labels disagree.
Dataset load_fashion_mnist(const std::string& dir = kFashionMnistDir, const std::string& split = "train",
                           int64_t limit = 0);

}  // namespace troupe::models
