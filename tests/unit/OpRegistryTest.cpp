//===- OpRegistryTest.cpp - Unit tests of the op registry core ------------===//
//
// Version resolution (ReduceSum 11 vs 13, ReduceMean 13 vs 18, Split 13 vs
// 18, ops introduced after opset 17), the generic checks every node gets
// (arity with optional operands, attribute kinds, required attributes, the
// exact error messages), constant operands, refinement of recorded result
// types, traits, in-place operands, AMP classes, cost models, and the
// coverage of every op the project needs.
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "ir/ops/ShapeValue.h"

#include "tests/unit/TestPaths.h"
#include "llvm/Support/MemoryBuffer.h"

#include <limits>
#include <set>

using namespace gmopt;
using namespace gmopt::test;

namespace {

const OpRegistry &registry() { return OpRegistry::instance(); }

const OpSchema &schemaOf(llvm::StringRef domain, llvm::StringRef op,
                         int64_t version = 17) {
  const OpSchema *schema = registry().lookup(domain, op, version);
  if (!schema) {
    ADD_FAILURE() << "no schema for " << domain.str() << "::" << op.str()
                  << " at " << version;
    static OpSchema empty;
    return empty;
  }
  return *schema;
}

//===----------------------------------------------------------------------===//
// Lookup and versions
//===----------------------------------------------------------------------===//

TEST(OpRegistryLookupTest, PicksNewestSchemaNotAfterOpset) {
  EXPECT_EQ(schemaOf("", "ReduceSum", 11).sinceVersion, 1);
  EXPECT_EQ(schemaOf("", "ReduceSum", 13).sinceVersion, 13);
  EXPECT_EQ(schemaOf("", "ReduceSum", 21).sinceVersion, 13);
  EXPECT_EQ(schemaOf("", "ReduceMean", 17).sinceVersion, 1);
  EXPECT_EQ(schemaOf("", "ReduceMean", 18).sinceVersion, 18);
  EXPECT_EQ(schemaOf("", "Split", 13).sinceVersion, 13);
  EXPECT_EQ(schemaOf("", "Split", 18).sinceVersion, 18);
  EXPECT_EQ(schemaOf("", "BatchNormalization", 13).sinceVersion, 9);
  EXPECT_EQ(schemaOf("", "BatchNormalization", 14).sinceVersion, 14);
  EXPECT_EQ(schemaOf("", "BatchNormalization", 21).sinceVersion, 15);
  EXPECT_EQ(
      schemaOf("", "Softmax", 12).lookupAttr("axis")->defaultValue->getInt(),
      1);
  EXPECT_EQ(
      schemaOf("", "Softmax", 13).lookupAttr("axis")->defaultValue->getInt(),
      -1);
  // ONNX Runtime's default-domain LayerNormalization (since 1) below the
  // standard one (since 17): what its LayerNormFusion writes at any opset.
  EXPECT_EQ(schemaOf("", "LayerNormalization", 13).sinceVersion, 1);
  EXPECT_EQ(schemaOf("", "LayerNormalization", 16).sinceVersion, 1);
  EXPECT_EQ(schemaOf("", "LayerNormalization", 17).sinceVersion, 17);
  EXPECT_EQ(schemaOf("", "SimplifiedLayerNormalization", 14).sinceVersion, 1);
  EXPECT_EQ(registry().lookup("", "Gelu", 19), nullptr);
  EXPECT_NE(registry().lookup("", "Gelu", 20), nullptr);
  EXPECT_NE(registry().lookup("com.microsoft", "Gelu", 1), nullptr);
  // "ai.onnx" is the standard domain spelled out.
  EXPECT_EQ(registry().lookup("ai.onnx", "Relu", 17),
            registry().lookup("", "Relu", 17));
  // ONNX Runtime's pooling gradients live in the standard domain.
  EXPECT_NE(registry().lookup("", "MaxPoolGrad", 13), nullptr);
  EXPECT_NE(registry().lookup("", "AveragePoolGrad", 21), nullptr);
  EXPECT_TRUE(registry().knows("com.microsoft", "InPlaceAccumulatorV2"));
  EXPECT_FALSE(registry().knows("com.microsoft", "Relu"));
}

/// ONNX versions a registered op takes under its previous schema, because
/// the change does not alter what the older schema accepts and computes.
const std::pair<const char *, int64_t> kCompatibleVersions[] = {
    // The pooling, Conv and Constant attributes these versions added or
    // clarified (ceil_mode, dilations, pads with auto_pad, sparse_value and
    // value_*) are in the older schema already.
    {"AveragePool", 10},
    {"AveragePool", 11},
    {"Constant", 11},
    {"Constant", 12},
    {"Conv", 11},
    {"MaxPool", 10},
    {"MaxPool", 11},
    // Negative axes allowed: the older schema normalizes them already.
    {"Flatten", 11},
    {"LogSoftmax", 11},
    {"ReduceL1", 11},
    {"ReduceL2", 11},
    {"ReduceLogSum", 11},
    {"ReduceLogSumExp", 11},
    {"ReduceMax", 11},
    {"ReduceMean", 11},
    {"ReduceMin", 11},
    {"ReduceProd", 11},
    {"ReduceSum", 11},
    {"ReduceSumSquare", 11},
    {"Slice", 11},
    {"Softmax", 11},
    // New element types only (bfloat16 at 13, the 8-bit and 4-bit float and
    // integer types at 19-21, optional and sequence types of Identity).
    {"Abs", 13},
    {"Add", 13},
    {"Add", 14},
    {"ArgMax", 13},
    {"ArgMin", 13},
    {"Cast", 9},
    {"Cast", 13},
    {"Cast", 21},
    {"CastLike", 21},
    {"Ceil", 13},
    {"Clip", 12},
    {"Clip", 13},
    {"Concat", 13},
    {"Constant", 9},
    {"Constant", 13},
    {"Constant", 19},
    {"Constant", 21},
    {"ConstantOfShape", 20},
    {"ConstantOfShape", 21},
    {"Div", 13},
    {"Div", 14},
    {"Equal", 11},
    {"Equal", 13},
    {"Equal", 19},
    {"Erf", 13},
    {"Exp", 13},
    {"Expand", 13},
    {"Flatten", 9},
    {"Flatten", 13},
    {"Flatten", 21},
    {"Floor", 13},
    {"Gather", 13},
    {"GatherElements", 13},
    {"GatherND", 13},
    {"Gemm", 13},
    {"Greater", 9},
    {"Greater", 13},
    {"GreaterOrEqual", 16},
    {"Identity", 13},
    {"Identity", 14},
    {"Identity", 16},
    {"Identity", 19},
    {"Identity", 21},
    {"IsInf", 20},
    {"IsNaN", 13},
    {"IsNaN", 20},
    {"LeakyRelu", 16},
    {"Less", 9},
    {"Less", 13},
    {"LessOrEqual", 16},
    {"Log", 13},
    {"MatMul", 9},
    {"MatMul", 13},
    {"Max", 12},
    {"Max", 13},
    {"MaxPool", 12},
    {"Mean", 13},
    {"Min", 12},
    {"Min", 13},
    {"Mod", 13},
    {"Mul", 13},
    {"Mul", 14},
    {"Neg", 13},
    {"NegativeLogLikelihoodLoss", 13},
    {"NonZero", 13},
    {"PRelu", 16},
    {"Pad", 13},
    {"Pad", 21},
    {"Pow", 12},
    {"Pow", 13},
    {"Pow", 15},
    {"Reciprocal", 13},
    {"ReduceL1", 13},
    {"ReduceL2", 13},
    {"ReduceLogSum", 13},
    {"ReduceLogSumExp", 13},
    {"ReduceMax", 12},
    {"ReduceMax", 13},
    {"ReduceMax", 20},
    {"ReduceMean", 13},
    {"ReduceMin", 12},
    {"ReduceMin", 13},
    {"ReduceMin", 20},
    {"ReduceProd", 13},
    {"ReduceSumSquare", 13},
    {"Relu", 13},
    {"Relu", 14},
    {"Reshape", 13},
    {"Reshape", 19},
    {"Reshape", 21},
    {"ScatterElements", 13},
    {"ScatterND", 13},
    {"Shape", 13},
    {"Shape", 19},
    {"Shape", 21},
    {"Sigmoid", 13},
    {"Sign", 13},
    {"Size", 13},
    {"Size", 19},
    {"Size", 21},
    {"Slice", 13},
    {"SoftmaxCrossEntropyLoss", 13},
    {"Sqrt", 13},
    {"Squeeze", 21},
    {"Sub", 13},
    {"Sub", 14},
    {"Sum", 13},
    {"Tanh", 13},
    {"Tile", 13},
    {"Transpose", 13},
    {"Transpose", 21},
    {"Unsqueeze", 21},
    {"Where", 16},
};

TEST(OpRegistryLookupTest, EveryOnnxVersionOfAKnownOpIsRegistered) {
  // tests/unit/Inputs/onnx-op-versions.txt lists every ai.onnx op with the
  // opsets that changed its schema (scripts/onnx-op-versions.py). For each
  // op gmopt knows, every such opset from its first registered version on
  // must have its own schema, or be a compatible change: otherwise a model
  // at the newer opset would silently get the older version's meaning.
  auto table = llvm::MemoryBuffer::getFile(
      gmopt::testSourceDir() + "/tests/unit/Inputs/onnx-op-versions.txt");
  ASSERT_TRUE(static_cast<bool>(table));
  std::set<std::pair<std::string, int64_t>> compatible;
  for (const auto &[op, version] : kCompatibleVersions)
    compatible.emplace(op, version);
  llvm::SmallVector<llvm::StringRef, 256> lines;
  (*table)->getBuffer().split(lines, '\n', -1, false);
  std::string missing;
  unsigned checkedOps = 0;
  for (llvm::StringRef line : lines) {
    if (line.starts_with("#"))
      continue;
    llvm::SmallVector<llvm::StringRef, 8> fields;
    line.split(fields, ' ', -1, false);
    ASSERT_GE(fields.size(), 2u) << line.str();
    llvm::StringRef op = fields[0];
    if (!registry().knows("", op))
      continue;
    ++checkedOps;
    for (llvm::StringRef field : llvm::ArrayRef(fields).drop_front()) {
      int64_t version = 0;
      ASSERT_FALSE(field.getAsInteger(10, version)) << line.str();
      const OpSchema *schema = registry().lookup("", op, version);
      // Versions before gmopt's first one are refused at import.
      if (!schema || schema->sinceVersion == version)
        continue;
      if (compatible.count({op.str(), version}))
        continue;
      missing += " " + op.str() + "-" + std::to_string(version);
    }
  }
  EXPECT_GT(checkedOps, 100u);
  EXPECT_EQ(missing, "") << "ONNX versions with no schema of their own "
                            "(register them, or list compatible changes in "
                            "kCompatibleVersions)";
  // Every compatible entry is a real ONNX version the registry resolves to an
  // older schema (no stale entries).
  for (const auto &[op, version] : kCompatibleVersions) {
    const OpSchema *schema = registry().lookup("", op, version);
    ASSERT_NE(schema, nullptr) << op;
    EXPECT_LT(schema->sinceVersion, version) << op;
  }
}

TEST(OpRegistryLookupTest, AllIsSortedAndSchemasAreWellFormed) {
  std::vector<const OpSchema *> schemas = registry().all();
  ASSERT_GT(schemas.size(), 150u);
  for (size_t i = 1; i < schemas.size(); ++i) {
    const OpSchema &a = *schemas[i - 1], &b = *schemas[i];
    EXPECT_TRUE(std::tie(a.domain, a.name, a.sinceVersion) <
                std::tie(b.domain, b.name, b.sinceVersion))
        << a.name << " / " << b.name;
  }
  for (const OpSchema *schema : schemas) {
    SCOPED_TRACE(schema->domain + "::" + schema->name);
    EXPECT_TRUE(static_cast<bool>(schema->infer));
    EXPECT_LE(schema->minInputs, schema->maxInputs);
    EXPECT_LE(schema->minOutputs, schema->maxOutputs);
    EXPECT_LT(schema->inPlaceOperand, static_cast<int64_t>(schema->maxInputs) +
                                          (schema->maxInputs == UINT_MAX));
    for (const AttrSpec &attr : schema->attributes) {
      if (attr.defaultValue) {
        EXPECT_EQ(attr.defaultValue->getKind(), attr.kind) << attr.name;
      }
      EXPECT_FALSE(attr.required && attr.defaultValue) << attr.name;
    }
  }
}

TEST(OpRegistryLookupTest, CoversEveryOpTheProjectNeeds) {
  const char *onnxOps[] = {"Add",
                           "Sub",
                           "Mul",
                           "Div",
                           "Pow",
                           "Sqrt",
                           "Exp",
                           "Log",
                           "Neg",
                           "Abs",
                           "Reciprocal",
                           "Relu",
                           "LeakyRelu",
                           "Sigmoid",
                           "Tanh",
                           "Erf",
                           "Softmax",
                           "LogSoftmax",
                           "MatMul",
                           "Gemm",
                           "Conv",
                           "MaxPool",
                           "AveragePool",
                           "GlobalAveragePool",
                           "BatchNormalization",
                           "LayerNormalization",
                           "Dropout",
                           "Gather",
                           "GatherElements",
                           "SoftmaxCrossEntropyLoss",
                           "NegativeLogLikelihoodLoss",
                           "Reshape",
                           "Transpose",
                           "Concat",
                           "Slice",
                           "Split",
                           "Expand",
                           "Where",
                           "Equal",
                           "Less",
                           "Greater",
                           "Not",
                           "And",
                           "Or",
                           "ReduceSum",
                           "ReduceMean",
                           "ReduceMax",
                           "ReduceSumSquare",
                           "Cast",
                           "CastLike",
                           "Shape",
                           "Size",
                           "Constant",
                           "ConstantOfShape",
                           "Identity",
                           "Sum",
                           "Squeeze",
                           "Unsqueeze",
                           "Flatten",
                           "Range",
                           "Tile",
                           "Trilu",
                           "Min",
                           "Max",
                           "Clip",
                           "Sign",
                           "Mean",
                           "Cos",
                           "Sin",
                           "IsNaN",
                           "IsInf",
                           "Floor",
                           "Ceil",
                           "ArgMax",
                           "OneHot",
                           "Einsum",
                           "MaxPoolGrad",
                           "AveragePoolGrad"};
  for (const char *op : onnxOps)
    EXPECT_NE(registry().lookup("", op, 17), nullptr) << op;
  EXPECT_NE(registry().lookup("", "Gelu", 20), nullptr);
  const char *msOps[] = {"ReluGrad",
                         "GeluGrad",
                         "FastGeluGrad",
                         "BiasGelu",
                         "BiasGeluGrad_dX",
                         "FastGelu",
                         "Gelu",
                         "SigmoidGrad",
                         "TanhGrad",
                         "SoftmaxGrad",
                         "SoftmaxGrad_13",
                         "LogSoftmaxGrad",
                         "LogSoftmaxGrad_13",
                         "LayerNormalizationGrad",
                         "SimplifiedLayerNormalizationGrad",
                         "SimplifiedLayerNormalization",
                         "InvertibleLayerNormalizationGrad",
                         "ConvGrad",
                         "BatchNormalizationGrad",
                         "BatchNormInternal",
                         "DropoutGrad",
                         "BitmaskDropout",
                         "BitmaskDropoutGrad",
                         "GatherGrad",
                         "GatherElementsGrad",
                         "SoftmaxCrossEntropyLossGrad",
                         "SoftmaxCrossEntropyLossInternal",
                         "SoftmaxCrossEntropyLossInternalGrad",
                         "FusedMatMul",
                         "BroadcastGradientArgs",
                         "DivGrad",
                         "Scale",
                         "ConcatTraining",
                         "SplitTraining",
                         "ReduceSumTraining",
                         "InPlaceAccumulatorV2",
                         "InPlaceAccumulator",
                         "IsAllFinite",
                         "MixedPrecisionScale",
                         "ZeroGradient",
                         "YieldOp",
                         "SoftmaxCrossEntropy",
                         "SoftmaxCrossEntropyGrad",
                         "SliceGrad"};
  for (const char *op : msOps)
    EXPECT_NE(registry().lookup("com.microsoft", op, 1), nullptr) << op;
}

TEST(OpRegistryLookupTest, CoversEveryOpOfTheTestdataGraphs) {
  // testdata/ops.txt lists (domain, op, opset) of every ONNX Runtime
  // training graph in testdata/.
  std::string path = gmopt::testdataDir() + "/ops.txt";
  auto buffer = llvm::MemoryBuffer::getFile(path);
  // A committed fixture: missing is a failure, never a skip.
  ASSERT_TRUE(bool(buffer)) << "missing " << path;
  llvm::SmallVector<llvm::StringRef, 64> lines;
  (*buffer)->getBuffer().split(lines, '\n', -1, false);
  unsigned numOps = 0;
  for (llvm::StringRef line : lines) {
    if (line.starts_with("#"))
      continue;
    llvm::SmallVector<llvm::StringRef, 4> columns;
    line.split(columns, '\t');
    ASSERT_GE(columns.size(), 3u) << line.str();
    int64_t version;
    ASSERT_FALSE(columns[2].getAsInteger(10, version)) << line.str();
    EXPECT_NE(registry().lookup(columns[0], columns[1], version), nullptr)
        << line.str();
    ++numOps;
  }
  EXPECT_GT(numOps, 20u);
}

//===----------------------------------------------------------------------===//
// Generic node checks and their messages
//===----------------------------------------------------------------------===//

TEST_F(OpTest, UnknownOpAndUnsupportedOpsetAreReported) {
  Value *x = input("f32[2,3]");
  Node *bar = make({"com.foo", "Bar"}, {x});
  bar->setName("bar");
  EXPECT_EQ(errorOf(*bar), "node bar (com.foo.Bar): unknown op 'com.foo.Bar'");

  module.opsetImports[""] = 19;
  Node *gelu = make(onnxOp("Gelu"), {x});
  gelu->setName("gelu");
  EXPECT_EQ(errorOf(*gelu),
            "node gelu (Gelu): op 'Gelu' is not supported at opset 19");
  module.opsetImports[""] = 20;
  EXPECT_EQ(errorOf(*gelu), "");
}

TEST_F(OpTest, ArityIsChecked) {
  Value *x = input("f32[2,3]");
  Node *add = make(onnxOp("Add"), {x, x, x});
  add->setName("add");
  EXPECT_EQ(errorOf(*add), "node add (Add): expected 2 inputs, got 3");
  EXPECT_TRUE(contains(errorOf(*make(onnxOp("Relu"), {x}, 2)),
                       "expected 1 output, got 2"));
  EXPECT_TRUE(contains(errorOf(*make(onnxOp("Clip"), {x, x, x, x})),
                       "expected 1 to 3 inputs, got 4"));
  EXPECT_TRUE(
      contains(errorOf(*make(onnxOp("Concat"), {}, 1, {intAttr("axis", 0)})),
               "expected at least 1 input, got 0"));
  EXPECT_TRUE(contains(errorOf(*make(onnxOp("Add"), {x, nullptr})),
                       "input 1 is required but absent"));
  EXPECT_TRUE(contains(errorOf(*make(onnxOp("Sum"), {x, nullptr, x})),
                       "input 1 is required but absent"));
  // Absent optional inputs are fine, even before a present one.
  Value *bound = f32s({6.0f}, {});
  EXPECT_EQ(infer(onnxOp("Clip"), {x, nullptr, bound}), "f32[2,3]");
  // Unnamed nodes are still identified.
  Node *anonymous = make(onnxOp("Relu"), {x, x});
  anonymous->setName("");
  EXPECT_EQ(errorOf(*anonymous),
            "node <unnamed> (Relu): expected 1 input, got 2");
}

TEST_F(OpTest, AttributesAreChecked) {
  Value *x = input("f32[2,3]");
  EXPECT_TRUE(
      contains(errorOf(*make(onnxOp("Relu"), {x}, 1, {intAttr("foo", 1)})),
               "unknown attribute 'foo'"));
  EXPECT_TRUE(contains(
      errorOf(*make(onnxOp("Softmax"), {x}, 1, {floatAttr("axis", 1.0f)})),
      "attribute 'axis' has kind float, expected int"));
  EXPECT_TRUE(contains(errorOf(*make(onnxOp("Cast"), {x})),
                       "missing required attribute 'to'"));
  // ONNX Runtime's AllowUncheckedAttributes ops accept extra attributes.
  Value *stats = input("f32[2,1]");
  Node *lnGrad = make(msOp("LayerNormalizationGrad"),
                      {x, x, input("f32[3]"), stats, stats}, 3,
                      {floatAttr("epsilon", 1e-5f), intAttr("stash_type", 1)});
  EXPECT_EQ(inferred(*lnGrad), "f32[2,3] f32[3] f32[3]");
}

TEST_F(OpTest, ContextReadsAttributeDefaultsAndConstants) {
  Value *x = input("f32[4]");
  Node *leaky = make(onnxOp("LeakyRelu"), {x});
  const OpSchema &schema = *registry().lookup(*leaky);
  InferenceContext ctx(*leaky, schema);
  EXPECT_FLOAT_EQ(ctx.getFloatAttr("alpha"), 0.01f);
  EXPECT_EQ(ctx.getAttr("beta"), nullptr);
  EXPECT_EQ(ctx.getIntAttr("beta", 7), 7);
  leaky->setAttr("alpha", Attribute::getFloat(0.2f));
  EXPECT_FLOAT_EQ(ctx.getFloatAttr("alpha"), 0.2f);

  Value *initializer = i64s({2, -1});
  Node *constant =
      make(onnxOp("Constant"), {}, 1, {intsAttr("value_ints", {5, 6, 7})});
  Node *floatConstant =
      make(onnxOp("Constant"), {}, 1, {floatAttr("value_float", 2.5f)});
  TensorData tensor = TensorData::fromValues<int64_t>(DType::I64, {1}, {9});
  Node *tensorConstant = make(onnxOp("Constant"), {}, 1,
                              {{"value", Attribute::getTensor(tensor)}});
  Value *withDefault = graph().addInput(ty("i64[1]"), "with_default");
  withDefault->setData(TensorData::fromValues<int64_t>(DType::I64, {1}, {3}));
  Node *user =
      make(onnxOp("Sum"),
           {initializer, constant->getResult(0), floatConstant->getResult(0),
            tensorConstant->getResult(0), withDefault, x});
  InferenceContext userCtx(*user, *registry().lookup(*user));
  ASSERT_NE(userCtx.getConstantInput(0), nullptr);
  EXPECT_EQ(userCtx.getConstantInput(0)->getIntValues(),
            (std::vector<int64_t>{2, -1}));
  ASSERT_NE(userCtx.getConstantInput(1), nullptr);
  EXPECT_EQ(userCtx.getConstantInput(1)->getIntValues(),
            (std::vector<int64_t>{5, 6, 7}));
  ASSERT_NE(userCtx.getConstantInput(2), nullptr);
  EXPECT_EQ(userCtx.getConstantInput(2)->getType().str(), "f32[]");
  EXPECT_DOUBLE_EQ(userCtx.getConstantInput(2)->getFloatElement(0), 2.5);
  ASSERT_NE(userCtx.getConstantInput(3), nullptr);
  EXPECT_EQ(userCtx.getConstantInput(3)->getIntValues(),
            (std::vector<int64_t>{9}));
  ASSERT_NE(userCtx.getConstantInput(4), nullptr);
  EXPECT_EQ(userCtx.getConstantInput(4)->getIntValues(),
            (std::vector<int64_t>{3}));
  EXPECT_EQ(userCtx.getConstantInput(5), nullptr);
}

TEST_F(OpTest, ConstantNodesTypeThemselves) {
  TensorData tensor =
      TensorData::fromValues<float>(DType::F32, {2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(infer(onnxOp("Constant"), {}, 1,
                  {{"value", Attribute::getTensor(tensor)}}),
            "f32[2,2]");
  EXPECT_EQ(infer(onnxOp("Constant"), {}, 1, {intsAttr("value_ints", {1, 2})}),
            "i64[2]");
  EXPECT_EQ(infer(onnxOp("Constant"), {}, 1, {intAttr("value_int", 4)}),
            "i64[]");
  EXPECT_TRUE(contains(infer(onnxOp("Constant"), {}),
                       "exactly one value attribute must be set, found 0"));
  EXPECT_TRUE(
      contains(infer(onnxOp("Constant"), {}, 1,
                     {intAttr("value_int", 4), floatAttr("value_float", 1.0f)}),
               "found 2"));
}

/// A value of \p kind for a required attribute: ordinary, or (when
/// \p extreme) the most hostile value of that kind.
Attribute attributeOfKind(Attribute::Kind kind, bool extreme) {
  int64_t big = std::numeric_limits<int64_t>::max();
  int64_t small = std::numeric_limits<int64_t>::min();
  switch (kind) {
  case Attribute::Kind::Int:
    return Attribute::getInt(extreme ? small : 1);
  case Attribute::Kind::Float:
    return Attribute::getFloat(extreme ? -1e30f : 1.0f);
  case Attribute::Kind::String:
    return Attribute::getString(extreme ? "...,..->.." : "none");
  case Attribute::Kind::Tensor:
    return Attribute::getTensor(
        TensorData::fromValues<float>(DType::F32, {2}, {1.0f, 2.0f}));
  case Attribute::Kind::Floats:
    return Attribute::getFloats({1.0f});
  case Attribute::Kind::Ints:
    return Attribute::getInts(extreme ? std::vector<int64_t>{big, small}
                                      : std::vector<int64_t>{0});
  case Attribute::Kind::Strings:
    return Attribute::getStrings({"a"});
  }
  return Attribute();
}

TEST_F(OpTest, EverySchemaSurvivesHostileOperandsAndAttributes) {
  // Errors are fine; crashes, hangs and sanitizer reports are not. Operand
  // types include unknown, unranked, scalar, huge and symbolic shapes.
  std::vector<TensorType> operandTypes = {
      TensorType(),       ty("f32[*]"),
      ty("f32[]"),        ty("f32[2,3,4,5]"),
      ty("i64[3]"),       ty("bool[1]"),
      ty("f16[batch,?]"), ty("i64[9223372036854775807]"),
      ty("f32[0,0,0,0]")};
  std::vector<Value *> constants = {i64s({1, 2}), i64s({-1}, true),
                                    i64s({std::numeric_limits<int64_t>::min(),
                                          std::numeric_limits<int64_t>::max()}),
                                    i64s({})};
  unsigned numNodes = 0;
  for (const OpSchema *schema : OpRegistry::instance().all()) {
    SCOPED_TRACE(schema->domain + "::" + schema->name);
    module.opsetImports[schema->domain] = schema->sinceVersion;
    unsigned maxInputs = std::min(schema->maxInputs, schema->minInputs + 3);
    unsigned numOutputs = std::min(schema->maxOutputs, schema->minOutputs + 2);
    for (bool extreme : {false, true}) {
      std::vector<NamedAttribute> attrs;
      for (const AttrSpec &spec : schema->attributes)
        if (spec.required || extreme)
          attrs.push_back({spec.name, attributeOfKind(spec.kind, extreme)});
      for (unsigned numInputs = schema->minInputs; numInputs <= maxInputs;
           ++numInputs) {
        for (const TensorType &type : operandTypes) {
          std::vector<Value *> operands;
          for (unsigned i = 0; i != numInputs; ++i)
            operands.push_back(graph().addInput(type, "x"));
          Node *node =
              make({schema->domain, schema->name}, operands, numOutputs, attrs);
          (void)inferred(*node);
          (void)estimateCost(*node);
          ++numNodes;
        }
        // Shape-like operands from constants after the first input.
        for (Value *constant : constants) {
          std::vector<Value *> operands = {input("f32[2,3,4,5]")};
          for (unsigned i = 1; i < numInputs; ++i)
            operands.push_back(constant);
          if (numInputs == 0)
            operands.clear();
          Node *node =
              make({schema->domain, schema->name}, operands, numOutputs, attrs);
          (void)inferred(*node);
          (void)estimateCost(*node);
          ++numNodes;
        }
      }
    }
  }
  EXPECT_GT(numNodes, 1000u);
}

TEST_F(OpTest, ShapeValueTracingIsLinearOnSharedSubgraphs) {
  // Add(v, v) chains double the number of paths at every step: without
  // memoization this query would take 2^45 steps.
  Value *value = i64s({1});
  for (int i = 0; i != 45; ++i)
    value = build1(onnxOp("Add"), {value, value});
  EXPECT_EQ(ops::getIntValues(*value),
            (std::vector<int64_t>{int64_t(1) << 45}));
  // Beyond the depth bound the trace gives up instead of recursing.
  for (int i = 0; i != 20; ++i)
    value = build1(onnxOp("Add"), {value, value});
  EXPECT_FALSE(ops::getShapeValue(*value).has_value());
  // Overflowing arithmetic yields an unknown element, not undefined
  // behaviour.
  Value *big = i64s({int64_t(1) << 32});
  Value *square = build1(onnxOp("Mul"), {big, big});
  std::optional<ops::SymIntVector> traced = ops::getShapeValue(*square);
  ASSERT_TRUE(traced.has_value());
  ASSERT_EQ(traced->size(), 1u);
  EXPECT_TRUE((*traced)[0].isUnknown());
}

//===----------------------------------------------------------------------===//
// Refining recorded types
//===----------------------------------------------------------------------===//

TEST_F(OpTest, InferAndSetTypesRefinesWithoutContradicting) {
  Value *x = input("f32[8,4]");
  Node *relu = make(onnxOp("Relu"), {x});
  relu->getResult(0)->setType(ty("f32[?,4]"));
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*relu)));
  EXPECT_EQ(relu->getResult(0)->getType().str(), "f32[8,4]");

