//===- GradientDumpTest.cpp - Tests of gmopt-run --dump-gradients' files --===//
//
// Unit tests of the NumPy .npy encoding of gradients (header, alignment,
// dtypes, bfloat16 widened to float32, refused dtypes) and of the file names
// made from parameter names (bytes a file name should not hold, a leading
// dot, length, collisions, also of case). The files' agreement with ONNX
// Runtime's gradients, read by NumPy, is tests/lit/run/dump-gradients.test.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/GradientDump.h"

#include "llvm/Support/Error.h"

#include "gtest/gtest.h"

#include <cstring>

using namespace gmopt;

namespace {

/// The header text of an encoded .npy file (between the length and the
/// data), after checking the magic and the 64-byte alignment.
std::string headerOf(const std::string &npy) {
  EXPECT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t length = uint8_t(npy[8]) | size_t(uint8_t(npy[9])) << 8;
  EXPECT_EQ((10 + length) % 64, 0u);
  EXPECT_EQ(npy[10 + length - 1], '\n');
  return npy.substr(10, length);
}

std::string dataOf(const std::string &npy) {
  size_t length = uint8_t(npy[8]) | size_t(uint8_t(npy[9])) << 8;
  return npy.substr(10 + length);
}

TEST(GradientDumpTest, Float32KeepsItsBytesAndShape) {
  std::vector<float> values = {1, 2, 3, 4, 5, 6};
  auto npy =
      encodeNpy(TensorData::fromValues<float>(DType::F32, {2, 3}, values), "w");
  ASSERT_TRUE(bool(npy)) << llvm::toString(npy.takeError());
  std::string header = headerOf(*npy);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, "
                         "'shape': (2, 3), }",
                         0),
            0u)
      << header;
  std::string data = dataOf(*npy);
  ASSERT_EQ(data.size(), sizeof(float) * values.size());
  EXPECT_EQ(std::memcmp(data.data(), values.data(), data.size()), 0);
}

TEST(GradientDumpTest, ShapesOfOneAndNoDimension) {
  auto vector = encodeNpy(
      TensorData::fromValues<double>(DType::F64, {5}, {1, 2, 3, 4, 5}), "v");
  ASSERT_TRUE(bool(vector));
  EXPECT_NE(headerOf(*vector).find("'descr': '<f8'"), std::string::npos);
  EXPECT_NE(headerOf(*vector).find("'shape': (5,), }"), std::string::npos);
  auto scalar = encodeNpy(
      TensorData::fromValues<uint16_t>(DType::F16, {}, {0x3C00}), "s");
  ASSERT_TRUE(bool(scalar));
  EXPECT_NE(headerOf(*scalar).find("'descr': '<f2'"), std::string::npos);
  EXPECT_NE(headerOf(*scalar).find("'shape': (), }"), std::string::npos);
  EXPECT_EQ(dataOf(*scalar), std::string("\x00\x3C", 2));
}

TEST(GradientDumpTest, BFloat16IsWidenedToFloat32) {
  // bfloat16 1.0 and -2.5 are the top halves of their float32 bits.
  auto npy = encodeNpy(
      TensorData::fromValues<uint16_t>(DType::BF16, {2}, {0x3F80, 0xC020}),
      "b");
  ASSERT_TRUE(bool(npy));
  EXPECT_NE(headerOf(*npy).find("'descr': '<f4'"), std::string::npos);
  std::string data = dataOf(*npy);
  ASSERT_EQ(data.size(), 8u);
  float widened[2];
  std::memcpy(widened, data.data(), 8);
  EXPECT_EQ(widened[0], 1.0f);
  EXPECT_EQ(widened[1], -2.5f);
}

TEST(GradientDumpTest, OtherDTypesAreRefused) {
  auto npy = encodeNpy(TensorData::fromValues<int64_t>(DType::I64, {2}, {1, 2}),
                       "steps");
  ASSERT_FALSE(bool(npy));
  std::string message = llvm::toString(npy.takeError());
  EXPECT_NE(message.find("the gradient of 'steps' is i64[2]"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("float32, float64, float16 and bfloat16"),
            std::string::npos);
}

TEST(GradientDumpTest, FileNamesAreSafeAndDistinct) {
  std::string longName(300, 'x');
  std::vector<std::string> files =
      gradientFileNames({"fc1.weight", "onnx::MatMul_1", "a/b", "a:b", "A_b",
                         ".hidden", "..", "", longName});
  ASSERT_EQ(files.size(), 9u);
  EXPECT_EQ(files[0], "fc1.weight.npy");
  EXPECT_EQ(files[1], "onnx__MatMul_1.npy");
  EXPECT_EQ(files[2], "a_b.npy");
  EXPECT_EQ(files[3], "a_b-2.npy");
  // Distinct from a_b.npy also on a file system that ignores case.
  EXPECT_EQ(files[4], "A_b-3.npy");
  EXPECT_EQ(files[5], "_hidden.npy");
  EXPECT_EQ(files[6], "_..npy");
  EXPECT_EQ(files[7], "_.npy");
  EXPECT_EQ(files[8], std::string(200, 'x') + ".npy");
}

} // namespace
