//===- OnnxExport.cpp - gmopt IR to ONNX ModelProto -----------------------===//
//
// Exports a Module as an ONNX ModelProto: model facts and opset imports,
// graph inputs with their types (symbolic dimensions as dim_param),
// initializers as raw_data (or, when writing a file, large ones as external
// data), every node with its attributes, value_info for each typed
// intermediate value, and the graph outputs. ONNX identifies values by
// name, so the exporter gives every value a unique one (ir/Naming.h): its
// own name when no earlier value has it, else an invented `gmopt_N`. Node
// names are made unique the same way (`gmopt_node_N`): ONNX Runtime rejects
// a graph where two nodes share a name, which passes that clone nodes (the
// recompute pass) would otherwise produce. Nodes that share a random
// stream (a Dropout and its recompute clones) get the stream id as their
// `seed` attribute, which the importer reads back as the stream id: they
// then draw the same numbers in ONNX Runtime too, whose kernels with a
// seed each own a generator advanced once per run.
// Absent optional operands and results are written as "". A lazy external
// initializer is loaded to be written, unless the caller asks to keep
// references from its directory (the .gm writer): then it is written as
// the reference it was read from and its bytes are never read; so is an
// external tensor attribute (a Constant node's value), and one that cannot
// be loaded is an error naming the node and its absent file. Files are
// written through ir/serialization/FileIO.h: the model and its external-data
// file are committed together, atomically, or not at all.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/Onnx.h"

#include "ir/Module.h"
#include "ir/Naming.h"
#include "ir/OpRegistry.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/OnnxTensor.h"

#include "onnx/onnx_pb.h"

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <climits>
#include <functional>

using namespace gmopt;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

namespace {

/// Offsets of tensors in the external-data file are aligned to this many
/// bytes so mapped tensors are aligned for any element type and vector
/// loads.
constexpr uint64_t kExternalDataAlignment = 64;

Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 message.str().c_str());
}

/// The initializers that go to an external-data file, and where.
struct ExternalDataPlan {
  /// File name of the data file, relative to the model's directory.
  std::string location;
  /// Tensors of more than this many bytes go to the file.
  uint64_t threshold = 0;
  /// Each tensor with its offset in the file.
  std::vector<std::pair<TensorData, uint64_t>> tensors;
  /// Size of the file.
  uint64_t size = 0;

  /// Reserves room for \p data and returns its offset.
  uint64_t add(const TensorData &data) {
    uint64_t offset = llvm::alignTo(size, kExternalDataAlignment);
    tensors.emplace_back(data, offset);
    size = offset + data.getSizeInBytes();
    return offset;
  }
};

/// Converts one Module into one ModelProto.
class OnnxExporter {
public:
  OnnxExporter(const Module &module, ExternalDataPlan *external,
               const OnnxExportOptions &options)
      : module(module), external(external), options(options) {}

  Expected<onnx::ModelProto> run();

private:
  void assignNames();
  const std::string &nameOf(const Value *value) const {
    auto it = names.find(value);
    assert(it != names.end() && "value outside the exported graph");
    return it->second;
  }
  Error exportOpsets(onnx::ModelProto &model) const;
  void exportValueInfo(const Value &value, onnx::ValueInfoProto &info) const;
  Error exportInitializer(const Value &value, onnx::TensorProto &tensor);
  Error exportNode(const Node &node, onnx::NodeProto &proto) const;
  Error exportExternalAttribute(const Node &node, const NamedAttribute &attr,
                                onnx::AttributeProto &proto) const;

  const Module &module;
  ExternalDataPlan *external;
  const OnnxExportOptions &options;
  llvm::DenseMap<const Value *, std::string> names;
  llvm::DenseMap<const Node *, std::string> nodeNames;
  /// How many nodes draw from each random stream.
  llvm::DenseMap<uint64_t, unsigned> streamUsers;
};

void OnnxExporter::assignNames() {
  // The same names uniquifyValueNames gives, so a module whose names were
  // made unique exports every value under its own name.
  names = computeUniqueValueNames(module.getGraph());
  nodeNames = computeUniqueNodeNames(module.getGraph());
  if (!options.seedSharedRandomStreams)
    return;
  uint64_t position = 0;
  for (const Node &node : module.getGraph().getNodes()) {
    uint64_t here = position++;
    std::optional<uint64_t> stream = node.getStreamId();
    if (!stream)
      continue;
    ++streamUsers[*stream];
    // Without a seed the importer derives the stream from the node's name
    // and position (assignMissingStreamIds); a node a rewrite moved (clones
    // inserted before it) would draw from another stream, so it keeps its
    // own as a seed too.
    auto name = nodeNames.find(&node);
    if (name != nodeNames.end() &&
        computeStreamId(name->second, here) != *stream)
      streamUsers[*stream] += 2;
  }
}