  relu->getResult(0)->setType(TensorType());
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*relu)));
  EXPECT_EQ(relu->getResult(0)->getType().str(), "f32[8,4]");

  relu->setName("r");
  relu->getResult(0)->setType(ty("f32[8,5]"));
  llvm::Error err = inferAndSetTypes(*relu);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_EQ(llvm::toString(std::move(err)),
            "node r (Relu): result 0 type f32[8,5] contradicts inferred "
            "f32[8,4]");
  EXPECT_EQ(relu->getResult(0)->getType().str(), "f32[8,5]");

  relu->getResult(0)->setType(ty("f16[8,4]"));
  EXPECT_TRUE(contains(llvm::toString(inferAndSetTypes(*relu)),
                       "contradicts inferred f32[8,4]"));
  relu->getResult(0)->setType(ty("f32[8,4,1]"));
  EXPECT_TRUE(contains(llvm::toString(inferAndSetTypes(*relu)), "contradicts"));

  // A known recorded dim stays when inference cannot compute it; a
  // symbolic one is replaced by a static inferred extent.
  Value *dynamic = input("f32[?,batch]");
  Node *tanh = make(onnxOp("Tanh"), {dynamic});
  tanh->getResult(0)->setType(ty("f32[6,3]"));
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*tanh)));
  EXPECT_EQ(tanh->getResult(0)->getType().str(), "f32[6,3]");
  Node *tanh2 = make(onnxOp("Tanh"), {x});
  tanh2->getResult(0)->setType(ty("f32[batch,4]"));
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*tanh2)));
  EXPECT_EQ(tanh2->getResult(0)->getType().str(), "f32[8,4]");
}

