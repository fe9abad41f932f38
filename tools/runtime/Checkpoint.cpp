//===- Checkpoint.cpp - Reading parameter values from weight files --------===//
//
// The three weight-file readers of Checkpoint.h. The FlatBuffers checkpoint
// is decoded with a small bounds-checked table reader (FlatBufferTable):
// a table starts with a signed offset back to its vtable; the vtable lists
// the table's byte size and, per field id, the field's offset in the table
// (0 = absent, the default applies); reference fields (tables, vectors,
// strings) hold an unsigned offset from the field itself to the target,
// and a vector or string starts with its element count. Field ids follow
// the declaration order of ort_training_checkpoint.fbs and ort.fbs.
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/Checkpoint.h"

#include "ir/Types.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/OnnxTensor.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "onnx/onnx_pb.h"

#include <optional>

using namespace gmopt;

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

//===----------------------------------------------------------------------===//
// FlatBuffers
//===----------------------------------------------------------------------===//

/// Field ids of the checkpoint schema (declaration order).
namespace checkpoint_fields {
constexpr unsigned kVersion = 0, kModuleState = 1, kOptimizerGroups = 2,
                   kPropertyBag = 3;
} // namespace checkpoint_fields
namespace optimizer_group_fields {
constexpr unsigned kGroupName = 0, kStep = 1, kInitialLearningRate = 2,
                   kOptimizerStates = 3;
} // namespace optimizer_group_fields
namespace parameter_state_fields {
constexpr unsigned kParamName = 0, kMomentums = 1;
} // namespace parameter_state_fields
namespace property_bag_fields {
constexpr unsigned kInts = 0, kFloats = 1, kStrings = 2;
} // namespace property_bag_fields
/// IntProperty, FloatProperty and StringProperty: a name and a value.
namespace property_fields {
constexpr unsigned kName = 0, kValue = 1;
} // namespace property_fields
namespace module_state_fields {
constexpr unsigned kRequiresGradParams = 0, kFrozenParams = 1,
                   kIsNominalState = 2, kHasExternalData = 3;
} // namespace module_state_fields
namespace tensor_fields {
constexpr unsigned kName = 0, kDims = 2, kDataType = 3, kRawData = 4,
                   kStringData = 5, kExternalDataOffset = 6;
} // namespace tensor_fields

/// A bounds-checked view of one FlatBuffers table inside a buffer. Every
/// accessor returns nullopt (or an empty result) when the buffer is too short
/// for what the offsets claim; callers turn that into "corrupt file".
class FlatBufferTable {
public:
  /// The table at byte \p position of \p buffer, or nullopt if its header
  /// or vtable lies outside the buffer.
  static std::optional<FlatBufferTable> at(llvm::StringRef buffer,
                                           uint64_t position) {
    FlatBufferTable table(buffer, position);
    auto vtableDistance = table.read<int32_t>(position);
    if (!vtableDistance)
      return std::nullopt;
    int64_t vtable = static_cast<int64_t>(position) - *vtableDistance;
    if (vtable < 0)
      return std::nullopt;
    table.vtable = static_cast<uint64_t>(vtable);
    auto vtableSize = table.read<uint16_t>(table.vtable);
    if (!vtableSize || *vtableSize < 4 ||
        table.vtable + *vtableSize > buffer.size())
      return std::nullopt;
    table.vtableSize = *vtableSize;
    return table;
  }

  /// The root table of a buffer (its first four bytes hold the offset).
  static std::optional<FlatBufferTable> root(llvm::StringRef buffer) {
    FlatBufferTable header(buffer, 0);
    auto offset = header.read<uint32_t>(0);
    if (!offset)
      return std::nullopt;
    return at(buffer, *offset);
  }

  /// Absolute position of field \p id, or nullopt when it is absent.
  std::optional<uint64_t> fieldPosition(unsigned id) const {
    uint64_t entry = 4 + 2 * uint64_t(id);
    if (entry + 2 > vtableSize)
      return std::nullopt;
    auto offset = read<uint16_t>(vtable + entry);
    if (!offset || *offset == 0)
      return std::nullopt;
    return position + *offset;
  }