Error OnnxExporter::exportOpsets(onnx::ModelProto &model) const {
  std::map<std::string, int64_t> opsets = module.opsetImports;
  for (const Node &node : module.getGraph().getNodes()) {
    if (opsets.count(node.getDomain().str()))
      continue;
    // ONNX Runtime's contrib ops are all at version 1.
    if (node.getDomain() == kMsDomain) {
      opsets[kMsDomain.str()] = 1;
      continue;
    }
    return makeError("cannot export node " + node.describe() +
                     ": the module has no opset import for domain '" +
                     node.getDomain() + "'");
  }
  for (const auto &[domain, version] : opsets) {
    onnx::OperatorSetIdProto *opset = model.add_opset_import();
    opset->set_domain(domain);
    opset->set_version(version);
  }
  return Error::success();
}

void OnnxExporter::exportValueInfo(const Value &value,
                                   onnx::ValueInfoProto &info) const {
  info.set_name(nameOf(&value));
  exportType(value.getType(), *info.mutable_type());
}

Error OnnxExporter::exportInitializer(const Value &value,
                                      onnx::TensorProto &tensor) {
  const TensorData &data = value.getData();
  tensor.set_name(nameOf(&value));
  if (const ExternalDataRef *ref = data.getExternalRef()) {
    const std::shared_ptr<ExternalDataSource> &source =
        data.getExternalSource();
    if (!options.keepExternalReferencesFrom.empty() && source &&
        source->getBaseDir() == options.keepExternalReferencesFrom) {
      exportTensorAsExternal(data, ref->location, ref->offset, tensor);
      return Error::success();
    }
    if (Error err = data.load())
      return makeError("initializer '" + nameOf(&value) +
                       "': " + llvm::toString(std::move(err)));
  }
  if (external && data.getSizeInBytes() > external->threshold) {
    uint64_t offset = external->add(data);
    exportTensorAsExternal(data, external->location, offset, tensor);
  } else {
    exportTensor(data, tensor);
  }
  return Error::success();
}

/// Writes \p attr into \p proto.
void exportAttribute(const NamedAttribute &attr, onnx::AttributeProto &proto) {
  using AP = onnx::AttributeProto;
  proto.set_name(attr.name);
  const Attribute &value = attr.value;
  switch (value.getKind()) {
  case Attribute::Kind::Float:
    proto.set_type(AP::FLOAT);
    proto.set_f(value.getFloat());
    return;
  case Attribute::Kind::Int:
    proto.set_type(AP::INT);
    proto.set_i(value.getInt());
    return;
  case Attribute::Kind::String:
    proto.set_type(AP::STRING);
    proto.set_s(value.getString());
    return;
  case Attribute::Kind::Tensor:
    proto.set_type(AP::TENSOR);
    exportTensor(value.getTensor(), *proto.mutable_t());
    return;
  case Attribute::Kind::Floats:
    proto.set_type(AP::FLOATS);
    proto.mutable_floats()->Add(value.getFloats().begin(),
                                value.getFloats().end());
    return;
  case Attribute::Kind::Ints:
    proto.set_type(AP::INTS);
    proto.mutable_ints()->Add(value.getInts().begin(), value.getInts().end());
    return;
  case Attribute::Kind::Strings:
    proto.set_type(AP::STRINGS);
    for (const std::string &s : value.getStrings())
      proto.add_strings(s);
    return;
  }
  llvm_unreachable("unknown attribute kind");
}

