#include <catch2/catch.hpp>

#include "devices/tensor.h"

using namespace troupe;

TEST_CASE("tensor factories and metadata", "[tensor]") {
  Tensor t = Tensor::zeros({2, 3});
  CHECK(t.defined());
  CHECK(t.dtype() == DType::f32);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.strides() == Strides{3, 1});
  CHECK(t.numel() == 6);
  CHECK(t.is_contiguous());
  CHECK(t.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(Tensor::arange(4, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(Tensor::full({2}, 2.5, DType::f64).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(Tensor::scalar<int32_t>(7).item<int32_t>() == 7);
  CHECK_THROWS_AS(Tensor::empty({2, -1}), ShapeError);
  CHECK_THROWS_AS(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
}

TEST_CASE("views share storage and read the right elements", "[tensor][views]") {
  Tensor a = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor row = a.select(0, 1);
  CHECK(row.shares_storage_with(a));
  CHECK(row.to_vector<float>() == std::vector<float>{4, 5, 6, 7});
  CHECK(a.select(1, -1).to_vector<float>() == std::vector<float>{3, 7, 11});
  CHECK(a.slice(1, 1, 3).to_vector<float>() == std::vector<float>{1, 2, 5, 6, 9, 10});
  CHECK(a.slice(1, 0, 100, 2).to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10});
  Tensor t = a.transpose(0, 1);
  CHECK(t.shape() == Shape{4, 3});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(t.contiguous().is_contiguous());
  CHECK(a.permute({1, 0}).to_vector<float>() == t.to_vector<float>());
  CHECK(a.reshape({2, 6}).shares_storage_with(a));
  CHECK(a.reshape({-1}).shape() == Shape{12});
  CHECK(a.view({2, 2, 3}).select(1, 1).to_vector<float>() == std::vector<float>{3, 4, 5, 9, 10, 11});
  // A transposed tensor cannot be flattened without a copy: view refuses, reshape copies.
  CHECK_THROWS_AS(t.view({12}), ShapeError);
  Tensor r = t.reshape({12});
  CHECK_FALSE(r.shares_storage_with(a));
  CHECK(r.to_vector<float>() == t.to_vector<float>());
  // Splitting a dim of a transposed view is still a view.
  CHECK(t.view({2, 2, 3}).shares_storage_with(a));
  Tensor e = Tensor::from_vector<float>({1, 2, 3}, {3, 1}).expand({3, 2});
  CHECK(e.strides()[1] == 0);
  CHECK(e.to_vector<float>() == std::vector<float>{1, 1, 2, 2, 3, 3});
  CHECK(Tensor::zeros({1, 3, 1}).squeeze().shape() == Shape{3});
  CHECK(Tensor::zeros({1, 3, 1}).squeeze(0).shape() == Shape{3, 1});
  CHECK(Tensor::zeros({3}).unsqueeze(0).shape() == Shape{1, 3});
  CHECK(Tensor::zeros({3}).unsqueeze(-1).shape() == Shape{3, 1});
}

TEST_CASE("view errors name the op and the shapes", "[tensor][errors]") {
  Tensor a = Tensor::zeros({3, 4});
  CHECK_THROWS_AS(a.select(0, 3), IndexError);
  CHECK_THROWS_WITH(a.select(0, 3), Catch::Contains("select") && Catch::Contains("f32[3,4]"));
  CHECK_THROWS_AS(a.reshape({5, 3}), ShapeError);
  CHECK_THROWS_WITH(a.reshape({5, 3}), Catch::Contains("[3,4]") && Catch::Contains("[5,3]"));
  CHECK_THROWS_AS(a.transpose(0, 2), IndexError);
  CHECK_THROWS_AS(a.permute({0, 0}), ShapeError);
  CHECK_THROWS_AS(a.expand({3, 5}), ShapeError);
  CHECK_THROWS_AS(a.data<double>(), DTypeError);
  CHECK_THROWS_AS(Tensor().clone(), ValueError);
}

TEST_CASE("copy-on-write keeps shared tensors immutable", "[tensor][immutability]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  Tensor sent = a;  // as if sent in a message: the receiver holds this handle
  Tensor view = a.slice(0, 1, 3);
  a.mutable_data<float>()[0] = 100;  // a is shared: it copies before writing
  CHECK(a.to_vector<float>() == std::vector<float>{100, 2, 3, 4});
  CHECK(sent.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(view.to_vector<float>() == std::vector<float>{2, 3});
  CHECK_FALSE(a.shares_storage_with(sent));
  // A sole owner writes in place: no copy.
  const void* before = a.raw_data();
  a.mutable_data<float>()[1] = 200;
  CHECK(a.raw_data() == before);
  // A non-contiguous sole owner is made contiguous first.
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).transpose(0, 1);
  t.mutable_data<float>()[1] = 9;
  CHECK(t.is_contiguous());
  CHECK(t.to_vector<float>() == std::vector<float>{1, 9, 2, 4});
}

TEST_CASE("dtype conversion and the 16-bit floats", "[tensor][dtype]") {
  Tensor f = Tensor::from_vector<float>({1.5f, -2.25f, 65504.0f, 1e-7f}, {4});
  CHECK(f.to(DType::f16).to(DType::f32).to_vector<float>() == std::vector<float>{1.5f, -2.25f, 65504.0f, 1.1920929e-07f});
  CHECK(f.to(DType::bf16).to(DType::f32).to_vector<float>()[0] == 1.5f);
  CHECK(float(BFloat16(3.14159f)) == Approx(3.140625f));
  CHECK(float(Half(100000.0f)) == std::numeric_limits<float>::infinity());
  CHECK(f.to(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{1, -2, 65504, 0});
  CHECK(f.to(DType::boolean).to_vector<bool>() == std::vector<bool>{true, true, true, true});
  CHECK(promote(DType::i32, DType::f32) == DType::f32);
  CHECK(promote(DType::f16, DType::bf16) == DType::f32);
  CHECK(promote(DType::u8, DType::i64) == DType::i64);
  CHECK(promote(DType::boolean, DType::u8) == DType::u8);
  CHECK(dtype_from_name("float32") == DType::f32);
  CHECK_THROWS_AS(dtype_from_name("complex64"), DTypeError);
}

TEST_CASE("devices parse and cpu is always there", "[device]") {
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::parse("cpu").is_cpu());
  CHECK_THROWS_AS(Device::parse("tpu"), DeviceError);
  CHECK_THROWS_AS(Device::parse("cuda:x"), DeviceError);
  Tensor t = Tensor::ones({2});
  CHECK(t.to(Device::cpu()).shares_storage_with(t));
}
