#include "models/data/fashion_mnist.h"

#include "devices/error.h"
#include "models/data/idx.h"

namespace troupe::models {

Dataset load_fashion_mnist(const std::string& dir, const std::string& split, int64_t limit) {
  if (split != "train" && split != "t10k")
    throw ValueError("load_fashion_mnist: split must be 'train' or 't10k', got '" + split + "'");
  const std::string images_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  if (limit < 0) throw ValueError("load_fashion_mnist: limit " + std::to_string(limit) + " is negative");
  Tensor pixels = read_idx(images_path, limit), labels = read_idx(labels_path, limit);
  if (pixels.dim() != 3 || pixels.shape()[1] != 28 || pixels.shape()[2] != 28)
    throw ValueError("load_fashion_mnist: '" + images_path + "' holds " + pixels.meta().str() +
                     ", expected u8[N,28,28]");
  if (labels.dim() != 1 || labels.shape()[0] != pixels.shape()[0])
    throw ValueError("load_fashion_mnist: '" + labels_path + "' holds " + labels.meta().str() + " for " +
                     std::to_string(pixels.shape()[0]) + " images");
  const int64_t n = pixels.shape()[0];
  Dataset out{Tensor::empty({n, 1, 28, 28}), Tensor::empty({n}, DType::i64)};
  const uint8_t* p = pixels.data<uint8_t>();
  float* x = out.images.mutable_data<float>();
  constexpr float mean = 0.1307f, inv_std = 1.0f / 0.3081f;
  for (int64_t i = 0; i < n * 28 * 28; ++i) x[i] = (static_cast<float>(p[i]) / 255.0f - mean) * inv_std;
  const uint8_t* l = labels.data<uint8_t>();
  int64_t* y = out.labels.mutable_data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (l[i] > 9) throw ValueError("load_fashion_mnist: '" + labels_path + "' has label " + std::to_string(l[i]));
    y[i] = l[i];
  }
  return out;
}

}  // namespace troupe::models
