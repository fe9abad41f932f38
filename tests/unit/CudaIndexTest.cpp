//===- CudaIndexTest.cpp - The CUDA indexing kernels against the CPU ------===//
//
// The indexing group's CUDA kernels (IndexKernels.cu, CudaIndexDispatch.cpp)
// address their elements with IndexMath.h's __host__ __device__ arithmetic.
// The host tests here run that same arithmetic over random shapes, indices
// (negative ones included) and reductions, emulating each kernel
// sequentially, and compare every element bit for bit with the CPU
// backend's kernel (backend/cpu/GatherKernels.cpp) on the same one-node
// module: GatherElements, ScatterElements (none / add / mul / max / min),
// GatherElementsGrad, GatherND (batch_dims), ScatterND (reductions) and
// GatherNDGrad. The device parity test runs the same cases on the CUDA
// backend against the CPU backend (scatters with reductions and the
// gradients within fp32 tolerance, since atomics add in any order) and
// skips without a device; a last device test checks that an out-of-range
// index is reported as a fault naming the node.
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/IndexMath.h"
#include "ir/Module.h"

#include "tests/unit/BackendStep.h"

#include "gtest/gtest.h"

#include <cmath>
#include <numeric>
#include <random>

using namespace gmopt;
using gmopt::cuda::combineScatter;
using gmopt::cuda::ElementIndexing;
using gmopt::cuda::NDIndexing;
using gmopt::cuda::ScatterOp;

