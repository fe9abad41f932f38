//===- extdata_import_bench.cpp - Import time of many external weights ----===//
//
// Times the import of models whose N initializers all live in an
// external-data file that is not there (as when compiling without the
// weights): a chain y = ((x + w0) * w1) + ... of N nodes over N
// initializers of f32[64], each an external-data reference. Import reads
// none of them, so its time should grow linearly with N. Prints one line per
// size: N, protobuf parse + import seconds, and microseconds per
// initializer.
// Usage: extdata_import_bench [N ...]   (default 1000 10000 100000)
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSupport.h"
#include "ir/Module.h"
#include "ir/serialization/Onnx.h"

#include "onnx/onnx_pb.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

using namespace gmopt::bench;

namespace {

/// The chain of \p n nodes over \p n external initializers of f32[64].
onnx::ModelProto buildModel(int n) {
  constexpr int64_t kWidth = 64;
  onnx::ModelProto model = makeBenchModel("extdata_bench", false);
  onnx::GraphProto *graph = model.mutable_graph();
  setF32Type(graph->add_input(), "x", {kWidth});
  std::string last = "x";
  for (int i = 0; i < n; ++i) {
    std::string weight = "w" + std::to_string(i);
    onnx::TensorProto *tensor = graph->add_initializer();
    tensor->set_name(weight);
    tensor->set_data_type(onnx::TensorProto::FLOAT);
    tensor->add_dims(kWidth);
    tensor->set_data_location(onnx::TensorProto::EXTERNAL);
    auto addEntry = [&](const char *key, const std::string &value) {
      onnx::StringStringEntryProto *entry = tensor->add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    };
    addEntry("location", "weights.bin");
    addEntry("offset", std::to_string(uint64_t(i) * kWidth * 4));
    addEntry("length", std::to_string(kWidth * 4));
    onnx::NodeProto *node = graph->add_node();
    node->set_op_type(i % 2 ? "Mul" : "Add");
    node->set_name("n" + std::to_string(i));
    node->add_input(last);
    node->add_input(weight);
    last = "v" + std::to_string(i);
    node->add_output(last);
  }
  setF32Type(graph->add_output(), last, {kWidth});
  return model;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i)
    sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty())
    sizes = {1000, 10000, 100000};
  // The weights file is never created: a relative location in an empty
  // directory.
  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("gmopt-extdata-bench", dir)) {
    llvm::errs() << "extdata_import_bench: " << ec.message() << '\n';
    return 1;
  }
  llvm::SmallString<128> modelPath(dir);
  llvm::sys::path::append(modelPath, "model.onnx");
  llvm::outs() << "initializers  import_s  us_per_initializer  unread\n";
  for (int n : sizes) {
    std::string bytes = buildModel(n).SerializeAsString();
    auto start = std::chrono::steady_clock::now();
    auto module = gmopt::importOnnxBytes(bytes, modelPath);
    double seconds = secondsSince(start);
    if (!module) {
      llvm::errs() << "extdata_import_bench: "
                   << llvm::toString(module.takeError()) << '\n';
      return 1;
    }
    size_t unread = 0;
    for (const auto &init : (*module)->getGraph().getInitializers())
      unread += init->getData().isExternal() && !init->getData().isLoaded();
    llvm::outs() << llvm::format("%12d  %8.3f  %18.2f  %6zu\n", n, seconds,
                                 seconds * 1e6 / n, unread);
  }
  (void)llvm::sys::fs::remove_directories(dir);
  return 0;
}
