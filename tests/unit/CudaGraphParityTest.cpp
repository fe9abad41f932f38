//===- CudaGraphParityTest.cpp - Testdata graphs on CUDA vs the CPU -------===//
//
// Whole-graph gradient parity: every testdata graph (TestdataTraining.h's
// kTestdataGraphs, plus gpt_tiny_dropout on gpt_tiny's batch) trained for
// two steps on ONNX Runtime's reference inputs on the CPU backend and on the
// CUDA backend, planned (with the CUDA workspace model) and eager; each
// step's loss and the last step's gradient of every trainable parameter
// must agree. fp32 throughout: the backends sum GEMMs (cuBLASLt against
// OpenBLAS), convolutions (cuDNN against im2col) and the softmax and norm
// rows in other orders, so a gradient element may differ by about 1e-4 of
// its tensor's largest magnitude (an element near zero carries the
// absolute error of the sums that cancelled to it) plus 1e-3 of its own,
// and a loss by 1e-5 + 1e-4 of itself. Random nodes (gpt_tiny_dropout)
// draw the same Philox masks on both backends. With --cuda-graph
// (ExecutorOptions::cudaGraph) three planned steps - warm-up, captured,
// replayed - must agree the same way: the replay reads the step, learning
// rate and update count on the device. Without a GPU the CUDA half
// skips with the probe's reason; the CPU half (the CPU step runs to finite
// figures, and the module is planned for CUDA and accepted by its kernel
// table) runs in every build.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDevice.h"

#include "backend/Executor.h"
#include "tests/unit/BackendStep.h"
#include "tests/unit/TestPaths.h"
#include "tests/unit/TestdataTraining.h"
#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace gmopt;

namespace {

/// A testdata graph, its dimension bindings and the folder of its
/// reference batch.
struct GraphCase {
  std::string name;
  std::map<std::string, int64_t> dims;
  std::string dataName;
};

/// How GoogleTest names a case in its output (and ctest's test names).
void PrintTo(const GraphCase &graph, std::ostream *out) { *out << graph.name; }

std::vector<GraphCase> graphCases() {
  std::vector<GraphCase> cases;
  for (const gmopt::testing::TestdataGraph &graph :
       gmopt::testing::kTestdataGraphs)
    cases.push_back(
        {graph.name, gmopt::testing::testdataDims(graph), graph.name});
  // Dropout in every block: its masks must be the CPU's on the device.
  cases.push_back({"gpt_tiny_dropout",
                   {{"batch", 4}, {"batch_x_seq", 4 * 64}},
                   "gpt_tiny"});
  return cases;
}

/// \p c loaded for \p backend (planned with its workspace model) with the
/// reference inputs bound.
struct LoadedGraph {
  RunnableModel model;
  std::vector<BoundInput> inputs;
};

std::optional<LoadedGraph> loadGraph(const GraphCase &c, BackendKind backend) {
  auto data =
      readTestDataSet(testdataDir() + "/" + c.dataName + "/test_data_set_0");
  EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
  if (!data)
    return std::nullopt;
  auto model = loadRunnableModel(
      testdataDir() + "/" + c.name + "/training_model.onnx", c.dims, nullptr,
      /*wantOriginal=*/false, "", nullptr, "", backend);
  EXPECT_TRUE(bool(model)) << llvm::toString(model.takeError());
  if (!model)
    return std::nullopt;
  InputSources sources;
  sources.testData = &*data;
  auto inputs = bindInputs(*model->module, sources);
  EXPECT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
  if (!inputs)
    return std::nullopt;
  return LoadedGraph{std::move(*model), std::move(*inputs)};
}

/// Two steps of \p graph on \p backend in \p mode.
llvm::Expected<TrainingResult> trainTwoSteps(const LoadedGraph &graph,
                                             BackendKind backend,
                                             AllocationMode mode) {
  TrainingOptions options;
  options.steps = 2;
  options.backend = backend;
  options.executor.mode = mode;
  return trainModule(*graph.model.module, graph.inputs, options);
}

/// Three planned steps of \p graph on \p backend, with the step captured
/// into a CUDA graph (\p cudaGraph: warm-up, capture, replay).
llvm::Expected<TrainingResult>
trainThreeSteps(const LoadedGraph &graph, BackendKind backend, bool cudaGraph) {
  TrainingOptions options;
  options.steps = 3;
  options.backend = backend;
  options.executor.cudaGraph = cudaGraph;
  return trainModule(*graph.model.module, graph.inputs, options);
}

/// The largest magnitude in \p tensor.
double largestMagnitude(const TensorData &tensor) {
  double largest = 0;
  for (uint64_t k = 0; k < tensor.getNumElements(); ++k)
    largest = std::max(largest, std::fabs(tensor.getFloatElement(k)));
  return largest;
}

/// The graphs whose convolutions and batch norms run on cuDNN.
bool needsCudnn(llvm::StringRef name) {
  return name == "cnn" || name == "cnn_bn" || name == "resnet_tiny";
}

class CudaGraphParityTest : public ::testing::TestWithParam<GraphCase> {};

} // namespace