TEST_F(OpTest, ContradictionLeavesEveryResultUntouched) {
  Value *x = input("f32[2,6]");
  Node *split =
      make(onnxOp("Split"), {x, i64s({2, 4})}, 2, {intAttr("axis", 1)});
  split->getResult(1)->setType(ty("f32[2,5]"));
  llvm::Error err = inferAndSetTypes(*split);
  EXPECT_TRUE(contains(llvm::toString(std::move(err)), "result 1 type"));
  EXPECT_EQ(split->getResult(0)->getType(), TensorType());
}

//===----------------------------------------------------------------------===//
// Traits, in-place operands and AMP classes
//===----------------------------------------------------------------------===//

TEST(OpRegistryTraitsTest, TraitsMatchOpSemantics) {
  EXPECT_TRUE(schemaOf("", "Add").hasTrait(TraitElementwise));
  EXPECT_TRUE(schemaOf("", "Add").hasTrait(TraitCommutative));
  EXPECT_TRUE(schemaOf("", "Mul").hasTrait(TraitCommutative));
  EXPECT_FALSE(schemaOf("", "Sub").hasTrait(TraitCommutative));
  EXPECT_FALSE(schemaOf("", "Div").hasTrait(TraitCommutative));
  EXPECT_TRUE(schemaOf("", "Sum").hasTrait(TraitCommutative));
  EXPECT_TRUE(schemaOf("", "Relu").hasTrait(TraitElementwise));
  EXPECT_FALSE(schemaOf("", "MatMul").hasTrait(TraitElementwise));
  EXPECT_FALSE(schemaOf("", "Softmax").hasTrait(TraitElementwise));
  for (const char *view :
       {"Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten"})
    EXPECT_TRUE(schemaOf("", view).hasTrait(TraitView)) << view;
  EXPECT_FALSE(schemaOf("", "Transpose").hasTrait(TraitView));
  EXPECT_TRUE(schemaOf("", "Dropout").hasTrait(TraitRandom));
  EXPECT_TRUE(
      schemaOf("com.microsoft", "BitmaskDropout", 1).hasTrait(TraitRandom));
  EXPECT_FALSE(
      schemaOf("com.microsoft", "DropoutGrad", 1).hasTrait(TraitRandom));
  EXPECT_TRUE(schemaOf("com.microsoft", "InPlaceAccumulatorV2", 1)
                  .hasTrait(TraitSideEffect));
  EXPECT_FALSE(schemaOf("", "Add").hasTrait(TraitSideEffect));
  // The accumulator writes its buffer (operand 0) and nothing else; an op
  // without a recorded operand is assumed to write all of them.
  EXPECT_EQ(schemaOf("com.microsoft", "InPlaceAccumulatorV2", 1).writesOperand,
            0);
  EXPECT_EQ(schemaOf("com.microsoft", "YieldOp", 1).writesOperand, -1);
  for (const OpSchema *schema : OpRegistry::instance().all()) {
    if (schema->writesOperand >= 0) {
      EXPECT_TRUE(schema->hasTrait(TraitSideEffect)) << schema->name;
    }
  }
  for (const char *op : {"Shape", "Size"})
    EXPECT_TRUE(schemaOf("", op).hasTrait(TraitShapeOnly)) << op;
  EXPECT_TRUE(schemaOf("com.microsoft", "BroadcastGradientArgs", 1)
                  .hasTrait(TraitShapeOnly));
  EXPECT_FALSE(schemaOf("", "Gather").hasTrait(TraitShapeOnly));
}

