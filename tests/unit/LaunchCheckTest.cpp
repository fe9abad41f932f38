//===- LaunchCheckTest.cpp - The data-parallel start-up check's hashes
//-----===//
//
// `mpirun -np N gmopt-run` (or a torchrun-style launch) compares, before
// the first step, hashes of every rank's training settings, inputs and
// initial values (tools/driver/DataParallelRun.h): equal values must hash
// alike, and a changed byte, name, order or seed must not; one process
// compares nothing.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/DataParallelRun.h"
#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "ir/Module.h"

#include "tests/unit/MlpTestdata.h"
#include "gtest/gtest.h"

#include <utility>
#include <vector>

using namespace gmopt;

namespace {

using test::loadMlp;
using test::Mlp;

TEST(LaunchCheckTest, HashesTellInitialValuesAndInputsApart) {
  // The data-parallel start-up check compares these hashes over the ranks:
  // equal values hash alike, and a changed byte, name or order does not.
  std::optional<Mlp> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  InputSources sources;
  sources.testData = &mlp->data;
  auto bound = bindInputs(module, sources);
  ASSERT_TRUE(bool(bound)) << llvm::toString(bound.takeError());
  std::vector<const Value *> params;
  for (const ParamInfo &info : module.getSignature().getParams())
    params.push_back(info.param);
  ASSERT_GE(params.size(), 2u);
  uint64_t hash = hashInitialValues(params, *bound);
  auto again = bindInputs(module, sources);
  ASSERT_TRUE(bool(again));
  EXPECT_EQ(hashInitialValues(params, *again), hash);
  std::vector<const Value *> swapped = params;
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(hashInitialValues(swapped, *bound), hash);
  // Another seed changes nothing bound from the test data...
  sources.seed = 7;
  auto reseeded = bindInputs(module, sources);
  ASSERT_TRUE(bool(reseeded));
  EXPECT_EQ(hashInitialValues(params, *reseeded), hash);
  // ... and everything initialized from it.
  InputSources synthetic;
  auto seeded = bindInputs(module, synthetic);
  ASSERT_TRUE(bool(seeded));
  synthetic.seed = 7;
  auto otherSeed = bindInputs(module, synthetic);
  ASSERT_TRUE(bool(otherSeed));
  EXPECT_NE(hashInitialValues(params, *seeded),
            hashInitialValues(params, *otherSeed));
  // One element of one parameter.
  for (BoundInput &binding : *again)
    if (binding.input == params.back()) {
      std::vector<uint8_t> bytes(binding.data.getBytes().begin(),
                                 binding.data.getBytes().end());
      bytes[0] ^= 1;
      binding.data = TensorData(binding.data.getType(), std::move(bytes));
    }
  EXPECT_NE(hashInitialValues(params, *again), hash);

  std::vector<TestDataSet> sets(2, mlp->data);
  uint64_t setsHash = hashTestDataSets(sets);
  EXPECT_EQ(hashTestDataSets(std::vector<TestDataSet>(2, mlp->data)), setsHash);
  EXPECT_NE(hashTestDataSets(llvm::ArrayRef(sets).take_front()), setsHash);
  sets[1].inputs[0].name = "renamed";
  EXPECT_NE(hashTestDataSets(sets), setsHash);
  // One process: nothing to compare.
  EXPECT_FALSE(bool(checkSameOnEveryRank({LaunchSetting{"--lr", "0.1", 1}},
                                         "a test exchange")));
}

} // namespace
