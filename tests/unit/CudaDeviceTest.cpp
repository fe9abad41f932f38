//===- CudaDeviceTest.cpp - Unit tests of the CUDA device -----------------===//
//
// On a machine without a GPU (CI) probing must fail cleanly with "no CUDA
// device"; without the toolkit it must say the backend is not built; with a
// GPU it must describe the device. Never a crash. Preparing a module on
// CUDA without a device fails with the probe's reason. The device tests
// (CudaExecutorTest) need a GPU and skip with a message elsewhere: the MLP
// testdata graph trained on CUDA (planned and eager) must reproduce ONNX
// Runtime's reference gradients and loss like the CPU backend does, the
// measured memory must match the plan and be covered by the device's own
// figures (pool high-water marks, cudaMemGetInfo, whose free-memory delta
// agrees with the accounted bytes within the stated tolerance), and step
// times (CUDA events) must be positive and within the run's wall time.
// --backend=auto's fallback for a node without a CUDA kernel is decided without
// a device.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDevice.h"

#include "backend/Executor.h"
#include "tests/unit/BackendStep.h"
#include "tests/unit/TestPaths.h"
#include "tests/unit/TestdataTraining.h"
#include "tools/driver/RunReport.h"
#include "tools/driver/RunSession.h"
#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "llvm/Support/FileSystem.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

std::string mlpDir() { return testdataDir() + "/mlp"; }

/// The MLP training graph, planned for \p backend, and its ORT reference.
struct MlpCase {
  RunnableModel model;
  TestDataSet data;
};

std::optional<MlpCase> loadMlp(BackendKind backend) {
  auto data = readTestDataSet(mlpDir() + "/test_data_set_0");
  EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
  if (!data)
    return std::nullopt;
  auto model = loadRunnableModel(
      mlpDir() + "/training_model.onnx", {{"batch", 8}}, nullptr,
      /*wantOriginal=*/false, "", nullptr, "", backend);
  EXPECT_TRUE(bool(model)) << llvm::toString(model.takeError());
  if (!model)
    return std::nullopt;
  return MlpCase{std::move(*model), std::move(*data)};
}

} // namespace

TEST(CudaDeviceTest, ProbeSucceedsOrSaysWhy) {
  auto device = probeCudaDevice();
  if (device) {
    EXPECT_TRUE(isCudaBackendBuilt());
    EXPECT_FALSE(device->name.empty());
    EXPECT_GT(device->totalMemoryBytes, 0u);
    EXPECT_GE(device->computeMajor, 3);
    return;
  }
  std::string message = llvm::toString(device.takeError());
  if (isCudaBackendBuilt())
    EXPECT_EQ(message.rfind("no CUDA device", 0), 0u) << message;
  else
    EXPECT_NE(message.find("not built"), std::string::npos) << message;
}

TEST(CudaDeviceTest, RepeatedProbesAgree) {
  auto first = probeCudaDevice();
  auto second = probeCudaDevice();
  EXPECT_EQ(bool(first), bool(second));
  if (!first)
    llvm::consumeError(first.takeError());
  if (!second)
    llvm::consumeError(second.takeError());
}

TEST(CudaDeviceTest, PreparingWithoutADeviceSaysWhy) {
  if (probeCudaDevice())
    GTEST_SKIP() << "a CUDA device is present";
  std::optional<MlpCase> mlp = loadMlp(BackendKind::Cpu);
  ASSERT_TRUE(mlp);
  ExecutorOptions options;
  auto executable = prepareCudaExecutable(*mlp->model.module, options);
  ASSERT_FALSE(bool(executable));
  std::string message = llvm::toString(executable.takeError());
  if (isCudaBackendBuilt())
    EXPECT_EQ(message.rfind("no CUDA device", 0), 0u) << message;
  else
    EXPECT_NE(message.find("not built"), std::string::npos) << message;
}

TEST(CudaDeviceTest, MemoryMeasurementLineNamesTheFigures) {
  // What gmopt-run prints after a CUDA run (and CudaExecutorTest parses).
  CudaMemoryMeasurement eager;
  eager.eager = true;
  eager.poolUsedHighBytes = 1024;
  eager.poolReservedHighBytes = 2 << 20;
  eager.deviceUsedBytes = 3 << 20;
  EXPECT_EQ(describeCudaMemoryMeasurement(eager),
            "device memory (cuda): pool used high 1024 bytes, pool reserved "
            "high 2097152 bytes, device used 3145728 bytes after a step "
            "(cudaMemGetInfo)");
  CudaMemoryMeasurement planned;
  planned.poolUsedHighBytes = 7; // no pool in planned mode: not printed
  planned.deviceUsedBytes = 42;
  EXPECT_EQ(describeCudaMemoryMeasurement(planned),
            "device memory (cuda): device used 42 bytes after a step "
            "(cudaMemGetInfo)");
}