TEST(OpRegistryTraitsTest, InPlaceOperands) {
  for (const char *op : {"Relu", "Sigmoid", "Tanh", "Add", "Mul", "Sub", "Div",
                         "Neg", "Exp", "Dropout"})
    EXPECT_EQ(schemaOf("", op).inPlaceOperand, 0) << op;
  for (const char *op :
       {"ReluGrad", "GeluGrad", "SigmoidGrad", "TanhGrad", "DropoutGrad",
        "BiasGeluGrad_dX", "InPlaceAccumulator"})
    EXPECT_EQ(schemaOf("com.microsoft", op, 1).inPlaceOperand, 0) << op;
  for (const char *op :
       {"MatMul", "Conv", "Transpose", "Shape", "Equal", "Reshape"})
    EXPECT_EQ(schemaOf("", op).inPlaceOperand, -1) << op;
}

TEST(OpRegistryTraitsTest, RowwiseInPlace) {
  // Not elementwise, but each row is read before it is overwritten.
  for (const char *op : {"Softmax", "LogSoftmax"}) {
    const OpSchema &schema = schemaOf("", op);
    EXPECT_FALSE(schema.hasTrait(TraitElementwise)) << op;
    EXPECT_TRUE(schema.hasTrait(TraitRowwise)) << op;
    EXPECT_EQ(schema.inPlaceOperand, 0) << op;
    EXPECT_EQ(schema.inPlaceResult, 0u) << op;
  }
  // The log-probabilities (result 1) may overwrite the scores.
  const OpSchema &sce = schemaOf("", "SoftmaxCrossEntropyLoss");
  EXPECT_TRUE(sce.hasTrait(TraitRowwise));
  EXPECT_EQ(sce.inPlaceOperand, 0);
  EXPECT_EQ(sce.inPlaceResult, 1u);
  EXPECT_EQ(schemaOf("com.microsoft", "SoftmaxCrossEntropyLossInternal", 1)
                .inPlaceResult,
            1u);
  // The loss gradient may overwrite the log-probabilities (operand 1).
  for (const char *op :
       {"SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossInternalGrad"})
    EXPECT_EQ(schemaOf("com.microsoft", op, 1).inPlaceOperand, 1) << op;
  EXPECT_EQ(schemaOf("com.microsoft", "SoftmaxGrad_13", 1).inPlaceOperand, 0);
  // The reductions are neither.
  EXPECT_FALSE(schemaOf("", "ReduceSum").hasTrait(TraitRowwise));
  EXPECT_EQ(schemaOf("", "ReduceSum").inPlaceOperand, -1);
}