namespace {

using Dims = std::vector<int64_t>;

int64_t count(const Dims &d) {
  return std::accumulate(d.begin(), d.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

/// One op on given inputs with the result the host emulation expects.
struct IndexCase {
  std::string what;
  std::string domain, op;
  std::vector<TensorData> inputs;
  TensorType result;
  std::vector<NamedAttribute> attrs;
  std::vector<float> expected;
  /// Whether the device may differ by rounding (atomic accumulation order).
  bool reorders = false;
};

std::unique_ptr<Module> buildModule(const IndexCase &c) {
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = 18;
  module->opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module->getGraph();
  std::vector<Value *> operands;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    operands.push_back(
        graph.addInput(c.inputs[i].getType(), "in" + std::to_string(i)));
  Builder builder(graph);
  Node *node = builder.create(OpName{c.domain, c.op}, operands, {c.result},
                              c.attrs, c.op);
  graph.addOutput(node->getResult(0));
  return module;
}

llvm::Expected<TensorData> runCase(const IndexCase &c, bool onCuda) {
  std::unique_ptr<Module> module = buildModule(c);
  auto outputs = test::runBackendStep(*module, c.inputs, onCuda);
  if (!outputs)
    return outputs.takeError();
  return std::move(outputs->front());
}

TensorData floats(const Dims &shape, const std::vector<float> &values) {
  return TensorData::fromValues<float>(DType::F32, shape, values);
}
TensorData int64s(const Dims &shape, const std::vector<int64_t> &values) {
  return TensorData::fromValues<int64_t>(DType::I64, shape, values);
}

struct Random {
  std::mt19937 rng;
  explicit Random(unsigned seed) : rng(seed) {}
  int64_t below(int64_t n) { return static_cast<int64_t>(rng() % n); }
  std::vector<float> values(int64_t n) {
    // Small integers and halves: products and sums stay exact or round the
    // same way in every order only for Max / Min / None; add and mul
    // still compare bit for bit on the host (one order there).
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> v(n);
    for (float &x : v)
      x = dist(rng);
    return v;
  }
  /// An index into \p extent, negative half of the time.
  int64_t index(int64_t extent) {
    int64_t i = below(extent);
    return below(2) ? i - extent : i;
  }
};

const char *reductionName(ScatterOp op) {
  switch (op) {
  case ScatterOp::None:
    return "none";
  case ScatterOp::Add:
    return "add";
  case ScatterOp::Mul:
    return "mul";
  case ScatterOp::Max:
    return "max";
  case ScatterOp::Min:
    return "min";
  }
  return "none";
}

//===----------------------------------------------------------------------===//
// Element cases
//===----------------------------------------------------------------------===//

/// A random data shape, axis and indices shape for the element ops; with
/// \p unique the indices cover each line of data once (a permutation).
struct ElementSetup {
  Dims data, indices;
  int64_t axis;
  std::vector<int64_t> idx;
  ElementIndexing g;
};

ElementSetup elementSetup(Random &r, bool unique) {
  ElementSetup s;
  int rank = 1 + static_cast<int>(r.below(4));
  for (int d = 0; d < rank; ++d)
    s.data.push_back(1 + r.below(5));
  s.axis = r.below(rank);
  for (int d = 0; d < rank; ++d)
    s.indices.push_back(d == s.axis ? (unique ? s.data[d] : 1 + r.below(6))
                                    : 1 + r.below(s.data[d]));
  s.g.rank = rank;
  s.g.axis = static_cast<int32_t>(s.axis);
  s.g.extent = s.data[s.axis];
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    s.g.indexShape[d] = s.indices[d];
    s.g.dataStrides[d] = stride;
    stride *= s.data[d];
  }
  int64_t n = count(s.indices);
  for (int64_t i = 0; i < n; ++i) {
    if (!unique) {
      s.idx.push_back(r.index(s.g.extent));
      continue;
    }
    // Coordinate along the axis, shifted per line: a permutation per line.
    int64_t inner = 1;
    for (int d = rank - 1; d > s.axis; --d)
      inner *= s.indices[d];
    int64_t c = (i / inner) % s.indices[s.axis];
    int64_t line = cuda::elementBaseOffset(s.g, i);
    int64_t v = (c + line * 7 + 3) % s.g.extent;
    s.idx.push_back(v % 2 ? v - s.g.extent : v);
  }
  return s;
}

/// GatherElements: out[i] = data[elementOffset(i)].
IndexCase gatherElementsCase(Random &r) {
  ElementSetup s = elementSetup(r, false);
  std::vector<float> data = r.values(count(s.data));
  IndexCase c{
      "GatherElements",
      "",
      "GatherElements",
      {floats(s.data, data), int64s(s.indices, s.idx)},
      TensorType::get(DType::F32, s.indices),
      {{"axis", Attribute::getInt(
                    r.below(2) ? s.axis : s.axis - int64_t(s.data.size()))}},
      {}};
  for (size_t i = 0; i < s.idx.size(); ++i) {
    int64_t offset = -1;
    EXPECT_TRUE(cuda::elementOffset(s.g, i, s.idx[i], offset));
    c.expected.push_back(data[offset]);
  }
  return c;
}

/// ScatterElements with \p op: out = data, then every update combined in
/// index order.
IndexCase scatterElementsCase(Random &r, ScatterOp op) {
  ElementSetup s = elementSetup(r, op == ScatterOp::None);
  std::vector<float> data = r.values(count(s.data));
  std::vector<float> updates = r.values(count(s.indices));
  IndexCase c{std::string("ScatterElements ") + reductionName(op),
              "",
              "ScatterElements",
              {floats(s.data, data), int64s(s.indices, s.idx),
               floats(s.indices, updates)},
              TensorType::get(DType::F32, s.data),
              {{"axis", Attribute::getInt(s.axis)},
               {"reduction", Attribute::getString(reductionName(op))}},
              data,
              op == ScatterOp::Add || op == ScatterOp::Mul};
  for (size_t i = 0; i < s.idx.size(); ++i) {
    int64_t offset = -1;
    EXPECT_TRUE(cuda::elementOffset(s.g, i, s.idx[i], offset));
    c.expected[offset] = combineScatter(op, c.expected[offset], updates[i]);
  }
  return c;
}

/// GatherElementsGrad(dY, shape, indices): zeros plus dY added in order.
IndexCase gatherElementsGradCase(Random &r) {
  ElementSetup s = elementSetup(r, false);
  std::vector<float> dy = r.values(count(s.indices));
  IndexCase c{"GatherElementsGrad",
              std::string(kMsDomain),
              "GatherElementsGrad",
              {floats(s.indices, dy),
               int64s({static_cast<int64_t>(s.data.size())}, s.data),
               int64s(s.indices, s.idx)},
              TensorType::get(DType::F32, s.data),
              {{"axis", Attribute::getInt(s.axis)}},
              std::vector<float>(count(s.data), 0.0f),
              true};
  for (size_t i = 0; i < s.idx.size(); ++i) {
    int64_t offset = -1;
    EXPECT_TRUE(cuda::elementOffset(s.g, i, s.idx[i], offset));
    c.expected[offset] =
        combineScatter(ScatterOp::Add, c.expected[offset], dy[i]);
  }
  return c;
}

//===----------------------------------------------------------------------===//
// ND cases
//===----------------------------------------------------------------------===//

struct NDSetup {
  Dims data, indices, gathered;
  int64_t batchDims;
  std::vector<int64_t> idx;
  NDIndexing g;
};

/// Random GatherND geometry; with \p unique (ScatterND without a
/// reduction) every tuple addresses a distinct block.
NDSetup ndSetup(Random &r, bool allowBatch, bool unique) {
  NDSetup s;
  int rank = 1 + static_cast<int>(r.below(4));
  for (int d = 0; d < rank; ++d)
    s.data.push_back(1 + r.below(4));
  s.batchDims = allowBatch && rank > 1 ? r.below(rank - 1 + 1) : 0;
  if (s.batchDims >= rank)
    s.batchDims = rank - 1;
  int64_t depth = 1 + r.below(rank - s.batchDims);
  s.indices.assign(s.data.begin(), s.data.begin() + s.batchDims);
  int64_t blocksPerBatch = 1;
  for (int64_t j = 0; j < depth; ++j)
    blocksPerBatch *= s.data[s.batchDims + j];
  int64_t tuples = unique ? 1 + r.below(blocksPerBatch) : 1 + r.below(5);
  s.indices.push_back(tuples);
  s.indices.push_back(depth);
  s.g.depth = depth;
  s.g.batches = count(Dims(s.data.begin(), s.data.begin() + s.batchDims));
  s.g.tuples = tuples;
  s.g.block = count(Dims(s.data.begin() + s.batchDims + depth, s.data.end()));
  s.g.batchSize = count(Dims(s.data.begin() + s.batchDims, s.data.end()));
  for (int64_t j = depth - 1, stride = 1; j >= 0; --j) {
    s.g.extents[j] = s.data[s.batchDims + j];
    s.g.strides[j] = stride;
    stride *= s.g.extents[j];
  }
  for (int64_t b = 0; b < s.g.batches; ++b) {
    std::vector<int64_t> order(blocksPerBatch);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), r.rng);
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t block = order[t % blocksPerBatch];
      for (int64_t j = 0; j < depth; ++j) {
        int64_t extent = s.g.extents[j];
        int64_t v =
            unique ? (block / s.g.strides[j]) % extent : r.below(extent);
        s.idx.push_back(r.below(2) ? v - extent : v);
      }
    }
  }
  s.gathered.assign(s.indices.begin(), s.indices.end() - 1);
  s.gathered.insert(s.gathered.end(), s.data.begin() + s.batchDims + depth,
                    s.data.end());
  return s;
}

