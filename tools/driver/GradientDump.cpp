//===- GradientDump.cpp - gmopt-run --dump-gradients ----------------------===//
//
// Writes one step's gradients as NumPy `.npy` files and a JSON manifest
// (format in GradientDump.h), through the run's OutputFileSet so that they
// appear all together, with the run's other outputs, or not at all.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/GradientDump.h"

#include "ir/Half.h"
#include "ir/ZeroSharding.h"
#include "ir/serialization/FileIO.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/EndianStream.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace gmopt;

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// NumPy's name of \p type where the dump supports it, else empty.
llvm::StringRef numpyDTypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "float32";
  case DType::F64:
    return "float64";
  case DType::F16:
    return "float16";
  case DType::BF16:
    return "bfloat16";
  default:
    return "";
  }
}

/// The longest file-name stem kept from a parameter name: room for `-N`
/// and `.npy` under the 255 bytes file systems allow.
constexpr size_t kMaxStemBytes = 200;

} // namespace

llvm::Expected<std::string> gmopt::encodeNpy(const TensorData &tensor,
                                             llvm::StringRef name) {
  const TensorType &type = tensor.getType();
  DType dtype = type.getDType();
  if (numpyDTypeName(dtype).empty())
    return makeError("the gradient of '" + name + "' is " + type.str() +
                     "; --dump-gradients writes float32, float64, float16 "
                     "and bfloat16 gradients only");
  if (!type.hasStaticShape())
    return makeError("the gradient of '" + name + "' has no static shape");
  if (llvm::Error err = tensor.load())
    return err;
  llvm::ArrayRef<uint8_t> bytes = tensor.getBytes();
  uint64_t elements = type.getNumElements();
  if (bytes.size() != dtypeStorageBytes(dtype, elements))
    return makeError("the gradient of '" + name + "' holds " +
                     llvm::Twine(bytes.size()) + " bytes, not the " +
                     llvm::Twine(dtypeStorageBytes(dtype, elements)) + " of " +
                     type.str());

  // The header: a Python dict literal, padded with spaces and ended by a
  // newline so that the data starts at a multiple of 64 bytes (NumPy's
  // alignment; format 1.0 needs 16).
  llvm::StringRef descr = dtype == DType::F64   ? "<f8"
                          : dtype == DType::F16 ? "<f2"
                                                : "<f4";
  std::string shape = "(";
  for (int64_t extent : type.getStaticShape())
    shape += llvm::formatv("{0}, ", extent).str();
  if (shape.size() > 1) {
    shape.pop_back(); // "(5," for one dimension, "(2, 3)" for two.
    if (type.getStaticShape().size() > 1)
      shape.pop_back();
  }
  shape += ")";
  std::string header = "{'descr': '" + descr.str() +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // "\x93NUMPY", then the format version 1.0.
  static constexpr char kMagic[] = "\x93NUMPY\x01\x00";
  constexpr size_t kMagicBytes = sizeof(kMagic) - 1;
  size_t unpadded = kMagicBytes + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';

  std::string out;
  llvm::raw_string_ostream os(out);
  os.write(kMagic, kMagicBytes);
  llvm::support::endian::write<uint16_t>(os, uint16_t(header.size()),
                                         llvm::endianness::little);
  os << header;
  if (dtype == DType::BF16) {
    // NumPy has no bfloat16: widened to float32, which holds it exactly.
    for (uint64_t i = 0; i != elements; ++i) {
      uint16_t bits = llvm::support::endian::read<uint16_t>(
          bytes.data() + 2 * i, llvm::endianness::little);
      llvm::support::endian::write<float>(os, bfloat16ToFloat(bits),
                                          llvm::endianness::little);
    }
  } else {
    // gmopt keeps tensors in ONNX's raw_data layout: little-endian.
    os << llvm::toStringRef(bytes);
  }
  return out;
}

std::vector<std::string>
gmopt::gradientFileNames(llvm::ArrayRef<std::string> names) {
  std::vector<std::string> files;
  llvm::StringSet<> taken;
  for (const std::string &name : names) {
    std::string stem;
    for (char c : llvm::StringRef(name).take_front(kMaxStemBytes))
      stem += llvm::isAlnum(c) || c == '.' || c == '_' || c == '-' ? c : '_';
    if (stem.empty())
      stem = "_";
    if (stem.front() == '.')
      stem.front() = '_';
    // Compared in lower case: two names differing only in case would be
    // one file on a case-insensitive file system.
    std::string file = stem + ".npy";
    for (unsigned n = 2; !taken.insert(llvm::StringRef(file).lower()).second;
         ++n)
      file = llvm::formatv("{0}-{1}.npy", stem, n).str();
    files.push_back(std::move(file));
  }
  return files;
}

