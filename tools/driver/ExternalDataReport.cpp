//===- ExternalDataReport.cpp - Which external weights a run left unread --===//
//
// Walks a module's initializers, input defaults and tensor attributes
// (Constant nodes' values) for lazy external tensors that were never
// loaded, stats each referenced file once (never opening it), and formats
// the list as a note and as JSON.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/ExternalDataReport.h"

#include "ir/Module.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;

std::vector<UnreadExternalTensor>
gmopt::findUnreadExternalData(const Module &module) {
  std::vector<UnreadExternalTensor> unread;
  llvm::StringMap<bool> present;
  auto visit = [&](const TensorData &data, llvm::StringRef name,
                   llvm::StringRef node) {
    const ExternalDataRef *ref = data.getExternalRef();
    if (!ref || data.isLoaded())
      return;
    UnreadExternalTensor tensor;
    tensor.name = name.str();
    tensor.node = node.str();
    tensor.bytes = data.getSizeInBytes();
    llvm::SmallString<256> path(data.getExternalSource()
                                    ? data.getExternalSource()->getBaseDir()
                                    : llvm::StringRef());
    llvm::sys::path::append(path, ref->location);
    tensor.path = path.str().str();
    tensor.offset = ref->offset;
    auto [it, inserted] = present.try_emplace(tensor.path, false);
    if (inserted)
      it->second = llvm::sys::fs::exists(tensor.path);
    tensor.filePresent = it->second && !data.failedToLoad();
    unread.push_back(std::move(tensor));
  };
  const Graph &graph = module.getGraph();
  for (const std::unique_ptr<Value> &input : graph.getInputs())
    if (input->hasData())
      visit(input->getData(), input->getName(), "");
  for (const std::unique_ptr<Value> &init : graph.getInitializers())
    if (init->hasData())
      visit(init->getData(), init->getName(), "");
  // Tensor attributes: a Constant node's value (named by its result) that
  // no pass turned into an initializer.
  for (const Node &node : graph.getNodes())
    for (const NamedAttribute &attr : node.getAttrs()) {
      if (attr.value.getKind() != Attribute::Kind::Tensor)
        continue;
      const Value *result =
          node.getNumResults() == 1 ? node.getResult(0) : nullptr;
      bool isConstant = node.isa(kOnnxDomain, "Constant") && result;
      visit(attr.value.getTensor(),
            isConstant ? result->getName() : llvm::StringRef(attr.name),
            node.describe());
    }
  return unread;
}

void gmopt::printUnreadExternalDataNote(
    llvm::raw_ostream &os, llvm::StringRef tool,
    llvm::ArrayRef<UnreadExternalTensor> tensors, unsigned maxLines) {
  if (tensors.empty())
    return;
  uint64_t totalBytes = 0;
  llvm::StringSet<> missingFiles;
  for (const UnreadExternalTensor &tensor : tensors) {
    totalBytes += tensor.bytes;
    if (!tensor.filePresent)
      missingFiles.insert(tensor.path);
  }
  os << tool << ": note: " << tensors.size() << " external-data tensor"
     << (tensors.size() == 1 ? "" : "s") << " (" << totalBytes
     << " bytes) were not read";
  if (!missingFiles.empty())
    os << ", " << missingFiles.size() << " of their files "
       << (missingFiles.size() == 1 ? "is" : "are") << " missing";
  os << "; gmopt-run maps them when it runs the model\n";
  unsigned shown = 0;
  for (const UnreadExternalTensor &tensor : tensors) {
    if (shown == maxLines)
      break;
    os << "  " << tensor.name;
    if (!tensor.node.empty())
      os << " (node " << tensor.node << ")";
    os << ": " << tensor.bytes << " bytes at offset " << tensor.offset << " of "
       << tensor.path << (tensor.filePresent ? "" : " (missing)") << '\n';
    ++shown;
  }
  if (shown < tensors.size())
    os << "  ... and " << (tensors.size() - shown) << " more\n";
}

llvm::json::Object
gmopt::unreadExternalDataJson(llvm::ArrayRef<UnreadExternalTensor> tensors) {
  uint64_t totalBytes = 0;
  llvm::StringSet<> missingFiles;
  llvm::json::Array list;
  for (const UnreadExternalTensor &tensor : tensors) {
    totalBytes += tensor.bytes;
    if (!tensor.filePresent)
      missingFiles.insert(tensor.path);
    llvm::json::Object entry{{"name", tensor.name},
                             {"bytes", tensor.bytes},
                             {"file", tensor.path},
                             {"offset", tensor.offset},
                             {"file_present", tensor.filePresent}};
    if (!tensor.node.empty())
      entry["node"] = tensor.node;
    list.push_back(std::move(entry));
  }
  return llvm::json::Object{
      {"unread_tensors", static_cast<uint64_t>(tensors.size())},
      {"unread_bytes", totalBytes},
      {"missing_files", static_cast<uint64_t>(missingFiles.size())},
      {"tensors", std::move(list)}};
}