  /// Scalar field \p id, \p fallback when absent. Sets \p corrupt if the
  /// field lies outside the buffer.
  template <typename T> T scalar(unsigned id, T fallback, bool &corrupt) const {
    std::optional<uint64_t> at = fieldPosition(id);
    if (!at)
      return fallback;
    std::optional<T> value = read<T>(*at);
    if (!value) {
      corrupt = true;
      return fallback;
    }
    return *value;
  }

  /// The target of reference field \p id (a table, vector or string), or
  /// nullopt when absent. Sets \p corrupt if the offset leaves the buffer.
  std::optional<uint64_t> reference(unsigned id, bool &corrupt) const {
    std::optional<uint64_t> at = fieldPosition(id);
    if (!at)
      return std::nullopt;
    auto offset = read<uint32_t>(*at);
    if (!offset || *at + *offset >= buffer.size()) {
      corrupt = true;
      return std::nullopt;
    }
    return *at + *offset;
  }

  /// The sub-table in field \p id.
  std::optional<FlatBufferTable> table(unsigned id, bool &corrupt) const {
    std::optional<uint64_t> target = reference(id, corrupt);
    if (!target)
      return std::nullopt;
    std::optional<FlatBufferTable> sub = at(buffer, *target);
    if (!sub)
      corrupt = true;
    return sub;
  }

  /// The bytes of vector field \p id whose elements are \p elementSize bytes
  /// wide, with its element count; empty when absent.
  std::pair<llvm::StringRef, uint32_t> vector(unsigned id, unsigned elementSize,
                                              bool &corrupt) const {
    std::optional<uint64_t> target = reference(id, corrupt);
    if (!target)
      return {};
    auto count = read<uint32_t>(*target);
    uint64_t begin = *target + 4;
    if (!count || begin + uint64_t(*count) * elementSize > buffer.size()) {
      corrupt = true;
      return {};
    }
    return {buffer.substr(begin, uint64_t(*count) * elementSize), *count};
  }

  /// The tables of vector-of-tables field \p id.
  std::vector<FlatBufferTable> tables(unsigned id, bool &corrupt) const {
    auto [bytes, count] = vector(id, 4, corrupt);
    std::vector<FlatBufferTable> result;
    uint64_t begin = bytes.data() ? bytes.data() - buffer.data() : 0;
    for (uint32_t i = 0; i != count && !corrupt; ++i) {
      uint64_t slot = begin + 4 * uint64_t(i);
      auto offset = read<uint32_t>(slot);
      std::optional<FlatBufferTable> element =
          offset ? at(buffer, slot + *offset) : std::nullopt;
      if (!element) {
        corrupt = true;
        break;
      }
      result.push_back(*element);
    }
    return result;
  }

  /// String field \p id; empty when absent.
  llvm::StringRef string(unsigned id, bool &corrupt) const {
    return vector(id, 1, corrupt).first;
  }

private:
  FlatBufferTable(llvm::StringRef buffer, uint64_t position)
      : buffer(buffer), position(position) {}

  template <typename T> std::optional<T> read(uint64_t at) const {
    if (at + sizeof(T) > buffer.size() || at + sizeof(T) < at)
      return std::nullopt;
    return llvm::support::endian::read<T, llvm::endianness::little>(
        buffer.data() + at);
  }

  llvm::StringRef buffer;
  uint64_t position;
  uint64_t vtable = 0;
  uint16_t vtableSize = 0;
};