TEST(OpRegistryTraitsTest, InPlaceResultExists) {
  for (const OpSchema *schema : OpRegistry::instance().all()) {
    if (schema->inPlaceOperand >= 0) {
      EXPECT_LT(schema->inPlaceResult, schema->maxOutputs)
          << schema->domain << "::" << schema->name;
    }
  }
}

TEST(OpRegistryTraitsTest, AmpClasses) {
  for (const char *op : {"MatMul", "Gemm", "Conv"})
    EXPECT_EQ(schemaOf("", op).amp, AmpClass::Allow) << op;
  for (const char *op : {"FusedMatMul", "ConvGrad"})
    EXPECT_EQ(schemaOf("com.microsoft", op, 1).amp, AmpClass::Allow) << op;
  for (const char *op :
       {"LogSoftmax", "BatchNormalization", "SoftmaxCrossEntropyLoss",
        "NegativeLogLikelihoodLoss", "ReduceSum", "ReduceMean", "ReduceMax",
        "ReduceSumSquare", "Exp", "Log", "Pow", "Sqrt"})
    EXPECT_EQ(schemaOf("", op).amp, AmpClass::Deny) << op;
  for (const char *op :
       {"LogSoftmaxGrad_13", "BatchNormalizationGrad", "BatchNormInternal",
        "SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossInternalGrad",
        "ReduceSumTraining"})
    EXPECT_EQ(schemaOf("com.microsoft", op, 1).amp, AmpClass::Deny) << op;
  // fp32 arithmetic on 16-bit storage (amp's strict-fp32 makes them Deny).
  for (const char *op : {"Softmax", "LayerNormalization"})
    EXPECT_EQ(schemaOf("", op).amp, AmpClass::Fp32Compute) << op;
  for (const char *op : {"SoftmaxGrad_13", "LayerNormalizationGrad"})
    EXPECT_EQ(schemaOf("com.microsoft", op, 1).amp, AmpClass::Fp32Compute)
        << op;
  for (const char *op : {"Add", "Relu", "Reshape", "Transpose", "Gather",
                         "Concat", "Dropout", "Where", "Identity"})
    EXPECT_EQ(schemaOf("", op).amp, AmpClass::Follow) << op;
  for (const char *op : {"ReluGrad", "BiasGelu", "DropoutGrad"})
    EXPECT_EQ(schemaOf("com.microsoft", op, 1).amp, AmpClass::Follow) << op;
  for (const char *op :
       {"Shape", "Size", "Equal", "Not", "ArgMax", "Range", "Cast"})
    EXPECT_EQ(schemaOf("", op).amp, AmpClass::None) << op;
}