llvm::Expected<GradientDump> GradientDump::open(llvm::StringRef directory) {
  if (directory == "-")
    return makeError("--dump-gradients takes a directory, not '-'");
  llvm::sys::fs::file_status status;
  std::error_code statError = llvm::sys::fs::status(directory, status);
  if (!statError) {
    if (!llvm::sys::fs::is_directory(status))
      return makeError(directory +
                       ": --dump-gradients needs a directory, and this is "
                       "not one");
    if (std::error_code ec =
            llvm::sys::fs::access(directory, llvm::sys::fs::AccessMode::Write))
      return makeError(directory +
                       ": the --dump-gradients directory is not "
                       "writable: " +
                       ec.message());
    return GradientDump(directory.str(), /*created=*/false);
  }
  if (statError != std::errc::no_such_file_or_directory)
    return makeError(directory +
                     ": cannot use it as the --dump-gradients "
                     "directory: " +
                     statError.message());
  if (std::error_code ec = llvm::sys::fs::create_directory(directory))
    return makeError(
        directory +
        ": cannot create the --dump-gradients directory: " + ec.message());
  return GradientDump(directory.str(), /*created=*/true);
}

std::string GradientDump::pathOf(llvm::StringRef fileName) const {
  llvm::SmallString<256> path(directory);
  llvm::sys::path::append(path, fileName);
  return std::string(path);
}

llvm::Error GradientDump::checkDumpable(const Module &module) {
  // ZeRO reduce-scatters the gradients: each rank ends with the reduced
  // shard it updates, beside (stage 1) its own unreduced gradient, or
  // (stage 2) nothing more.
  if (std::optional<ZeroShardingRecord> zero = readZeroSharding(module);
      zero && zero->stage >= 1)
    return makeError(llvm::formatv("--dump-gradients: the module keeps no "
                                   "whole reduced gradient (ZeRO stage {0} "
                                   "leaves each rank the shard it updates); "
                                   "compile with --zero 0 to dump them",
                                   zero->stage)
                         .str());
  if (llvm::none_of(module.getSignature().getParams(),
                    [](const ParamInfo &param) { return param.trainable; }))
    return makeError("--dump-gradients: the module has no trainable "
                     "parameter, so there is no gradient to dump");
  return llvm::Error::success();
}

llvm::Error GradientDump::reserve(const Module &module,
                                  OutputFileSet &outputs) {
  if (llvm::Error err = checkDumpable(module))
    return err;
  std::vector<std::string> names;
  for (const ParamInfo &param : module.getSignature().getParams())
    if (param.trainable)
      names.push_back(param.param->getName().str());
  std::vector<std::string> fileNames = gradientFileNames(names);
  files.clear();
  for (size_t i = 0; i != names.size(); ++i) {
    if (llvm::Error err =
            outputs.reserve(pathOf(fileNames[i]), "--dump-gradients"))
      return err;
    files.emplace_back(names[i], fileNames[i]);
  }
  return outputs.reserve(pathOf("manifest.json"), "--dump-gradients");
}

llvm::Error GradientDump::write(
    llvm::ArrayRef<std::pair<std::string, TensorData>> gradients,
    const GradientDumpRun &run, OutputFileSet &outputs) const {
  llvm::json::Array entries;
  for (const auto &file : files) {
    // Named copies: a lambda cannot capture a structured binding in C++17.
    const std::string &name = file.first;
    const auto &fileName = file.second;
    const auto *found = llvm::find_if(
        gradients, [&](const auto &entry) { return entry.first == name; });
    if (found == gradients.end())
      return makeError("--dump-gradients: the run read no gradient of '" +
                       name + "'");
    const TensorData &gradient = found->second;
    auto bytes = encodeNpy(gradient, name);
    if (!bytes)
      return bytes.takeError();
    if (llvm::Error err = outputs.write(pathOf(fileName), *bytes))
      return err;
    llvm::json::Array shape;
    for (int64_t extent : gradient.getType().getStaticShape())
      shape.push_back(extent);
    entries.push_back(llvm::json::Object{
        {"name", name},
        {"file", fileName},
        {"dtype", numpyDTypeName(gradient.getType().getDType())},
        {"shape", std::move(shape)}});
  }
  llvm::json::Object manifest{{"format", "gmopt-gradients"},
                              {"version", 1},
                              {"model", run.model},
                              {"backend", run.backend},
                              {"pipeline", run.pipeline},
                              {"micro_steps", int64_t(run.microSteps)},
                              {"loss", std::isfinite(run.loss)
                                           ? llvm::json::Value(run.loss)
                                           : llvm::json::Value(nullptr)},
                              {"gradients", std::move(entries)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest))) << "\n";
  return outputs.write(pathOf("manifest.json"), text);
}

void GradientDump::removeIfCreatedAndEmpty() const {
  // remove() of a directory is rmdir: it fails, leaving it, unless empty.
  if (created)
    (void)llvm::sys::fs::remove(directory);
}
