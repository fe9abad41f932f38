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

std::string joinShapes(const std::vector<std::vector<int64_t>> &shapes) {
  std::vector<std::string> parts;
  for (const std::vector<int64_t> &shape : shapes) {
    std::vector<std::string> dims;
    for (int64_t dim : shape)
      dims.push_back(std::to_string(dim));
    parts.push_back(dims.empty() ? "scalar" : llvm::join(dims, "x"));
  }
  return joinNames(parts);
}

std::optional<std::vector<std::vector<int64_t>>>
splitShapes(llvm::StringRef text) {
  std::vector<std::vector<int64_t>> shapes;
  for (const std::string &part : splitNames(text)) {
    std::vector<int64_t> shape;
    if (part != "scalar") {
      llvm::SmallVector<llvm::StringRef, 4> dims;
      llvm::StringRef(part).split(dims, 'x');
      for (llvm::StringRef dim : dims) {
        int64_t value = 0;
        if (dim.getAsInteger(10, value) || value < 0)
          return std::nullopt;
        shape.push_back(value);
      }
    }
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

llvm::Error groupError(const ZeroShardGroup &group, const llvm::Twine &what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "ZeRO shard '" + group.shard + "': " + what);
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
    std::vector<std::string> perState;
    for (const std::vector<std::string> &names : bucket.wholeStates)
      perState.push_back(joinNames(names));
    std::string wholeStates = llvm::join(perState, "|");
    metadata.emplace_back(kBucketPrefix.str() + std::to_string(b),
                          "elements=" + std::to_string(bucket.elements) +
                              ";shard=" + std::to_string(bucket.shardElements) +
                              ";params=" + joinNames(bucket.params) +
                              ";gradient=" + bucket.gradientShard +
                              ";state=" + joinNames(bucket.stateShards) +
                              ";shapes=" + joinShapes(bucket.paramShapes) +
                              ";whole=" + wholeStates);
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
    auto shapes = splitShapes(field(entry.second, "shapes").value_or(""));
    if (!shapes)
      return std::nullopt;
    bucket.paramShapes = std::move(*shapes);
    llvm::SmallVector<llvm::StringRef, 2> perState;
    field(entry.second, "whole")
        .value_or("")
        .split(perState, '|', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef names : perState)
      bucket.wholeStates.push_back(splitNames(names));
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
      layout.ranks = std::max(layout.ranks, getCollectiveRanks(node));
  return layout;
}

llvm::Expected<std::vector<ZeroShardGroup>>
gmopt::getZeroShardGroups(const ZeroShardingRecord &record) {
  std::vector<ZeroShardGroup> groups;
  for (size_t b = 0, e = record.buckets.size(); b != e; ++b) {
    const ZeroBucketRecord &bucket = record.buckets[b];
    if (bucket.stateShards.empty())
      continue;
    int64_t elements = 0;
    for (const std::vector<int64_t> &shape : bucket.paramShapes)
      elements += elementsOf(shape);
    if (bucket.paramShapes.size() != bucket.params.size() ||
        bucket.wholeStates.size() != bucket.stateShards.size() ||
        elements != bucket.elements)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "ZeRO bucket " + llvm::Twine(b) +
              " records no whole state names or shapes (a .gm compiled "
              "before gmopt recorded them: compile it again)");
    for (size_t k = 0, n = bucket.stateShards.size(); k != n; ++k) {
      if (bucket.wholeStates[k].size() != bucket.params.size())
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "ZeRO bucket " + llvm::Twine(b) + " names " +
                llvm::Twine(bucket.wholeStates[k].size()) +
                " whole tensors for state shard '" + bucket.stateShards[k] +
                "' but has " + llvm::Twine(bucket.params.size()) +
                " parameters");
      ZeroShardGroup group;
      group.shard = bucket.stateShards[k];
      group.whole = bucket.wholeStates[k];
      group.shapes = bucket.paramShapes;
      group.shardElements = bucket.shardElements;
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

llvm::Expected<std::vector<float>>
gmopt::sliceZeroShard(const ZeroShardGroup &group, int64_t rank, int64_t ranks,
                      llvm::ArrayRef<llvm::ArrayRef<float>> whole) {
  if (rank < 0 || rank >= ranks)
    return groupError(group, "rank " + llvm::Twine(rank) + " is not in a " +
                                 "world of " + llvm::Twine(ranks));
  if (whole.size() != group.whole.size())
    return groupError(group, "expected " + llvm::Twine(group.whole.size()) +
                                 " whole tensors, got " +
                                 llvm::Twine(whole.size()));
  std::vector<float> shard(size_t(group.shardElements), 0.0f);
  int64_t begin = rank * group.shardElements;
  int64_t end = begin + group.shardElements;
  int64_t offset = 0;
  for (size_t i = 0, e = whole.size(); i != e; ++i) {
    int64_t count = elementsOf(group.shapes[i]);
    if (int64_t(whole[i].size()) != count)
      return groupError(group, "whole tensor '" + group.whole[i] + "' has " +
                                   llvm::Twine(whole[i].size()) +
                                   " elements, expected " + llvm::Twine(count));
    // The part of [offset, offset + count) inside [begin, end).
    int64_t from = std::max(offset, begin), to = std::min(offset + count, end);
    for (int64_t j = from; j < to; ++j)
      shard[size_t(j - begin)] = whole[i][size_t(j - offset)];
    offset += count;
  }
  if (offset > ranks * group.shardElements)
    return groupError(group, llvm::Twine(offset) + " elements do not fit " +
                                 llvm::Twine(ranks) + " shards of " +
                                 llvm::Twine(group.shardElements));
  return shard;
}

llvm::Expected<std::vector<std::vector<float>>>
gmopt::assembleZeroWhole(const ZeroShardGroup &group, int64_t ranks,
                         llvm::ArrayRef<float> gathered) {
  if (int64_t(gathered.size()) != ranks * group.shardElements)
    return groupError(group, "expected " + llvm::Twine(ranks) + " shards of " +
                                 llvm::Twine(group.shardElements) +
                                 " floats, got " +
                                 llvm::Twine(gathered.size()));
  std::vector<std::vector<float>> whole;
  size_t offset = 0;
  for (const std::vector<int64_t> &shape : group.shapes) {
    size_t count = size_t(elementsOf(shape));
    if (offset + count > gathered.size())
      return groupError(group, "the whole tensors need more than the " +
                                   llvm::Twine(gathered.size()) +
                                   " gathered floats");
    whole.emplace_back(gathered.begin() + offset,
                       gathered.begin() + offset + count);
    offset += count;
  }
  return whole;
}