/// Calls fn(outputElement, dataOffset) for every gathered element.
template <typename Fn> void forEachNDElement(const NDSetup &s, const Fn &fn) {
  int64_t total = s.g.batches * s.g.tuples * s.g.block;
  for (int64_t i = 0; i < total; ++i) {
    int64_t t = i / s.g.block, offset = -1;
    EXPECT_TRUE(
        cuda::ndBlockOffset(s.g, t, s.idx.data() + t * s.g.depth, offset));
    fn(i, offset + i % s.g.block);
  }
}

IndexCase gatherNDCase(Random &r) {
  NDSetup s = ndSetup(r, true, false);
  std::vector<float> data = r.values(count(s.data));
  IndexCase c{"GatherND batch_dims " + std::to_string(s.batchDims),
              "",
              "GatherND",
              {floats(s.data, data), int64s(s.indices, s.idx)},
              TensorType::get(DType::F32, s.gathered),
              {{"batch_dims", Attribute::getInt(s.batchDims)}},
              {}};
  forEachNDElement(
      s, [&](int64_t, int64_t offset) { c.expected.push_back(data[offset]); });
  return c;
}

IndexCase scatterNDCase(Random &r, ScatterOp op) {
  NDSetup s = ndSetup(r, false, op == ScatterOp::None);
  std::vector<float> data = r.values(count(s.data));
  std::vector<float> updates = r.values(count(s.gathered));
  IndexCase c{std::string("ScatterND ") + reductionName(op),
              "",
              "ScatterND",
              {floats(s.data, data), int64s(s.indices, s.idx),
               floats(s.gathered, updates)},
              TensorType::get(DType::F32, s.data),
              {{"reduction", Attribute::getString(reductionName(op))}},
              data,
              op == ScatterOp::Add || op == ScatterOp::Mul};
  forEachNDElement(s, [&](int64_t i, int64_t offset) {
    c.expected[offset] = combineScatter(op, c.expected[offset], updates[i]);
  });
  return c;
}