TEST(CudaExecutorTest, MlpTrainsLikeOnnxRuntimeInPlannedAndEagerMode) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  std::optional<MlpCase> mlp = loadMlp(BackendKind::Cuda);
  ASSERT_TRUE(mlp);
  EXPECT_EQ(mlp->model.module->plan.workspaceModel,
            kCudaWorkspaceModelName.str());
  InputSources sources;
  sources.testData = &mlp->data;
  auto inputs = bindInputs(*mlp->model.module, sources);
  ASSERT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
  for (AllocationMode mode : {AllocationMode::Planned, AllocationMode::Eager}) {
    TrainingOptions options;
    options.backend = BackendKind::Cuda;
    options.executor.mode = mode;
    auto wallStart = std::chrono::steady_clock::now();
    std::string log;
    llvm::raw_string_ostream logStream(log);
    auto result = trainModule(*mlp->model.module, *inputs, options, &logStream);
    double wallMs = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - wallStart)
                        .count();
    ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
    // Step times are CUDA events' device time: positive, and within the
    // host's wall time of the whole run.
    ASSERT_FALSE(result->microStepMilliseconds.empty());
    double stepsMs = 0;
    for (double ms : result->microStepMilliseconds) {
      EXPECT_GT(ms, 0.0);
      stepsMs += ms;
    }
    EXPECT_LE(stepsMs, wallMs);
    // The device's own figures cover the counted peak: the pool's used
    // high-water mark (eager) and the device's used bytes after a step.
    size_t at = log.find("device memory (cuda): ");
    ASSERT_NE(at, std::string::npos) << log;
    unsigned long long poolUsed = 0, poolReserved = 0, deviceUsed = 0;
    const char *line = log.c_str() + at;
    if (mode == AllocationMode::Eager) {
      ASSERT_EQ(std::sscanf(line,
                            "device memory (cuda): pool used high %llu bytes, "
                            "pool reserved high %llu bytes, device used %llu",
                            &poolUsed, &poolReserved, &deviceUsed),
                3)
          << line;
      EXPECT_GE(poolUsed, result->memory.peakBytes) << line;
      EXPECT_GE(poolReserved, poolUsed) << line;
    } else {
      ASSERT_EQ(std::sscanf(line, "device memory (cuda): device used %llu",
                            &deviceUsed),
                1)
          << line;
    }
    EXPECT_GE(deviceUsed, result->memory.peakBytes) << line;
    // The free-memory delta agrees with the accounted bytes (arena +
    // persistent + workspace; the eager pool's reserved bytes).
    ASSERT_TRUE(result->cudaMemory.has_value());
    EXPECT_EQ(result->cudaMemory->stepsMeasured,
              result->microStepMilliseconds.size());
    EXPECT_EQ(result->cudaMemory->countedPeakBytes, result->memory.peakBytes);
    if (llvm::Error err =
            checkDeviceMemoryAgreement(*result->cudaMemory, "the MLP run"))
      ADD_FAILURE() << llvm::toString(std::move(err));
    auto comparisons = compareWithReference(*result, mlp->data, Tolerance());
    ASSERT_TRUE(bool(comparisons)) << llvm::toString(comparisons.takeError());
    EXPECT_TRUE(allWithinTolerance(*comparisons));
    EXPECT_GT(result->memory.peakBytes, 0u);
    if (mode == AllocationMode::Planned) {
      EXPECT_EQ(result->memory.peakBytes,
                mlp->model.module->plan.figures.plannedBytes());
    }
  }
}

// Whole-graph gradient parity against the CPU backend, for every testdata
// graph: CudaGraphParityTest.cpp.

