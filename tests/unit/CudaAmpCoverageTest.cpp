//===- CudaAmpCoverageTest.cpp - Every rewritten testdata graph on CUDA ---===//
//
// Every bundled training graph (kTestdataGraphs, at its reference batch),
// rewritten by the pipelines a GPU run uses - fp16 and bf16 automatic mixed
// precision, and full recompute - must have a CUDA kernel for every node:
// checkCudaNode (the prepare-time check, which needs no device) accepts
// each one. A refused node is reported with its graph, its pipeline and the
// check's message. The graphs are checked on the host; running them is the
// device tests' business (CudaDeviceTest, CudaCnnParityTest).
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDevice.h"

#include "tests/unit/TestPaths.h"
#include "tests/unit/TestdataTraining.h"
#include "tools/driver/Runtime.h"

#include "gtest/gtest.h"

#include <set>
#include <string>

using namespace gmopt;

namespace {

/// The pipelines whose rewritten graphs must run on CUDA.
constexpr const char *kPipelines[] = {
    "canonicalize,fold-transpose,amp{dtype=fp16},schedule,plan-buffers",
    "canonicalize,fold-transpose,amp{dtype=bf16},schedule,plan-buffers",
    "canonicalize,fold-transpose,recompute{mode=full},schedule,plan-buffers",
};

/// The distinct checkCudaNode errors of \p graph under \p pipeline (an
/// import or rewrite failure is one failure of its own).
void expectCudaKernels(const gmopt::testing::TestdataGraph &graph,
                       const char *pipeline) {
  SCOPED_TRACE(std::string(graph.name) + " under " + pipeline);
  OptimizerSpec adamW;
  adamW.kind = OptimizerKind::AdamW;
  auto model = loadRunnableModel(
      testdataDir() + "/" + graph.name + "/training_model.onnx",
      gmopt::testing::testdataDims(graph), nullptr,
      /*wantOriginal=*/false, pipeline, &adamW, "", BackendKind::Cuda);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  std::set<std::string> refused;
  unsigned nodes = 0;
  for (const Node &node : model->module->getGraph().getNodes()) {
    ++nodes;
    if (llvm::Error err = checkCudaNode(node))
      refused.insert(llvm::toString(std::move(err)));
  }
  EXPECT_GT(nodes, 0u);
  for (const std::string &message : refused)
    ADD_FAILURE() << message;
}

} // namespace

TEST(CudaAmpCoverageTest, EveryTestdataGraphHasCudaKernelsUnderAmp) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP() << "the CUDA backend is not built";
  for (const gmopt::testing::TestdataGraph &graph :
       gmopt::testing::kTestdataGraphs)
    for (const char *pipeline : {kPipelines[0], kPipelines[1]})
      expectCudaKernels(graph, pipeline);
}

TEST(CudaAmpCoverageTest, EveryTestdataGraphHasCudaKernelsUnderRecompute) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP() << "the CUDA backend is not built";
  for (const gmopt::testing::TestdataGraph &graph :
       gmopt::testing::kTestdataGraphs)
    expectCudaKernels(graph, kPipelines[2]);
}