IndexCase gatherNDGradCase(Random &r) {
  NDSetup s = ndSetup(r, true, false);
  std::vector<float> update = r.values(count(s.gathered));
  IndexCase c{"GatherNDGrad batch_dims " + std::to_string(s.batchDims),
              std::string(kMsDomain),
              "GatherNDGrad",
              {int64s({static_cast<int64_t>(s.data.size())}, s.data),
               int64s(s.indices, s.idx), floats(s.gathered, update)},
              TensorType::get(DType::F32, s.data),
              {{"batch_dims", Attribute::getInt(s.batchDims)}},
              std::vector<float>(count(s.data), 0.0f),
              true};
  forEachNDElement(s, [&](int64_t i, int64_t offset) {
    c.expected[offset] =
        combineScatter(ScatterOp::Add, c.expected[offset], update[i]);
  });
  return c;
}

std::vector<IndexCase> indexCases() {
  Random r(17);
  std::vector<IndexCase> cases;
  const ScatterOp ops[] = {ScatterOp::None, ScatterOp::Add, ScatterOp::Mul,
                           ScatterOp::Max, ScatterOp::Min};
  for (int trial = 0; trial < 12; ++trial) {
    cases.push_back(gatherElementsCase(r));
    cases.push_back(gatherElementsGradCase(r));
    cases.push_back(gatherNDCase(r));
    cases.push_back(gatherNDGradCase(r));
    for (ScatterOp op : ops) {
      cases.push_back(scatterElementsCase(r, op));
      cases.push_back(scatterNDCase(r, op));
    }
  }
  return cases;
}

std::string describe(const IndexCase &c) {
  std::string text = c.what + " inputs";
  for (const TensorData &input : c.inputs) {
    text += " [";
    for (int64_t d : input.getType().getStaticShape())
      text += std::to_string(d) + ",";
    text += "]";
  }
  return text;
}

} // namespace

TEST(CudaIndexTest, WrapsNegativeAndRejectsOutOfRange) {
  int64_t v = -3;
  EXPECT_TRUE(cuda::wrapIndexInto(v, 5));
  EXPECT_EQ(v, 2);
  for (int64_t bad : {-6, 5, 100, -100}) {
    v = bad;
    EXPECT_FALSE(cuda::wrapIndexInto(v, 5)) << bad;
  }
  ElementIndexing g;
  g.rank = 2;
  g.axis = 1;
  g.extent = 4;
  g.indexShape[0] = 2;
  g.indexShape[1] = 3;
  g.dataStrides[0] = 4;
  g.dataStrides[1] = 1;
  int64_t offset = -7;
  EXPECT_FALSE(cuda::elementOffset(g, 4, 4, offset));
  EXPECT_EQ(offset, -7) << "an invalid index leaves the offset untouched";
  ASSERT_TRUE(cuda::elementOffset(g, 4, -1, offset));
  EXPECT_EQ(offset, 4 + 3); // Row 1, column 3.
  NDIndexing nd;
  nd.depth = 2;
  nd.tuples = 1;
  nd.block = 2;
  nd.batchSize = 12;
  nd.extents[0] = 2;
  nd.extents[1] = 3;
  nd.strides[0] = 3;
  nd.strides[1] = 1;
  int64_t tupleBad[] = {0, 3}, tupleGood[] = {-1, -1};
  EXPECT_FALSE(cuda::ndBlockOffset(nd, 0, tupleBad, offset));
  ASSERT_TRUE(cuda::ndBlockOffset(nd, 0, tupleGood, offset));
  EXPECT_EQ(offset, (1 * 3 + 2) * 2);
}