//===----------------------------------------------------------------------===//
// Costs
//===----------------------------------------------------------------------===//

TEST_F(OpTest, MatMulAndGemmCostTwoMNK) {
  Value *a = input("f32[2,3,4]");
  Value *b = input("f32[4,5]");
  Node *matmul = make(onnxOp("MatMul"), {a, b});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*matmul)));
  OpCost cost = estimateCost(*matmul);
  EXPECT_EQ(cost.flops, 2u * 2 * 3 * 5 * 4);
  EXPECT_EQ(cost.bytesRead, (2u * 3 * 4 + 4 * 5) * 4);
  EXPECT_EQ(cost.bytesWritten, 2u * 3 * 5 * 4);

  Node *gemm = make(onnxOp("Gemm"), {input("f32[7,6]"), input("f32[9,7]")}, 1,
                    {intAttr("transA", 1), intAttr("transB", 1)});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*gemm)));
  EXPECT_EQ(gemm->getResult(0)->getType().str(), "f32[6,9]");
  EXPECT_EQ(estimateCost(*gemm).flops, 2u * 6 * 9 * 7);

  Node *fused =
      make(msOp("FusedMatMul"), {input("f32[8,16]"), input("f32[32,16]")}, 1,
           {intAttr("transB", 1)});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*fused)));
  EXPECT_EQ(estimateCost(*fused).flops, 2u * 8 * 32 * 16);

  // Unknown shapes cost nothing rather than a guess.
  Node *dynamic = make(onnxOp("MatMul"), {input("f32[batch,4]"), b});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*dynamic)));
  EXPECT_EQ(estimateCost(*dynamic).flops, 0u);
  EXPECT_EQ(estimateCost(*dynamic).bytesRead, 4u * 5 * 4);
}

