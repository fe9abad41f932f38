//===- OpRegistry.cpp - What gmopt knows about each operator --------------===//
//
// The registry core: schema storage keyed by (domain, op type) with one
// entry per since-version, version resolution against a module's opset
// imports, the InferenceContext handed to inference functions, and the
// generic drivers every client uses: inferNodeTypes (arity and attribute
// checks, then the schema's inference), inferAndSetTypes (refining recorded
// result types without ever contradicting them) and estimateCost. The
// schemas themselves live in ir/ops/, one file per op family.
//
//===----------------------------------------------------------------------===//

#include "ir/OpRegistry.h"
#include "ir/Module.h"
#include "ir/ops/OpDefs.h"
#include "ir/ops/ShapeValue.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cassert>
#include <limits>

using namespace gmopt;

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// ONNX lets models spell the standard domain "ai.onnx"; we store "".
llvm::StringRef canonicalDomain(llvm::StringRef domain) {
  return domain == "ai.onnx" ? llvm::StringRef() : domain;
}

/// The registry key "domain::type", built in \p storage (no heap allocation
/// for ordinary names: lookups happen once per node per pass).
llvm::StringRef registryKey(llvm::StringRef domain, llvm::StringRef opType,
                            llvm::SmallVectorImpl<char> &storage) {
  storage.clear();
  (canonicalDomain(domain) + "::" + opType).toVector(storage);
  return llvm::StringRef(storage.data(), storage.size());
}

std::string opLabel(const Node &node) {
  llvm::StringRef domain = canonicalDomain(node.getDomain());
  if (domain.empty())
    return node.getOpType().str();
  return (domain + "." + node.getOpType()).str();
}

/// `node NAME (OpType): ` — the prefix of every per-node message.
std::string nodePrefix(const Node &node) {
  std::string name =
      node.getName().empty() ? "<unnamed>" : node.getName().str();
  return "node " + name + " (" + opLabel(node) + "): ";
}

/// The opset the node's module imports for its domain; nullopt when there is
/// no module or the module does not import the domain.
std::optional<int64_t> importedOpset(const Node &node) {
  const Graph *graph = node.getGraph();
  if (!graph || !graph->getModule())
    return std::nullopt;
  const auto &imports = graph->getModule()->opsetImports;
  llvm::StringRef domain = canonicalDomain(node.getDomain());
  auto it = imports.find(domain.str());
  if (it == imports.end() && domain.empty())
    it = imports.find("ai.onnx");
  if (it == imports.end())
    return std::nullopt;
  return it->second;
}

/// `1 input`, `2 inputs`.
std::string countNoun(uint64_t count, llvm::StringRef noun) {
  return llvm::formatv("{0} {1}{2}", count, noun, count == 1 ? "" : "s").str();
}

/// Describes an arity range: `2 inputs`, `1 to 3 inputs`, `at least 1 input`.
std::string arityText(unsigned min, unsigned max, llvm::StringRef noun) {
  if (min == max)
    return countNoun(min, noun);
  if (max == ops::kVariadic)
    return "at least " + countNoun(min, noun);
  return llvm::formatv("{0} to {1}", min, countNoun(max, noun)).str();
}

llvm::Error checkArity(const Node &node, const OpSchema &schema) {
  unsigned numInputs = node.getNumOperands();
  if (numInputs < schema.minInputs || numInputs > schema.maxInputs)
    return makeError(nodePrefix(node) + "expected " +
                     arityText(schema.minInputs, schema.maxInputs, "input") +
                     llvm::formatv(", got {0}", numInputs));
  bool variadic = schema.maxInputs == ops::kVariadic;
  for (unsigned i = 0; i != numInputs; ++i) {
    if (node.getOperand(i))
      continue;
    if (i < schema.minInputs || variadic)
      return makeError(nodePrefix(node) +
                       llvm::formatv("input {0} is required but absent", i));
  }
  unsigned numOutputs = node.getNumResults();
  if (numOutputs < schema.minOutputs || numOutputs > schema.maxOutputs)
    return makeError(nodePrefix(node) + "expected " +
                     arityText(schema.minOutputs, schema.maxOutputs, "output") +
                     llvm::formatv(", got {0}", numOutputs));
  return llvm::Error::success();
}