/// A tensor attribute whose bytes live in an external-data file (a Constant
/// node's value): written as its reference where initializers from its
/// directory are, else loaded, and an error naming the node and the file
/// when that fails. Leaves \p proto without a tensor when the caller is to
/// write the (now loaded) bytes.
Error OnnxExporter::exportExternalAttribute(const Node &node,
                                            const NamedAttribute &attr,
                                            onnx::AttributeProto &proto) const {
  const TensorData &data = attr.value.getTensor();
  const ExternalDataRef *ref = data.getExternalRef();
  const std::shared_ptr<ExternalDataSource> &source = data.getExternalSource();
  if (!options.keepExternalReferencesFrom.empty() && source &&
      source->getBaseDir() == options.keepExternalReferencesFrom) {
    proto.set_name(attr.name);
    proto.set_type(onnx::AttributeProto::TENSOR);
    exportTensorAsExternal(data, ref->location, ref->offset,
                           *proto.mutable_t());
    return Error::success();
  }
  // A Constant's value is known by its result's name; another node's
  // tensor attribute by the attribute's.
  const Value *result = node.getNumResults() == 1 ? node.getResult(0) : nullptr;
  std::string tensor =
      node.isa(kOnnxDomain, "Constant") && result ? nameOf(result) : attr.name;
  if (Error err =
          requireTensorValue(data, "ONNX export", tensor, node.describe()))
    return makeError(llvm::toString(std::move(err)));
  return Error::success();
}

Error OnnxExporter::exportNode(const Node &node, onnx::NodeProto &proto) const {
  auto name = nodeNames.find(&node);
  assert(name != nodeNames.end() && "node outside the exported graph");
  proto.set_name(name->second);
  proto.set_op_type(node.getOpType().str());
  if (!node.getDomain().empty())
    proto.set_domain(node.getDomain().str());
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
    const Value *operand = node.getOperand(i);
    if (operand && !names.count(operand))
      return makeError("cannot export node " + node.describe() + ": operand " +
                       Twine(i) + " is not a value of the graph");
    proto.add_input(operand ? nameOf(operand) : std::string());
  }
  for (unsigned i = 0, e = node.getNumResults(); i != e; ++i) {
    const Value *result = node.getResult(i);
    proto.add_output(result ? nameOf(result) : std::string());
  }
  std::optional<uint64_t> stream = node.getStreamId();
  if (stream && streamUsers.lookup(*stream) < 2)
    stream.reset();
  for (const NamedAttribute &attr : node.getAttrs()) {
    if (stream && attr.name == "seed")
      continue;
    onnx::AttributeProto &out = *proto.add_attribute();
    if (attr.value.getKind() == Attribute::Kind::Tensor &&
        attr.value.getTensor().isExternal())
      if (Error err = exportExternalAttribute(node, attr, out))
        return err;
    if (!out.has_t())
      exportAttribute(attr, out);
  }
  if (stream) {
    const OpSchema *schema = OpRegistry::instance().lookup(node);
    if (!schema || !schema->hasTrait(TraitRandom))
      return makeError("cannot export node " + node.describe() +
                       ": it has a random stream id but is not a random op");
    onnx::AttributeProto *seed = proto.add_attribute();
    seed->set_name("seed");
    seed->set_type(onnx::AttributeProto::INT);
    seed->set_i(static_cast<int64_t>(*stream));
  }
  return Error::success();
}

Expected<onnx::ModelProto> OnnxExporter::run() {
  assignNames();
  onnx::ModelProto model;
  model.set_ir_version(module.irVersion);
  if (Error err = exportOpsets(model))
    return err;
  model.set_producer_name(module.producerName.empty() ? "gmopt"
                                                      : module.producerName);
  model.set_producer_version(module.producerVersion);
  if (!module.modelDomain.empty())
    model.set_domain(module.modelDomain);
  if (module.modelVersion != 0)
    model.set_model_version(module.modelVersion);
  if (!module.docString.empty())
    model.set_doc_string(module.docString);
  for (const auto &[key, value] : module.metadata) {
    if (key == kLiteralInitializersKey)
      continue;
    onnx::StringStringEntryProto *entry = model.add_metadata_props();
    entry->set_key(key);
    entry->set_value(value);
  }

  const Graph &graph = module.getGraph();
  onnx::GraphProto *graphProto = model.mutable_graph();
  // ONNX requires a graph name.
  graphProto->set_name(graph.getName().empty() ? "gmopt"
                                               : graph.getName().str());

  for (const std::unique_ptr<Value> &input : graph.getInputs())
    exportValueInfo(*input, *graphProto->add_input());
  llvm::json::Array literals;
  for (const std::unique_ptr<Value> &init : graph.getInitializers()) {
    if (Error err = exportInitializer(*init, *graphProto->add_initializer()))
      return err;
    if (init->isLiteral())
      literals.push_back(nameOf(init.get()));
  }
  if (!literals.empty()) {
    onnx::StringStringEntryProto *entry = model.add_metadata_props();
    entry->set_key(kLiteralInitializersKey.str());
    std::string text;
    llvm::raw_string_ostream os(text);
    os << llvm::json::Value(std::move(literals));
    entry->set_value(os.str());
  }
  for (const std::unique_ptr<Value> &input : graph.getInputs())
    if (input->hasData())
      if (Error err = exportInitializer(*input, *graphProto->add_initializer()))
        return err;

  for (const Node &node : graph.getNodes())
    if (Error err = exportNode(node, *graphProto->add_node()))
      return err;

  llvm::DenseSet<const Value *> outputs;
  for (unsigned i = 0, e = graph.getNumOutputs(); i != e; ++i) {
    const Value *output = graph.getOutput(i);
    if (!output || !names.count(output))
      return makeError(llvm::formatv("cannot export graph output #{0}: it is "
                                     "not a value of the graph",
                                     i));
    exportValueInfo(*output, *graphProto->add_output());
    outputs.insert(output);
  }

  for (const Node &node : graph.getNodes())
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i) {
      const Value *result = node.getResult(i);
      if (result && !outputs.count(result) &&
          result->getType().getDType() != DType::Undefined)
        exportValueInfo(*result, *graphProto->add_value_info());
    }
  return model;
}

