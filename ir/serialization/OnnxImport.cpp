//===- OnnxImport.cpp - ONNX ModelProto to gmopt IR -----------------------===//
//
// Imports an ONNX ModelProto into a Module. ONNX refers to values by name;
// the importer resolves every name once through hash maps (so a graph of a
// hundred thousand nodes imports in linear time), orders nodes
// topologically when the file is not (a stable depth-first order that keeps
// file order wherever the dependencies allow, reporting a cycle by a node on
// it), binds symbolic dimensions, takes result types from value_info and
// graph outputs and refines them with gmopt's op registry, and finally
// recognises the training signature. Initializer bytes are moved out of the
// parsed protobuf rather than copied; external-data initializers are not
// read at all (lazy TensorData whose file is mapped when a pass or a backend
// wants the bytes), so a model compiles without its weight files and
// import time does not grow with their size. A Constant node's value is
// external data too in some exports (torchtune's rotary positions): it is
// imported the same way, so a plan that needs only its shape does not need
// its file either, and a reader that must have the numbers says so
// (ir/Attribute.h's requireTensorValue). Other tensor attributes are one
// element (ConstantOfShape's) that kernels read as they are: their
// external data, if any, is mapped at import. Every message starts with
// the model's file name and names the offending node, as
// `FILE: what (node NAME)`.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/Onnx.h"

#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/SizeLimits.h"
#include "ir/Verifier.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/OnnxTensor.h"

#include "onnx/onnx_pb.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <climits>

using namespace gmopt;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

namespace {

/// ONNX Runtime's random ops may carry a `seed` attribute (an int, or a
/// float for RandomUniform); where present it is the node's stream id.
void assignSeedStreamIds(Graph &graph) {
  for (Node &node : graph.getNodes()) {
    const Attribute *seed = node.getAttr("seed");
    if (!seed)
      continue;
    const OpSchema *schema = OpRegistry::instance().lookup(node);
    if (!schema || !schema->hasTrait(TraitRandom))
      continue;
    if (seed->getKind() == Attribute::Kind::Int)
      node.setStreamId(static_cast<uint64_t>(seed->getInt()));
    else if (seed->getKind() == Attribute::Kind::Float)
      node.setStreamId(
          static_cast<uint64_t>(static_cast<int64_t>(seed->getFloat())));
  }
}

/// ONNX allows the standard domain to be spelled "ai.onnx"; gmopt stores "".
StringRef normalizeDomain(StringRef domain) {
  return domain == "ai.onnx" ? StringRef(kOnnxDomain) : domain;
}

/// How a NodeProto is named in messages: its name, or its op type and index.
std::string describeNodeProto(const onnx::NodeProto &node, size_t index) {
  if (!node.name().empty())
    return node.name();
  return llvm::formatv("{0}#{1}", node.op_type(), index).str();
}

/// Replaces symbolic dimensions bound in \p bindings by their extents.
TensorType bindDims(const TensorType &type,
                    const std::map<std::string, int64_t> &bindings) {
  if (!type.hasRank() || bindings.empty())
    return type;
  llvm::SmallVector<Dim, 4> dims(type.getDims().begin(), type.getDims().end());
  bool changed = false;
  for (Dim &dim : dims) {
    if (!dim.isSymbolic())
      continue;
    auto it = bindings.find(dim.getSymbol().str());
    if (it == bindings.end())
      continue;
    dim = Dim::fixed(it->second);
    changed = true;
  }
  return changed ? TensorType(type.getDType(), dims) : type;
}

/// Combines two partial descriptions of one value's type: known element
/// type over undefined, ranked over unranked, and per dimension static over
/// symbolic over unknown. \p primary wins on disagreement.
TensorType mergeTypes(const TensorType &primary, const TensorType &secondary) {
  DType dtype = primary.getDType() != DType::Undefined ? primary.getDType()
                                                       : secondary.getDType();
  if (!primary.hasRank()) {
    if (!secondary.hasRank())
      return TensorType::unranked(dtype);
    return TensorType(dtype, secondary.getDims());
  }
  if (!secondary.hasRank() || secondary.getRank() != primary.getRank())
    return TensorType(dtype, primary.getDims());
  llvm::SmallVector<Dim, 4> dims;
  for (unsigned i = 0, e = primary.getRank(); i != e; ++i) {
    const Dim &a = primary.getDim(i), &b = secondary.getDim(i);
    if (a.isStatic() || b.isUnknown() || (a.isSymbolic() && !b.isStatic()))
      dims.push_back(a);
    else
      dims.push_back(b);
  }
  return TensorType(dtype, dims);
}

/// Converts one ONNX model into a Module. Holds the name tables for the
/// duration of one import.
class OnnxImporter {
public:
  OnnxImporter(StringRef fileName, const OnnxImportOptions &options,
               std::string externalDataDir)
      : fileName(fileName.str()), options(options), resolver(externalDataDir),
        lazyResolver(ExternalDataResolver::createLazy(externalDataDir)) {}