TEST_P(CudaGraphParityTest, CpuStepIsFiniteAndTheCudaPlanIsMade) {
  // The CPU half, in every build.
  const GraphCase &c = GetParam();
  std::optional<LoadedGraph> onCpu = loadGraph(c, BackendKind::Cpu);
  ASSERT_TRUE(onCpu);
  auto cpu = trainTwoSteps(*onCpu, BackendKind::Cpu, AllocationMode::Planned);
  ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
  ASSERT_EQ(cpu->losses.size(), 2u);
  for (double loss : cpu->losses)
    EXPECT_TRUE(std::isfinite(loss)) << loss;
  ASSERT_FALSE(cpu->lastGradients.empty());
  for (const auto &[name, gradient] : cpu->lastGradients) {
    ASSERT_GT(gradient.getNumElements(), 0u) << name;
    for (uint64_t k = 0; k < gradient.getNumElements(); ++k)
      ASSERT_TRUE(std::isfinite(gradient.getFloatElement(k)))
          << name << " element " << k;
  }
  // The module the CUDA half runs: planned for the CUDA workspace model
  // and, where the backend is built, accepted by its kernel table.
  std::optional<LoadedGraph> onCuda = loadGraph(c, BackendKind::Cuda);
  ASSERT_TRUE(onCuda);
  EXPECT_EQ(onCuda->model.module->plan.workspaceModel,
            kCudaWorkspaceModelName.str());
  if (isCudaBackendBuilt() && (isCudnnBuilt() || !needsCudnn(c.name)))
    if (llvm::Error err = checkCudaModule(*onCuda->model.module))
      ADD_FAILURE() << llvm::toString(std::move(err));
}

TEST_P(CudaGraphParityTest, LossAndGradientsMatchTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  const GraphCase &c = GetParam();
  std::optional<LoadedGraph> onCpu = loadGraph(c, BackendKind::Cpu);
  std::optional<LoadedGraph> onCuda = loadGraph(c, BackendKind::Cuda);
  ASSERT_TRUE(onCpu && onCuda);
  if (llvm::Error err = checkCudaModule(*onCuda->model.module)) {
    if (!isCudnnBuilt())
      GTEST_SKIP() << "this machine has no cuDNN (no cudnn.h when configured): "
                   << llvm::toString(std::move(err));
    FAIL() << llvm::toString(std::move(err));
  }
  auto cpu = trainTwoSteps(*onCpu, BackendKind::Cpu, AllocationMode::Planned);
  ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
  for (AllocationMode mode : {AllocationMode::Planned, AllocationMode::Eager}) {
    SCOPED_TRACE(mode == AllocationMode::Planned ? "planned" : "eager");
    auto cuda = trainTwoSteps(*onCuda, BackendKind::Cuda, mode);
    ASSERT_TRUE(bool(cuda)) << llvm::toString(cuda.takeError());
    ASSERT_EQ(cpu->losses.size(), cuda->losses.size());
    for (size_t s = 0; s < cpu->losses.size(); ++s)
      EXPECT_NEAR(cuda->losses[s], cpu->losses[s],
                  1e-5 + 1e-4 * std::fabs(cpu->losses[s]))
          << "loss of step " << s;
    ASSERT_EQ(cpu->lastGradients.size(), cuda->lastGradients.size());
    for (size_t i = 0; i < cpu->lastGradients.size(); ++i) {
      const auto &[name, expected] = cpu->lastGradients[i];
      const TensorData &actual = cuda->lastGradients[i].second;
      EXPECT_EQ(cuda->lastGradients[i].first, name);
      ASSERT_EQ(expected.getNumElements(), actual.getNumElements()) << name;
      double scale = largestMagnitude(expected);
      for (uint64_t k = 0; k < expected.getNumElements(); ++k) {
        double e = expected.getFloatElement(k), a = actual.getFloatElement(k);
        ASSERT_NEAR(a, e, 1e-4 * scale + 1e-3 * std::fabs(e))
            << name << " element " << k << " (largest magnitude " << scale
            << ")";
      }
    }
  }
}

TEST_P(CudaGraphParityTest, CudaGraphReplaysMatchTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  const GraphCase &c = GetParam();
  std::optional<LoadedGraph> onCpu = loadGraph(c, BackendKind::Cpu);
  std::optional<LoadedGraph> onCuda = loadGraph(c, BackendKind::Cuda);
  ASSERT_TRUE(onCpu && onCuda);
  if (llvm::Error err = checkCudaModule(*onCuda->model.module)) {
    if (!isCudnnBuilt())
      GTEST_SKIP() << "this machine has no cuDNN (no cudnn.h when configured): "
                   << llvm::toString(std::move(err));
    FAIL() << llvm::toString(std::move(err));
  }
  auto cpu = trainThreeSteps(*onCpu, BackendKind::Cpu, false);
  ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
  auto cuda = trainThreeSteps(*onCuda, BackendKind::Cuda, true);
  ASSERT_TRUE(bool(cuda)) << llvm::toString(cuda.takeError());
  ASSERT_EQ(cuda->losses.size(), 3u);
  for (size_t s = 0; s < cpu->losses.size(); ++s)
    EXPECT_NEAR(cuda->losses[s], cpu->losses[s],
                1e-5 + 1e-4 * std::fabs(cpu->losses[s]))
        << "loss of step " << s;
  ASSERT_EQ(cpu->lastGradients.size(), cuda->lastGradients.size());
  for (size_t i = 0; i < cpu->lastGradients.size(); ++i) {
    const auto &[name, expected] = cpu->lastGradients[i];
    const TensorData &actual = cuda->lastGradients[i].second;
    ASSERT_EQ(expected.getNumElements(), actual.getNumElements()) << name;
    double scale = largestMagnitude(expected);
    for (uint64_t k = 0; k < expected.getNumElements(); ++k) {
      double e = expected.getFloatElement(k), a = actual.getFloatElement(k);
      ASSERT_NEAR(a, e, 1e-4 * scale + 1e-3 * std::fabs(e))
          << name << " element " << k << " of the replayed step";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Testdata, CudaGraphParityTest,
                         ::testing::ValuesIn(graphCases()),
                         [](const ::testing::TestParamInfo<GraphCase> &info) {
                           return info.param.name;
                         });
