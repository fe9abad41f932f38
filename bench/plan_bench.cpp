//===- plan_bench.cpp - Scheduling and planning a huge training graph -----===//
//
// Builds, in memory with the Builder, a training step of about 100,000
// nodes in ONNX Runtime's layout: an MLP forward pass (MatMul, Add, Relu),
// its backward pass (ReluGrad, Transpose, the two MatMuls, ReduceSum) with
// every parameter's gradient accumulated into a buffer input by
// InPlaceAccumulatorV2, all with static shapes. Then it times the schedule
// pass and the plan-buffers pass (the budget: under a second for
// both in a Release build) and prints the plan's figures.
// Usage: plan_bench [--layers N] [--pipeline P]
//        (default 9091 layers -> 100,001 nodes; pipeline
//         "schedule,plan-buffers")
//
//===----------------------------------------------------------------------===//

#include "passes/Pass.h"
#include "passes/PassRegistry.h"

#include "bench/BenchSupport.h"
#include "ir/Module.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace gmopt;
using namespace gmopt::bench;

namespace {

TensorType f32(llvm::ArrayRef<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

/// The training step of an MLP of \p layers square layers: 3 forward and 8
/// backward nodes per layer.
void buildTrainingGraph(Module &module, int layers) {
  const int64_t batch = 32, width = 64;
  module.opsetImports[""] = 17;
  module.opsetImports["com.microsoft"] = 1;
  Graph &graph = module.getGraph();
  Builder b(graph);
  Value *x = graph.addInput(f32({batch, width}), "x");
  Value *reset =
      graph.addInput(TensorType::get(DType::Bool, {1}), "lazy_reset_grad");
  Value *axes = graph.addInitializer(
      TensorData::fromValues<int64_t>(DType::I64, {1}, {0}), "axes");
  auto named = [](Node *node, const std::string &name) {
    node->setName(name);
    node->getResult(0)->setName(name);
    return node->getResult(0);
  };

  struct Layer {
    Value *w, *b, *wBuffer, *bBuffer, *in, *out;
  };
  std::vector<Layer> stack;
  Value *h = x;
  for (int l = 0; l < layers; ++l) {
    std::string p = "l" + std::to_string(l);
    Layer layer;
    layer.w = graph.addInput(f32({width, width}), p + ".w");
    layer.b = graph.addInput(f32({width}), p + ".b");
    layer.wBuffer = graph.addInput(f32({width, width}), p + ".w_grad.buffer");
    layer.bBuffer = graph.addInput(f32({width}), p + ".b_grad.buffer");
    layer.in = h;
    Value *mm =
        named(b.create({"", "MatMul"}, {h, layer.w}, {f32({batch, width})}),
              p + ".mm");
    Value *z = named(
        b.create({"", "Add"}, {mm, layer.b}, {f32({batch, width})}), p + ".z");
    h = named(b.create({"", "Relu"}, {z}, {f32({batch, width})}), p + ".h");
    layer.out = h;
    stack.push_back(layer);
  }
  Value *loss = named(b.create({"", "ReduceSum"}, {h}, {f32({})}), "loss");
  graph.addOutput(loss);
  Value *dh = named(b.create({"", "Neg"}, {h}, {f32({batch, width})}), "dy");
  for (int l = layers - 1; l >= 0; --l) {
    const Layer &layer = stack[l];
    std::string p = "l" + std::to_string(l);
    Value *dz = named(b.create({"com.microsoft", "ReluGrad"}, {dh, layer.out},
                               {f32({batch, width})}),
                      p + ".dz");
    Value *inT =
        named(b.create({"", "Transpose"}, {layer.in}, {f32({width, batch})},
                       {{"perm", Attribute::getInts({1, 0})}}),
              p + ".inT");
    Value *dw =
        named(b.create({"", "MatMul"}, {inT, dz}, {f32({width, width})}),
              p + ".w_grad");
    Value *db = named(b.create({"", "ReduceSum"}, {dz, axes}, {f32({width})},
                               {{"keepdims", Attribute::getInt(0)}}),
                      p + ".b_grad");
    Value *wT =
        named(b.create({"", "Transpose"}, {layer.w}, {f32({width, width})},
                       {{"perm", Attribute::getInts({1, 0})}}),
              p + ".wT");
    dh = named(b.create({"", "MatMul"}, {dz, wT}, {f32({batch, width})}),
               p + ".dx");
    for (auto [buffer, grad] :
         {std::pair{layer.wBuffer, dw}, {layer.bBuffer, db}}) {
      Node *acc =
          b.create({"com.microsoft", "InPlaceAccumulatorV2"},
                   {buffer, grad, reset}, {TensorType::get(DType::Bool, {1})});
      graph.addOutput(acc->getResult(0));
    }
  }
  graph.addOutput(dh);
}

} // namespace

int main(int argc, char **argv) {
  int layers = 9091;
  std::string pipeline = "schedule,plan-buffers";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--layers") && i + 1 < argc)
      layers = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--pipeline") && i + 1 < argc)
      pipeline = argv[++i];
    else {
      llvm::errs() << "usage: plan_bench [--layers N] [--pipeline P]\n";
      return 2;
    }
  }

  Module module;
  auto start = std::chrono::steady_clock::now();
  buildTrainingGraph(module, layers);
  inferTrainingSignature(module);
  inferNodePhases(module);
  llvm::outs() << "graph: " << module.getGraph().getNumNodes() << " nodes, "
               << module.getGraph().countValues() << " values, built in "
               << llvm::format("%.3f", secondsSince(start)) << " s\n";

  auto passes = createPipeline(pipeline);
  if (!passes) {
    llvm::errs() << "plan_bench: error: " << llvm::toString(passes.takeError())
                 << "\n";
    return 1;
  }
  PassContext context;
  double total = 0;
  for (auto &pass : *passes) {
    start = std::chrono::steady_clock::now();
    auto changed = pass->run(module, context);
    double seconds = secondsSince(start);
    if (!changed) {
      llvm::errs() << "plan_bench: error: " << pass->getName() << ": "
                   << llvm::toString(changed.takeError()) << "\n";
      return 1;
    }
    total += seconds;
    llvm::outs() << llvm::format("%-14s %.3f s", pass->getName().str().c_str(),
                                 seconds)
                 << (*changed ? "  (changed)" : "") << "\n";
  }
  llvm::outs() << llvm::format("total          %.3f s\n", total);
  const ExecutionPlan &plan = module.plan;
  if (!plan.empty()) {
    const MemoryFigures &figures = plan.figures;
    llvm::outs() << "LOAD " << figures.lowerBoundBytes << " B at step "
                 << figures.lowerBoundStep << ", arena " << plan.arenaBytes
                 << llvm::format(" B (x%.4f)", figures.fragmentation() + 1)
                 << ", eager estimate " << figures.eagerEstimateBytes
                 << " B, planned " << figures.plannedBytes() << " B\n";
  }
  context.printStatistics(llvm::outs());
  return 0;
}