  /// Imports \p model. When \p mutableModel (the same proto) is given,
  /// initializer bytes are moved out of it instead of copied.
  Expected<std::unique_ptr<Module>> run(const onnx::ModelProto &model,
                                        onnx::ModelProto *mutableModel);

private:
  Error error(const Twine &message) const {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s: %s",
                                   fileName.c_str(), message.str().c_str());
  }
  /// Prefixes the file name to a message produced elsewhere.
  Error wrap(Error err) const { return error(llvm::toString(std::move(err))); }
  /// Like wrap, and appends the node unless the message already names it.
  Error wrapForNode(Error err, const std::string &nodeName) const {
    std::string message = llvm::toString(std::move(err));
    if (StringRef(message).contains(nodeName))
      return error(message);
    return error(message + " (node " + nodeName + ")");
  }

  Error importModelFacts(const onnx::ModelProto &model);
  /// Marks the initializers kLiteralInitializersKey names as literals and
  /// drops the entry from the module's metadata.
  Error markLiteralInitializers();
  Error importTypeHints(const onnx::GraphProto &graph);
  Error importInputsAndInitializers(const onnx::GraphProto &graph,
                                    onnx::GraphProto *mutableGraph);
  Expected<std::vector<unsigned>> orderNodes(const onnx::GraphProto &graph);
  Error importNode(const onnx::NodeProto &proto, onnx::NodeProto *mutableProto,
                   size_t index);
  /// Imports one attribute; \p lazyTensor leaves a tensor's external data
  /// unread (when options.lazyExternalData allows it).
  Expected<Attribute>
  importAttribute(const onnx::AttributeProto &proto,
                  onnx::AttributeProto *mutableProto, bool lazyTensor,
                  llvm::function_ref<std::string()> nodeName);
  Error importOutputs(const onnx::GraphProto &graph);

  std::string fileName;
  const OnnxImportOptions &options;
  /// Maps external data at once (options.lazyExternalData off).
  ExternalDataResolver resolver;
  /// Leaves external data unread (initializers and Constant nodes'
  /// values); shared with their TensorData.
  std::shared_ptr<ExternalDataResolver> lazyResolver;
  std::unique_ptr<Module> module;
  /// Every value defined so far, by ONNX name.
  llvm::StringMap<Value *> values;
  /// Types declared in value_info and graph outputs, by value name.
  llvm::StringMap<TensorType> typeHints;
};