TEST_F(OpTest, ConvCostCountsEveryMultiplyAdd) {
  Value *x = input("f32[2,3,10,10]");
  Value *w = input("f32[8,3,3,3]");
  Node *conv =
      make(onnxOp("Conv"), {x, w}, 1, {intsAttr("pads", {1, 1, 1, 1})});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*conv)));
  EXPECT_EQ(conv->getResult(0)->getType().str(), "f32[2,8,10,10]");
  // 2 * N * Cout * Hout * Wout * Cin/group * kh * kw
  EXPECT_EQ(estimateCost(*conv).flops, 2u * 2 * 8 * 10 * 10 * 3 * 3 * 3);

  Node *grouped =
      make(onnxOp("Conv"), {input("f32[1,4,5,5]"), input("f32[6,2,3,3]")}, 1,
           {intAttr("group", 2)});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*grouped)));
  EXPECT_EQ(grouped->getResult(0)->getType().str(), "f32[1,6,3,3]");
  EXPECT_EQ(estimateCost(*grouped).flops, 2u * 1 * 6 * 3 * 3 * 2 * 3 * 3);

  // ConvGrad: one convolution each for dX and dW, one add per dY element
  // for dB.
  Value *dy = conv->getResult(0);
  Node *grad =
      make(msOp("ConvGrad"), {dy, x, w}, 3, {intsAttr("pads", {1, 1, 1, 1})});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*grad)));
  uint64_t convFlops = 2u * 2 * 8 * 10 * 10 * 3 * 3 * 3;
  EXPECT_EQ(estimateCost(*grad).flops, 2 * convFlops + 2 * 8 * 10 * 10);
  graph().dropResult(grad, 0);
  EXPECT_EQ(estimateCost(*grad).flops, convFlops + 2 * 8 * 10 * 10);
}

