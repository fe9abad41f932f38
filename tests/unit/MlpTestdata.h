//===- MlpTestdata.h - The mlp testdata graph loaded for the driver's tests
//===//
//
// What the runtime library's tests start from: testdata/mlp's training
// graph at batch 8 (canonicalized, as gmopt-run loads it) with ONNX
// Runtime's reference batch.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_MLPTESTDATA_H
#define GMOPT_TESTS_UNIT_MLPTESTDATA_H

#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <optional>

namespace gmopt {
namespace test {

/// mlp with batch 8 (canonicalized) and its reference data.
struct Mlp {
  RunnableModel model;
  TestDataSet data;
};

/// Loads mlp (with the original graph beside it when \p wantOriginal, and
/// \p optimizer merged in where given); failures are test failures, and
/// nullopt.
inline std::optional<Mlp> loadMlp(bool wantOriginal = false,
                                  const OptimizerSpec *optimizer = nullptr) {
  std::string dir = testdataDir() + "/mlp";
  auto data = readTestDataSet(dir + "/test_data_set_0");
  EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
  if (!data)
    return std::nullopt;
  auto model = loadRunnableModel(dir + "/training_model.onnx", {{"batch", 8}},
                                 nullptr, wantOriginal, "", optimizer);
  EXPECT_TRUE(bool(model)) << llvm::toString(model.takeError());
  if (!model)
    return std::nullopt;
  return Mlp{std::move(*model), std::move(*data)};
}

} // namespace test
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_MLPTESTDATA_H