Error OnnxImporter::importModelFacts(const onnx::ModelProto &model) {
  int64_t irVersion = model.ir_version();
  if (irVersion < kMinIrVersion || irVersion > kMaxIrVersion)
    return error(llvm::formatv("unsupported ONNX ir_version {0} (gmopt reads "
                               "ir_version {1} to {2})",
                               irVersion, kMinIrVersion, kMaxIrVersion));
  module->irVersion = irVersion;

  for (const onnx::OperatorSetIdProto &opset : model.opset_import()) {
    std::string domain = normalizeDomain(opset.domain()).str();
    int64_t version = opset.version();
    if (domain.empty() && (version < kMinOnnxOpset || version > kMaxOnnxOpset))
      return error(llvm::formatv("unsupported opset {0} for domain '' (gmopt "
                                 "supports opsets {1} to {2})",
                                 version, kMinOnnxOpset, kMaxOnnxOpset));
    if (version < 1)
      return error(llvm::formatv("invalid opset version {0} for domain '{1}'",
                                 version, domain));
    auto [it, inserted] = module->opsetImports.emplace(domain, version);
    if (!inserted && it->second != version)
      return error(llvm::formatv("domain '{0}' is imported at opsets {1} and "
                                 "{2}",
                                 domain, it->second, version));
  }

  module->producerName = model.producer_name();
  module->producerVersion = model.producer_version();
  module->modelDomain = model.domain();
  module->modelVersion = model.model_version();
  module->docString = model.doc_string();
  for (const onnx::StringStringEntryProto &entry : model.metadata_props())
    module->metadata.emplace_back(entry.key(), entry.value());
  return Error::success();
}

Error OnnxImporter::markLiteralInitializers() {
  auto &metadata = module->metadata;
  auto entry = llvm::find_if(metadata, [](const auto &keyValue) {
    return keyValue.first == kLiteralInitializersKey;
  });
  if (entry == metadata.end())
    return Error::success();
  std::string text = entry->second;
  metadata.erase(entry);
  Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  const llvm::json::Array *names = parsed ? parsed->getAsArray() : nullptr;
  if (!names) {
    if (!parsed)
      llvm::consumeError(parsed.takeError());
    return error("metadata '" + kLiteralInitializersKey +
                 "' is not a JSON array of names");
  }
  for (const llvm::json::Value &name : *names) {
    std::optional<StringRef> text = name.getAsString();
    Value *value = text ? values.lookup(*text) : nullptr;
    if (!value || !value->isInitializer())
      return error(
          "metadata '" + kLiteralInitializersKey + "' names " +
          (text ? "'" + text->str() + "'" : std::string("a non-string")) +
          ", which is no initializer");
    value->setLiteral(true);
  }
  return Error::success();
}

Error OnnxImporter::importTypeHints(const onnx::GraphProto &graph) {
  auto addHint = [&](const onnx::ValueInfoProto &info,
                     StringRef what) -> Error {
    if (info.name().empty() || !info.has_type())
      return Error::success();
    Expected<TensorType> type =
        importType(info.type(), (what + " '" + info.name() + "'").str());
    if (!type)
      return wrap(type.takeError());
    // A hint beyond the size limit is refused where it is used: at the
    // graph input, or at the node whose result it types.
    TensorType bound = bindDims(*type, options.dimBindings);
    auto [it, inserted] = typeHints.try_emplace(info.name(), bound);
    if (!inserted)
      it->second = mergeTypes(it->second, bound);
    return Error::success();
  };
  for (const onnx::ValueInfoProto &info : graph.output())
    if (Error err = addHint(info, "graph output"))
      return err;
  for (const onnx::ValueInfoProto &info : graph.value_info())
    if (Error err = addHint(info, "value"))
      return err;
  return Error::success();
}

