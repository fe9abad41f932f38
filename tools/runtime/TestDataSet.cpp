//===- TestDataSet.cpp - ONNX test-data directories and tensor files ------===//
//
// Lists a test-data directory, picks out `input_K.pb`/`output_K.pb`, parses
// each as an onnx.TensorProto and converts it with
// ir/serialization/OnnxTensor.h, keeping the name for matching and the number
// for ordering. A set in which two files share a number or a tensor name is
// refused: which one a lookup found would depend on the directory order.
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/TestDataSet.h"

#include "ir/serialization/FileIO.h"
#include "ir/serialization/OnnxTensor.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "onnx/onnx_pb.h"

using namespace gmopt;

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Parses `PREFIX_K.pb` into K; -1 if \p fileName does not have that form.
int64_t fileNumber(llvm::StringRef fileName, llvm::StringRef prefix) {
  if (!fileName.consume_front(prefix) || !fileName.consume_back(".pb") ||
      fileName.empty() || !llvm::all_of(fileName, llvm::isDigit))
    return -1;
  int64_t number;
  if (fileName.getAsInteger(10, number))
    return -1;
  return number;
}

const NamedTensor *findByName(const std::vector<NamedTensor> &tensors,
                              llvm::StringRef name) {
  for (const NamedTensor &tensor : tensors)
    if (!tensor.name.empty() && tensor.name == name)
      return &tensor;
  return nullptr;
}

const NamedTensor *findByIndex(const std::vector<NamedTensor> &tensors,
                               int64_t index) {
  for (const NamedTensor &tensor : tensors)
    if (tensor.index == index)
      return &tensor;
  return nullptr;
}

/// Two files of one kind (sorted by number) with the same number
/// (`input_1.pb`, `input_01.pb`) or holding tensors of the same name would
/// leave the choice between them to the directory order: an error.
llvm::Error checkUnambiguous(const std::vector<NamedTensor> &tensors) {
  llvm::StringMap<const NamedTensor *> byName;
  for (size_t i = 0; i != tensors.size(); ++i) {
    const NamedTensor &tensor = tensors[i];
    if (i && tensors[i - 1].index == tensor.index)
      return makeError(tensors[i - 1].source + " and " + tensor.source +
                       " have the same number " + llvm::Twine(tensor.index));
    if (tensor.name.empty())
      continue;
    auto [it, inserted] = byName.try_emplace(tensor.name, &tensor);
    if (!inserted)
      return makeError(it->second->source + " and " + tensor.source +
                       " both hold a tensor named '" + tensor.name + "'");
  }
  return llvm::Error::success();
}

} // namespace

const NamedTensor *TestDataSet::findInput(llvm::StringRef name) const {
  return findByName(inputs, name);
}
const NamedTensor *TestDataSet::findOutput(llvm::StringRef name) const {
  return findByName(outputs, name);
}
const NamedTensor *TestDataSet::findInputByIndex(int64_t index) const {
  return findByIndex(inputs, index);
}
const NamedTensor *TestDataSet::findOutputByIndex(int64_t index) const {
  return findByIndex(outputs, index);
}

llvm::Expected<NamedTensor> gmopt::readTensorFile(llvm::StringRef path) {
  // A regular file only, read no further than its size.
  auto buffer = readFileBounded(path);
  if (!buffer)
    return buffer.takeError();
  onnx::TensorProto proto;
  llvm::StringRef bytes = (*buffer)->getBuffer();
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return makeError(path + ": not a valid ONNX TensorProto");
  ExternalDataResolver resolver(llvm::sys::path::parent_path(path).str());
  auto data = importTensorStealing(proto, &resolver);
  if (!data)
    return makeError(path + ": " + llvm::toString(data.takeError()));
  NamedTensor tensor;
  tensor.name = proto.name();
  tensor.source = path.str();
  tensor.data = std::move(*data);
  return tensor;
}