TEST(CudaIndexTest, CombineMatchesTheCpuReductions) {
  EXPECT_EQ(combineScatter(ScatterOp::None, 1.0f, 2.0f), 2.0f);
  EXPECT_EQ(combineScatter(ScatterOp::Add, 1.5f, 2.0f), 3.5f);
  EXPECT_EQ(combineScatter(ScatterOp::Mul, 1.5f, 2.0f), 3.0f);
  EXPECT_EQ(combineScatter(ScatterOp::Max, 1.5f, 2.0f), 2.0f);
  EXPECT_EQ(combineScatter(ScatterOp::Min, 1.5f, 2.0f), 1.5f);
  EXPECT_EQ(combineScatter<int64_t>(ScatterOp::Mul, -3, 4), -12);
  // NaN updates are ignored by max / min, as the CPU's comparisons do.
  EXPECT_EQ(combineScatter(ScatterOp::Max, 1.0f, std::nanf("")), 1.0f);
}

TEST(CudaIndexTest, HostIndexMathMatchesTheCpuKernels) {
  for (const IndexCase &c : indexCases()) {
    SCOPED_TRACE(describe(c));
    auto cpu = runCase(c, /*onCuda=*/false);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
    ASSERT_EQ(cpu->getNumElements(), c.expected.size());
    for (uint64_t k = 0; k < c.expected.size(); ++k) {
      float actual = static_cast<float>(cpu->getFloatElement(k));
      ASSERT_EQ(std::memcmp(&actual, &c.expected[k], sizeof(float)), 0)
          << "element " << k << ": CPU " << actual << ", index math "
          << c.expected[k];
    }
  }
}

TEST(CudaIndexTest, IndexOpsMatchTheCpuBackendOnTheDevice) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device (no CUDA device): "
                 << llvm::toString(device.takeError());
  for (const IndexCase &c : indexCases()) {
    SCOPED_TRACE(describe(c));
    auto cpu = runCase(c, /*onCuda=*/false);
    auto gpu = runCase(c, /*onCuda=*/true);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
    ASSERT_TRUE(bool(gpu)) << llvm::toString(gpu.takeError());
    ASSERT_EQ(cpu->getNumElements(), gpu->getNumElements());
    for (uint64_t k = 0; k < cpu->getNumElements(); ++k) {
      double e = cpu->getFloatElement(k), a = gpu->getFloatElement(k);
      if (c.reorders)
        ASSERT_NEAR(a, e, 1e-5 + 1e-5 * std::fabs(e)) << "element " << k;
      else
        ASSERT_EQ(a, e) << "element " << k;
    }
  }
}

TEST(CudaIndexTest, OutOfRangeIndexFaultsOnTheDevice) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device (no CUDA device): "
                 << llvm::toString(device.takeError());
  for (const char *op : {"GatherElements", "GatherND"}) {
    SCOPED_TRACE(op);
    IndexCase c{op,
                "",
                op,
                {floats({2, 3}, {1, 2, 3, 4, 5, 6}), int64s({2, 1}, {0, 7})},
                TensorType::get(DType::F32, std::string(op) == "GatherND"
                                                ? Dims{2, 3}
                                                : Dims{2, 1}),
                {},
                {}};
    auto gpu = runCase(c, /*onCuda=*/true);
    ASSERT_FALSE(bool(gpu)) << "index 7 of extent 2 or 3 must fault";
    std::string message = llvm::toString(gpu.takeError());
    EXPECT_NE(message.find(op), std::string::npos) << message;
  }
}