Error OnnxImporter::importInputsAndInitializers(
    const onnx::GraphProto &graph, onnx::GraphProto *mutableGraph) {
  Graph &g = module->getGraph();
  for (int i = 0, e = graph.input_size(); i != e; ++i) {
    const onnx::ValueInfoProto &input = graph.input(i);
    const std::string &name = input.name();
    if (name.empty())
      return error(llvm::formatv("graph input #{0} has no name", i));
    if (values.count(name))
      return error("graph input '" + name + "' is declared more than once");
    Expected<TensorType> type =
        importType(input.type(), "graph input '" + name + "'");
    if (!type)
      return wrap(type.takeError());
    TensorType bound = bindDims(*type, options.dimBindings);
    if (Error err = checkTensorSize(bound, "graph input '" + name + "'"))
      return wrap(std::move(err));
    values[name] = g.addInput(bound, name);
  }

  if (graph.sparse_initializer_size() != 0)
    return error("sparse initializer '" +
                 graph.sparse_initializer(0).values().name() +
                 "' is not supported");
  for (int i = 0, e = graph.initializer_size(); i != e; ++i) {
    const onnx::TensorProto &tensor = graph.initializer(i);
    const std::string &name = tensor.name();
    if (name.empty())
      return error(llvm::formatv("initializer #{0} has no name", i));
    ExternalDataResolver *initializerResolver =
        options.lazyExternalData ? lazyResolver.get() : &resolver;
    Expected<TensorData> data =
        mutableGraph
            ? importTensorStealing(*mutableGraph->mutable_initializer(i),
                                   initializerResolver)
            : importTensor(tensor, initializerResolver);
    if (!data)
      return wrap(data.takeError());

    auto it = values.find(name);
    if (it == values.end()) {
      values[name] = g.addInitializer(std::move(*data), name);
      continue;
    }
    Value *input = it->second;
    if (!input->isGraphInput() || input->hasData())
      return error("initializer '" + name + "' is defined more than once");
    // The initializer is the default of a graph input: the declared input
    // type stays authoritative (it may be more general), but must agree.
    const TensorType &declared = input->getType();
    const TensorType &actual = data->getType();
    bool compatible = declared.getDType() == DType::Undefined ||
                      declared.getDType() == actual.getDType();
    if (compatible && declared.hasRank()) {
      compatible = declared.getRank() == actual.getRank();
      for (unsigned d = 0; compatible && d < declared.getRank(); ++d)
        if (declared.getDim(d).isStatic() &&
            declared.getDim(d) != actual.getDim(d))
          compatible = false;
    }
    if (!compatible)
      return error("initializer '" + name + "' of type " + actual.str() +
                   " does not match graph input type " + declared.str());
    input->setType(mergeTypes(declared, actual));
    input->setData(std::move(*data));
  }
  return Error::success();
}

Expected<std::vector<unsigned>>
OnnxImporter::orderNodes(const onnx::GraphProto &graph) {
  unsigned numNodes = graph.node_size();
  // Which node defines each node output.
  llvm::StringMap<unsigned> producer(numNodes + numNodes / 2);
  for (unsigned i = 0; i != numNodes; ++i) {
    const onnx::NodeProto &node = graph.node(i);
    for (const std::string &output : node.output()) {
      if (output.empty())
        continue;
      if (values.count(output) || !producer.try_emplace(output, i).second)
        return error("value '" + output + "' is defined more than once (node " +
                     describeNodeProto(node, i) + ")");
    }
  }

  // Producer node of each operand, as a flat adjacency list.
  std::vector<unsigned> depBegin(numNodes + 1, 0);
  std::vector<unsigned> deps;
  bool inFileOrder = true;
  for (unsigned i = 0; i != numNodes; ++i) {
    const onnx::NodeProto &node = graph.node(i);
    depBegin[i] = deps.size();
    for (const std::string &input : node.input()) {
      if (input.empty() || values.count(input))
        continue;
      auto it = producer.find(input);
      if (it == producer.end())
        return error("value '" + input + "' used by node " +
                     describeNodeProto(node, i) + " is not defined");
      deps.push_back(it->second);
      inFileOrder &= it->second < i;
    }
  }
  depBegin[numNodes] = deps.size();

  std::vector<unsigned> order;
  order.reserve(numNodes);
  if (inFileOrder) {
    for (unsigned i = 0; i != numNodes; ++i)
      order.push_back(i);
    return order;
  }

  // Depth-first post-order, roots visited in file order: a node is emitted
  // right after the producers it is waiting for, so an already ordered
  // stretch of the file stays as it is. Iterative, since real graphs have
  // dependence chains far deeper than the native stack.
  enum class Mark : uint8_t { Unvisited, OnStack, Done };
  std::vector<Mark> mark(numNodes, Mark::Unvisited);
  std::vector<std::pair<unsigned, unsigned>> stack; // (node, next dep)
  for (unsigned root = 0; root != numNodes; ++root) {
    if (mark[root] != Mark::Unvisited)
      continue;
    stack.emplace_back(root, depBegin[root]);
    mark[root] = Mark::OnStack;
    while (!stack.empty()) {
      auto &[node, next] = stack.back();
      if (next == depBegin[node + 1]) {
        mark[node] = Mark::Done;
        order.push_back(node);
        stack.pop_back();
        continue;
      }
      unsigned dep = deps[next++];
      if (mark[dep] == Mark::OnStack)
        return error("graph has a cycle through node " +
                     describeNodeProto(graph.node(dep), dep));
      if (mark[dep] == Mark::Unvisited) {
        mark[dep] = Mark::OnStack;
        stack.emplace_back(dep, depBegin[dep]);
      }
    }
  }
  return order;
}

