//===- ir_roundtrip_bench.cpp - Import/verify/export of a huge graph ------===//
//
// Builds a synthetic training graph of about 100,000 nodes as an ONNX
// ModelProto (an MLP forward pass and its backward pass in ONNX Runtime's
// style: parameters as graph inputs, ReluGrad, transposed MatMuls), then
// times each phase of gmopt's front end on it: protobuf parse + import (with
// type inference), a full verification, and export + serialization.
// Usage: ir_roundtrip_bench [--layers N]   (default 12500 -> 100,000 nodes)
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSupport.h"
#include "ir/Module.h"
#include "ir/Verifier.h"
#include "ir/serialization/Onnx.h"

#include "onnx/onnx_pb.h"

#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace gmopt::bench;

namespace {

void addNode(onnx::GraphProto *graph, const char *domain, const char *op,
             std::initializer_list<std::string> inputs,
             std::initializer_list<std::string> outputs) {
  onnx::NodeProto *node = graph->add_node();
  node->set_domain(domain);
  node->set_op_type(op);
  node->set_name(std::string(op) + "_" + std::to_string(graph->node_size()));
  for (const std::string &in : inputs)
    node->add_input(in);
  for (const std::string &out : outputs)
    node->add_output(out);
}

/// An MLP of \p layers square layers: forward h = Relu(h W + b), backward
/// with ReluGrad and the two MatMuls of each linear layer. 8 nodes a layer.
onnx::ModelProto buildModel(int layers) {
  const int64_t batch = 32, width = 64;
  onnx::ModelProto model = makeBenchModel("bench", true);
  onnx::GraphProto *graph = model.mutable_graph();
  setF32Type(graph->add_input(), "x", {batch, width});
  std::string h = "x";
  for (int l = 0; l < layers; ++l) {
    std::string p = "l" + std::to_string(l);
    setF32Type(graph->add_input(), p + ".w", {width, width});
    setF32Type(graph->add_input(), p + ".b", {width});
    addNode(graph, "", "MatMul", {h, p + ".w"}, {p + ".mm"});
    addNode(graph, "", "Add", {p + ".mm", p + ".b"}, {p + ".z"});
    addNode(graph, "", "Relu", {p + ".z"}, {p + ".h"});
    h = p + ".h";
  }
  std::string dh = "dy";
  setF32Type(graph->add_input(), "dy", {batch, width});
  for (int l = layers - 1; l >= 0; --l) {
    std::string p = "l" + std::to_string(l);
    std::string in = l == 0 ? "x" : "l" + std::to_string(l - 1) + ".h";
    addNode(graph, "com.microsoft", "ReluGrad", {dh, p + ".h"}, {p + ".dz"});
    addNode(graph, "", "Transpose", {in}, {p + ".inT"});
    addNode(graph, "", "MatMul", {p + ".inT", p + ".dz"}, {p + ".w_grad"});
    addNode(graph, "", "Transpose", {p + ".w"}, {p + ".wT"});
    addNode(graph, "", "MatMul", {p + ".dz", p + ".wT"}, {p + ".dh"});
    setF32Type(graph->add_output(), p + ".w_grad", {width, width});
    dh = p + ".dh";
  }
  setF32Type(graph->add_output(), dh, {batch, width});
  return model;
}

} // namespace

int main(int argc, char **argv) {
  int layers = 12500;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--layers") && i + 1 < argc)
      layers = std::atoi(argv[++i]);
  if (layers <= 0) {
    llvm::errs() << "ir_roundtrip_bench: --layers must be positive\n";
    return 1;
  }

  std::string bytes;
  buildModel(layers).SerializeToString(&bytes);

  auto start = std::chrono::steady_clock::now();
  gmopt::OnnxImportOptions importOptions;
  importOptions.verify = false;
  auto module = gmopt::importOnnxBytes(bytes, "bench.onnx", importOptions);
  if (!module) {
    llvm::errs() << "ir_roundtrip_bench: " << llvm::toString(module.takeError())
                 << "\n";
    return 1;
  }
  double importSeconds = secondsSince(start);

  start = std::chrono::steady_clock::now();
  if (auto err = gmopt::verifyModule(**module)) {
    llvm::errs() << "ir_roundtrip_bench: " << llvm::toString(std::move(err))
                 << "\n";
    return 1;
  }
  double verifySeconds = secondsSince(start);

  start = std::chrono::steady_clock::now();
  auto exported = gmopt::exportOnnxModel(**module);
  if (!exported) {
    llvm::errs() << "ir_roundtrip_bench: "
                 << llvm::toString(exported.takeError()) << "\n";
    return 1;
  }
  std::string out;
  exported->SerializeToString(&out);
  double exportSeconds = secondsSince(start);

  size_t nodes = (*module)->getGraph().getNumNodes();
  llvm::outs() << "nodes " << nodes << "\n"
               << "import_s " << importSeconds << "\n"
               << "verify_s " << verifySeconds << "\n"
               << "export_s " << exportSeconds << "\n"
               << "total_s " << importSeconds + verifySeconds + exportSeconds
               << "\n";
  return 0;
}
