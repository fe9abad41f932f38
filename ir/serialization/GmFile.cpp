//===- GmFile.cpp - The `.gm` compiled-model container --------------------===//
//
// Writing turns each module into a gm.Model (the ONNX export plus its
// signature and plan by name) after making names unique, frames the
// payload with the header and writes it with writeFileSafely. Reading
// trusts nothing: the header, the length and the CRC are checked before
// protobuf sees a byte, each embedded model goes through the full ONNX
// importer (so the verifier runs), and every name the signature and the
// plan mention must resolve in the imported graph before the plan is
// rebuilt and validated. The stored schedule must equal the imported node
// order, since the plan's steps are positions in it. Initializers (and
// Constant nodes' values) kept in external-data files are stored as ONNX
// external-data references with the directory they are relative to, never
// as bytes: writing reads none of them, and reading leaves them unread (the
// importer's lazy TensorData) until the run maps them. The first problem is
// the error, and its message starts with the file name.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/GmFile.h"

#include "ir/Module.h"
#include "ir/Naming.h"
#include "ir/Plan.h"
#include "ir/Verifier.h"
#include "ir/gm.pb.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/Onnx.h"

#include "onnx/onnx_pb.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CRC.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <climits>
#include <optional>

#ifndef GMOPT_VERSION
#error "GMOPT_VERSION must be defined by the build (ir/CMakeLists.txt)"
#endif

using namespace gmopt;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