Expected<Attribute> OnnxImporter::importAttribute(
    const onnx::AttributeProto &proto, onnx::AttributeProto *mutableProto,
    bool lazyTensor, llvm::function_ref<std::string()> nodeName) {
  using AP = onnx::AttributeProto;
  const std::string &name = proto.name();
  auto unsupported = [&](StringRef what) {
    return error(what + " attribute '" + name + "' is not supported (node " +
                 nodeName() + ")");
  };
  if (!proto.ref_attr_name().empty())
    return unsupported("function-reference");

  AP::AttributeType kind = proto.type();
  if (kind == AP::UNDEFINED) {
    // Old exporters leave the type out; infer it from the field that is set.
    if (proto.has_f())
      kind = AP::FLOAT;
    else if (proto.has_i())
      kind = AP::INT;
    else if (proto.has_s())
      kind = AP::STRING;
    else if (proto.has_t())
      kind = AP::TENSOR;
    else if (proto.has_g() || proto.graphs_size())
      kind = AP::GRAPH;
    else if (proto.floats_size())
      kind = AP::FLOATS;
    else if (proto.ints_size())
      kind = AP::INTS;
    else if (proto.strings_size())
      kind = AP::STRINGS;
    else
      return error("attribute '" + name + "' has no type and no value (node " +
                   nodeName() + ")");
  }

  switch (kind) {
  case AP::FLOAT:
    return Attribute::getFloat(proto.f());
  case AP::INT:
    return Attribute::getInt(proto.i());
  case AP::STRING:
    return Attribute::getString(proto.s());
  case AP::TENSOR: {
    // A lazy one is like an initializer: its reference is checked now, its
    // bytes read when a pass or a kernel wants them.
    ExternalDataResolver *tensorResolver =
        lazyTensor && options.lazyExternalData ? lazyResolver.get() : &resolver;
    Expected<TensorData> data =
        mutableProto
            ? importTensorStealing(*mutableProto->mutable_t(), tensorResolver)
            : importTensor(proto.t(), tensorResolver);
    if (!data)
      return error("attribute '" + name +
                   "': " + llvm::toString(data.takeError()) + " (node " +
                   nodeName() + ")");
    return Attribute::getTensor(std::move(*data));
  }
  case AP::FLOATS:
    return Attribute::getFloats(
        std::vector<float>(proto.floats().begin(), proto.floats().end()));
  case AP::INTS:
    return Attribute::getInts(
        std::vector<int64_t>(proto.ints().begin(), proto.ints().end()));
  case AP::STRINGS:
    return Attribute::getStrings(std::vector<std::string>(
        proto.strings().begin(), proto.strings().end()));
  case AP::GRAPH:
  case AP::GRAPHS:
    return unsupported("subgraph");
  case AP::SPARSE_TENSOR:
  case AP::SPARSE_TENSORS:
    return unsupported("sparse tensor");
  case AP::TYPE_PROTO:
  case AP::TYPE_PROTOS:
    return unsupported("type");
  case AP::TENSORS:
    return unsupported("tensor-list");
  default:
    return error(llvm::formatv("attribute '{0}' has unknown type {1} (node "
                               "{2})",
                               name, static_cast<int>(kind), nodeName()));
  }
}

