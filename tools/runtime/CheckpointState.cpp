//===- CheckpointState.cpp - Parameters, optimizer state, properties ------===//
//
// ONNX Runtime's CheckpointState over gmopt's checkpoint readers and writer
// (tools/runtime/Checkpoint.h): load a checkpoint, keep its properties, and
// save it again, reading the attached session's live values when there is
// one.
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/SessionImpl.h"

#include "tools/runtime/HostTensorData.h"

#include "tools/driver/ToolSupport.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;

namespace {

llvm::Error makeStateError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The checkpoint file \p path names: the path itself, or the `checkpoint`
/// file of a directory.
std::string checkpointFile(llvm::StringRef path) {
  if (!llvm::sys::fs::is_directory(path))
    return path.str();
  llvm::SmallString<256> file(path);
  llvm::sys::path::append(file, "checkpoint");
  return std::string(file);
}

/// Removes property \p name from every list of \p bag.
template <typename T>
void eraseNamed(std::vector<std::pair<std::string, T>> &list,
                llvm::StringRef name) {
  llvm::erase_if(list, [&](const auto &entry) { return entry.first == name; });
}

} // namespace

NamedTensor *CheckpointState::Impl::lookupParameter(llvm::StringRef name,
                                                    bool *isTrainable) {
  for (auto [list, flag] : {std::pair{&checkpoint.trainable, true},
                            std::pair{&checkpoint.frozen, false}})
    for (NamedTensor &tensor : *list)
      if (tensor.name == name) {
        if (isTrainable)
          *isTrainable = flag;
        return &tensor;
      }
  return nullptr;
}

CheckpointState::CheckpointState() : impl(std::make_shared<Impl>()) {}
CheckpointState::~CheckpointState() = default;
CheckpointState::CheckpointState(const CheckpointState &) = default;
CheckpointState &CheckpointState::operator=(const CheckpointState &) = default;

llvm::Expected<CheckpointState> CheckpointState::load(llvm::StringRef path) {
  std::string file = checkpointFile(path);
  auto buffer = readInputFile(file);
  if (!buffer)
    return buffer.takeError();
  llvm::StringRef bytes = (*buffer)->getBuffer();
  CheckpointState state;
  // ONNX Runtime's FlatBuffers checkpoint keeps its parameters apart by
  // requires_grad; the other files hold parameters only.
  if (bytes.size() >= 8 && bytes.substr(4, 4) == "ODTC") {
    auto checkpoint = parseOrtCheckpoint(bytes, file);
    if (!checkpoint)
      return checkpoint.takeError();
    state.impl->checkpoint = std::move(*checkpoint);
    return state;
  }
  auto weights = readWeightFile(file);
  if (!weights)
    return weights.takeError();
  state.impl->checkpoint.trainable = std::move(weights->tensors);
  return state;
}

llvm::Error CheckpointState::save(llvm::StringRef path,
                                  bool includeOptimizerState) const {
  OrtCheckpoint checkpoint;
  if (impl->session) {
    auto snapshot = impl->session->impl->snapshot(includeOptimizerState);
    if (!snapshot)
      return snapshot.takeError();
    checkpoint = std::move(*snapshot);
  } else {
    checkpoint = impl->checkpoint;
    if (!includeOptimizerState)
      checkpoint.optimizerGroups.clear();
  }
  std::string file = checkpointFile(path);
  std::error_code ec;
  llvm::raw_fd_ostream os(file, ec, llvm::sys::fs::OF_None);
  if (ec)
    return makeStateError(file + ": " + ec.message());
  os << writeOrtCheckpoint(checkpoint);
  os.close();
  if (os.has_error())
    return makeStateError(file + ": " + os.error().message());
  return llvm::Error::success();
}