/// Converts one ort.fbs Tensor table.
llvm::Expected<NamedTensor> readFlatTensor(const FlatBufferTable &table,
                                           llvm::StringRef fileName,
                                           bool &corrupt) {
  NamedTensor tensor;
  tensor.name = table.string(tensor_fields::kName, corrupt).str();
  tensor.source = (fileName + ": tensor '" + tensor.name + "'").str();
  auto [dimBytes, rank] = table.vector(tensor_fields::kDims, 8, corrupt);
  int32_t dataType =
      table.scalar<int32_t>(tensor_fields::kDataType, 0, corrupt);
  auto [raw, rawSize] = table.vector(tensor_fields::kRawData, 1, corrupt);
  auto [strings, numStrings] =
      table.vector(tensor_fields::kStringData, 4, corrupt);
  int64_t externalOffset =
      table.scalar<int64_t>(tensor_fields::kExternalDataOffset, -1, corrupt);
  if (corrupt)
    return tensor;
  if (externalOffset >= 0)
    return makeError(tensor.source +
                     ": the value is in an external data file, which gmopt "
                     "does not read");
  std::optional<DType> dtype = dtypeFromOnnx(dataType);
  if (!dtype || *dtype == DType::Undefined || *dtype == DType::String ||
      numStrings)
    return makeError(tensor.source +
                     llvm::formatv(": unsupported element type {0}", dataType));
  llvm::SmallVector<int64_t, 4> shape;
  for (uint32_t i = 0; i != rank; ++i) {
    int64_t extent =
        llvm::support::endian::read<int64_t, llvm::endianness::little>(
            dimBytes.data() + 8 * i);
    if (extent < 0 || extent > (int64_t(1) << 40))
      return makeError(tensor.source +
                       llvm::formatv(": invalid dimension {0}", extent));
    shape.push_back(extent);
  }
  TensorType type = TensorType::get(*dtype, shape);
  if (type.getSizeInBytes() != rawSize)
    return makeError(tensor.source +
                     llvm::formatv(": holds {0} bytes but {1} needs {2}",
                                   rawSize, type.str(), type.getSizeInBytes()));
  std::vector<uint8_t> bytes(raw.bytes_begin(), raw.bytes_end());
  tensor.data = TensorData(type, std::move(bytes));
  return tensor;
}

/// Reads a protobuf varint32 at \p position, advancing it.
std::optional<uint32_t> readVarint32(llvm::StringRef bytes, size_t &position) {
  uint64_t value = 0;
  for (unsigned shift = 0; shift < 35; shift += 7) {
    if (position >= bytes.size())
      return std::nullopt;
    uint8_t byte = static_cast<uint8_t>(bytes[position++]);
    value |= uint64_t(byte & 0x7f) << shift;
    if (!(byte & 0x80))
      return value > UINT32_MAX ? std::nullopt
                                : std::optional<uint32_t>(uint32_t(value));
  }
  return std::nullopt;
}

