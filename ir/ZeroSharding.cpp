//===- ZeroSharding.cpp - The record of a ZeRO-sharded training step ------===//
//
// Writes and parses the metadata entries described in ZeroSharding.h: one
// `key=value` list per entry, separated by `;`, lists inside by `,`.
//
//===----------------------------------------------------------------------===//

#include "ir/ZeroSharding.h"
#include "ir/Collectives.h"
#include "ir/Module.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>

using namespace gmopt;

namespace {

constexpr llvm::StringLiteral kZeroKey = "gmopt.zero";
constexpr llvm::StringLiteral kBucketPrefix = "gmopt.zero.bucket.";

std::string joinNames(const std::vector<std::string> &names) {
  return llvm::join(names, ",");
}

std::vector<std::string> splitNames(llvm::StringRef text) {
  std::vector<std::string> names;
  llvm::SmallVector<llvm::StringRef, 8> parts;
  text.split(parts, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef part : parts)
    names.push_back(part.str());
  return names;
}

/// The value of `key=` in \p text, or nullopt.
std::optional<llvm::StringRef> field(llvm::StringRef text,
                                     llvm::StringRef key) {
  llvm::SmallVector<llvm::StringRef, 8> parts;
  text.split(parts, ';');
  for (llvm::StringRef part : parts) {
    auto [name, value] = part.split('=');
    if (name == key)
      return value;
  }
  return std::nullopt;
}

std::optional<int64_t> intField(llvm::StringRef text, llvm::StringRef key) {
  auto value = field(text, key);
  int64_t number = 0;
  if (!value || value->getAsInteger(10, number))
    return std::nullopt;
  return number;
}

} // namespace

void gmopt::recordZeroSharding(Module &module,
                               const ZeroShardingRecord &record) {
  auto &metadata = module.metadata;
  llvm::erase_if(metadata, [](const auto &entry) {
    return entry.first == kZeroKey ||
           llvm::StringRef(entry.first).starts_with(kBucketPrefix);
  });
  metadata.emplace_back(
      kZeroKey.str(), "stage=" + std::to_string(record.stage) +
                          ";ranks=" + std::to_string(record.ranks) +
                          ";buckets=" + std::to_string(record.buckets.size()));
  for (size_t b = 0, e = record.buckets.size(); b != e; ++b) {
    const ZeroBucketRecord &bucket = record.buckets[b];
    metadata.emplace_back(kBucketPrefix.str() + std::to_string(b),
                          "elements=" + std::to_string(bucket.elements) +
                              ";shard=" + std::to_string(bucket.shardElements) +
                              ";params=" + joinNames(bucket.params) +
                              ";gradient=" + bucket.gradientShard +
                              ";state=" + joinNames(bucket.stateShards));
  }
}

std::optional<ZeroShardingRecord>
gmopt::readZeroSharding(const Module &module) {
  const std::string *header = nullptr;
  for (const auto &entry : module.metadata)
    if (entry.first == kZeroKey)
      header = &entry.second;
  if (!header)
    return std::nullopt;
  ZeroShardingRecord record;
  auto stage = intField(*header, "stage");
  auto ranks = intField(*header, "ranks");
  auto buckets = intField(*header, "buckets");
  if (!stage || !ranks || !buckets || *buckets < 0)
    return std::nullopt;
  record.stage = *stage;
  record.ranks = *ranks;
  record.buckets.resize(size_t(*buckets));
  for (const auto &entry : module.metadata) {
    llvm::StringRef key = entry.first;
    if (!key.consume_front(kBucketPrefix))
      continue;
    size_t index = 0;
    if (key.getAsInteger(10, index) || index >= record.buckets.size())
      return std::nullopt;
    ZeroBucketRecord &bucket = record.buckets[index];
    auto elements = intField(entry.second, "elements");
    auto shard = intField(entry.second, "shard");
    if (!elements || !shard)
      return std::nullopt;
    bucket.elements = *elements;
    bucket.shardElements = *shard;
    bucket.params = splitNames(field(entry.second, "params").value_or(""));
    bucket.gradientShard = field(entry.second, "gradient").value_or("").str();
    bucket.stateShards = splitNames(field(entry.second, "state").value_or(""));
  }
  return record;
}

DataParallelLayout gmopt::getDataParallelLayout(const Module &module) {
  DataParallelLayout layout;
  if (std::optional<ZeroShardingRecord> record = readZeroSharding(module)) {
    layout.ranks = record->ranks;
    layout.stage = record->stage;
    return layout;
  }
  for (const Node &node : module.getGraph().getNodes())
    if (isCommunicatingCollective(node))
      layout.ranks = std::max(layout.ranks, node.getIntAttr("ranks", 1));
  return layout;
}