llvm::Error checkAttributes(const Node &node, const OpSchema &schema) {
  for (const NamedAttribute &attr : node.getAttrs()) {
    const AttrSpec *spec = schema.lookupAttr(attr.name);
    if (!spec) {
      if (schema.allowUnknownAttributes)
        continue;
      return makeError(nodePrefix(node) + "unknown attribute '" + attr.name +
                       "'");
    }
    if (attr.value.getKind() != spec->kind)
      return makeError(nodePrefix(node) + "attribute '" + attr.name +
                       "' has kind " + attributeKindName(attr.value.getKind()) +
                       ", expected " + attributeKindName(spec->kind));
  }
  for (const AttrSpec &spec : schema.attributes)
    if (spec.required && !node.hasAttr(spec.name))
      return makeError(nodePrefix(node) + "missing required attribute '" +
                       spec.name + "'");
  return llvm::Error::success();
}

/// Merges a recorded type with an inferred one; nullopt on contradiction.
std::optional<TensorType> refineType(const TensorType &existing,
                                     const TensorType &inferred) {
  DType dtype = existing.getDType();
  if (dtype == DType::Undefined)
    dtype = inferred.getDType();
  else if (inferred.getDType() != DType::Undefined &&
           inferred.getDType() != dtype)
    return std::nullopt;
  if (!existing.hasRank() && !inferred.hasRank())
    return TensorType::unranked(dtype);
  if (!existing.hasRank())
    return TensorType(dtype, inferred.getDims());
  if (!inferred.hasRank())
    return TensorType(dtype, existing.getDims());
  if (existing.getRank() != inferred.getRank())
    return std::nullopt;
  llvm::SmallVector<Dim, 4> dims;
  for (unsigned i = 0, e = existing.getRank(); i != e; ++i) {
    const Dim &have = existing.getDim(i), &got = inferred.getDim(i);
    if (have.isStatic() && got.isStatic() &&
        have.getExtent() != got.getExtent())
      return std::nullopt;
    if (have.isStatic() || (have.isSymbolic() && !got.isStatic()))
      dims.push_back(have);
    else if (have.isUnknown() && got.isUnknown())
      dims.push_back(have);
    else
      dims.push_back(got);
  }
  return TensorType(dtype, dims);
}

} // namespace

//===----------------------------------------------------------------------===//
// InferenceContext
//===----------------------------------------------------------------------===//

InferenceContext::InferenceContext(const Node &node, const OpSchema &schema)
    : node(node), schema(schema) {
  outputs.resize(node.getNumResults());
}

bool InferenceContext::hasInput(unsigned i) const {
  return i < node.getNumOperands() && node.getOperand(i) != nullptr;
}

const TensorType &InferenceContext::getInputType(unsigned i) const {
  assert(hasInput(i) && "type of an absent operand");
  return node.getOperand(i)->getType();
}

const TensorData *InferenceContext::getConstantInput(unsigned i) const {
  if (!hasInput(i))
    return nullptr;
  const Value *value = node.getOperand(i);
  // Large or unavailable external data is not a known value here.
  if (value->hasData())
    return value->getData().hasFoldableBytes() ? &value->getData() : nullptr;
  const Node *producer = value->getDefiningNode();
  if (!producer || canonicalDomain(producer->getDomain()) != "" ||
      producer->getOpType() != "Constant")
    return nullptr;
  if (const Attribute *attr = producer->getAttr("value"))
    if (attr->getKind() == Attribute::Kind::Tensor)
      return attr->getTensor().hasFoldableBytes() ? &attr->getTensor()
                                                  : nullptr;
  std::optional<TensorData> data = ops::getConstantData(*value);
  if (!data)
    return nullptr;
  materializedConstants.push_back(std::make_unique<TensorData>(*data));
  return materializedConstants.back().get();
}

const Attribute *InferenceContext::getAttr(llvm::StringRef name) const {
  if (const Attribute *attr = node.getAttr(name))
    return attr;
  if (const AttrSpec *spec = schema.lookupAttr(name))
    if (spec->defaultValue)
      return &*spec->defaultValue;
  return nullptr;
}

int64_t InferenceContext::getIntAttr(llvm::StringRef name,
                                     int64_t fallback) const {
  const Attribute *attr = getAttr(name);
  if (!attr || attr->getKind() != Attribute::Kind::Int)
    return fallback;
  return attr->getInt();
}

float InferenceContext::getFloatAttr(llvm::StringRef name,
                                     float fallback) const {
  const Attribute *attr = getAttr(name);
  if (!attr || attr->getKind() != Attribute::Kind::Float)
    return fallback;
  return attr->getFloat();
}