TEST(CudaDeviceTest, TestdataGraphsHaveCudaKernels) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP() << "the CUDA backend is not built";
  // checkCudaNode needs no device: every node of these training graphs
  // (with the optimizer the runtime adds) must be accepted by the CUDA
  // kernels; the others report what is missing.
  // The graphs whose every op has a CUDA kernel (the CNN graphs through
  // CudnnDispatch.cpp: Conv/ConvGrad, the pools and their gradients, batch
  // norm); any other is listed with what it misses.
  std::set<std::string> covered = {
      "mlp",         "gpt_tiny",          "gpt_tiny_untied",
      "gpt_opset14", "gpt_opset20",       "regression_frozen",
      "llama_tiny",  "llama_tiny_untied", "gpt_tiny_dropout",
      "bert_tiny"};
  // Conv and batch norm run on cuDNN, where it was found at configure time.
  if (isCudnnBuilt())
    covered.insert({"cnn", "cnn_bn", "resnet_tiny"});
  for (const char *cnnGraph : {"cnn", "cnn_bn", "resnet_tiny"})
    EXPECT_TRUE(llvm::any_of(gmopt::testing::kTestdataGraphs,
                             [&](const gmopt::testing::TestdataGraph &graph) {
                               return graph.name == std::string(cnnGraph);
                             }))
        << cnnGraph << " is no longer a testdata graph";
  struct Graph {
    std::string name;
    std::map<std::string, int64_t> dims;
    bool mustPass;
  };
  std::vector<Graph> graphs;
  for (const gmopt::testing::TestdataGraph &graph :
       gmopt::testing::kTestdataGraphs)
    graphs.push_back({graph.name, gmopt::testing::testdataDims(graph),
                      covered.count(graph.name) != 0});
  graphs.push_back(
      {"gpt_tiny_dropout", {{"batch", 4}, {"batch_x_seq", 4 * 64}}, true});
  OptimizerSpec adamW;
  adamW.kind = OptimizerKind::AdamW;
  for (const Graph &graph : graphs) {
    auto model = loadRunnableModel(
        testdataDir() + "/" + graph.name + "/training_model.onnx", graph.dims,
        nullptr, false, "", &adamW, "", BackendKind::Cuda);
    if (!model) {
      ADD_FAILURE() << graph.name << ": " << llvm::toString(model.takeError());
      continue;
    }
    std::set<std::string> missing;
    for (const Node &node : model->module->getGraph().getNodes())
      if (llvm::Error err = checkCudaNode(node)) {
        std::string message = llvm::toString(std::move(err));
        missing.insert(message);
        if (graph.mustPass)
          ADD_FAILURE() << graph.name << ": " << message;
      }
    if (!graph.mustPass && !missing.empty()) {
      for (const std::string &m : missing)
        std::cout << "  " << m << "\n";
    }
    if (!graph.mustPass && !missing.empty())
      std::cout << graph.name << ": " << missing.size()
                << " kinds of node without a CUDA kernel, e.g. "
                << *missing.begin() << "\n";
  }
}

TEST(CudaDeviceTest, AutoFallsBackToTheCpuForANodeWithoutAKernel) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP() << "the CUDA backend is not built";
  // What `--backend=auto` decides on a device, before preparing: the MLP
  // has a CUDA kernel for every node; cnn, given a YieldOp node (an op the
  // CUDA kernels lack: one of CudaCoverageTest's known gaps), does not, and
  // the notice names that node.
  OptimizerSpec adamW;
  adamW.kind = OptimizerKind::AdamW;
  auto mlp = loadRunnableModel(mlpDir() + "/training_model.onnx",
                               {{"batch", 8}}, nullptr, /*wantOriginal=*/true,
                               "", &adamW, "", BackendKind::Cuda);
  ASSERT_TRUE(bool(mlp)) << llvm::toString(mlp.takeError());
  EXPECT_FALSE(bool(checkCudaModule(*mlp->module)));
  auto mlpNotice = cudaFallbackNotice(*mlp);
  ASSERT_TRUE(bool(mlpNotice)) << llvm::toString(mlpNotice.takeError());
  EXPECT_EQ(*mlpNotice, "");

  auto cnn = loadRunnableModel(testdataDir() + "/cnn/training_model.onnx",
                               {{"batch", 8}}, nullptr, /*wantOriginal=*/true,
                               "", &adamW, "", BackendKind::Cuda);
  ASSERT_TRUE(bool(cnn)) << llvm::toString(cnn.takeError());
  {
    Graph &graph = cnn->module->getGraph();
    ASSERT_FALSE(graph.getInputs().empty());
    Value *input = graph.getInputs().front().get();
    Builder builder(graph);
    builder.create(OpName{std::string(kMsDomain), "YieldOp"}, {input},
                   {input->getType()}, {}, "yield_without_cuda_kernel");
  }
  const Node *firstMissing = nullptr;
  for (const Node &node : cnn->module->getGraph().getNodes())
    if (llvm::Error err = checkCudaNode(node)) {
      llvm::consumeError(std::move(err));
      firstMissing = &node;
      break;
    }
  ASSERT_NE(firstMissing, nullptr) << "YieldOp now has a CUDA kernel: pick "
                                      "another op";
  llvm::Error moduleError = checkCudaModule(*cnn->module);
  ASSERT_TRUE(bool(moduleError));
  std::string reason = llvm::toString(std::move(moduleError));
  EXPECT_NE(
      reason.find("no CUDA kernel for '" + firstMissing->getOp().str() + "'"),
      std::string::npos)
      << reason;
  EXPECT_NE(reason.find(firstMissing->describe()), std::string::npos) << reason;
  auto cnnNotice = cudaFallbackNotice(*cnn);
  ASSERT_TRUE(bool(cnnNotice)) << llvm::toString(cnnNotice.takeError());
  EXPECT_EQ(*cnnNotice, reason + "; using the CPU backend");

  // A .gm file planned for the CUDA workspace model cannot run on the CPU
  // either: an error that says how to compile it for the CPU.
  ASSERT_FALSE(cnn->module->plan.empty());
  EXPECT_EQ(cnn->module->plan.workspaceModel, kCudaWorkspaceModelName.str());
  cnn->fromGmFile = true;
  auto gmNotice = cudaFallbackNotice(*cnn);
  ASSERT_FALSE(bool(gmNotice));
  std::string gmError = llvm::toString(gmNotice.takeError());
  EXPECT_NE(gmError.find(reason), std::string::npos) << gmError;
  EXPECT_NE(gmError.find("--workspace=cpu"), std::string::npos) << gmError;
}