void writeVarint32(std::string &out, uint32_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

/// Fails when two of \p names are equal: `FILE: WHAT i and WHAT j are both
/// named 'X'`, where \p describe(i) says what entry i is.
llvm::Error checkUniqueNames(llvm::ArrayRef<llvm::StringRef> names,
                             llvm::StringRef file,
                             llvm::function_ref<std::string(size_t)> describe) {
  llvm::StringMap<size_t> first;
  for (size_t i = 0, e = names.size(); i != e; ++i) {
    auto [it, inserted] = first.try_emplace(names[i], i);
    if (!inserted)
      return makeError(file + ": " + describe(it->second) + " and " +
                       describe(i) + " are both named '" + names[i] +
                       "' (a weights file must name each tensor once)");
  }
  return llvm::Error::success();
}

/// The names of \p tensors, in order.
std::vector<llvm::StringRef> namesOf(llvm::ArrayRef<NamedTensor> tensors) {
  std::vector<llvm::StringRef> names;
  for (const NamedTensor &tensor : tensors)
    names.push_back(tensor.name);
  return names;
}

/// Reads the optimizer groups of a checkpoint (\p root), checking that no
/// name is given twice.
llvm::Expected<std::vector<OptimizerGroup>>
readOptimizerGroups(const FlatBufferTable &root, llvm::StringRef fileName,
                    bool &corrupt) {
  std::vector<OptimizerGroup> groups;
  for (const FlatBufferTable &table :
       root.tables(checkpoint_fields::kOptimizerGroups, corrupt)) {
    OptimizerGroup group;
    group.name =
        table.string(optimizer_group_fields::kGroupName, corrupt).str();
    group.step =
        table.scalar<int64_t>(optimizer_group_fields::kStep, 0, corrupt);
    group.initialLearningRate = table.scalar<float>(
        optimizer_group_fields::kInitialLearningRate, 0.0f, corrupt);
    for (const FlatBufferTable &stateTable :
         table.tables(optimizer_group_fields::kOptimizerStates, corrupt)) {
      ParameterOptimizerState state;
      state.param =
          stateTable.string(parameter_state_fields::kParamName, corrupt).str();
      for (const FlatBufferTable &tensorTable :
           stateTable.tables(parameter_state_fields::kMomentums, corrupt)) {
        auto tensor = readFlatTensor(tensorTable, fileName, corrupt);
        if (!tensor)
          return tensor.takeError();
        if (corrupt)
          return groups;
        tensor->source =
            (fileName + ": optimizer state '" + tensor->name + "' of '" +
             state.param + "' in group '" + group.name + "'")
                .str();
        state.momentums.push_back(std::move(*tensor));
      }
      if (corrupt)
        return groups;
      if (llvm::Error err = checkUniqueNames(
              namesOf(state.momentums), fileName, [&](size_t i) {
                return llvm::formatv("state tensor {0} of '{1}' in group "
                                     "'{2}'",
                                     i, state.param, group.name)
                    .str();
              }))
        return err;
      group.params.push_back(std::move(state));
    }
    if (corrupt)
      return groups;
    std::vector<llvm::StringRef> params;
    for (const ParameterOptimizerState &state : group.params)
      params.push_back(state.param);
    if (llvm::Error err = checkUniqueNames(params, fileName, [&](size_t i) {
          return llvm::formatv("parameter state {0} of group '{1}'", i,
                               group.name)
              .str();
        }))
      return err;
    groups.push_back(std::move(group));
  }
  std::vector<llvm::StringRef> names;
  for (const OptimizerGroup &group : groups)
    names.push_back(group.name);
  if (llvm::Error err = checkUniqueNames(names, fileName, [](size_t i) {
        return llvm::formatv("optimizer group {0}", i).str();
      }))
    return err;
  return groups;
}

/// Reads the property bag of a checkpoint (\p root), if any.
PropertyBag readPropertyBag(const FlatBufferTable &root, bool &corrupt) {
  PropertyBag bag;
  std::optional<FlatBufferTable> table =
      root.table(checkpoint_fields::kPropertyBag, corrupt);
  if (!table)
    return bag;
  for (const FlatBufferTable &entry :
       table->tables(property_bag_fields::kInts, corrupt))
    bag.ints.emplace_back(
        entry.string(property_fields::kName, corrupt).str(),
        entry.scalar<int64_t>(property_fields::kValue, 0, corrupt));
  for (const FlatBufferTable &entry :
       table->tables(property_bag_fields::kFloats, corrupt))
    bag.floats.emplace_back(
        entry.string(property_fields::kName, corrupt).str(),
        entry.scalar<float>(property_fields::kValue, 0.0f, corrupt));
  for (const FlatBufferTable &entry :
       table->tables(property_bag_fields::kStrings, corrupt))
    bag.strings.emplace_back(
        entry.string(property_fields::kName, corrupt).str(),
        entry.string(property_fields::kValue, corrupt).str());
  return bag;
}

} // namespace

const NamedTensor *WeightSet::lookup(llvm::StringRef name) const {
  for (const NamedTensor &tensor : tensors)
    if (tensor.name == name)
      return &tensor;
  return nullptr;
}

const NamedTensor *ParameterOptimizerState::lookup(llvm::StringRef name) const {
  for (const NamedTensor &tensor : momentums)
    if (tensor.name == name)
      return &tensor;
  return nullptr;
}

const ParameterOptimizerState *
OptimizerGroup::lookup(llvm::StringRef param) const {
  for (const ParameterOptimizerState &state : params)
    if (state.param == param)
      return &state;
  return nullptr;
}

std::optional<float> PropertyBag::lookupFloat(llvm::StringRef name) const {
  for (const auto &[key, value] : floats)
    if (key == name)
      return value;
  return std::nullopt;
}

