//===- OrtCheckpointWriter.cpp - Writing ONNX Runtime checkpoints ---------===//
//
// writeOrtCheckpoint (Checkpoint.h): an OrtCheckpoint as the FlatBuffers
// file of ort_training_checkpoint.fbs that ONNX Runtime's
// CheckpointState.load_checkpoint reads. ONNX Runtime verifies the buffer
// (flatbuffers::Verifier) before it reads anything, so the layout follows
// the FlatBuffers rules the verifier checks: the buffer is built back to
// front, every scalar is aligned to its size, every vector and string starts
// with a 4-byte-aligned element count, a string ends with a zero byte,
// references (unsigned offsets) point forward, and each table starts with a
// signed offset to its vtable. ONNX Runtime's reader needs more than the
// schema says: a tensor's name, dims and raw_data, a module state's both
// parameter lists, a group's name and optimizer states and a parameter
// state's name and momentums must be present (possibly empty), so they are
// always written.
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/Checkpoint.h"

#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Endian.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

using namespace gmopt;

namespace {

/// The version ONNX Runtime 1.19 writes
/// (core/flatbuffers/checkpoint_version.h).
constexpr int32_t kCheckpointVersion = 2;

/// A minimal FlatBuffers builder. Objects are prepended: an object's handle
/// is its distance from the end of the finished buffer, which never changes
/// as more is prepended in front of it.
class FlatBufferWriter {
public:
  /// A handle: the distance of an object's start from the buffer's end.
  using Offset = uint32_t;

  /// Prepends a string (count, bytes, zero terminator).
  Offset string(llvm::StringRef text) {
    align(4, text.size() + 1);
    uint8_t zero = 0;
    prepend(&zero, 1);
    prepend(text.bytes_begin(), text.size());
    return finishVector(text.size());
  }

  /// Prepends a vector of \p count scalars of \p elementSize bytes each,
  /// already little-endian in \p bytes, its first element aligned to
  /// \p alignment (at least the element size).
  Offset scalarVector(const uint8_t *bytes, size_t count, size_t elementSize,
                      size_t alignment) {
    size_t size = count * elementSize;
    align(4, size);
    align(std::max(alignment, elementSize), size);
    prepend(bytes, size);
    return finishVector(count);
  }

  /// Prepends a vector of references to \p objects (in order).
  Offset referenceVector(llvm::ArrayRef<Offset> objects) {
    align(4, 4 * objects.size());
    for (size_t i = objects.size(); i-- > 0;)
      prependReference(objects[i]);
    return finishVector(objects.size());
  }

  /// Starts a table; add its fields, then call endTable.
  void startTable() {
    fields.clear();
    tableStart = size();
  }
  /// Adds scalar field \p id of the table being built.
  template <typename T> void addScalar(unsigned id, T value) {
    align(sizeof(T), 0);
    uint8_t bytes[sizeof(T)];
    llvm::support::endian::write<T, llvm::endianness::little>(bytes, value);
    prepend(bytes, sizeof(T));
    fields.push_back({id, size()});
  }
  /// Adds reference field \p id (to a table, vector or string).
  void addReference(unsigned id, Offset object) {
    align(4, 0);
    prependReference(object);
    fields.push_back({id, size()});
  }
  /// Ends the table: its vtable (field id -> position in the table) goes
  /// in front of it, and its first word points there.
  Offset endTable() {
    align(4, 0);
    // The table's first word, its signed offset to the vtable, is known
    // only once the vtable is laid out below: reserve it, patch it after.
    uint8_t vtableOffsetSlot[4] = {0, 0, 0, 0};
    prepend(vtableOffsetSlot, 4);
    Offset table = size();
    unsigned numSlots = 0;
    for (const Field &field : fields)
      numSlots = std::max(numSlots, field.id + 1);
    std::vector<uint16_t> vtable(2 + numSlots, 0);
    vtable[0] = static_cast<uint16_t>(2 * vtable.size());
    vtable[1] = static_cast<uint16_t>(table - tableStart);
    for (const Field &field : fields)
      vtable[2 + field.id] = static_cast<uint16_t>(table - field.at);
    for (size_t i = vtable.size(); i-- > 0;) {
      uint8_t bytes[2];
      llvm::support::endian::write<uint16_t, llvm::endianness::little>(
          bytes, vtable[i]);
      prepend(bytes, 2);
    }
    Offset vtableAt = size();
    // The table's first word: the vtable's position relative to it (the
    // vtable lies in front, so the value is positive: table - vtable).
    int32_t distance = static_cast<int32_t>(vtableAt - table);
    patch(table, distance);
    fields.clear();
    return table;
  }