Error OnnxImporter::importNode(const onnx::NodeProto &proto,
                               onnx::NodeProto *mutableProto, size_t index) {
  // The node's name for messages, built only when one is needed.
  auto nodeName = [&] { return describeNodeProto(proto, index); };
  if (proto.op_type().empty())
    return error("node " + nodeName() + " has no op_type");

  // Attributes first: a subgraph attribute (If, Loop) is the real reason
  // such a node cannot be imported, whatever the registry knows.
  llvm::SmallVector<NamedAttribute, 4> attrs;
  bool isConstantValue = proto.op_type() == "Constant" &&
                         normalizeDomain(proto.domain()) == kOnnxDomain;
  for (int i = 0, e = proto.attribute_size(); i != e; ++i) {
    const onnx::AttributeProto &attr = proto.attribute(i);
    if (attr.name().empty())
      return error("node " + nodeName() + " has an attribute with no name");
    // Nodes have a handful of attributes: a scan beats a set.
    if (llvm::any_of(attrs, [&](const NamedAttribute &seen) {
          return seen.name == attr.name();
        }))
      return error("attribute '" + attr.name() +
                   "' is given more than once (node " + nodeName() + ")");
    // A Constant node's value is a tensor like an initializer (canonicalize
    // makes it one): its external data is left unread. Other ops' tensor
    // attributes (ConstantOfShape's one element) are read at import, as
    // their kernels expect.
    bool lazyTensor = isConstantValue && attr.name() == "value";
    Expected<Attribute> value = importAttribute(
        attr, mutableProto ? mutableProto->mutable_attribute(i) : nullptr,
        lazyTensor, nodeName);
    if (!value)
      return value.takeError();
    attrs.push_back(NamedAttribute{attr.name(), std::move(*value)});
  }

  OpName op{normalizeDomain(proto.domain()).str(), proto.op_type()};
  const OpRegistry &registry = OpRegistry::instance();
  auto opset = module->opsetImports.find(op.domain);
  if (opset == module->opsetImports.end())
    return error("domain '" + op.domain + "' of op '" + op.str() +
                 "' has no opset import (node " + nodeName() + ")");
  // Name the op, its domain, the model's opset for it and the node: what a
  // user needs to tell an unsupported op from an unsupported version.
  StringRef domainLabel = op.domain.empty() ? "ai.onnx" : StringRef(op.domain);
  if (options.verify && !registry.knows(op.domain, op.type))
    return error(llvm::formatv("unknown op '{0}' of domain '{1}' at opset {2} "
                               "(node {3})",
                               op.type, domainLabel, opset->second,
                               nodeName()));
  if (options.verify && !registry.lookup(op.domain, op.type, opset->second)) {
    int64_t first = 0;
    for (const OpSchema *schema : registry.all())
      if (schema->domain == op.domain && schema->name == op.type &&
          (first == 0 || schema->sinceVersion < first))
        first = schema->sinceVersion;
    return error(llvm::formatv("op '{0}' does not exist in opset {1} of "
                               "domain '{2}' (gmopt knows it from opset {3}; "
                               "node {4})",
                               op.type, opset->second, domainLabel, first,
                               nodeName()));
  }

  llvm::SmallVector<Value *, 4> operands;
  operands.reserve(proto.input_size());
  for (const std::string &input : proto.input())
    operands.push_back(input.empty() ? nullptr : values.lookup(input));

  Graph &g = module->getGraph();
  Node *node = g.createNode(g.end(), std::move(op), operands,
                            proto.output_size(), proto.name());
  for (NamedAttribute &attr : attrs)
    node->setAttr(attr.name, std::move(attr.value));
  for (int i = 0, e = proto.output_size(); i != e; ++i) {
    const std::string &output = proto.output(i);
    if (output.empty()) {
      g.dropResult(node, i);
      continue;
    }
    Value *result = node->getResult(i);
    result->setName(output);
    values[output] = result;
    auto hint = typeHints.find(output);
    if (hint != typeHints.end())
      result->setType(hint->second);
  }

  if (options.verify)
    if (Error err = inferAndSetTypes(*node))
      return wrapForNode(std::move(err), nodeName());
  // Inference may multiply extents (MatMul, Expand): refuse an oversized
  // result before later nodes build on it.
  for (Value *result : node->getResults())
    if (result)
      if (Error err = checkTensorSize(result->getType(),
                                      "result '" + result->getName() + "'"))
        return wrapForNode(std::move(err), nodeName());
  return Error::success();
}

