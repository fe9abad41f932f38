//===- OnnxTensorImportTest.cpp - ONNX tensor encodings -------------------===//
//
// Tests of the TensorProto conversions in OnnxTensor.h (typed fields for
// every dtype, raw_data stealing, type conversion, malformed tensors) and of
// external data through import: files mapped in place, the errors, and
// links that must stay inside the model directory.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/Onnx.h"

#include "OnnxTestModels.h"
#include "TestSupport.h"
#include "ir/Module.h"
#include "ir/serialization/OnnxTensor.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <sys/stat.h>
#include <unistd.h>

using namespace gmopt;
using namespace gmopt::test;
using TP = onnx::TensorProto;

namespace {

//===----------------------------------------------------------------------===//
// Tensor encodings
//===----------------------------------------------------------------------===//

TEST(OnnxTensor, TypedFieldsForEveryDType) {
  auto check = [](TP tensor, DType dtype, std::vector<uint8_t> expected) {
    llvm::Expected<TensorData> data = importTensor(tensor, nullptr);
    ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
    EXPECT_EQ(data->getType().getDType(), dtype);
    EXPECT_EQ(
        std::vector<uint8_t>(data->getBytes().begin(), data->getBytes().end()),
        expected)
        << dtypeName(dtype).str();
  };
  auto make = [](int32_t dtype, std::vector<int64_t> dims) {
    TP t;
    t.set_name("t");
    t.set_data_type(dtype);
    for (int64_t d : dims)
      t.add_dims(d);
    return t;
  };
  auto bytesOf = [](auto... values) {
    std::vector<uint8_t> bytes;
    auto append = [&](auto v) {
      const auto *p = reinterpret_cast<const uint8_t *>(&v);
      bytes.insert(bytes.end(), p, p + sizeof(v));
    };
    (append(values), ...);
    return bytes;
  };

  TP f32 = make(TP::FLOAT, {2});
  f32.add_float_data(1.5f);
  f32.add_float_data(-2.0f);
  check(f32, DType::F32, bytesOf(1.5f, -2.0f));

  TP c64 = make(TP::COMPLEX64, {1});
  c64.add_float_data(1.0f);
  c64.add_float_data(2.0f);
  check(c64, DType::C64, bytesOf(1.0f, 2.0f));

  TP f64 = make(TP::DOUBLE, {1});
  f64.add_double_data(0.25);
  check(f64, DType::F64, bytesOf(0.25));

  TP c128 = make(TP::COMPLEX128, {1});
  c128.add_double_data(3.0);
  c128.add_double_data(4.0);
  check(c128, DType::C128, bytesOf(3.0, 4.0));

  TP i64 = make(TP::INT64, {2});
  i64.add_int64_data(-1);
  i64.add_int64_data(1LL << 40);
  check(i64, DType::I64, bytesOf(int64_t(-1), int64_t(1LL << 40)));

  TP u64 = make(TP::UINT64, {1});
  u64.add_uint64_data(~0ULL);
  check(u64, DType::U64, bytesOf(uint64_t(~0ULL)));

  TP u32 = make(TP::UINT32, {1});
  u32.add_uint64_data(0xdeadbeefULL);
  check(u32, DType::U32, bytesOf(uint32_t(0xdeadbeef)));

  TP i32 = make(TP::INT32, {1});
  i32.add_int32_data(-5);
  check(i32, DType::I32, bytesOf(int32_t(-5)));

  TP i16 = make(TP::INT16, {2});
  i16.add_int32_data(-2);
  i16.add_int32_data(300);
  check(i16, DType::I16, bytesOf(int16_t(-2), int16_t(300)));

  TP u16 = make(TP::UINT16, {1});
  u16.add_int32_data(65535);
  check(u16, DType::U16, bytesOf(uint16_t(65535)));

  TP f16 = make(TP::FLOAT16, {1});
  f16.add_int32_data(0x3c00); // 1.0
  check(f16, DType::F16, bytesOf(uint16_t(0x3c00)));

  TP bf16 = make(TP::BFLOAT16, {1});
  bf16.add_int32_data(0x3f80); // 1.0
  check(bf16, DType::BF16, bytesOf(uint16_t(0x3f80)));

  TP i8 = make(TP::INT8, {2});
  i8.add_int32_data(-1);
  i8.add_int32_data(127);
  check(i8, DType::I8, bytesOf(int8_t(-1), int8_t(127)));

  TP u8 = make(TP::UINT8, {1});
  u8.add_int32_data(200);
  check(u8, DType::U8, bytesOf(uint8_t(200)));

  TP boolean = make(TP::BOOL, {3});
  boolean.add_int32_data(0);
  boolean.add_int32_data(1);
  boolean.add_int32_data(5);
  check(boolean, DType::Bool, {0, 1, 1});

  TP f8 = make(int32_t(DType::F8E4M3FN), {1});
  f8.add_int32_data(0x38);
  check(f8, DType::F8E4M3FN, {0x38});

  // Three 4-bit values packed into two bytes, one int32 per byte.
  TP i4 = make(int32_t(DType::I4), {3});
  i4.add_int32_data(0x21);
  i4.add_int32_data(0x03);
  check(i4, DType::I4, {0x21, 0x03});

  TP empty = make(TP::FLOAT, {2, 0});
  check(empty, DType::F32, {});

  TP raw = make(TP::INT32, {2});
  raw.set_raw_data(std::string("\x01\x00\x00\x00\x02\x00\x00\x00", 8));
  check(raw, DType::I32, bytesOf(int32_t(1), int32_t(2)));
}

TEST(OnnxTensor, RejectsMalformedTensors) {
  auto message = [](const TP &t) { return errorOf(importTensor(t, nullptr)); };
  TP count;
  count.set_name("w");
  count.set_data_type(TP::FLOAT);
  count.add_dims(3);
  count.add_float_data(1);
  EXPECT_EQ(message(count), "tensor 'w': float_data has 1 values, expected 3");

  TP none;
  none.set_name("w");
  none.set_data_type(TP::INT64);
  none.add_dims(2);
  EXPECT_EQ(message(none), "tensor 'w': has no data (2 elements expected)");

  TP str;
  str.set_name("s");
  str.set_data_type(TP::STRING);
  str.add_string_data("x");
  EXPECT_EQ(message(str), "tensor 's': string tensors are not supported");

  TP seg;
  seg.set_name("w");
  seg.set_data_type(TP::FLOAT);
  seg.mutable_segment()->set_begin(0);
  EXPECT_EQ(message(seg), "tensor 'w': segmented tensors are not supported");

  TP negative;
  negative.set_name("w");
  negative.set_data_type(TP::FLOAT);
  negative.add_dims(-1);
  EXPECT_EQ(message(negative), "tensor 'w': negative dimension -1");

  TP huge;
  huge.set_name("w");
  huge.set_data_type(TP::FLOAT);
  for (int i = 0; i < 4; ++i)
    huge.add_dims(1LL << 20);
  EXPECT_EQ(message(huge), "tensor 'w': type f32[1048576,1048576,1048576,"
                           "1048576] is larger than gmopt's limit of 2^50 "
                           "bytes per tensor");

  TP badType;
  badType.set_name("w");
  badType.set_data_type(99);
  EXPECT_EQ(message(badType), "tensor 'w': unknown element type 99");
}

TEST(OnnxTensor, StealingMovesRawDataOut) {
  TP t;
  t.set_name("w");
  t.set_data_type(TP::FLOAT);
  t.add_dims(2);
  t.set_raw_data(std::string(8, '\x01'));
  const char *before = t.raw_data().data();
  llvm::Expected<TensorData> data = importTensorStealing(t, nullptr);
  ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
  // The TensorData views the very buffer the proto held.
  EXPECT_EQ(reinterpret_cast<const char *>(data->getBytes().data()), before);
  EXPECT_FALSE(t.has_raw_data());
  EXPECT_EQ(data->getBytes().size(), 8u);
}

TEST(OnnxTensor, TypeConversion) {
  onnx::TypeProto type;
  ModelBuilder::setType(type, TP::FLOAT, {"b", 3});
  type.mutable_tensor_type()->mutable_shape()->add_dim(); // unknown
  llvm::Expected<TensorType> t = importType(type, "v");
  ASSERT_TRUE(bool(t));
  EXPECT_EQ(*t, TensorType(DType::F32, {Dim::symbolic("b"), Dim::fixed(3),
                                        Dim::unknown()}));
  onnx::TypeProto back;
  exportType(*t, back);
  EXPECT_EQ(back.SerializeAsString(), type.SerializeAsString());

  onnx::TypeProto unranked;
  unranked.mutable_tensor_type()->set_elem_type(TP::INT64);
  t = importType(unranked, "v");
  ASSERT_TRUE(bool(t));
  EXPECT_FALSE(t->hasRank());
  EXPECT_EQ(t->getDType(), DType::I64);

  onnx::TypeProto bad;
  bad.mutable_tensor_type()->set_elem_type(77);
  EXPECT_EQ(errorOf(importType(bad, "value 'v'")),
            "value 'v' has unknown element type 77");
}

//===----------------------------------------------------------------------===//
// External data
//===----------------------------------------------------------------------===//

TEST(OnnxImportExternal, ViewsMappedFileInPlace) {
  TempDir dir;
  std::vector<float> a = {1, 2, 3, 4}, c = {5, 6};
  std::string blob(64, '\0');
  std::memcpy(&blob[0], a.data(), 16);
  std::memcpy(&blob[32], c.data(), 8);
  dir.write("weights.bin", blob);

  ModelBuilder b;
  b.input("x", TP::FLOAT, {4});
  b.input("y", TP::FLOAT, {2});
  makeExternal(b.initializer<float>("a", TP::FLOAT, {4}, {}), "weights.bin", 0,
               16);
  makeExternal(b.initializer<float>("c", TP::FLOAT, {2}, {}), "weights.bin",
               32);
  b.node("Add", {"x", "a"}, {"s"}, "add0");
  b.node("Add", {"y", "c"}, {"t"}, "add1");
  b.output("s", TP::FLOAT, {4});
  b.output("t", TP::FLOAT, {2});
  dir.write("model.onnx", b.bytes());

  auto module = importOnnxFile(dir.file("model.onnx"));
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  const Graph &g = (*module)->getGraph();
  const TensorData &da = g.lookupValue("a")->getData();
  const TensorData &dc = g.lookupValue("c")->getData();
  EXPECT_EQ(da.getFloatElement(3), 4.0);
  EXPECT_EQ(dc.getFloatElement(0), 5.0);
  // Both tensors view one mapping of the file rather than copies.
  EXPECT_EQ(dc.getBytes().data() - da.getBytes().data(), 32);

  // An explicit directory overrides the model's own.
  OnnxImportOptions options;
  options.externalDataDir = std::string(dir.path);
  auto fromBytes = importOnnxBytes(b.bytes(), "elsewhere/m.onnx", options);
  ASSERT_TRUE(bool(fromBytes)) << llvm::toString(fromBytes.takeError());
}

TEST(OnnxImportExternal, Errors) {
  TempDir dir;
  dir.write("small.bin", std::string(8, '\0'));
  auto importWith = [&](const std::string &location, uint64_t offset,
                        std::optional<uint64_t> length = std::nullopt) {
    ModelBuilder b;
    b.input("x", TP::FLOAT, {4});
    makeExternal(b.initializer<float>("w", TP::FLOAT, {4}, {}), location,
                 offset, length);
    b.node("Add", {"x", "w"}, {"s"}, "add0");
    b.output("s");
    dir.write("model.onnx", b.bytes());
    return errorOf(importOnnxFile(dir.file("model.onnx")));
  };
  std::string model = dir.file("model.onnx");
  EXPECT_EQ(importWith("small.bin", 0),
            model + ": tensor 'w': external data (offset 0, 16 bytes) lies "
                    "outside 'small.bin' (8 bytes)");
  EXPECT_EQ(importWith("small.bin", 0, 8),
            model + ": tensor 'w': external data length 8 does not match the "
                    "16 bytes of its shape");
  EXPECT_EQ(importWith("/etc/passwd", 0),
            model + ": tensor 'w': external data location '/etc/passwd' must "
                    "be a relative path");
  EXPECT_EQ(importWith("../x.bin", 0),
            model + ": tensor 'w': external data location '../x.bin' leaves "
                    "the model directory");
  // A missing file is no import error (its bytes are read lazily); the
  // load names it.
  ModelBuilder b;
  b.input("x", TP::FLOAT, {4});
  makeExternal(b.initializer<float>("w", TP::FLOAT, {4}, {}), "missing.bin", 0);
  b.node("Add", {"x", "w"}, {"s"}, "add0");
  b.output("s");
  dir.write("model.onnx", b.bytes());
  auto imported = importOnnxFile(dir.file("model.onnx"));
  ASSERT_TRUE(bool(imported)) << llvm::toString(imported.takeError());
  std::string missing =
      errorOf((*imported)->getGraph().lookupValue("w")->getData().load());
  EXPECT_EQ(missing.rfind("cannot open external data file '" +
                              dir.file("missing.bin") + "': ",
                          0),
            0u)
      << missing;
}

TEST(OnnxImportExternal, LinksMustStayInsideTheModelDirectory) {
  TempDir dir;
  std::vector<float> values = {1, 2, 3, 4};
  std::string blob(16, '\0');
  std::memcpy(&blob[0], values.data(), 16);
  dir.write("weights.bin", blob);
  ASSERT_EQ(::symlink("weights.bin", dir.file("alias.bin").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/passwd", dir.file("passwd.bin").c_str()), 0);
  ASSERT_EQ(::symlink("/dev/zero", dir.file("zero.bin").c_str()), 0);
  ASSERT_EQ(::symlink("/etc", dir.file("etc").c_str()), 0);
  ASSERT_EQ(::mkfifo(dir.file("fifo.bin").c_str(), 0600), 0);
  auto importWith = [&](const std::string &location) {
    ModelBuilder b;
    b.input("x", TP::FLOAT, {4});
    makeExternal(b.initializer<float>("w", TP::FLOAT, {4}, {}), location, 0);
    b.node("Add", {"x", "w"}, {"s"}, "add0");
    b.output("s");
    dir.write("model.onnx", b.bytes());
    auto module = importOnnxFile(dir.file("model.onnx"));
    return module ? std::string("<success>")
                  : llvm::toString(module.takeError());
  };
  std::string model = dir.file("model.onnx");
  // A link that stays inside is followed.
  EXPECT_EQ(importWith("alias.bin"), "<success>");
  // Links out of the directory are refused before anything is read, so
  // nothing of the file can appear in a message.
  for (const char *location : {"passwd.bin", "zero.bin", "etc/passwd"}) {
    std::string message = importWith(location);
    EXPECT_EQ(message, model + ": tensor 'w': external data location '" +
                           location +
                           "' resolves to a file outside the model directory");
    EXPECT_EQ(message.find("root"), std::string::npos) << message;
  }
  // Inside, but not a regular file: refused without opening it (a FIFO
  // would block).
  llvm::SmallString<256> realFifo;
  ASSERT_FALSE(llvm::sys::fs::real_path(dir.file("fifo.bin"), realFifo));
  EXPECT_EQ(importWith("fifo.bin"),
            model + ": tensor 'w': external data location 'fifo.bin': " +
                realFifo.str().str() + ": is a FIFO, not a regular file");
}

} // namespace