  /// Finishes the buffer with \p root as its root table and the 4-byte
  /// file \p identifier, and returns the bytes.
  std::string finish(Offset root, llvm::StringRef identifier) {
    assert(identifier.size() == 4 && "FlatBuffers identifiers are 4 bytes");
    align(minAlign, 8);
    prepend(identifier.bytes_begin(), 4);
    prependReference(root);
    std::string bytes(reversed.rbegin(), reversed.rend());
    return bytes;
  }

private:
  /// One field of the table being built: its id and handle.
  struct Field {
    unsigned id;
    Offset at;
  };

  Offset size() const { return static_cast<Offset>(reversed.size()); }

  /// Prepends \p count bytes (in buffer order).
  void prepend(const uint8_t *bytes, size_t count) {
    for (size_t i = count; i-- > 0;)
      reversed.push_back(bytes[i]);
  }

  /// Pads with zeros so that, once \p following more bytes are prepended,
  /// the buffer's size is a multiple of \p alignment.
  void align(size_t alignment, size_t following) {
    minAlign = std::max(minAlign, alignment);
    while ((reversed.size() + following) % alignment)
      reversed.push_back(0);
  }

  /// Prepends the unsigned offset from the new word to \p object.
  void prependReference(Offset object) {
    align(4, 0);
    uint32_t distance = size() + 4 - object;
    uint8_t bytes[4];
    llvm::support::endian::write<uint32_t, llvm::endianness::little>(bytes,
                                                                     distance);
    prepend(bytes, 4);
  }

  /// Prepends a vector's element count; returns the vector's handle.
  Offset finishVector(size_t count) {
    uint8_t bytes[4];
    llvm::support::endian::write<uint32_t, llvm::endianness::little>(
        bytes, static_cast<uint32_t>(count));
    prepend(bytes, 4);
    return size();
  }

  /// Overwrites the 4 bytes at handle \p at with \p value.
  void patch(Offset at, int32_t value) {
    uint8_t bytes[4];
    llvm::support::endian::write<int32_t, llvm::endianness::little>(bytes,
                                                                    value);
    // The byte at buffer position (end - at + k) is reversed[at - 1 - k].
    for (size_t k = 0; k != 4; ++k)
      reversed[at - 1 - k] = bytes[k];
  }

  /// The buffer so far, last byte first.
  std::vector<uint8_t> reversed;
  size_t minAlign = 1;
  std::vector<Field> fields;
  Offset tableStart = 0;
};

/// Field ids of the schemas (declaration order), as Checkpoint.cpp reads
/// them.
namespace tensor_fields {
constexpr unsigned kName = 0, kDims = 2, kDataType = 3, kRawData = 4;
} // namespace tensor_fields

/// Writes one ort.fbs Tensor.
FlatBufferWriter::Offset writeTensor(FlatBufferWriter &writer,
                                     llvm::StringRef name,
                                     const TensorData &data) {
  llvm::ArrayRef<uint8_t> bytes = data.getBytes();
  // Tensor bytes 8-byte aligned, so that a reader may view them in place.
  FlatBufferWriter::Offset raw =
      writer.scalarVector(bytes.data(), bytes.size(), 1, 8);
  std::vector<uint8_t> dimBytes;
  for (int64_t extent : data.getType().getStaticShape()) {
    uint8_t bytes[8];
    llvm::support::endian::write<int64_t, llvm::endianness::little>(bytes,
                                                                    extent);
    dimBytes.insert(dimBytes.end(), bytes, bytes + 8);
  }
  FlatBufferWriter::Offset dims =
      writer.scalarVector(dimBytes.data(), dimBytes.size() / 8, 8, 8);
  FlatBufferWriter::Offset nameAt = writer.string(name);
  writer.startTable();
  writer.addReference(tensor_fields::kName, nameAt);
  writer.addReference(tensor_fields::kDims, dims);
  // DType's values are ONNX's TensorProto.DataType numbers, which ort.fbs's
  // TensorDataType repeats.
  writer.addScalar<int32_t>(tensor_fields::kDataType,
                            static_cast<int32_t>(data.getType().getDType()));
  writer.addReference(tensor_fields::kRawData, raw);
  return writer.endTable();
}

/// Writes \p tensors and a vector of them.
FlatBufferWriter::Offset writeTensors(FlatBufferWriter &writer,
                                      llvm::ArrayRef<NamedTensor> tensors) {
  std::vector<FlatBufferWriter::Offset> tables;
  for (const NamedTensor &tensor : tensors)
    tables.push_back(writeTensor(writer, tensor.name, tensor.data));
  return writer.referenceVector(tables);
}

} // namespace

