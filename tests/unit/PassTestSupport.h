//===- PassTestSupport.h - What the pass tests share -------------*- C++ -*-===//
//
// The helpers of the tests that rewrite a graph and compare it with the
// original (fold-scale, fold-transpose, fuse-attention, fuse-cross-entropy):
// run a pipeline, count an op, the relative error of a result against its
// reference, one training step, and the check that a rewritten graph trains
// like its original.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_PASSTESTSUPPORT_H
#define GMOPT_TESTS_UNIT_PASSTESTSUPPORT_H

#include "passes/PassManager.h"
#include "tests/unit/TestdataTraining.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

namespace gmopt {
namespace testing {

/// Runs \p pipeline on \p module with \p manager (a fresh one when null);
/// "<success>" or the error's text.
inline std::string runPipeline(Module &module, llvm::StringRef pipeline,
                               PassManager *manager = nullptr) {
  PassManager local;
  PassManager &pm = manager ? *manager : local;
  if (llvm::Error err = pm.addPipeline(pipeline))
    return testdataErrorText(std::move(err));
  return testdataErrorText(pm.run(module));
}

/// How many nodes of (\p domain, \p type) \p module has.
inline unsigned countOps(const Module &module, llvm::StringRef domain,
                         llvm::StringRef type) {
  unsigned count = 0;
  for (const Node &node : module.getGraph().getNodes())
    count += node.isa(domain, type);
  return count;
}

/// Largest |a - b| over the elements, relative to the largest |b| (at
/// least 1e-30): how far \p a is from the reference \p b.
inline double relativeError(const TensorData &a, const TensorData &b) {
  EXPECT_EQ(a.getType(), b.getType());
  if (a.getType() != b.getType())
    return INFINITY;
  double maxDiff = 0, maxRef = 1e-30;
  for (uint64_t i = 0, e = a.getNumElements(); i != e; ++i) {
    maxDiff = std::max(maxDiff,
                       std::fabs(a.getFloatElement(i) - b.getFloatElement(i)));
    maxRef = std::max(maxRef, std::fabs(b.getFloatElement(i)));
  }
  return maxDiff / maxRef;
}

/// The loss and every trainable gradient of one step of \p module run as
/// step \p step (which keys the dropout masks), on two threads; \p planned
/// when the module carries a plan of its own.
inline std::vector<TensorData>
trainStep(const Module &module, const llvm::StringMap<TensorData> &inputs,
          uint64_t step, bool planned = false) {
  TrainedStep trained =
      trainTestdataStep(module, inputs, AllocationMode::Planned, 2, step);
  // A plan the executor made reserves every kernel's scratch (a plan
  // plan-buffers made in a PassManager without a workspace model does not).
  if (!planned) {
    EXPECT_EQ(trained.unplannedScratchBytes, 0u);
  }
  return std::move(trained.results);
}

/// Checks that \p rewritten trains like \p original at each of \p steps:
/// the loss and every gradient within 1e-5 relative.
inline void expectSameSteps(const Module &original, const Module &rewritten,
                            const llvm::StringMap<TensorData> &inputs,
                            std::initializer_list<uint64_t> steps,
                            bool planned) {
  for (uint64_t step : steps) {
    std::vector<TensorData> expected =
        trainStep(original, inputs, step, planned);
    std::vector<TensorData> actual =
        trainStep(rewritten, inputs, step, planned);
    ASSERT_EQ(actual.size(), expected.size());
    ASSERT_GT(actual.size(), 1u);
    for (size_t i = 0; i != expected.size(); ++i)
      EXPECT_LE(relativeError(actual[i], expected[i]), 1e-5)
          << "step " << step << ", result " << i
          << (i ? " (a gradient)" : " (the loss)");
  }
}

} // namespace testing
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_PASSTESTSUPPORT_H
