//===- TextIRTest.cpp - Unit tests of the text form printer and parser ----===//
//
// print followed by parse must rebuild an identical module: these tests
// build modules with the Builder (absent operands and results, every
// attribute kind, a constant of every element type, awkward value names,
// symbolic dimensions, the full training signature and module facts), print
// them, parse the text and compare the modules structurally and the texts
// literally. Floats are checked exhaustively for the 8- and 16-bit formats.
// Malformed inputs must produce one error with the exact line:column.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/TextIR.h"
#include "ir/IR.h"
#include "ir/Module.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace gmopt;

namespace {

TensorType f32(llvm::ArrayRef<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

std::string print(const Module &module, PrintOptions options = {}) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printModule(module, os, options);
  return os.str();
}

/// Parses \p text, failing the test on an error.
std::unique_ptr<Module> parseOrFail(llvm::StringRef text) {
  auto parsed = parseModule(text, "test.gmir");
  if (!parsed) {
    ADD_FAILURE() << llvm::toString(parsed.takeError()) << "\nin:\n"
                  << text.str();
    return nullptr;
  }
  return std::move(*parsed);
}

/// The error message of parsing \p text ("" if it parses).
std::string parseError(llvm::StringRef text) {
  auto parsed = parseModule(text, "t.gmir");
  if (parsed)
    return "";
  return llvm::toString(parsed.takeError());
}

//===----------------------------------------------------------------------===//
// Structural equality
//===----------------------------------------------------------------------===//

/// Compares two modules value by value, node by node; reports the first
/// difference as a gtest failure.
class ModuleComparer {
public:
  bool equal(const Module &a, const Module &b) {
    if (a.irVersion != b.irVersion || a.opsetImports != b.opsetImports ||
        a.producerName != b.producerName ||
        a.producerVersion != b.producerVersion ||
        a.modelDomain != b.modelDomain || a.modelVersion != b.modelVersion ||
        a.docString != b.docString || a.metadata != b.metadata ||
        a.dimBindings != b.dimBindings)
      return fail("module facts differ");
    const Graph &ga = a.getGraph(), &gb = b.getGraph();
    if (ga.getName() != gb.getName())
      return fail("graph names differ");
    if (!sameValueLists(ga.getInputs(), gb.getInputs(), "input") ||
        !sameValueLists(ga.getInitializers(), gb.getInitializers(),
                        "initializer"))
      return false;
    if (ga.getNumNodes() != gb.getNumNodes())
      return fail("node counts differ");
    for (auto ia = ga.getNodes().begin(), ib = gb.getNodes().begin();
         ia != ga.getNodes().end(); ++ia, ++ib)
      if (!sameNode(*ia, *ib))
        return false;
    if (ga.getNumOutputs() != gb.getNumOutputs())
      return fail("output counts differ");
    for (unsigned i = 0, e = ga.getNumOutputs(); i != e; ++i)
      if (!corresponds(ga.getOutput(i), gb.getOutput(i)))
        return fail("output " + std::to_string(i) + " differs");
    return sameSignature(a.getSignature(), b.getSignature());
  }

private:
  bool fail(const std::string &what) {
    ADD_FAILURE() << what;
    return false;
  }

  bool corresponds(const Value *a, const Value *b) {
    if (!a || !b)
      return a == b;
    auto it = valueMap.find(a);
    return it != valueMap.end() && it->second == b;
  }

  bool sameValue(const Value *a, const Value *b) {
    if (!a || !b)
      return a == b || fail("presence of a value differs");
    if (a->getKind() != b->getKind() || a->getName() != b->getName() ||
        a->getType() != b->getType() || a->hasData() != b->hasData() ||
        (a->hasData() && !(a->getData() == b->getData())))
      return fail("value '" + a->getName().str() + "' differs (" +
                  a->getType().str() + " vs " + b->getType().str() + ")");
    valueMap[a] = b;
    return true;
  }

  bool sameValueLists(llvm::ArrayRef<std::unique_ptr<Value>> a,
                      llvm::ArrayRef<std::unique_ptr<Value>> b,
                      const std::string &what) {
    if (a.size() != b.size())
      return fail(what + " counts differ");
    for (size_t i = 0; i != a.size(); ++i)
      if (!sameValue(a[i].get(), b[i].get()))
        return false;
    return true;
  }