Error OnnxImporter::importOutputs(const onnx::GraphProto &graph) {
  Graph &g = module->getGraph();
  for (int i = 0, e = graph.output_size(); i != e; ++i) {
    const std::string &name = graph.output(i).name();
    if (name.empty())
      return error(llvm::formatv("graph output #{0} has no name", i));
    Value *value = values.lookup(name);
    if (!value)
      return error("graph output '" + name + "' is not defined");
    g.addOutput(value);
  }
  return Error::success();
}

Expected<std::unique_ptr<Module>>
OnnxImporter::run(const onnx::ModelProto &model,
                  onnx::ModelProto *mutableModel) {
  assert((!mutableModel || mutableModel == &model) &&
         "the mutable model must be the imported one");
  module = std::make_unique<Module>();
  if (!model.has_graph())
    return error("not a valid ONNX model (no graph)");
  for (const auto &[symbol, extent] : options.dimBindings) {
    if (extent < 0)
      return error(llvm::formatv("dimension binding {0}={1} is negative",
                                 symbol, extent));
    if (static_cast<uint64_t>(extent) > kMaxTensorBytes)
      return error(llvm::formatv("dimension binding {0}={1} is larger than "
                                 "any tensor gmopt accepts (at most {2})",
                                 symbol, extent, kMaxTensorBytesText));
  }
  module->dimBindings = options.dimBindings;
  if (Error err = importModelFacts(model))
    return err;

  const onnx::GraphProto &graph = model.graph();
  onnx::GraphProto *mutableGraph =
      mutableModel ? mutableModel->mutable_graph() : nullptr;
  module->getGraph().setName(graph.name());
  // The name maps at their final size: growing them rehashes every name.
  unsigned numNodeOutputs = 0;
  for (const onnx::NodeProto &node : graph.node())
    numNodeOutputs += node.output_size();
  values = llvm::StringMap<Value *>(graph.input_size() +
                                    graph.initializer_size() + numNodeOutputs);
  typeHints = llvm::StringMap<TensorType>(graph.value_info_size() +
                                          graph.output_size());
  if (Error err = importTypeHints(graph))
    return err;
  if (Error err = importInputsAndInitializers(graph, mutableGraph))
    return err;

  Expected<std::vector<unsigned>> order = orderNodes(graph);
  if (!order)
    return order.takeError();
  for (unsigned index : *order)
    if (Error err = importNode(
            graph.node(index),
            mutableGraph ? mutableGraph->mutable_node(index) : nullptr, index))
      return err;
  if (Error err = importOutputs(graph))
    return err;
  if (Error err = markLiteralInitializers())
    return err;

  inferTrainingSignature(*module);
  // Node identity, once: phases from ONNX Runtime's conventions, stream ids
  // from `seed` attributes (else computed). Nothing re-derives them later.
  inferNodePhases(*module);
  assignSeedStreamIds(module->getGraph());
  assignMissingStreamIds(module->getGraph());
  // importNode inferred (and checked) every node's types against their
  // operands, which no later step changes: the verifier checks the rest.
  VerifyOptions verifyOptions;
  verifyOptions.checkTypes = false;
  if (options.verify)
    if (Error err = verifyModule(*module, verifyOptions))
      return wrap(std::move(err));
  return std::move(module);
}

