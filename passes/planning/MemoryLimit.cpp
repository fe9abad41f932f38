//===- MemoryLimit.cpp - Memory limits as users write them ----------------===//

#include "passes/planning/MemoryLimit.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <utility>

using namespace gmopt;

uint64_t MemoryLimit::resolve(uint64_t reference) const {
  return bytes ? *bytes : uint64_t(std::floor(fraction * reference));
}

llvm::Expected<MemoryLimit> gmopt::parseMemoryLimit(llvm::StringRef text,
                                                    llvm::StringRef what) {
  auto bad = [&](const char *why) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: bad limit '%s': %s (expected bytes such as 1073741824, 512MiB "
        "or 2GB, or a percentage such as 60%%)",
        what.str().c_str(), text.str().c_str(), why);
  };
  llvm::StringRef rest = text.trim();
  MemoryLimit limit;
  if (rest.consume_back("%")) {
    double percent;
    if (rest.trim().getAsDouble(percent) || !(percent > 0) || percent > 100)
      return bad("a percentage must be in (0, 100]");
    limit.fraction = percent / 100;
    return limit;
  }
  size_t digits = 0;
  while (digits < rest.size() &&
         (std::isdigit(rest[digits]) || rest[digits] == '.'))
    ++digits;
  double number;
  if (!digits || rest.take_front(digits).getAsDouble(number))
    return bad("no number");
  llvm::StringRef unit = rest.drop_front(digits).trim();
  static const std::pair<const char *, double> units[] = {
      {"", 1},
      {"B", 1},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"TB", 1e12},
      {"KiB", 1024.0},
      {"MiB", 1048576.0},
      {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}};
  for (const auto &entry : units)
    if (unit.equals_insensitive(entry.first)) {
      double bytes = number * entry.second;
      if (!(bytes >= 1) || bytes > 1.8e19)
        return bad("out of range");
      limit.bytes = uint64_t(bytes);
      return limit;
    }
  return bad("unknown unit");
}

std::string gmopt::formatBytes(uint64_t bytes) {
  char buffer[64];
  snprintf(buffer, sizeof buffer, "%llu bytes (%.3f GiB)",
           static_cast<unsigned long long>(bytes), bytes / 1073741824.0);
  return buffer;
}