llvm::Expected<OrtCheckpoint> gmopt::parseOrtCheckpoint(llvm::StringRef bytes,
                                                        llvm::StringRef name) {
  auto corruptError = [&] {
    return makeError(name + ": corrupt ONNX Runtime checkpoint (an offset "
                            "points outside the file)");
  };
  if (bytes.size() < 8 || bytes.substr(4, 4) != "ODTC")
    return makeError(name + ": not an ONNX Runtime checkpoint (no \"ODTC\" "
                            "identifier)");
  std::optional<FlatBufferTable> root = FlatBufferTable::root(bytes);
  if (!root)
    return corruptError();
  bool corrupt = false;
  int32_t version =
      root->scalar<int32_t>(checkpoint_fields::kVersion, 0, corrupt);
  std::optional<FlatBufferTable> moduleState =
      root->table(checkpoint_fields::kModuleState, corrupt);
  if (corrupt)
    return corruptError();
  if (version < 1)
    return makeError(
        name + llvm::formatv(": unsupported checkpoint version {0}", version));
  if (!moduleState)
    return makeError(name + ": the checkpoint has no module state (no "
                            "parameter values)");
  if (moduleState->scalar<uint8_t>(module_state_fields::kIsNominalState, 0,
                                   corrupt))
    return makeError(name + ": nominal checkpoint: it names the parameters "
                            "but holds no values");
  if (moduleState->scalar<uint8_t>(module_state_fields::kHasExternalData, 0,
                                   corrupt))
    return makeError(name + ": the checkpoint keeps its tensors in an "
                            "external data file, which gmopt does not read");
  OrtCheckpoint checkpoint;
  for (unsigned field : {module_state_fields::kRequiresGradParams,
                         module_state_fields::kFrozenParams}) {
    std::vector<NamedTensor> &into =
        field == module_state_fields::kRequiresGradParams ? checkpoint.trainable
                                                          : checkpoint.frozen;
    for (const FlatBufferTable &table : moduleState->tables(field, corrupt)) {
      auto tensor = readFlatTensor(table, name, corrupt);
      if (!tensor)
        return tensor.takeError();
      if (corrupt)
        break;
      into.push_back(std::move(*tensor));
    }
    if (corrupt)
      return corruptError();
  }
  std::vector<llvm::StringRef> names = namesOf(checkpoint.trainable);
  for (llvm::StringRef frozen : namesOf(checkpoint.frozen))
    names.push_back(frozen);
  size_t numTrainable = checkpoint.trainable.size();
  if (llvm::Error err = checkUniqueNames(names, name, [&](size_t i) {
        return i < numTrainable
                   ? llvm::formatv("trainable parameter {0}", i).str()
                   : llvm::formatv("frozen parameter {0}", i - numTrainable)
                         .str();
      }))
    return err;
  auto groups = readOptimizerGroups(*root, name, corrupt);
  if (!groups)
    return groups.takeError();
  checkpoint.optimizerGroups = std::move(*groups);
  checkpoint.properties = readPropertyBag(*root, corrupt);
  if (corrupt)
    return corruptError();
  return checkpoint;
}

llvm::Expected<std::vector<NamedTensor>>
gmopt::parseTensorSequence(llvm::StringRef bytes, llvm::StringRef name,
                           llvm::StringRef externalDataDir) {
  size_t position = 0;
  std::optional<uint32_t> count = readVarint32(bytes, position);
  if (!count)
    return makeError(name + ": not a TensorProto sequence (bad count)");
  ExternalDataResolver resolver(externalDataDir.str());
  std::vector<NamedTensor> tensors;
  for (uint32_t i = 0; i != *count; ++i) {
    std::optional<uint32_t> size = readVarint32(bytes, position);
    if (!size || position + *size > bytes.size())
      return makeError(name + llvm::formatv(": truncated TensorProto sequence "
                                            "(entry {0} of {1})",
                                            i, *count));
    onnx::TensorProto proto;
    if (!proto.ParseFromArray(bytes.data() + position, static_cast<int>(*size)))
      return makeError(name + llvm::formatv(": entry {0} is not a valid "
                                            "TensorProto",
                                            i));
    position += *size;
    auto data = importTensorStealing(proto, &resolver);
    if (!data)
      return makeError(name + ": " + llvm::toString(data.takeError()));
    NamedTensor tensor;
    tensor.name = proto.name();
    tensor.source = (name + ": tensor '" + proto.name() + "'").str();
    tensor.index = i;
    tensor.data = std::move(*data);
    tensors.push_back(std::move(tensor));
  }
  if (position != bytes.size())
    return makeError(name + ": trailing bytes after the TensorProto sequence");
  if (llvm::Error err = checkUniqueNames(namesOf(tensors), name, [](size_t i) {
        return llvm::formatv("entry {0}", i).str();
      }))
    return err;
  return tensors;
}