  bool sameNode(const Node &a, const Node &b) {
    std::string label = a.describe();
    if (!(a.getOp() == b.getOp()) || a.getName() != b.getName())
      return fail("node " + label + " differs in op or name");
    if (a.getNumOperands() != b.getNumOperands())
      return fail("node " + label + " differs in operand count");
    for (unsigned i = 0, e = a.getNumOperands(); i != e; ++i)
      if (!corresponds(a.getOperand(i), b.getOperand(i)))
        return fail("node " + label + " operand " + std::to_string(i));
    if (a.getAttrs().size() != b.getAttrs().size())
      return fail("node " + label + " differs in attribute count");
    for (size_t i = 0, e = a.getAttrs().size(); i != e; ++i)
      if (a.getAttrs()[i].name != b.getAttrs()[i].name ||
          a.getAttrs()[i].value != b.getAttrs()[i].value)
        return fail("node " + label + " attribute " + a.getAttrs()[i].name);
    if (a.getPhase() != b.getPhase() || a.getStreamId() != b.getStreamId())
      return fail("node " + label + " differs in phase or stream id");
    if (a.getNumResults() != b.getNumResults())
      return fail("node " + label + " differs in result count");
    for (unsigned i = 0, e = a.getNumResults(); i != e; ++i)
      if (!sameValue(a.getResult(i), b.getResult(i)))
        return false;
    nodeMap[&a] = &b;
    return true;
  }

  bool sameSignature(const TrainingSignature &a, const TrainingSignature &b) {
    if (a.getParams().size() != b.getParams().size() ||
        a.getDataInputs().size() != b.getDataInputs().size())
      return fail("signature sizes differ");
    for (size_t i = 0; i != a.getParams().size(); ++i) {
      const ParamInfo &pa = a.getParams()[i], &pb = b.getParams()[i];
      if (!corresponds(pa.param, pb.param) || pa.trainable != pb.trainable ||
          !corresponds(pa.grad, pb.grad) ||
          !corresponds(pa.accumulator, pb.accumulator) ||
          (pa.accumulateNode ? nodeMap.lookup(pa.accumulateNode) : nullptr) !=
              pb.accumulateNode)
        return fail("param " + std::to_string(i) + " differs");
      if (pa.optimizerState.size() != pb.optimizerState.size())
        return fail("param " + std::to_string(i) + " optimizer state differs");
      for (size_t j = 0; j != pa.optimizerState.size(); ++j)
        if (!corresponds(pa.optimizerState[j], pb.optimizerState[j]))
          return fail("param " + std::to_string(i) +
                      " optimizer state differs");
    }
    for (unsigned i = 0; i != kNumStepSlots; ++i)
      if (!corresponds(a.getStepSlot(static_cast<StepSlot>(i)),
                       b.getStepSlot(static_cast<StepSlot>(i))))
        return fail("step slot differs");
    for (size_t i = 0; i != a.getDataInputs().size(); ++i)
      if (!corresponds(a.getDataInputs()[i], b.getDataInputs()[i]))
        return fail("data input differs");
    if (!corresponds(a.getLoss(), b.getLoss()) ||
        !corresponds(a.getLossGradSeed(), b.getLossGradSeed()) ||
        !corresponds(a.getLazyResetGrad(), b.getLazyResetGrad()))
      return fail("loss, seed or lazy_reset_grad differs");
    return true;
  }