/// protobuf's output stream over a raw_ostream. A failed write is the
/// stream's to report (OutputFileSet checks its fd stream at the end).
class RawOstreamOutput : public google::protobuf::io::CopyingOutputStream {
public:
  explicit RawOstreamOutput(llvm::raw_ostream &os) : os(os) {}
  bool Write(const void *buffer, int size) override {
    os.write(static_cast<const char *>(buffer), static_cast<size_t>(size));
    return true;
  }

private:
  llvm::raw_ostream &os;
};

/// Streams the external-data file of \p plan into \p os: each tensor at
/// its offset, zeros between.
void writeExternalData(llvm::raw_ostream &os, const ExternalDataPlan &plan) {
  uint64_t position = 0;
  for (const auto &[data, offset] : plan.tensors) {
    os.write_zeros(offset - position);
    llvm::ArrayRef<uint8_t> bytes = data.getBytes();
    os.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    position = offset + bytes.size();
  }
}

} // namespace

Expected<onnx::ModelProto>
gmopt::exportOnnxModel(const Module &module, const OnnxExportOptions &options) {
  silenceProtobufLogging();
  // Without a file there is nowhere to put external data: all inline.
  return OnnxExporter(module, /*external=*/nullptr, options).run();
}

Error gmopt::exportOnnxFile(const Module &module, StringRef path,
                            const OnnxExportOptions &options) {
  // The model and its data file are committed together or not at all.
  OutputFileSet outputs;
  if (Error err = exportOnnxFile(module, path, outputs, options))
    return err;
  return outputs.commit();
}

Error gmopt::exportOnnxFile(const Module &module, StringRef path,
                            OutputFileSet &outputs,
                            const OnnxExportOptions &options) {
  silenceProtobufLogging();
  ExternalDataPlan plan;
  bool useExternal = options.externalDataThreshold > 0;
  if (useExternal) {
    plan.location = (llvm::sys::path::filename(path) + ".data").str();
    plan.threshold = options.externalDataThreshold;
  }
  Expected<onnx::ModelProto> model =
      OnnxExporter(module, useExternal ? &plan : nullptr, options).run();
  if (!model)
    return makeError(path + ": " + llvm::toString(model.takeError()));
  if (model->ByteSizeLong() > static_cast<size_t>(INT_MAX))
    return makeError(path + ": the model is larger than 2 GiB; set an "
                            "external-data threshold");

  if (!plan.tensors.empty()) {
    llvm::SmallString<256> dataPath(llvm::sys::path::parent_path(path));
    llvm::sys::path::append(dataPath, plan.location);
    if (Error err = outputs.reserve(dataPath, "the external-data file"))
      return err;
    if (Error err = outputs.write(dataPath, [&](llvm::raw_ostream &os) {
          writeExternalData(os, plan);
        }))
      return err;
  }
  return outputs.write(path, [&](llvm::raw_ostream &os) {
    // Streamed: a large model is not held twice. A write error is the
    // stream's, which OutputFileSet reports.
    RawOstreamOutput output(os);
    google::protobuf::io::CopyingOutputStreamAdaptor stream(&output);
    (void)model->SerializeToZeroCopyStream(&stream);
    (void)stream.Flush();
  });
}