llvm::Expected<TestDataSet> gmopt::readTestDataSet(llvm::StringRef directory) {
  if (!llvm::sys::fs::is_directory(directory))
    return makeError(
        directory + ": " +
        (llvm::sys::fs::exists(directory)
             ? "not a directory"
             : std::make_error_code(std::errc::no_such_file_or_directory)
                   .message()));
  TestDataSet set;
  set.directory = directory.str();
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(directory, ec), end;
       it != end && !ec; it.increment(ec)) {
    llvm::StringRef fileName = llvm::sys::path::filename(it->path());
    int64_t inputNumber = fileNumber(fileName, "input_");
    int64_t outputNumber = fileNumber(fileName, "output_");
    if (inputNumber < 0 && outputNumber < 0)
      continue;
    auto tensor = readTensorFile(it->path());
    if (!tensor)
      return tensor.takeError();
    tensor->index = inputNumber >= 0 ? inputNumber : outputNumber;
    (inputNumber >= 0 ? set.inputs : set.outputs).push_back(std::move(*tensor));
  }
  if (ec)
    return makeError(directory + ": cannot list: " + ec.message());
  if (set.inputs.empty() && set.outputs.empty())
    return makeError(directory +
                     ": no input_K.pb or output_K.pb files (expected an ONNX "
                     "test_data_set directory)");
  auto byIndex = [](const NamedTensor &a, const NamedTensor &b) {
    return a.index < b.index || (a.index == b.index && a.source < b.source);
  };
  llvm::sort(set.inputs, byIndex);
  llvm::sort(set.outputs, byIndex);
  for (const std::vector<NamedTensor> *tensors : {&set.inputs, &set.outputs})
    if (llvm::Error err = checkUnambiguous(*tensors))
      return err;
  return set;
}

llvm::Expected<std::vector<TestDataSet>>
gmopt::readTestDataSets(llvm::StringRef directory) {
  if (!llvm::sys::fs::is_directory(directory))
    return readTestDataSet(directory).takeError();
  std::vector<std::pair<int64_t, std::string>> subsets;
  bool hasTensorFiles = false;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(directory, ec), end;
       it != end && !ec; it.increment(ec)) {
    llvm::StringRef fileName = llvm::sys::path::filename(it->path());
    if (fileNumber(fileName, "input_") >= 0 ||
        fileNumber(fileName, "output_") >= 0)
      hasTensorFiles = true;
    int64_t setNumber = -1;
    llvm::StringRef rest = fileName;
    if (rest.consume_front("test_data_set_") && !rest.empty() &&
        !rest.getAsInteger(10, setNumber) && setNumber >= 0 &&
        llvm::sys::fs::is_directory(it->path()))
      subsets.emplace_back(setNumber, it->path());
  }
  if (ec)
    return makeError(directory + ": cannot list: " + ec.message());
  std::vector<TestDataSet> sets;
  if (hasTensorFiles || subsets.empty()) {
    auto set = readTestDataSet(directory);
    if (!set)
      return set.takeError();
    sets.push_back(std::move(*set));
    return sets;
  }
  llvm::sort(subsets);
  for (const auto &[number, path] : subsets) {
    auto set = readTestDataSet(path);
    if (!set)
      return set.takeError();
    sets.push_back(std::move(*set));
  }
  return sets;
}

llvm::Expected<std::vector<TestDataSet>> gmopt::splitTestDataSet(
    const TestDataSet &set, unsigned parts,
    llvm::function_ref<
        std::optional<llvm::SmallVector<int64_t, 4>>(llvm::StringRef)>
        microShapes) {
  std::vector<TestDataSet> result;
  if (parts < 2)
    return result;
  result.assign(parts, TestDataSet());
  bool split = false;
  for (TestDataSet &part : result)
    part.directory = set.directory;
  for (const NamedTensor &tensor : set.inputs) {
    std::optional<llvm::SmallVector<int64_t, 4>> micro =
        microShapes(tensor.name);
    const TensorType &type = tensor.data.getType();
    llvm::SmallVector<int64_t, 4> shape = type.hasStaticShape()
                                              ? type.getStaticShape()
                                              : llvm::SmallVector<int64_t, 4>();
    bool same = micro && shape == *micro;
    bool whole = micro && !micro->empty() && shape.size() == micro->size() &&
                 shape[0] == (*micro)[0] * int64_t(parts) &&
                 std::equal(shape.begin() + 1, shape.end(), micro->begin() + 1);
    if (micro && !same && !whole)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "%s: input '%s' fits neither the micro-batch nor %u of them on "
          "its first axis",
          tensor.source.c_str(), tensor.name.c_str(), parts);
    if (!whole) {
      for (TestDataSet &part : result)
        part.inputs.push_back(tensor);
      continue;
    }
    split = true;
    llvm::ArrayRef<uint8_t> bytes = tensor.data.getBytes();
    size_t partBytes = bytes.size() / parts;
    for (unsigned i = 0; i != parts; ++i) {
      NamedTensor piece = tensor;
      piece.source = tensor.source + " (micro-batch " + std::to_string(i) + ")";
      llvm::ArrayRef<uint8_t> slice = bytes.slice(i * partBytes, partBytes);
      piece.data = TensorData(TensorType::get(type.getDType(), *micro),
                              std::vector<uint8_t>(slice.begin(), slice.end()));
      result[i].inputs.push_back(std::move(piece));
    }
  }
  if (!split)
    result.clear();
  return result;
}