TEST(CudaDeviceTest, RewrittenGraphsHaveCudaKernels) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP() << "the CUDA backend is not built";
  // What gpu-check.sh runs: gpt_tiny_dropout after selective recompute,
  // after recompute + bf16 amp (casts, in-graph loss scaling, skip on
  // overflow), with fp16 amp, and with its dropout masks packed.
  OptimizerSpec adamW;
  adamW.kind = OptimizerKind::AdamW;
  for (const char *pipeline :
       {"canonicalize,fold-transpose,recompute{mode=selective},schedule,"
        "plan-buffers",
        "canonicalize,fold-transpose,recompute{mode=selective},amp{dtype=bf16},"
        "schedule,plan-buffers",
        "canonicalize,fold-transpose,amp{dtype=fp16},schedule,plan-buffers",
        "canonicalize,fold-transpose,pack-dropout-masks,schedule,"
        "plan-buffers"}) {
    auto model =
        loadRunnableModel(testdataDir() + "/gpt_tiny/training_model.onnx",
                          {{"batch", 2}, {"batch_x_seq", 128}}, nullptr, false,
                          pipeline, &adamW, "", BackendKind::Cuda);
    ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
    std::set<std::string> missing;
    for (const Node &node : model->module->getGraph().getNodes())
      if (llvm::Error err = checkCudaNode(node))
        missing.insert(llvm::toString(std::move(err)));
    for (const std::string &message : missing)
      ADD_FAILURE() << pipeline << ": " << message;
  }
}

TEST(CudaDeviceTest, BenchGraphsHaveCudaKernels) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP() << "the CUDA backend is not built";
  // gpu-check.sh's GPT-2 small and ResNet-50, where bench/models/build.py
  // has made them: in $GMOPT_BENCH_MODELS (gpu-check.sh sets it to the
  // graphs it resolved, .onnx.gz unpacked), else bench/models. Host-only:
  // each node is asked for its kernel, nothing runs.
  const char *benchModels = std::getenv("GMOPT_BENCH_MODELS");
  std::string root = benchModels && *benchModels
                         ? std::string(benchModels)
                         : testSourceDir() + "/bench/models";
  struct BenchGraph {
    const char *name;
    std::map<std::string, int64_t> dims;
  } graphs[] = {
      {"gpt2_small", {{"batch", 1}, {"seq", 64}, {"batch_x_seq", 64}}},
      {"resnet50", {{"batch", 2}}}};
  unsigned checked = 0;
  for (const BenchGraph &graph : graphs) {
    std::string path = root + "/" + graph.name + "/training_model.onnx";
    if (!llvm::sys::fs::exists(path))
      continue;
    ++checked;
    auto model = loadRunnableModel(path, graph.dims, nullptr, false, "",
                                   nullptr, "", BackendKind::Cuda);
    ASSERT_TRUE(bool(model))
        << graph.name << ": " << llvm::toString(model.takeError());
    std::set<std::string> missing;
    for (const Node &node : model->module->getGraph().getNodes())
      if (llvm::Error err = checkCudaNode(node))
        missing.insert(llvm::toString(std::move(err)));
    for (const std::string &message : missing)
      ADD_FAILURE() << graph.name << ": " << message;
  }
  if (!checked)
    GTEST_SKIP() << "no bench graph in " << root
                 << " (bench/models/build.py gpt2_small resnet50)";
}