std::vector<int64_t> InferenceContext::getIntsAttr(llvm::StringRef name) const {
  const Attribute *attr = getAttr(name);
  if (!attr || attr->getKind() != Attribute::Kind::Ints)
    return {};
  return attr->getInts();
}

std::string InferenceContext::getStringAttr(llvm::StringRef name) const {
  const Attribute *attr = getAttr(name);
  if (!attr || attr->getKind() != Attribute::Kind::String)
    return {};
  return attr->getString();
}

llvm::Error InferenceContext::error(const llvm::Twine &message) const {
  return makeError(nodePrefix(node) + message);
}

//===----------------------------------------------------------------------===//
// OpSchema and OpRegistry
//===----------------------------------------------------------------------===//

const AttrSpec *OpSchema::lookupAttr(llvm::StringRef attrName) const {
  for (const AttrSpec &spec : attributes)
    if (spec.name == attrName)
      return &spec;
  return nullptr;
}

const OpRegistry &OpRegistry::instance() {
  // Built once, on first use, and immutable afterwards (thread-safe static
  // initialization); there is no global constructor.
  static const OpRegistry registry = [] {
    OpRegistry built;
    registerOnnxOps(built);
    registerMicrosoftOps(built);
    ops::registerCollectiveOps(built);
    ops::registerAttentionOps(built);
    ops::registerCrossEntropyOps(built);
    ops::registerCopyOps(built);
    return built;
  }();
  return registry;
}

const OpSchema *OpRegistry::lookup(llvm::StringRef domain,
                                   llvm::StringRef opType,
                                   int64_t opsetVersion) const {
  llvm::SmallString<64> storage;
  auto it = schemas.find(registryKey(domain, opType, storage));
  if (it == schemas.end())
    return nullptr;
  const OpSchema *best = nullptr;
  for (const OpSchema &schema : it->second) {
    if (schema.sinceVersion > opsetVersion)
      break;
    best = &schema;
  }
  return best;
}

const OpSchema *OpRegistry::lookup(const Node &node) const {
  // A module that does not import the node's domain at all gets the newest
  // schema: being strict about missing imports is the importer's job.
  int64_t version =
      importedOpset(node).value_or(std::numeric_limits<int64_t>::max());
  return lookup(node.getDomain(), node.getOpType(), version);
}

bool OpRegistry::knows(llvm::StringRef domain, llvm::StringRef opType) const {
  llvm::SmallString<64> storage;
  return schemas.count(registryKey(domain, opType, storage)) != 0;
}

void OpRegistry::add(OpSchema schema) {
  llvm::SmallString<64> storage;
  std::vector<OpSchema> &versions =
      schemas[registryKey(schema.domain, schema.name, storage)];
  auto pos = llvm::lower_bound(versions, schema.sinceVersion,
                               [](const OpSchema &s, int64_t version) {
                                 return s.sinceVersion < version;
                               });
  assert((pos == versions.end() || pos->sinceVersion != schema.sinceVersion) &&
         "op schema registered twice for the same since-version");
  versions.insert(pos, std::move(schema));
}

std::vector<const OpSchema *> OpRegistry::all() const {
  std::vector<const OpSchema *> result;
  for (const auto &entry : schemas)
    for (const OpSchema &schema : entry.getValue())
      result.push_back(&schema);
  llvm::sort(result, [](const OpSchema *a, const OpSchema *b) {
    return std::tie(a->domain, a->name, a->sinceVersion) <
           std::tie(b->domain, b->name, b->sinceVersion);
  });
  return result;
}

//===----------------------------------------------------------------------===//
// Inference and cost drivers
//===----------------------------------------------------------------------===//

llvm::Expected<llvm::SmallVector<TensorType, 2>>
gmopt::inferNodeTypes(const Node &node) {
  const OpRegistry &registry = OpRegistry::instance();
  const OpSchema *schema = registry.lookup(node);
  if (!schema) {
    if (!registry.knows(node.getDomain(), node.getOpType()))
      return makeError(nodePrefix(node) + "unknown op '" + opLabel(node) + "'");
    return makeError(nodePrefix(node) +
                     llvm::formatv("op '{0}' is not supported at opset {1}",
                                   opLabel(node),
                                   importedOpset(node).value_or(0)));
  }
  if (auto err = checkArity(node, *schema))
    return err;
  if (auto err = checkAttributes(node, *schema))
    return err;
  InferenceContext ctx(node, *schema);
  if (auto err = schema->infer(ctx))
    return err;
  return llvm::SmallVector<TensorType, 2>(ctx.getOutputTypes().begin(),
                                          ctx.getOutputTypes().end());
}