TEST_F(OpTest, DefaultAndViewCosts) {
  Value *x = input("f32[4,5]");
  Node *add = make(onnxOp("Add"), {x, input("f32[5]")});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*add)));
  OpCost cost = estimateCost(*add);
  EXPECT_EQ(cost.flops, 20u);
  EXPECT_EQ(cost.bytesRead, (20u + 5) * 4);
  EXPECT_EQ(cost.bytesWritten, 20u * 4);

  Node *reshape = make(onnxOp("Reshape"), {x, i64s({20})});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*reshape)));
  OpCost view = estimateCost(*reshape);
  EXPECT_EQ(view.flops, 0u);
  EXPECT_EQ(view.bytesRead, 0u);
  EXPECT_EQ(view.bytesWritten, 0u);

  Node *shape = make(onnxOp("Shape"), {x});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*shape)));
  EXPECT_EQ(estimateCost(*shape).flops, 0u);

  Node *sum =
      make(onnxOp("ReduceSum"), {x, i64s({1})}, 1, {intAttr("keepdims", 0)});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*sum)));
  EXPECT_EQ(estimateCost(*sum).flops, 20u);

  Node *unknown = make(onnxOp("Relu"), {input("f32[n,5]")});
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*unknown)));
  EXPECT_EQ(estimateCost(*unknown).flops, 0u);
  EXPECT_EQ(estimateCost(*unknown).bytesRead, 0u);
}

} // namespace