std::string gmopt::writeOrtCheckpoint(const OrtCheckpoint &checkpoint) {
  FlatBufferWriter writer;
  // Children first: a reference points forward, to what was written before.
  FlatBufferWriter::Offset trainable =
      writeTensors(writer, checkpoint.trainable);
  FlatBufferWriter::Offset frozen = writeTensors(writer, checkpoint.frozen);
  writer.startTable(); // ModuleState
  writer.addReference(0, trainable);
  writer.addReference(1, frozen);
  FlatBufferWriter::Offset moduleState = writer.endTable();

  std::vector<FlatBufferWriter::Offset> groups;
  for (const OptimizerGroup &group : checkpoint.optimizerGroups) {
    std::vector<FlatBufferWriter::Offset> states;
    for (const ParameterOptimizerState &state : group.params) {
      FlatBufferWriter::Offset momentums =
          writeTensors(writer, state.momentums);
      FlatBufferWriter::Offset param = writer.string(state.param);
      writer.startTable(); // ParameterOptimizerState
      writer.addReference(0, param);
      writer.addReference(1, momentums);
      states.push_back(writer.endTable());
    }
    FlatBufferWriter::Offset stateVector = writer.referenceVector(states);
    FlatBufferWriter::Offset name = writer.string(group.name);
    writer.startTable(); // OptimizerGroup
    writer.addScalar<int64_t>(1, group.step);
    writer.addReference(0, name);
    writer.addScalar<float>(2, group.initialLearningRate);
    writer.addReference(3, stateVector);
    groups.push_back(writer.endTable());
  }
  FlatBufferWriter::Offset groupVector = writer.referenceVector(groups);

  std::optional<FlatBufferWriter::Offset> propertyBag;
  if (!checkpoint.properties.empty()) {
    const PropertyBag &bag = checkpoint.properties;
    auto writeProperties = [&](auto &list, auto addValue) {
      std::vector<FlatBufferWriter::Offset> entries;
      for (const auto &[name, value] : list) {
        FlatBufferWriter::Offset nameAt = writer.string(name);
        entries.push_back(addValue(nameAt, value));
      }
      return writer.referenceVector(entries);
    };
    FlatBufferWriter::Offset ints = writeProperties(
        bag.ints, [&](FlatBufferWriter::Offset name, int64_t value) {
          writer.startTable();
          writer.addScalar<int64_t>(1, value);
          writer.addReference(0, name);
          return writer.endTable();
        });
    FlatBufferWriter::Offset floats = writeProperties(
        bag.floats, [&](FlatBufferWriter::Offset name, float value) {
          writer.startTable();
          writer.addReference(0, name);
          writer.addScalar<float>(1, value);
          return writer.endTable();
        });
    FlatBufferWriter::Offset strings =
        writeProperties(bag.strings, [&](FlatBufferWriter::Offset name,
                                         const std::string &value) {
          FlatBufferWriter::Offset valueAt = writer.string(value);
          writer.startTable();
          writer.addReference(0, name);
          writer.addReference(1, valueAt);
          return writer.endTable();
        });
    writer.startTable(); // PropertyBag
    writer.addReference(0, ints);
    writer.addReference(1, floats);
    writer.addReference(2, strings);
    propertyBag = writer.endTable();
  }

  writer.startTable(); // Checkpoint
  writer.addScalar<int32_t>(0, kCheckpointVersion);
  writer.addReference(1, moduleState);
  writer.addReference(2, groupVector);
  if (propertyBag)
    writer.addReference(3, *propertyBag);
  FlatBufferWriter::Offset root = writer.endTable();
  return writer.finish(root, "ODTC");
}