namespace {

Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Quotes a name for messages.
std::string quoted(StringRef name) { return ("'" + name + "'").str(); }

//===----------------------------------------------------------------------===//
// Enumerations
//===----------------------------------------------------------------------===//

gm::StorageKind storageKindToProto(StorageKind kind) {
  switch (kind) {
  case StorageKind::Arena:
    return gm::STORAGE_KIND_ARENA;
  case StorageKind::Persistent:
    return gm::STORAGE_KIND_PERSISTENT;
  case StorageKind::Alias:
    return gm::STORAGE_KIND_ALIAS;
  case StorageKind::Constant:
    return gm::STORAGE_KIND_CONSTANT;
  }
  llvm_unreachable("unknown storage kind");
}

/// The StorageKind of a stored enumerator; none for UNSPECIFIED and for
/// numbers this version does not know (proto3 enums are open).
std::optional<StorageKind> storageKindFromProto(int kind) {
  switch (kind) {
  case gm::STORAGE_KIND_ARENA:
    return StorageKind::Arena;
  case gm::STORAGE_KIND_PERSISTENT:
    return StorageKind::Persistent;
  case gm::STORAGE_KIND_ALIAS:
    return StorageKind::Alias;
  case gm::STORAGE_KIND_CONSTANT:
    return StorageKind::Constant;
  default:
    return std::nullopt;
  }
}

gm::MemoryCategory categoryToProto(MemoryCategory category) {
  switch (category) {
  case MemoryCategory::Parameters:
    return gm::MEMORY_CATEGORY_PARAMETERS;
  case MemoryCategory::Gradients:
    return gm::MEMORY_CATEGORY_GRADIENTS;
  case MemoryCategory::OptimizerState:
    return gm::MEMORY_CATEGORY_OPTIMIZER_STATE;
  case MemoryCategory::Activations:
    return gm::MEMORY_CATEGORY_ACTIVATIONS;
  case MemoryCategory::Temporaries:
    return gm::MEMORY_CATEGORY_TEMPORARIES;
  case MemoryCategory::Workspace:
    return gm::MEMORY_CATEGORY_WORKSPACE;
  }
  llvm_unreachable("unknown memory category");
}

std::optional<MemoryCategory> categoryFromProto(int category) {
  switch (category) {
  case gm::MEMORY_CATEGORY_PARAMETERS:
    return MemoryCategory::Parameters;
  case gm::MEMORY_CATEGORY_GRADIENTS:
    return MemoryCategory::Gradients;
  case gm::MEMORY_CATEGORY_OPTIMIZER_STATE:
    return MemoryCategory::OptimizerState;
  case gm::MEMORY_CATEGORY_ACTIVATIONS:
    return MemoryCategory::Activations;
  case gm::MEMORY_CATEGORY_TEMPORARIES:
    return MemoryCategory::Temporaries;
  case gm::MEMORY_CATEGORY_WORKSPACE:
    return MemoryCategory::Workspace;
  default:
    return std::nullopt;
  }
}

gm::Phase encodePhase(Phase phase) {
  switch (phase) {
  case Phase::Forward:
    return gm::PHASE_FORWARD;
  case Phase::Backward:
    return gm::PHASE_BACKWARD;
  case Phase::Optimizer:
    return gm::PHASE_OPTIMIZER;
  case Phase::Recompute:
    return gm::PHASE_RECOMPUTE;
  }
  llvm_unreachable("unknown phase");
}

std::optional<Phase> decodePhase(int phase) {
  switch (phase) {
  case gm::PHASE_FORWARD:
    return Phase::Forward;
  case gm::PHASE_BACKWARD:
    return Phase::Backward;
  case gm::PHASE_OPTIMIZER:
    return Phase::Optimizer;
  case gm::PHASE_RECOMPUTE:
    return Phase::Recompute;
  default:
    return std::nullopt;
  }
}

/// Calls \p fn on every present value of \p graph in export order: graph
/// inputs, initializers, then node results in schedule order.
template <typename Fn> void forEachValue(const Graph &graph, Fn fn) {
  for (const std::unique_ptr<Value> &input : graph.getInputs())
    fn(input.get());
  for (const std::unique_ptr<Value> &init : graph.getInitializers())
    fn(init.get());
  for (const Node &node : graph.getNodes())
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
      if (Value *result = node.getResult(i))
        fn(result);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

/// The source directory of the first external initializer of \p graph
/// (else of the first external Constant value), if any: the one directory
/// whose references a .gm model keeps (tensors from other directories, such
/// as a merged optimizer model's, are stored inline).
std::optional<std::string> externalDataDir(const Graph &graph) {
  auto dirOf = [](const TensorData &data) -> std::optional<std::string> {
    if (!data.isExternal() || !data.getExternalSource())
      return std::nullopt;
    return data.getExternalSource()->getBaseDir().str();
  };
  for (const std::unique_ptr<Value> &init : graph.getInitializers())
    if (init->hasData())
      if (std::optional<std::string> dir = dirOf(init->getData()))
        return dir;
  for (const std::unique_ptr<Value> &input : graph.getInputs())
    if (input->hasData())
      if (std::optional<std::string> dir = dirOf(input->getData()))
        return dir;
  // The original model keeps its Constant nodes, whose values may be
  // external too.
  for (const Node &node : graph.getNodes())
    for (const NamedAttribute &attr : node.getAttrs())
      if (attr.value.getKind() == Attribute::Kind::Tensor)
        if (std::optional<std::string> dir = dirOf(attr.value.getTensor()))
          return dir;
  return std::nullopt;
}

/// Encodes one module, whose value and node names are already unique, as a
/// gm.Model. \p role ("rewritten" or "original") names it in messages.
class ModelEncoder {
public:
  ModelEncoder(const Module &module, StringRef role)
      : module(module), role(role) {
    forEachValue(module.getGraph(),
                 [&](const Value *value) { present.insert(value); });
    for (const Node &node : module.getGraph().getNodes())
      presentNodes.insert(&node);
  }

  Error encode(gm::Model &proto) {
    if (Error err = encodeSignature(*proto.mutable_signature()))
      return err;
    for (const Node &node : module.getGraph().getNodes()) {
      gm::NodeIdentity *identity = proto.add_nodes();
      identity->set_phase(encodePhase(node.getPhase()));
      if (std::optional<uint64_t> stream = node.getStreamId()) {
        identity->set_has_stream_id(true);
        identity->set_stream_id(*stream);
      }
    }
    if (!module.plan.empty())
      if (Error err = encodePlan(*proto.mutable_plan()))
        return err;
    // External initializers stay where they are: the .gm records their
    // references and the directory those are relative to, never their
    // bytes (a model compiles without its weight files, and a 27 GB model
    // gives a small .gm).
    OnnxExportOptions exportOptions;
    // Node identities carry the stream ids (below).
    exportOptions.seedSharedRandomStreams = false;
    if (std::optional<std::string> dir = externalDataDir(module.getGraph())) {
      exportOptions.keepExternalReferencesFrom = *dir;
      llvm::SmallString<256> absolute(*dir);
      if (llvm::sys::fs::real_path(
              dir->empty() ? StringRef(".") : StringRef(*dir), absolute))
        if (std::error_code ec = llvm::sys::fs::make_absolute(absolute))
          return fail("cannot make the external-data directory '" + *dir +
                      "' absolute: " + ec.message());
      proto.set_external_data_dir(absolute.str().str());
    }
    Expected<onnx::ModelProto> model = exportOnnxModel(module, exportOptions);
    if (!model)
      return fail(llvm::toString(model.takeError()));
    if (model->ByteSizeLong() > static_cast<size_t>(INT_MAX))
      return fail("the model is larger than 2 GiB, more than a .gm file can "
                  "hold");
    if (!model->SerializeToString(proto.mutable_onnx()))
      return fail("cannot serialize the ONNX model");
    return Error::success();
  }

private:
  Error fail(const Twine &message) const {
    return makeError("cannot write the " + role + " model: " + message);
  }

  /// The stored name of \p value (empty for none); \p what says what it is.
  Expected<std::string> nameOf(const Value *value, StringRef what) const {
    if (!value)
      return std::string();
    if (!present.count(value))
      return fail("the signature's " + what + " is not a value of the graph");
    assert(!value->getName().empty() && "names are uniquified before writing");
    return value->getName().str();
  }

  Error encodeSignature(gm::TrainingSignature &proto) const {
    const TrainingSignature &sig = module.getSignature();
    auto set = [&](const Value *value, StringRef what,
                   std::string *field) -> Error {
      Expected<std::string> name = nameOf(value, what);
      if (!name)
        return name.takeError();
      *field = std::move(*name);
      return Error::success();
    };
    for (const ParamInfo &param : sig.getParams()) {
      if (!param.param)
        return fail("the signature has a parameter entry without a value");
      gm::Param *entry = proto.add_params();
      entry->set_trainable(param.trainable);
      if (Error err = set(param.param, "parameter", entry->mutable_value()))
        return err;
      std::string label = "of " + quoted(param.param->getName());
      if (Error err =
              set(param.grad, "gradient " + label, entry->mutable_grad()))
        return err;
      if (Error err = set(param.accumulator, "accumulator " + label,
                          entry->mutable_accumulator()))
        return err;
      if (param.accumulateNode) {
        if (!presentNodes.count(param.accumulateNode))
          return fail("the accumulation node " + label +
                      " is not a node of the graph");
        entry->set_accumulate_node(param.accumulateNode->getName().str());
      }
      for (const Value *state : param.optimizerState)
        if (Error err = set(state, "optimizer state " + label,
                            entry->add_optimizer_state()))
          return err;
    }
    for (const Value *data : sig.getDataInputs())
      if (Error err = set(data, "data input", proto.add_data_inputs()))
        return err;
    if (Error err = set(sig.getLoss(), "loss", proto.mutable_loss()))
      return err;
    if (Error err = set(sig.getLossGradSeed(), "loss-gradient seed",
                        proto.mutable_loss_grad_seed()))
      return err;
    if (Error err = set(sig.getStepSlot(StepSlot::LearningRate),
                        "learning rate", proto.mutable_learning_rate()))
      return err;
    if (Error err = set(sig.getStepSlot(StepSlot::StepCount), "step count",
                        proto.mutable_step_count()))
      return err;
    if (Error err = set(sig.getStepSlot(StepSlot::LossScale), "loss scale",
                        proto.mutable_loss_scale()))
      return err;
    if (Error err =
            set(sig.getStepSlot(StepSlot::LossScaleGoodSteps),
                "loss-scale good steps", proto.mutable_loss_scale_good_steps()))
      return err;
    return set(sig.getLazyResetGrad(), "lazy_reset_grad",
               proto.mutable_lazy_reset_grad());
  }

  Error encodePlan(gm::Plan &proto) const {
    const ExecutionPlan &plan = module.plan;
    // Never write a file that cannot be loaded: the reader validates too.
    if (Error err = plan.validate(module))
      return fail(llvm::toString(std::move(err)));
    for (const Node &node : module.getGraph().getNodes())
      proto.add_schedule(node.getName().str());
    forEachValue(module.getGraph(), [&](const Value *value) {
      const BufferAssignment *assignment = plan.lookup(value);
      assert(assignment && "a validated plan plans every value");
      gm::Buffer *buffer = proto.add_buffers();
      buffer->set_value(value->getName().str());
      buffer->set_kind(storageKindToProto(assignment->kind));
      buffer->set_category(categoryToProto(assignment->category));
      buffer->set_offset(assignment->offset);
      buffer->set_size(assignment->size);
      if (assignment->aliasOf)
        buffer->set_alias_of(assignment->aliasOf->getName().str());
      buffer->set_first_step(assignment->firstStep);
      buffer->set_last_step(assignment->lastStep);
      buffer->set_space(assignment->space == MemorySpace::Host
                            ? gm::MEMORY_SPACE_HOST
                            : gm::MEMORY_SPACE_DEVICE);
    });
    proto.set_arena_bytes(plan.arenaBytes);
    proto.set_host_arena_bytes(plan.hostArenaBytes);
    proto.set_workspace_model(plan.workspaceModel);
    for (const Node &node : module.getGraph().getNodes()) {
      const WorkspaceAssignment *workspace = plan.lookupWorkspace(&node);
      if (!workspace)
        continue;
      gm::Workspace *stored = proto.add_workspaces();
      stored->set_step(workspace->step);
      stored->set_offset(workspace->offset);
      stored->set_size(workspace->size);
    }

    const MemoryFigures &figures = plan.figures;
    gm::MemoryFigures &stored = *proto.mutable_figures();
    stored.set_naive_bytes(figures.naiveBytes);
    stored.set_lower_bound_bytes(figures.lowerBoundBytes);
    stored.set_lower_bound_step(figures.lowerBoundStep);
    stored.set_arena_bytes(figures.arenaBytes);
    stored.set_host_arena_bytes(figures.hostArenaBytes);
    for (unsigned i = 0; i != kNumMemoryCategories; ++i) {
      if (!figures.persistentBytes[i])
        continue;
      gm::CategoryBytes *entry = stored.add_persistent_bytes();
      entry->set_category(categoryToProto(static_cast<MemoryCategory>(i)));
      entry->set_bytes(figures.persistentBytes[i]);
    }
    stored.set_in_place_saved_bytes(figures.inPlaceSavedBytes);
    stored.set_eager_estimate_bytes(figures.eagerEstimateBytes);
    stored.set_workspace_bytes(figures.workspaceBytes);
    return Error::success();
  }

  const Module &module;
  std::string role;
  llvm::DenseSet<const Value *> present;
  llvm::DenseSet<const Node *> presentNodes;
};

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/// Name tables of one imported graph.
struct NameTable {
  explicit NameTable(Graph &graph) {
    forEachValue(graph,
                 [&](Value *value) { values[value->getName()] = value; });
    for (Node &node : graph) {
      auto [it, inserted] = nodes.try_emplace(node.getName(), &node);
      if (!inserted)
        ambiguousNodes.insert(node.getName());
    }
  }

  llvm::StringMap<Value *> values;
  llvm::StringMap<Node *> nodes;
  /// Node names more than one node has.
  llvm::StringSet<> ambiguousNodes;
};

/// Loads one `.gm` payload.
class GmReader {
public:
  GmReader(StringRef name, StringRef externalDataDir)
      : name(name.str()), externalDataDir(externalDataDir.str()) {}

  Expected<CompiledModule> read(StringRef bytes);

private:
  /// An error about the file: `NAME: MESSAGE`.
  Error fail(const Twine &message) const {
    return makeError(name + ": " + message);
  }

  Expected<StringRef> checkHeader(StringRef bytes) const;
  Error loadDimBindings(const gm::GmFile &file);
  /// Imports and checks one stored model; \p prefix starts its messages
  /// after the file name ("" or "original model: ").
  Expected<std::unique_ptr<Module>>
  loadModel(const gm::Model &proto, StringRef role, StringRef prefix) const;
  Error loadSignature(const gm::TrainingSignature &proto, Module &module,
                      const NameTable &names, StringRef prefix) const;
  Error loadPlan(const gm::Plan &proto, Module &module, const NameTable &names,
                 StringRef prefix) const;
  Error loadNodeIdentities(const gm::Model &proto, Module &module,
                           StringRef prefix) const;

  std::string name;
  /// Overrides the stored external-data directory when not empty.
  std::string externalDataDir;
  std::map<std::string, int64_t> dimBindings;
};

Expected<StringRef> GmReader::checkHeader(StringRef bytes) const {
  StringRef magic(kGmMagic, sizeof(kGmMagic));
  if (bytes.empty())
    return fail("not a gmopt .gm file (the file is empty)");
  if (!bytes.starts_with(magic)) {
    if (bytes.size() < magic.size() && magic.starts_with(bytes))
      return fail(llvm::formatv("truncated .gm file: {0} bytes, shorter than "
                                "the {1}-byte header",
                                bytes.size(), kGmHeaderSize));
    return fail("not a gmopt .gm file");
  }
  if (bytes.size() < kGmHeaderSize)
    return fail(llvm::formatv("truncated .gm file: {0} bytes, shorter than "
                              "the {1}-byte header",
                              bytes.size(), kGmHeaderSize));
  using namespace llvm::support::endian;
  uint32_t version = read32le(bytes.data() + 8);
  uint64_t payloadLength = read64le(bytes.data() + 12);
  uint32_t storedCrc = read32le(bytes.data() + 20);
  if (version == 0)
    return fail("invalid .gm format version 0");
  if (version > kGmFormatVersion)
    return fail(llvm::formatv(".gm format version {0} is newer than this "
                              "gmopt ({1})",
                              version, kGmFormatVersion));
  uint64_t available = bytes.size() - kGmHeaderSize;
  if (payloadLength > available)
    return fail(llvm::formatv("truncated .gm file: the header declares {0} "
                              "payload bytes but only {1} follow",
                              payloadLength, available));
  if (payloadLength < available)
    return fail(llvm::formatv("corrupt .gm file: payload length mismatch: the "
                              "header declares {0} bytes but {1} follow",
                              payloadLength, available));
  StringRef payload = bytes.drop_front(kGmHeaderSize);
  uint32_t actualCrc = llvm::crc32(llvm::arrayRefFromStringRef(payload));
  if (actualCrc != storedCrc)
    return fail(llvm::formatv("corrupt .gm file: CRC-32 mismatch (the header "
                              "says {0:x10}, the payload has {1:x10})",
                              storedCrc, actualCrc));
  return payload;
}

Error GmReader::loadDimBindings(const gm::GmFile &file) {
  for (const gm::DimBinding &binding : file.dim_bindings()) {
    if (binding.name().empty())
      return fail("a dimension binding has no name");
    if (binding.extent() < 0)
      return fail(llvm::formatv("dimension '{0}' is bound to {1}, a negative "
                                "extent",
                                binding.name(), binding.extent()));
    if (!dimBindings.emplace(binding.name(), binding.extent()).second)
      return fail("dimension " + quoted(binding.name()) + " is bound twice");
  }
  return Error::success();
}

Error GmReader::loadSignature(const gm::TrainingSignature &proto,
                              Module &module, const NameTable &names,
                              StringRef prefix) const {
  auto lookup = [&](const std::string &valueName,
                    const Twine &what) -> Expected<Value *> {
    if (valueName.empty())
      return nullptr;
    Value *value = names.values.lookup(valueName);
    if (!value)
      return fail(prefix + "signature refers to unknown value " +
                  quoted(valueName) + " (" + what + ")");
    return value;
  };

  TrainingSignature sig;
  llvm::DenseSet<const Value *> seenParams;
  for (const gm::Param &entry : proto.params()) {
    if (entry.value().empty())
      return fail(prefix + "signature has a parameter with no value name");
    ParamInfo param;
    param.trainable = entry.trainable();
    Expected<Value *> value = lookup(entry.value(), "a parameter");
    if (!value)
      return value.takeError();
    param.param = *value;
    if (!seenParams.insert(param.param).second)
      return fail(prefix + "signature lists parameter " +
                  quoted(entry.value()) + " twice");
    std::string of = "of parameter " + quoted(entry.value());
    Expected<Value *> grad = lookup(entry.grad(), "the gradient " + of);
    if (!grad)
      return grad.takeError();
    param.grad = *grad;
    Expected<Value *> accumulator =
        lookup(entry.accumulator(), "the accumulator " + of);
    if (!accumulator)
      return accumulator.takeError();
    param.accumulator = *accumulator;
    if (!entry.accumulate_node().empty()) {
      const std::string &nodeName = entry.accumulate_node();
      if (names.ambiguousNodes.count(nodeName))
        return fail(prefix + "signature refers to node " + quoted(nodeName) +
                    ", whose name is not unique");
      param.accumulateNode = names.nodes.lookup(nodeName);
      if (!param.accumulateNode)
        return fail(prefix + "signature refers to unknown node " +
                    quoted(nodeName) + " (the accumulation node " + of + ")");
    }
    for (const std::string &stateName : entry.optimizer_state()) {
      if (stateName.empty())
        return fail(prefix +
                    "signature has an optimizer state with no value "
                    "name (" +
                    of + ")");
      Expected<Value *> state = lookup(stateName, "optimizer state " + of);
      if (!state)
        return state.takeError();
      param.optimizerState.push_back(*state);
    }
    sig.appendParam(std::move(param));
  }
  for (const std::string &data : proto.data_inputs()) {
    if (data.empty())
      return fail(prefix + "signature has a data input with no value name");
    Expected<Value *> value = lookup(data, "a data input");
    if (!value)
      return value.takeError();
    sig.addDataInput(*value);
  }
  Expected<Value *> loss = lookup(proto.loss(), "the loss");
  if (!loss)
    return loss.takeError();
  sig.setLoss(*loss);
  Expected<Value *> seed =
      lookup(proto.loss_grad_seed(), "the loss-gradient seed");
  if (!seed)
    return seed.takeError();
  sig.setLossGradSeed(*seed);
  Expected<Value *> lazyReset =
      lookup(proto.lazy_reset_grad(), "lazy_reset_grad");
  if (!lazyReset)
    return lazyReset.takeError();
  sig.setLazyResetGrad(*lazyReset);
  struct SlotField {
    StepSlot slot;
    const std::string &name;
    const char *what;
  };
  for (const SlotField &field :
       {SlotField{StepSlot::LearningRate, proto.learning_rate(),
                  "the learning rate"},
        SlotField{StepSlot::StepCount, proto.step_count(), "the step count"},
        SlotField{StepSlot::LossScale, proto.loss_scale(), "the loss scale"},
        SlotField{StepSlot::LossScaleGoodSteps, proto.loss_scale_good_steps(),
                  "the loss-scale good steps"}}) {
    Expected<Value *> value = lookup(field.name, field.what);
    if (!value)
      return value.takeError();
    sig.setStepSlot(field.slot, *value);
  }

  // The stored signature replaces the one the importer inferred.
  module.setSignature(std::move(sig));
  return Error::success();
}

Error GmReader::loadNodeIdentities(const gm::Model &proto, Module &module,
                                   StringRef prefix) const {
  Graph &graph = module.getGraph();
  if (proto.nodes_size() == 0)
    return Error::success();
  if (static_cast<size_t>(proto.nodes_size()) != graph.getNumNodes())
    return fail(prefix + llvm::formatv("the model has {0} nodes but {1} node "
                                       "identities",
                                       graph.getNumNodes(), proto.nodes_size())
                             .str());
  int index = 0;
  for (Node &node : graph.getNodes()) {
    const gm::NodeIdentity &identity = proto.nodes(index++);
    std::optional<Phase> phase = decodePhase(identity.phase());
    if (!phase)
      return fail(prefix + "node " + quoted(node.getName()) +
                  " has an invalid phase");
    node.setPhase(*phase);
    node.setStreamId(identity.has_stream_id()
                         ? std::optional<uint64_t>(identity.stream_id())
                         : std::nullopt);
  }
  return Error::success();
}

Error GmReader::loadPlan(const gm::Plan &proto, Module &module,
                         const NameTable &names, StringRef prefix) const {
  const Graph &graph = module.getGraph();
  size_t numNodes = graph.getNumNodes();
  if (static_cast<size_t>(proto.schedule_size()) != numNodes)
    return fail(llvm::formatv("{0}plan schedule has {1} steps but the model "
                              "has {2} nodes",
                              prefix, proto.schedule_size(), numNodes));
  int step = 0;
  for (const Node &node : graph.getNodes()) {
    if (node.getName() != proto.schedule(step))
      return fail(llvm::formatv("{0}plan schedule does not match the model's "
                                "node order: step {1} is '{2}', node {1} is "
                                "'{3}'",
                                prefix, step, proto.schedule(step),
                                node.getName()));
    ++step;
  }
  // Graph inputs and initializers are defined at step 0, even without nodes.
  uint64_t numSteps = std::max<uint64_t>(numNodes, 1);

  ExecutionPlan plan;
  plan.arenaBytes = proto.arena_bytes();
  plan.hostArenaBytes = proto.host_arena_bytes();
  plan.workspaceModel = proto.workspace_model();
  for (const gm::Buffer &buffer : proto.buffers()) {
    const std::string &valueName = buffer.value();
    Value *value = names.values.lookup(valueName);
    if (!value)
      return fail(prefix + "plan refers to unknown value " + quoted(valueName));
    std::string of = "the buffer of " + quoted(valueName);
    BufferAssignment assignment;
    std::optional<StorageKind> kind = storageKindFromProto(buffer.kind());
    if (!kind)
      return fail(llvm::formatv("{0}plan: {1} has invalid storage kind {2}",
                                prefix, of, static_cast<int>(buffer.kind())));
    assignment.kind = *kind;
    std::optional<MemoryCategory> category =
        categoryFromProto(buffer.category());
    if (!category)
      return fail(llvm::formatv("{0}plan: {1} has invalid memory category {2}",
                                prefix, of,
                                static_cast<int>(buffer.category())));
    assignment.category = *category;
    assignment.offset = buffer.offset();
    assignment.size = buffer.size();
    assignment.firstStep = buffer.first_step();
    assignment.lastStep = buffer.last_step();
    switch (buffer.space()) {
    case gm::MEMORY_SPACE_DEVICE:
      assignment.space = MemorySpace::Device;
      break;
    case gm::MEMORY_SPACE_HOST:
      assignment.space = MemorySpace::Host;
      break;
    default:
      return fail(llvm::formatv("{0}plan: {1} has invalid memory space {2}",
                                prefix, of, static_cast<int>(buffer.space())));
    }

    if (assignment.kind == StorageKind::Alias) {
      if (buffer.alias_of().empty())
        return fail(prefix + "plan: " + of +
                    " is an alias but names no value it aliases");
      assignment.aliasOf = names.values.lookup(buffer.alias_of());
      if (!assignment.aliasOf)
        return fail(prefix + "plan refers to unknown value " +
                    quoted(buffer.alias_of()) + " (aliased by " +
                    quoted(valueName) + ")");
    } else if (!buffer.alias_of().empty()) {
      return fail(prefix + "plan: " + of + " is not an alias but names " +
                  quoted(buffer.alias_of()) + " as what it aliases");
    }
    if (assignment.firstStep >= numSteps || assignment.lastStep >= numSteps)
      return fail(llvm::formatv("{0}plan: {1} has steps {2}..{3}, out of range "
                                "for a schedule of {4} steps",
                                prefix, of, assignment.firstStep,
                                assignment.lastStep, numSteps));
    // The sizes a backend allocates must be the tensors' real sizes.
    const TensorType &type = value->getType();
    if (!type.hasStaticShape())
      return fail(prefix + "plan: " + of + " is planned but its type " +
                  type.str() + " is not static");
    if (assignment.size != type.getSizeInBytes())
      return fail(llvm::formatv("{0}plan: {1} has size {2} but its type {3} "
                                "needs {4} bytes",
                                prefix, of, assignment.size, type.str(),
                                type.getSizeInBytes()));
    // Checked here in a form that cannot overflow, before the validator
    // adds offset and size.
    uint64_t arena = assignment.space == MemorySpace::Host ? plan.hostArenaBytes
                                                           : plan.arenaBytes;
    if (assignment.kind == StorageKind::Arena &&
        (assignment.offset > arena ||
         assignment.size > arena - assignment.offset))
      return fail(llvm::formatv("{0}plan: {1} ([{2}, +{3})) does not fit in "
                                "the {4}-byte {5} arena",
                                prefix, of, assignment.offset, assignment.size,
                                arena, memorySpaceName(assignment.space)));
    if (!plan.buffers.try_emplace(value, assignment).second)
      return fail(prefix + "plan has two buffers for value " +
                  quoted(valueName));
  }

  std::vector<const Node *> nodeAt;
  nodeAt.reserve(numNodes);
  for (const Node &node : graph.getNodes())
    nodeAt.push_back(&node);
  for (const gm::Workspace &workspace : proto.workspaces()) {
    if (workspace.step() >= numNodes)
      return fail(llvm::formatv("{0}plan: a workspace is at step {1}, out of "
                                "range for a schedule of {2} steps",
                                prefix, workspace.step(), numNodes));
    const Node *node = nodeAt[workspace.step()];
    if (workspace.offset() > plan.arenaBytes ||
        workspace.size() > plan.arenaBytes - workspace.offset())
      return fail(llvm::formatv("{0}plan: the workspace of {1} ([{2}, +{3})) "
                                "does not fit in the {4}-byte arena",
                                prefix, node->describe(), workspace.offset(),
                                workspace.size(), plan.arenaBytes));
    WorkspaceAssignment assignment;
    assignment.offset = workspace.offset();
    assignment.size = workspace.size();
    assignment.step = workspace.step();
    if (!plan.workspaces.try_emplace(node, assignment).second)
      return fail(prefix + "plan has two workspaces for " + node->describe());
  }

  const gm::MemoryFigures &stored = proto.figures();
  MemoryFigures &figures = plan.figures;
  figures.naiveBytes = stored.naive_bytes();
  figures.lowerBoundBytes = stored.lower_bound_bytes();
  figures.lowerBoundStep = stored.lower_bound_step();
  figures.arenaBytes = stored.arena_bytes();
  figures.hostArenaBytes = stored.host_arena_bytes();
  figures.inPlaceSavedBytes = stored.in_place_saved_bytes();
  figures.eagerEstimateBytes = stored.eager_estimate_bytes();
  figures.workspaceBytes = stored.workspace_bytes();
  std::array<bool, kNumMemoryCategories> seen{};
  for (const gm::CategoryBytes &entry : stored.persistent_bytes()) {
    std::optional<MemoryCategory> category =
        categoryFromProto(entry.category());
    if (!category)
      return fail(llvm::formatv("{0}plan figures: invalid memory category {1}",
                                prefix, static_cast<int>(entry.category())));
    unsigned index = static_cast<unsigned>(*category);
    if (seen[index])
      return fail(prefix + "plan figures: persistent bytes of " +
                  memoryCategoryName(*category) + " are given twice");
    seen[index] = true;
    figures.persistentBytes[index] = entry.bytes();
  }

  if (Error err = plan.validate(module))
    return fail(prefix + llvm::toString(std::move(err)));
  module.plan = std::move(plan);
  return Error::success();
}

Expected<std::unique_ptr<Module>> GmReader::loadModel(const gm::Model &proto,
                                                      StringRef role,
                                                      StringRef prefix) const {
  OnnxImportOptions options;
  options.dimBindings = dimBindings;
  // External initializers are references into the directory the compiler
  // recorded (or the caller names); without one, next to the .gm file.
  // The importer leaves them unread and refuses locations that leave it.
  StringRef directory = llvm::sys::path::parent_path(name);
  if (!externalDataDir.empty())
    options.externalDataDir = externalDataDir;
  else if (!proto.external_data_dir().empty())
    options.externalDataDir = proto.external_data_dir();
  else
    options.externalDataDir = directory.empty() ? "." : directory.str();
  // The importer starts its messages with the name it is given.
  std::string modelName = (name + ": embedded " + role + " model").str();
  Expected<std::unique_ptr<Module>> imported =
      importOnnxBytes(proto.onnx(), modelName, options);
  if (!imported)
    return imported.takeError();
  Module &module = **imported;

  NameTable names(module.getGraph());
  if (Error err = loadSignature(proto.signature(), module, names, prefix))
    return err;
  if (Error err = loadNodeIdentities(proto, module, prefix))
    return err;
  // The signature's own rules (parameters are inputs or initializers...).
  VerifyOptions verifyOptions;
  verifyOptions.checkTypes = false; // The importer has checked them.
  if (Error err = verifyModule(module, verifyOptions))
    return fail(prefix + llvm::toString(std::move(err)));
  if (proto.has_plan())
    if (Error err = loadPlan(proto.plan(), module, names, prefix))
      return err;
  return std::move(*imported);
}

Expected<CompiledModule> GmReader::read(StringRef bytes) {
  Expected<StringRef> payload = checkHeader(bytes);
  if (!payload)
    return payload.takeError();
  if (payload->size() > static_cast<size_t>(INT_MAX))
    return fail("the .gm payload is larger than 2 GiB, more than protobuf "
                "can parse");

  gm::GmFile file;
  google::protobuf::io::ArrayInputStream stream(
      payload->data(), static_cast<int>(payload->size()));
  google::protobuf::io::CodedInputStream coded(&stream);
  coded.SetTotalBytesLimit(INT_MAX);
  if (!file.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return fail("corrupt .gm file: the payload is not a valid gmopt.gm.GmFile "
                "message");

  if (Error err = loadDimBindings(file))
    return err;
  if (!file.has_rewritten())
    return fail("the .gm file holds no rewritten model");
  if (!file.has_original())
    return fail("the .gm file holds no original model");

  CompiledModule compiled;
  compiled.pipeline = file.pipeline();
  compiled.producerVersion = file.producer_version();
  Expected<std::unique_ptr<Module>> rewritten =
      loadModel(file.rewritten(), "rewritten", "");
  if (!rewritten)
    return rewritten.takeError();
  compiled.module = std::move(*rewritten);
  Expected<std::unique_ptr<Module>> original =
      loadModel(file.original(), "original", "original model: ");
  if (!original)
    return original.takeError();
  compiled.original = std::move(*original);

  // The ONNX export carries the module's pipeline history; a file written
  // from a module without it still says what it ran.
  std::vector<std::pair<std::string, std::string>> &metadata =
      compiled.module->metadata;
  bool recorded = llvm::any_of(metadata, [](const auto &entry) {
    return entry.first == kGmPipelineMetadataKey;
  });
  if (!recorded && !compiled.pipeline.empty())
    metadata.emplace_back(kGmPipelineMetadataKey.str(), compiled.pipeline);
  return compiled;
}

} // namespace

llvm::StringRef gmopt::getGmoptVersion() { return GMOPT_VERSION; }

std::string gmopt::wrapGmPayload(StringRef payload, uint32_t formatVersion) {
  using namespace llvm::support::endian;
  std::string bytes;
  bytes.reserve(kGmHeaderSize + payload.size());
  bytes.append(kGmMagic, sizeof(kGmMagic));
  char field[8];
  write32le(field, formatVersion);
  bytes.append(field, 4);
  write64le(field, payload.size());
  bytes.append(field, 8);
  write32le(field, llvm::crc32(llvm::arrayRefFromStringRef(payload)));
  bytes.append(field, 4);
  bytes.append(payload.data(), payload.size());
  assert(bytes.size() == kGmHeaderSize + payload.size() && "header layout");
  return bytes;
}

Expected<std::string> gmopt::writeGmBytes(Module &rewritten, Module &original,
                                          StringRef pipeline) {
  silenceProtobufLogging();
  for (Module *module : {&rewritten, &original}) {
    uniquifyValueNames(*module);
    uniquifyNodeNames(*module);
  }
  gm::GmFile file;
  file.set_producer_version(getGmoptVersion().str());
  file.set_pipeline(pipeline.str());
  // std::map order: sorted by name, so equal modules give equal bytes.
  for (const auto &[dimName, extent] : rewritten.dimBindings) {
    gm::DimBinding *binding = file.add_dim_bindings();
    binding->set_name(dimName);
    binding->set_extent(extent);
  }
  if (Error err = ModelEncoder(rewritten, "rewritten")
                      .encode(*file.mutable_rewritten()))
    return err;
  if (Error err =
          ModelEncoder(original, "original").encode(*file.mutable_original()))
    return err;
  if (file.ByteSizeLong() > static_cast<size_t>(INT_MAX))
    return makeError("cannot write a .gm file larger than 2 GiB");
  std::string payload;
  if (!file.SerializeToString(&payload))
    return makeError("cannot serialize the .gm payload");
  return wrapGmPayload(payload);
}

Error gmopt::writeGmFile(StringRef path, Module &rewritten, Module &original,
                         StringRef pipeline) {
  Expected<std::string> bytes = writeGmBytes(rewritten, original, pipeline);
  if (!bytes)
    return makeError(path + ": " + llvm::toString(bytes.takeError()));
  return writeFileSafely(path, *bytes);
}

Expected<CompiledModule> gmopt::readGmBytes(StringRef bytes, StringRef name,
                                            StringRef externalDataDir) {
  silenceProtobufLogging();
  return GmReader(name, externalDataDir).read(bytes);
}

Expected<CompiledModule> gmopt::readGmFile(StringRef path,
                                           StringRef externalDataDir) {
  Expected<std::unique_ptr<llvm::MemoryBuffer>> buffer = readFileBounded(path);
  if (!buffer)
    return buffer.takeError();
  return readGmBytes((*buffer)->getBuffer(), path, externalDataDir);
}