std::string
gmopt::writeTensorSequence(const std::vector<NamedTensor> &tensors) {
  std::string out;
  writeVarint32(out, static_cast<uint32_t>(tensors.size()));
  for (const NamedTensor &tensor : tensors) {
    onnx::TensorProto proto;
    exportTensor(tensor.data, proto);
    proto.set_name(tensor.name);
    std::string bytes = proto.SerializeAsString();
    writeVarint32(out, static_cast<uint32_t>(bytes.size()));
    out += bytes;
  }
  return out;
}

llvm::Expected<WeightSet> gmopt::readWeightFile(llvm::StringRef path) {
  WeightSet set;
  set.path = path.str();
  std::string file = path.str();
  if (llvm::sys::fs::is_directory(path)) {
    llvm::SmallString<256> sequence(path);
    llvm::sys::path::append(sequence, "tensors.pbseq");
    if (!llvm::sys::fs::exists(sequence))
      return makeError(path + ": a directory without tensors.pbseq (expected "
                              "an ONNX model, an ONNX Runtime checkpoint or a "
                              ".pbseq file)");
    file = sequence.str().str();
  }
  // A regular file only, read no further than its size.
  auto buffer = readFileBounded(file);
  if (!buffer)
    return buffer.takeError();
  llvm::StringRef bytes = (*buffer)->getBuffer();
  std::string directory = llvm::sys::path::parent_path(file).str();

  if (bytes.size() >= 8 && bytes.substr(4, 4) == "ODTC") {
    set.kind = WeightFileKind::OrtCheckpoint;
    auto checkpoint = parseOrtCheckpoint(bytes, file);
    if (!checkpoint)
      return checkpoint.takeError();
    set.tensors = std::move(checkpoint->trainable);
    for (NamedTensor &tensor : checkpoint->frozen)
      set.tensors.push_back(std::move(tensor));
    set.optimizerGroups = std::move(checkpoint->optimizerGroups);
    set.properties = std::move(checkpoint->properties);
    return set;
  }
  if (llvm::StringRef(file).ends_with(".pbseq")) {
    set.kind = WeightFileKind::TensorSequence;
    auto tensors = parseTensorSequence(bytes, file, directory);
    if (!tensors)
      return tensors.takeError();
    set.tensors = std::move(*tensors);
    return set;
  }
  set.kind = WeightFileKind::OnnxModel;
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) ||
      !model.has_graph())
    return makeError(file + ": not an ONNX model, an ONNX Runtime checkpoint "
                            "or a TensorProto sequence");
  ExternalDataResolver resolver(directory);
  for (onnx::TensorProto &proto :
       *model.mutable_graph()->mutable_initializer()) {
    auto data = importTensorStealing(proto, &resolver);
    if (!data)
      return makeError(file + ": " + llvm::toString(data.takeError()));
    NamedTensor tensor;
    tensor.name = proto.name();
    tensor.source = (file + ": initializer '" + proto.name() + "'");
    tensor.data = std::move(*data);
    set.tensors.push_back(std::move(tensor));
  }
  if (llvm::Error err =
          checkUniqueNames(namesOf(set.tensors), file, [](size_t i) {
            return llvm::formatv("initializer {0}", i).str();
          }))
    return err;
  return set;
}