/// The directory external data is resolved against when the options do not
/// say: the model file's own directory.
std::string defaultExternalDataDir(StringRef fileName,
                                   const OnnxImportOptions &options) {
  if (!options.externalDataDir.empty())
    return options.externalDataDir;
  // Never empty: lazy tensors and the .gm writer name their directory.
  StringRef parent = llvm::sys::path::parent_path(fileName);
  return parent.empty() ? std::string(".") : parent.str();
}

} // namespace

Expected<std::unique_ptr<Module>>
gmopt::importOnnxBytes(StringRef bytes, StringRef fileName,
                       const OnnxImportOptions &options) {
  silenceProtobufLogging();
  auto parseError = [&] {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: not a valid ONNX model (protobuf parse failed)",
        fileName.str().c_str());
  };
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: model is larger than 2 GiB; store large initializers as "
        "external data",
        fileName.str().c_str());
  auto model = std::make_unique<onnx::ModelProto>();
  google::protobuf::io::ArrayInputStream stream(bytes.data(),
                                                static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream coded(&stream);
  // The default limit (64 MiB in older releases) rejects large models.
  coded.SetTotalBytesLimit(INT_MAX);
  if (!model->ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return parseError();
  OnnxImporter importer(fileName, options,
                        defaultExternalDataDir(fileName, options));
  return importer.run(*model, model.get());
}

Expected<std::unique_ptr<Module>>
gmopt::importOnnxFile(StringRef path, OnnxImportOptions options) {
  Expected<std::unique_ptr<llvm::MemoryBuffer>> buffer = readFileBounded(path);
  if (!buffer)
    return buffer.takeError();
  return importOnnxBytes((*buffer)->getBuffer(), path, options);
}

Expected<std::unique_ptr<Module>>
gmopt::importOnnxModel(const onnx::ModelProto &model, StringRef fileName,
                       const OnnxImportOptions &options) {
  OnnxImporter importer(fileName, options,
                        defaultExternalDataDir(fileName, options));
  return importer.run(model, nullptr);
}

Error gmopt::checkDimsBound(const Module &module) {
  auto check = [&](const Value &value) -> Error {
    const TensorType &type = value.getType();
    if (!type.hasRank())
      return Error::success();
    for (const Dim &dim : type.getDims()) {
      if (!dim.isSymbolic() || module.dimBindings.count(dim.getSymbol().str()))
        continue;
      StringRef name = value.getName();
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "symbolic dimension '%s' of value '%s' is not bound; pass --dim "
          "%s=N",
          dim.getSymbol().str().c_str(),
          name.empty() ? "<unnamed>" : name.str().c_str(),
          dim.getSymbol().str().c_str());
    }
    return Error::success();
  };
  const Graph &graph = module.getGraph();
  for (const std::unique_ptr<Value> &input : graph.getInputs())
    if (Error err = check(*input))
      return err;
  for (const std::unique_ptr<Value> &init : graph.getInitializers())
    if (Error err = check(*init))
      return err;
  for (const Node &node : graph.getNodes())
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
      if (const Value *result = node.getResult(i))
        if (Error err = check(*result))
          return err;
  return Error::success();
}