  llvm::DenseMap<const Value *, const Value *> valueMap;
  llvm::DenseMap<const Node *, const Node *> nodeMap;
};

/// print -> parse -> print: the texts must match and the modules be equal.
void expectRoundTrip(const Module &module, PrintOptions options = {}) {
  std::string first = print(module, options);
  std::unique_ptr<Module> parsed = parseOrFail(first);
  ASSERT_TRUE(parsed);
  EXPECT_TRUE(ModuleComparer().equal(module, *parsed)) << first;
  EXPECT_EQ(print(*parsed, options), first);
}

//===----------------------------------------------------------------------===//
// Module builders
//===----------------------------------------------------------------------===//

/// A constant of \p dtype with \p numElements deterministic pseudo-random
/// bytes (bools stay 0/1; floats hit NaNs, infinities and subnormals).
TensorData randomConstant(DType dtype, int64_t numElements, unsigned seed) {
  std::mt19937 rng(seed);
  TensorType type = TensorType::get(dtype, {numElements});
  uint64_t numBytes = dtype == DType::String ? 7 : type.getSizeInBytes();
  std::vector<uint8_t> bytes(numBytes);
  for (uint8_t &byte : bytes)
    byte = dtype == DType::Bool ? rng() % 2 : rng() % 256;
  return TensorData(type, std::move(bytes));
}

/// A small training graph exercising every feature of the text form.
std::unique_ptr<Module> buildRichModule() {
  auto module = std::make_unique<Module>();
  module->irVersion = 9;
  module->opsetImports = {{"", 17}, {"com.microsoft", 1}};
  module->producerName = "onnx \"quoted\"\nproducer";
  module->producerVersion = "0.1";
  module->modelDomain = "ai.gmopt";
  module->modelVersion = 3;
  module->docString = "doc\twith\\escapes and \x01 \xff bytes";
  module->metadata = {{"k", "v"}, {"k", "v2"}, {"\xc3\xbc", ""}};
  module->dimBindings = {{"batch", 8}, {"seq len", 128}};

  Graph &graph = module->getGraph();
  graph.setName("main graph");
  Value *input = graph.addInput(
      TensorType(DType::F32, {Dim::symbolic("batch"), Dim::fixed(4)}), "input");
  Value *weight = graph.addInput(f32({3, 4}), "fc1.weight");
  Value *bias = graph.addInput(f32({3}), "fc1.bias");
  bias->setData(
      TensorData::fromValues<float>(DType::F32, {3}, {0.5f, -0.0f, 1e-30f}));
  Value *lazy =
      graph.addInput(TensorType::get(DType::Bool, {}), "lazy_reset_grad");
  Value *acc =
      graph.addInput(f32({3, 4}), "fc1.weight_grad.accumulation.buffer");
  Value *labels = graph.addInput(
      TensorType(DType::I64, {Dim::symbolic("batch")}), "labels");
  Value *weird = graph.addInput(
      TensorType(DType::F16, {Dim::unknown(), Dim::symbolic("seq len"),
                              Dim::symbolic("a\x01\"b\\")}),
      "weird name");
  Value *digits = graph.addInput(f32({1}), "17");
  Value *colons = graph.addInput(f32({1}), "onnx::Gemm_3");
  Value *trailingColon = graph.addInput(f32({1}), "x:");
  Value *unnamedInput = graph.addInput(TensorType::unranked(DType::I64), "");
  Value *dupA = graph.addInput(f32({2}), "dup");
  Value *dupB = graph.addInput(f32({2}), "dup");
  Value *slashes = graph.addInput(f32({1}), "/fc1/Gemm_output_0");
  Value *comment = graph.addInput(f32({1}), "a//b");
  Value *defaulted =
      graph.addInput(TensorType(DType::F32, {Dim::symbolic("n")}), "defaulted");
  defaulted->setData(TensorData::fromValues<float>(DType::F32, {2}, {1, 2}));

  Builder builder(graph);
  // A constant of every element type, small (element list) and large (hex).
  std::vector<Value *> constants;
  for (unsigned i = 1; i <= kMaxDType; ++i) {
    DType dtype = static_cast<DType>(i);
    constants.push_back(builder.createConstant(randomConstant(dtype, 5, i),
                                               "c_" + dtypeName(dtype).str()));
    constants.push_back(
        builder.createConstant(randomConstant(dtype, 40, 100 + i), ""));
  }
  builder.createConstant(TensorData(f32({0}), std::vector<uint8_t>()), "empty");
  builder.createConstant(TensorData::fromValues<int64_t>(DType::I64, {}, {-7}),
                         "scalar");
  Value *retyped = builder.createConstant(
      TensorData::fromValues<int32_t>(DType::I32, {2}, {1, 2}), "retyped");
  retyped->setType(TensorType(DType::I32, {Dim::symbolic("two")}));

  Node *gemm = builder.create(
      {"", "Gemm"}, {input, weight, bias},
      {TensorType(DType::F32, {Dim::symbolic("batch"), Dim::fixed(3)})},
      {{"transB", Attribute::getInt(1)}, {"alpha", Attribute::getFloat(1.0f)}},
      "Gemm_0");
  Node *loss = builder.create(
      {"com.microsoft", "SoftmaxCrossEntropyLossInternal"},
      {gemm->getResult(0), labels, nullptr, nullptr},
      {TensorType::get(DType::F32, {}), f32({8}),
       TensorType(DType::F32, {Dim::symbolic("batch"), Dim::fixed(3)})},
      {{"reduction", Attribute::getString("mean")}}, "loss_node");
  loss->getResult(0)->setName("loss");
  loss->getResult(2)->setName("log_prob");
  graph.dropResult(loss, 1);

  std::vector<float> specialFloats = {0.1f,
                                      -0.0f,
                                      std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(),
                                      std::numeric_limits<float>::denorm_min(),
                                      std::numeric_limits<float>::max(),
                                      3.0f};
  uint32_t nanBits = 0x7fc00123;
  float payloadNan;
  std::memcpy(&payloadNan, &nanBits, sizeof(payloadNan));
  specialFloats.push_back(payloadNan);
  builder.create(
      {"com.microsoft", "Everything"}, {weird, nullptr, digits, colons},
      {f32({1}), f32({2})},
      {{"i", Attribute::getInt(std::numeric_limits<int64_t>::min())},
       {"imax", Attribute::getInt(std::numeric_limits<int64_t>::max())},
       {"f", Attribute::getFloat(-2.5f)},
       {"fint", Attribute::getFloat(4.0f)},
       {"fnan", Attribute::getFloat(payloadNan)},
       {"s", Attribute::getString("tab\there \"q\" \\ \n")},
       {"t", Attribute::getTensor(TensorData::fromValues<int64_t>(
                 DType::I64, {2, 2}, {1, -2, 3, 4}))},
       {"tbig", Attribute::getTensor(randomConstant(DType::F16, 33, 7))},
       {"floats", Attribute::getFloats(specialFloats)},
       {"nans", Attribute::getFloats({payloadNan})},
       {"ints", Attribute::getInts({-1, 0, 1})},
       {"strings", Attribute::getStrings({"a", "", "c d"})},
       {"no_floats", Attribute::getFloats({})},
       {"no_ints", Attribute::getInts({})},
       {"no_strings", Attribute::getStrings({})},
       {"weird key!", Attribute::getInt(0)}});
  // Unnamed results, a repeated name, a zero-result node, a node whose only
  // result is absent and ops that need the quoted spelling.
  Node *relu = builder.create({"", "Relu"}, {trailingColon}, {f32({1})});
  Node *dupC = builder.create({"", "Neg"}, {dupA}, {f32({2})});
  dupC->getResult(0)->setName("dup");
  builder.create({"", "Add"}, {dupB, dupC->getResult(0)}, {f32({2})});
  builder.create({"com.foo", "Print"}, {slashes, comment}, {}, {}, "printer");
  Node *dropped =
      builder.create({"", "Dropout"}, {relu->getResult(0)}, {f32({1})});
  graph.dropResult(dropped, 0);
  // A random node's stream id and a non-forward phase print and parse.
  dropped->setStreamId(0xFEDCBA9876543210ull);
  dropped->setPhase(Phase::Recompute);
  // Bare, `name` would read as the name of the Dropout above.
  builder.create({"", "name"}, {bias}, {});
  builder.create({"", "return"}, {unnamedInput}, {TensorType()});
  builder.create({"weird domain!", "a.b"}, {constants[0]}, {f32({5})}, {},
                 "InPlaceAccumulatorV2_dup");
  Node *accumulate = builder.create(
      {"com.microsoft", "InPlaceAccumulatorV2"}, {acc, weight, lazy},
      {TensorType::get(DType::Bool, {}), f32({3, 4})}, {},
      "InPlaceAccumulatorV2_0");
  accumulate->getResult(0)->setName("fc1.weight_grad.accumulation.out");
  Node *dupNamed1 =
      builder.create({"", "Identity"}, {bias}, {f32({3})}, {}, "same");
  Node *dupNamed2 = builder.create({"", "Identity"}, {bias}, {}, {}, "same");

  graph.addOutput(loss->getResult(0));
  graph.addOutput(accumulate->getResult(0));
  graph.addOutput(input);
  graph.addOutput(loss->getResult(0));
  graph.addOutput(nullptr);

  TrainingSignature &sig = module->getSignature();
  sig.appendParam(
      {weight, true, accumulate->getResult(1), acc, accumulate, {}});
  sig.appendParam({bias, false, nullptr, nullptr, nullptr, {}});
  sig.appendParam({dupA, true, nullptr, nullptr, dupNamed1, {}});
  sig.appendParam({dupB, true, nullptr, nullptr, dupNamed2, {}});
  sig.addDataInput(input);
  sig.addDataInput(labels);
  sig.setLoss(loss->getResult(0));
  sig.setLossGradSeed(gemm->getResult(0));
  sig.setLazyResetGrad(lazy);
  return module;
}

//===----------------------------------------------------------------------===//
// Round trips
//===----------------------------------------------------------------------===//

TEST(TextIRTest, RichModuleRoundTrips) {
  std::unique_ptr<Module> module = buildRichModule();
  expectRoundTrip(*module);
  // Everything as element lists, and everything as hex.
  PrintOptions allElements;
  allElements.largeConstantElements = 1u << 20;
  expectRoundTrip(*module, allElements);
  PrintOptions allHex;
  allHex.largeConstantElements = 0;
  expectRoundTrip(*module, allHex);
}

TEST(TextIRTest, EmptyModuleRoundTrips) {
  Module module;
  expectRoundTrip(module);
  EXPECT_EQ(print(module), "module attributes {ir_version = 8} {\n"
                           "  graph @\"\"() {\n"
                           "    return\n"
                           "  }\n"
                           "}\n");
}

TEST(TextIRTest, PrintsReadableText) {
  Module module;
  module.opsetImports = {{"", 17}, {"com.microsoft", 1}};
  module.dimBindings = {{"batch", 8}};
  Graph &graph = module.getGraph();
  graph.setName("main");
  Value *x = graph.addInput(
      TensorType(DType::F32, {Dim::symbolic("batch"), Dim::fixed(2)}), "x");
  Value *w = graph.addInput(f32({3, 2}), "w");
  Builder builder(graph);
  Value *c = builder.createConstant(
      TensorData::fromValues<float>(DType::F32, {2}, {1.0f, 0.1f}), "c");
  Node *gemm = builder.create(
      {"", "Gemm"}, {x, w, nullptr},
      {TensorType(DType::F32, {Dim::symbolic("batch"), Dim::fixed(3)})},
      {{"transB", Attribute::getInt(1)}, {"alpha", Attribute::getFloat(0.5f)}},
      "Gemm_0");
  Node *split =
      builder.create({"com.microsoft", "Split2"}, {gemm->getResult(0), c},
                     {f32({1}), f32({2}), f32({3})});
  split->getResult(1)->setName("mid");
  graph.dropResult(split, 2);
  graph.addOutput(split->getResult(1));
  module.getSignature().appendParam({w, true, nullptr, nullptr, nullptr, {}});
  module.getSignature().addDataInput(x);
  module.getSignature().setLoss(split->getResult(0));

  EXPECT_EQ(
      print(module),
      "module attributes {ir_version = 8, opsets = {\"\" = 17, "
      "\"com.microsoft\" = 1}, dims = {batch = 8}} {\n"
      "  graph @main(%x: f32[batch,2], %w: f32[3,2]) {\n"
      "    %c = constant f32[2] dense<[1.0, 0.1]>\n"
      "    %0 = Gemm(%x, %w, _) {transB = 1, alpha = 0.5} : "
      "f32[batch,3] name \"Gemm_0\"\n"
      "    %1, %mid, _ = com.microsoft.Split2(%0, %c) : (f32[1], f32[2])\n"
      "    return %mid\n"
      "  }\n"
      "  signature {\n"
      "    param %w trainable\n"
      "    data %x\n"
      "    loss %1\n"
      "  }\n"
      "}\n");
  expectRoundTrip(module);
}

TEST(TextIRTest, ParsesHandWrittenText) {
  const char *text = R"(// A hand-written module.
module {
  graph @g(%a: f32[4], %b: f32[4] = dense<[1, 2, 3, 4.5]>) {
    %k = constant i64[2] dense<[-1, 0x10]>
    %sum = Add(%a, %b)   // no result types: unknown
    %x, _ = com.microsoft.Pair(%sum, _) {list = [1, 2.5], e = [] : strings,
        t = bool[2] dense<[true, 0]>, n = 3 : f32} : f32[4] name "pair"
    "".return(%x)
    return %x, %k
  }
  signature {
    param %a trainable grad %x via "pair"
    data %b
  }
}
)";
  std::unique_ptr<Module> module = parseOrFail(text);
  ASSERT_TRUE(module);
  Graph &graph = module->getGraph();
  EXPECT_EQ(graph.getName(), "g");
  ASSERT_EQ(graph.getInputs().size(), 2u);
  Value *b = graph.getInputs()[1].get();
  ASSERT_TRUE(b->hasData());
  EXPECT_EQ(b->getData().getFloatElement(3), 4.5);
  Value *k = graph.getInitializers()[0].get();
  EXPECT_EQ(k->getData().getIntValues(), (std::vector<int64_t>{-1, 16}));
  ASSERT_EQ(graph.getNumNodes(), 3u);
  auto it = graph.getNodes().begin();
  Node &add = *it++;
  EXPECT_EQ(add.getResult(0)->getType(), TensorType());
  EXPECT_EQ(add.getResult(0)->getName(), "sum");
  Node &pair = *it++;
  EXPECT_TRUE(pair.isa("com.microsoft", "Pair"));
  EXPECT_EQ(pair.getName(), "pair");
  EXPECT_EQ(pair.getOperand(1), nullptr);
  EXPECT_EQ(pair.getNumResults(), 2u);
  EXPECT_EQ(pair.getResult(1), nullptr);
  EXPECT_EQ(pair.getResult(0)->getType(), f32({4}));
  EXPECT_EQ(*pair.getAttr("list"), Attribute::getFloats({1.0f, 2.5f}));
  EXPECT_EQ(*pair.getAttr("e"), Attribute::getStrings({}));
  EXPECT_EQ(pair.getAttr("t")->getTensor().getIntValues(),
            (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(*pair.getAttr("n"), Attribute::getFloat(3.0f));
  Node &ret = *it++;
  EXPECT_TRUE(ret.isa("", "return"));
  EXPECT_EQ(ret.getNumResults(), 0u);
  EXPECT_EQ(graph.getNumOutputs(), 2u);
  ASSERT_EQ(module->getSignature().getParams().size(), 1u);
  EXPECT_EQ(module->getSignature().getParams()[0].accumulateNode, &pair);
  EXPECT_EQ(module->getSignature().getParams()[0].grad, pair.getResult(0));
  EXPECT_EQ(module->getSignature().getDataInputs().vec(),
            std::vector<Value *>{b});
}

/// Parses a `TYPE dense<[...]>` of \p dtype holding every \p width-bit
/// pattern and checks that the bytes come back unchanged.
void expectAllBitPatternsRoundTrip(DType dtype, unsigned width) {
  Module module;
  uint64_t count = uint64_t(1) << width;
  std::vector<uint8_t> bytes;
  for (uint64_t bits = 0; bits != count; ++bits)
    for (unsigned i = 0; i != width / 8; ++i)
      bytes.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  Builder(module.getGraph())
      .createConstant(TensorData(TensorType::get(dtype, {int64_t(count)}),
                                 std::move(bytes)),
                      "all");
  PrintOptions options;
  options.largeConstantElements = count;
  std::string text = print(module, options);
  ASSERT_NE(text.find("dense<["), std::string::npos);
  expectRoundTrip(module, options);
}

TEST(TextIRTest, EverySmallFloatBitPatternRoundTrips) {
  expectAllBitPatternsRoundTrip(DType::F16, 16);
  expectAllBitPatternsRoundTrip(DType::BF16, 16);
  expectAllBitPatternsRoundTrip(DType::F8E4M3FN, 8);
  expectAllBitPatternsRoundTrip(DType::F8E4M3FNUZ, 8);
  expectAllBitPatternsRoundTrip(DType::F8E5M2, 8);
  expectAllBitPatternsRoundTrip(DType::F8E5M2FNUZ, 8);
  expectAllBitPatternsRoundTrip(DType::I16, 16);
  expectAllBitPatternsRoundTrip(DType::U8, 8);
}

TEST(TextIRTest, RandomWideFloatsRoundTrip) {
  Module module;
  Builder builder(module.getGraph());
  builder.createConstant(randomConstant(DType::F32, 5000, 1), "f");
  builder.createConstant(randomConstant(DType::F64, 5000, 2), "d");
  builder.createConstant(randomConstant(DType::I64, 2000, 3), "i");
  builder.createConstant(randomConstant(DType::U64, 2000, 4), "u");
  PrintOptions options;
  options.largeConstantElements = 5000;
  expectRoundTrip(module, options);
}

TEST(TextIRTest, FloatsPrintShortAndExact) {
  Module module;
  Builder builder(module.getGraph());
  builder.createConstant(
      TensorData::fromValues<float>(DType::F32, {6},
                                    {0.1f, 1.0f, -0.0f, 1e20f,
                                     std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN()}),
      "f");
  uint16_t halfTenth = 0x2e66; // nearest half to 0.1
  builder.createConstant(
      TensorData::fromValues<uint16_t>(DType::F16, {1}, {halfTenth}), "h");
  builder.createConstant(TensorData::fromValues<float>(DType::F32, {}, {-2.5f}),
                         "scalar");
  std::string text = print(module);
  EXPECT_NE(text.find("%scalar = constant f32[] dense<-2.5>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("dense<[0.1, 1.0, -0.0, 1e+20, inf, 0x7FC00000]>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("f16[1] dense<[0.1]>"), std::string::npos) << text;
  expectRoundTrip(module);
}

TEST(TextIRTest, LargeConstantsAreHexOrElided) {
  Module module;
  Builder(module.getGraph())
      .createConstant(TensorData::fromValues<float>(DType::F32, {17},
                                                    std::vector<float>(17, 1)),
                      "w");
  std::string text = print(module);
  EXPECT_NE(text.find("dense<\"0x0000803F0000803F"), std::string::npos) << text;
  PrintOptions elide;
  elide.elideLargeConstants = true;
  std::string elided = print(module, elide);
  EXPECT_NE(elided.find("%w = constant f32[17] <elided 68 bytes>"),
            std::string::npos)
      << elided;
  EXPECT_EQ(parseError(elided),
            "t.gmir:3:27: cannot parse an elided constant; print the module "
            "without elideLargeConstants");
}

TEST(TextIRTest, DeepNestingIsAnErrorNotACrash) {
  std::string text =
      "module {\n  graph @g() {\n    Foo() {a = " + std::string(200000, '[') +
      "\n";
  EXPECT_EQ(parseError(text).rfind("t.gmir:3:17: expected list element", 0),
            0u);
  std::string braces = "module " + std::string(100000, '{');
  EXPECT_FALSE(parseError(braces).empty());
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

/// Wraps \p body lines in a module whose graph has input %x: f32[2]; the
/// first body line is line 3.
std::string inGraph(const std::string &body) {
  return "module {\n  graph @g(%x: f32[2]) {\n" + body + "  }\n}\n";
}

TEST(TextIRTest, ErrorsPointAtLineAndColumn) {
  struct Case {
    std::string text;
    std::string message;
  };
  std::vector<Case> cases = {
      {"module {\n  graph @g(%x f32[2]) {\n",
       "t.gmir:2:15: expected ':' after value name"},
      {"module {\n  graph @g(%x:f32[2]) {\n",
       "t.gmir:2:18: expected ':' after value name (a ':' followed by a name "
       "character continues the name: write '%x: f32[...]')"},
      {"module {\n  graph @g(%x: f33[2]) {\n",
       "t.gmir:2:16: unknown element type 'f33'"},
      {inGraph("    %x = Relu(%x) : f32[2]\n    return %x\n"),
       "t.gmir:3:5: redefinition of value %x"},
      {inGraph("    %y, %y = Split(%x)\n    return %y\n"),
       "t.gmir:3:9: redefinition of value %y"},
      {inGraph("    %y = Relu(%z) : f32[2]\n    return %y\n"),
       "t.gmir:3:15: use of undefined value %z"},
      {inGraph("    %y = Relu(%y) : f32[2]\n    return %y\n"),
       "t.gmir:3:15: use of undefined value %y"},
      {inGraph("    %y = Relu(%x)\n    return %y, %z\n"),
       "t.gmir:4:16: use of undefined value %z"},
      {inGraph("    %y = Relu(%x) {a = 1, a = 2} : f32[2]\n    return %y\n"),
       "t.gmir:3:27: duplicate attribute 'a'"},
      {inGraph("    %y = Relu(%x) {a = } : f32[2]\n    return %y\n"),
       "t.gmir:3:24: expected attribute value"},
      {inGraph("    %y = Relu(%x) {a = 1 : i32}\n    return %y\n"),
       "t.gmir:3:28: expected 'i64' or 'f32' after ':' in attribute"},
      {inGraph("    %y = Relu(%x) {a = []}\n    return %y\n"),
       "t.gmir:3:24: the kind of an empty list must be given, as in '[] : "
       "ints'"},
      {inGraph("    %y = Relu(%x) {a = [1, \"s\"]}\n    return %y\n"),
       "t.gmir:3:24: list mixes strings and numbers"},
      {inGraph("    %y = Relu(%x) {a = 99999999999999999999}\n    return %y\n"),
       "t.gmir:3:24: integer literal too large"},
      {inGraph("    %y = Relu(%x : f32[2]\n    return %y\n"),
       "t.gmir:3:18: expected ',' or ')' in operand list"},
      {inGraph("    %y = Relu(%x) : (f32[2], f32[2])\n    return %y\n"),
       "t.gmir:3:19: node has 1 results but 2 result types"},
      {inGraph("    %y = Relu(%x) : f32[2 3]\n    return %y\n"),
       "t.gmir:3:27: expected ',' or ']' in shape"},
      {inGraph("    %y = Relu(%x) : f32[-1]\n    return %y\n"),
       "t.gmir:3:25: negative dimension -1"},
      {inGraph("    %y = Relu(%x) $\n"),
       "t.gmir:3:19: unexpected character '$'"},
      {inGraph("    %y = Relu(%x) name \"abc\n"),
       "t.gmir:3:24: unterminated string literal"},
      {inGraph("    %y = Relu(%x) name \"a\\qb\"\n"),
       "t.gmir:3:26: invalid escape sequence in string literal"},
      {inGraph("    %c = constant i8[2] dense<[1, 128]>\n"),
       "t.gmir:3:35: integer literal out of range for i8"},
      {inGraph("    %c = constant u8[2] dense<[-1, 1]>\n"),
       "t.gmir:3:32: integer literal out of range for u8"},
      {inGraph("    %c = constant f16[1] dense<[70000.0]>\n"),
       "t.gmir:3:33: float literal out of range for f16"},
      {inGraph("    %c = constant f8e4m3fn[1] dense<[inf]>\n"),
       "t.gmir:3:38: f8e4m3fn has no infinity"},
      {inGraph("    %c = constant f32[3] dense<[1.0, 2.0]>\n"),
       "t.gmir:3:32: expected 3 elements for f32[3], got 2"},
      {inGraph("    %c = constant f32[1] dense<[1.0, 2.0]>\n"),
       "t.gmir:3:38: too many elements for f32[1] (expected 1)"},
      {inGraph("    %c = constant f32[1] dense<\"0x0000\">\n"),
       "t.gmir:3:32: expected 4 bytes for f32[1], got 2"},
      {inGraph("    %c = constant f32[batch] dense<[1.0]>\n"),
       "t.gmir:3:19: a constant needs a static shape, got f32[batch]"},
      {inGraph("    %c = constant c64[1] dense<[1.0]>\n"),
       "t.gmir:3:32: constants of type c64 are written as a hex string "
       "\"0x...\""},
      {inGraph("    %c = constant bool[1] dense<[2]>\n"),
       "t.gmir:3:34: expected 'true', 'false', 0 or 1"},
      {inGraph("    %c = constant u8[1] dense<\"0x1\">\n"),
       "t.gmir:3:31: hex string has an odd number of digits"},
      {inGraph("    %c = constant u8[1] dense<\"0xZZ\">\n"),
       "t.gmir:3:31: invalid hex digit in constant bytes"},
      {inGraph("    %c = constant u8[1] dense<\"12\">\n"),
       "t.gmir:3:31: expected a hex string \"0x...\" of the constant's bytes"},
      {inGraph("    _ = constant f32[1] dense<[1.0]>\n"),
       "t.gmir:3:9: 'constant' defines exactly one named value"},
      {inGraph("    %\"\" = Relu(%x)\n"),
       "t.gmir:3:5: empty value name; unnamed values are written as numbers "
       "such as %0"},
      {inGraph("    %3#1 = Relu(%x)\n"),
       "t.gmir:3:5: unnamed value %3 cannot have a '#' suffix"},
      {inGraph("    %y = Relu(%x)\n"),
       "t.gmir:4:3: expected 'return' at the end of the graph body"},
      {inGraph("    return %x %x\n"),
       "t.gmir:3:15: expected '}' after the return statement"},
      {inGraph("    return %x\n") + "garbage\n",
       "t.gmir:6:1: unexpected text after the end of the module"},
      {"module {\n", "t.gmir:2:1: expected 'graph' in the module body"},
      {"", "t.gmir:1:1: expected 'module' at the start of the module"},
      {"module attributes {ir_version = 8, ir_version = 9} {\n",
       "t.gmir:1:36: duplicate module attribute 'ir_version'"},
      {"module attributes {opsets = {\"\" = 17, \"\" = 18}} {\n",
       "t.gmir:1:39: duplicate opset domain ''"},
      {"module attributes {opsets = {\"\" = 17, \"ai.onnx\" = 17}} {\n",
       "t.gmir:1:39: duplicate opset domain ''"},
      {"module attributes {opsets = {\"\" = 8}} {\n",
       "t.gmir:1:30: unsupported opset 8 for domain '' (gmopt supports "
       "opsets 13 to 23)"},
      {"module attributes {opsets = {\"com.microsoft\" = 0}} {\n",
       "t.gmir:1:30: invalid opset version 0 for domain 'com.microsoft'"},
      {"module attributes {ir_version = 11} {\n",
       "t.gmir:1:33: unsupported ONNX ir_version 11 (gmopt reads "
       "ir_version 3 to 10)"},
      {"module attributes {colour = 1} {\n",
       "t.gmir:1:20: unknown module attribute 'colour'"},
      {"module {\n  graph @g(%x: f32[2]) {\n    return %x\n  }\n"
       "  signature {\n    loss %x\n    loss %x\n  }\n}\n",
       "t.gmir:7:5: duplicate 'loss' in signature"},
      {"module {\n  graph @g(%x: f32[2]) {\n    return %x\n  }\n"
       "  signature {\n    param %x trainable via %x\n  }\n}\n",
       "t.gmir:6:28: value %x is not a node result"},
      {"module {\n  graph @g(%x: f32[2]) {\n    return %x\n  }\n"
       "  signature {\n    param %x trainable via \"n\"\n  }\n}\n",
       "t.gmir:6:28: no node is named 'n'"},
      {"module {\n  graph @g(%x: f32[2]) {\n    return %x\n  }\n"
       "  signature {\n    param %x trainable via 0\n  }\n}\n",
       "t.gmir:6:28: node index 0 is out of range"},
      {"module {\n  graph @g(%x: f32[2]) {\n    Relu(%x) name \"n\"\n"
       "    Relu(%x) name \"n\"\n    return %x\n  }\n"
       "  signature {\n    param %x trainable via \"n\"\n  }\n}\n",
       "t.gmir:8:28: more than one node is named 'n'"},
      {"module {\n  graph @g(%x: f32[2]) {\n    return %x\n  }\n"
       "  signature {\n    param %x\n  }\n}\n",
       "t.gmir:7:3: expected 'trainable' or 'frozen' after parameter"},
      {std::string("module\0", 7), "t.gmir:1:7: unexpected byte 0x00"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(parseError(c.text), c.message) << "input:\n" << c.text;
}

TEST(TextIRTest, ErrorsCarryTheBufferName) {
  auto parsed = parseModule("module {", "foo.gmir");
  ASSERT_FALSE(parsed);
  EXPECT_EQ(llvm::toString(parsed.takeError()),
            "foo.gmir:1:9: expected 'graph' in the module body");
}

} // namespace