llvm::Error gmopt::inferAndSetTypes(Node &node) {
  auto inferred = inferNodeTypes(node);
  if (!inferred)
    return inferred.takeError();
  // Merge everything first so a contradiction leaves the node untouched.
  llvm::SmallVector<std::optional<TensorType>, 2> merged;
  for (unsigned i = 0, e = node.getNumResults(); i != e; ++i) {
    Value *result = node.getResult(i);
    if (!result || i >= inferred->size()) {
      merged.push_back(std::nullopt);
      continue;
    }
    std::optional<TensorType> type =
        refineType(result->getType(), (*inferred)[i]);
    if (!type)
      return makeError(nodePrefix(node) +
                       llvm::formatv("result {0} type {1} contradicts "
                                     "inferred {2}",
                                     i, result->getType().str(),
                                     (*inferred)[i].str()));
    merged.push_back(std::move(type));
  }
  for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
    if (merged[i])
      node.getResult(i)->setType(std::move(*merged[i]));
  return llvm::Error::success();
}

llvm::SmallVector<unsigned, 8>
gmopt::getWrittenOperands(const Node &node, const OpSchema *schema) {
  llvm::SmallVector<unsigned, 8> written;
  unsigned numOperands = node.getNumOperands();
  if (schema && !schema->hasTrait(TraitSideEffect))
    return written;
  if (schema && schema->writtenOperands) {
    for (unsigned index : schema->writtenOperands(node))
      if (index < numOperands)
        written.push_back(index);
    return written;
  }
  if (schema && schema->writesOperand >= 0) {
    if (unsigned(schema->writesOperand) < numOperands)
      written.push_back(schema->writesOperand);
    return written;
  }
  for (unsigned i = 0; i != numOperands; ++i)
    written.push_back(i);
  return written;
}

OpCost gmopt::estimateCost(const Node &node) {
  const OpSchema *schema = OpRegistry::instance().lookup(node);
  if (schema && schema->cost)
    return schema->cost(node);
  if (schema && schema->hasTrait(TraitView))
    return OpCost();
  OpCost cost = ops::memoryTraffic(node);
  if (schema && schema->hasTrait(TraitShapeOnly))
    return cost;
  for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
    if (const Value *result = node.getResult(i))
      cost.flops += ops::staticElements(result->getType());
  return cost;
}

//===----------------------------------------------------------------------===//
// The op table
//===----------------------------------------------------------------------===//

llvm::StringRef gmopt::ampClassName(AmpClass amp) {
  switch (amp) {
  case AmpClass::None:
    return "none";
  case AmpClass::Allow:
    return "allow";
  case AmpClass::Deny:
    return "deny";
  case AmpClass::Fp32Compute:
    return "fp32-compute";
  case AmpClass::Follow:
    return "follow";
  }
  llvm_unreachable("unknown AMP class");
}

void gmopt::printOpTable(llvm::raw_ostream &os) {
  std::vector<const OpSchema *> schemas = OpRegistry::instance().all();
  os << "# op, versions, AMP class (ir/OpRegistry.h, AmpClass), AMP operands "
        "where not all\n";
  for (size_t i = 0; i != schemas.size();) {
    size_t end = i;
    std::string versions;
    while (end != schemas.size() &&
           schemas[end]->domain == schemas[i]->domain &&
           schemas[end]->name == schemas[i]->name) {
      versions += (versions.empty() ? "" : ",") +
                  std::to_string(schemas[end]->sinceVersion);
      ++end;
    }
    const OpSchema &newest = *schemas[end - 1];
    std::string name = newest.domain.empty()
                           ? newest.name
                           : newest.domain + "::" + newest.name;
    os << llvm::formatv("{0,-44} {1,-14} {2}", name, versions,
                        ampClassName(newest.amp));
    if (newest.ampOperands != ~0u) {
      std::string operands;
      for (unsigned k = 0; k != 32; ++k)
        if (newest.ampOperands >> k & 1u)
          operands += (operands.empty() ? "" : ",") + std::to_string(k);
      os << " operands " << operands;
    }
    os << "\n";
    i = end;
  }
}