void CheckpointState::addProperty(llvm::StringRef name, PropertyValue value) {
  PropertyBag &bag = impl->checkpoint.properties;
  eraseNamed(bag.ints, name);
  eraseNamed(bag.floats, name);
  eraseNamed(bag.strings, name);
  if (auto *integer = std::get_if<int64_t>(&value))
    bag.ints.emplace_back(name.str(), *integer);
  else if (auto *real = std::get_if<float>(&value))
    bag.floats.emplace_back(name.str(), *real);
  else
    bag.strings.emplace_back(name.str(), std::get<std::string>(value));
}

llvm::Expected<PropertyValue>
CheckpointState::getProperty(llvm::StringRef name) const {
  const PropertyBag &bag = impl->checkpoint.properties;
  for (const auto &entry : bag.ints)
    if (entry.first == name)
      return PropertyValue(entry.second);
  for (const auto &entry : bag.floats)
    if (entry.first == name)
      return PropertyValue(entry.second);
  for (const auto &entry : bag.strings)
    if (entry.first == name)
      return PropertyValue(entry.second);
  return makeStateError("the checkpoint state has no property '" + name + "'");
}

bool CheckpointState::hasProperty(llvm::StringRef name) const {
  auto value = getProperty(name);
  if (value)
    return true;
  llvm::consumeError(value.takeError());
  return false;
}

std::vector<std::string> CheckpointState::getPropertyNames() const {
  const PropertyBag &bag = impl->checkpoint.properties;
  std::vector<std::string> names;
  for (const auto &entry : bag.ints)
    names.push_back(entry.first);
  for (const auto &entry : bag.floats)
    names.push_back(entry.first);
  for (const auto &entry : bag.strings)
    names.push_back(entry.first);
  return names;
}

std::vector<std::string> CheckpointState::getParameterNames() const {
  if (impl->session)
    return impl->session->parameterNames(false);
  std::vector<std::string> names;
  for (const NamedTensor &tensor : impl->checkpoint.trainable)
    names.push_back(tensor.name);
  for (const NamedTensor &tensor : impl->checkpoint.frozen)
    names.push_back(tensor.name);
  return names;
}

llvm::Expected<bool> CheckpointState::isTrainable(llvm::StringRef name) const {
  if (impl->session) {
    std::vector<std::string> all = impl->session->parameterNames(false);
    if (!llvm::is_contained(all, name))
      return makeStateError("no parameter '" + name + "'");
    return llvm::is_contained(impl->session->parameterNames(true), name);
  }
  bool trainable = false;
  if (!impl->lookupParameter(name, &trainable))
    return makeStateError("no parameter '" + name + "'");
  return trainable;
}

llvm::Expected<HostTensor>
CheckpointState::getParameter(llvm::StringRef name) const {
  if (impl->session)
    return impl->session->getParameter(name);
  NamedTensor *tensor = impl->lookupParameter(name, nullptr);
  if (!tensor)
    return makeStateError("no parameter '" + name + "'");
  return toHostTensor(tensor->data);
}

llvm::Error CheckpointState::updateParameter(llvm::StringRef name,
                                             const HostTensor &value) {
  if (impl->session)
    return impl->session->setParameter(name, value);
  NamedTensor *tensor = impl->lookupParameter(name, nullptr);
  if (!tensor)
    return makeStateError("no parameter '" + name + "'");
  TensorData data = toTensorData(value.clone());
  if (data.getType() != tensor->data.getType())
    return makeStateError("parameter '" + name + "' is " +
                          tensor->data.getType().str() + ", not " +
                          value.describe());
  tensor->data = std::move(data);
  return llvm::Error::success();
}

bool CheckpointState::hasOptimizerState() const {
  if (impl->session) {
    auto snapshot = impl->session->impl->snapshot(true);
    if (!snapshot) {
      llvm::consumeError(snapshot.takeError());
      return false;
    }
    return !snapshot->optimizerGroups.empty();
  }
  return !impl->checkpoint.optimizerGroups.empty();
}

TrainingSession *CheckpointState::getSession() const { return impl->session; }
