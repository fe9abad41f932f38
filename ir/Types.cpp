//===- Types.cpp - Element types, dimensions and tensor types -------------===//
//
// Sizes, names and printing of DType, Dim and TensorType. The printed form is
// HLO-like (`f32[batch,784]`) and is parsed back by the text parser.
//
//===----------------------------------------------------------------------===//

#include "ir/Types.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cassert>
#include <cctype>

using namespace gmopt;

unsigned gmopt::dtypeSize(DType type) {
  switch (type) {
  case DType::Undefined:
  case DType::String:
    return 0;
  case DType::F32:
  case DType::I32:
  case DType::U32:
    return 4;
  case DType::U8:
  case DType::I8:
  case DType::Bool:
  case DType::F8E4M3FN:
  case DType::F8E4M3FNUZ:
  case DType::F8E5M2:
  case DType::F8E5M2FNUZ:
  case DType::U4:
  case DType::I4:
    return 1;
  case DType::U16:
  case DType::I16:
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::I64:
  case DType::U64:
  case DType::F64:
  case DType::C64:
    return 8;
  case DType::C128:
    return 16;
  }
  llvm_unreachable("unknown dtype");
}

uint64_t gmopt::dtypeStorageBytes(DType type, uint64_t numElements) {
  // Saturating, like getNumElements: a size computed from a shape that no
  // loader would accept (ir/SizeLimits.h) must not wrap to a small one.
  if (type == DType::U4 || type == DType::I4)
    return numElements / 2 + numElements % 2;
  return llvm::SaturatingMultiply(numElements, uint64_t(dtypeSize(type)));
}

namespace {
struct DTypeName {
  DType type;
  llvm::StringLiteral name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::Undefined, "undef"},
    {DType::F32, "f32"},
    {DType::U8, "u8"},
    {DType::I8, "i8"},
    {DType::U16, "u16"},
    {DType::I16, "i16"},
    {DType::I32, "i32"},
    {DType::I64, "i64"},
    {DType::String, "string"},
    {DType::Bool, "bool"},
    {DType::F16, "f16"},
    {DType::F64, "f64"},
    {DType::U32, "u32"},
    {DType::U64, "u64"},
    {DType::C64, "c64"},
    {DType::C128, "c128"},
    {DType::BF16, "bf16"},
    {DType::F8E4M3FN, "f8e4m3fn"},
    {DType::F8E4M3FNUZ, "f8e4m3fnuz"},
    {DType::F8E5M2, "f8e5m2"},
    {DType::F8E5M2FNUZ, "f8e5m2fnuz"},
    {DType::U4, "u4"},
    {DType::I4, "i4"},
};
} // namespace

llvm::StringRef gmopt::dtypeName(DType type) {
  for (const DTypeName &entry : kDTypeNames)
    if (entry.type == type)
      return entry.name;
  llvm_unreachable("unknown dtype");
}

std::optional<DType> gmopt::parseDType(llvm::StringRef name) {
  for (const DTypeName &entry : kDTypeNames)
    if (entry.name == name)
      return entry.type;
  return std::nullopt;
}

std::optional<DType> gmopt::dtypeFromOnnx(int64_t onnxType) {
  if (onnxType < 0 || onnxType > static_cast<int64_t>(kMaxDType))
    return std::nullopt;
  return static_cast<DType>(onnxType);
}

bool gmopt::isFloatingPoint(DType type) {
  switch (type) {
  case DType::F32:
  case DType::F16:
  case DType::BF16:
  case DType::F64:
  case DType::F8E4M3FN:
  case DType::F8E4M3FNUZ:
  case DType::F8E5M2:
  case DType::F8E5M2FNUZ:
    return true;
  default:
    return false;
  }
}

bool gmopt::isInteger(DType type) {
  switch (type) {
  case DType::U8:
  case DType::I8:
  case DType::U16:
  case DType::I16:
  case DType::I32:
  case DType::I64:
  case DType::U32:
  case DType::U64:
  case DType::U4:
  case DType::I4:
    return true;
  default:
    return false;
  }
}

int64_t Dim::getExtent() const {
  assert(isStatic() && "extent of a non-static dimension");
  return extent;
}

TensorType::TensorType(DType dtype, llvm::ArrayRef<Dim> dims)
    : dtype(dtype), ranked(true), dims(dims.begin(), dims.end()) {}

TensorType TensorType::get(DType dtype, llvm::ArrayRef<int64_t> shape) {
  llvm::SmallVector<Dim, 4> dims;
  for (int64_t extent : shape) {
    assert(extent >= 0 && "negative static extent");
    dims.push_back(Dim::fixed(extent));
  }
  return TensorType(dtype, dims);
}

unsigned TensorType::getRank() const {
  assert(ranked && "rank of an unranked type");
  return dims.size();
}

bool TensorType::hasStaticShape() const {
  if (!ranked)
    return false;
  for (const Dim &d : dims)
    if (!d.isStatic())
      return false;
  return true;
}

llvm::SmallVector<int64_t, 4> TensorType::getStaticShape() const {
  assert(hasStaticShape() && "static shape of a dynamic type");
  llvm::SmallVector<int64_t, 4> shape;
  for (const Dim &d : dims)
    shape.push_back(d.getExtent());
  return shape;
}

uint64_t TensorType::getNumElements() const {
  assert(hasStaticShape() && "element count of a dynamic type");
  // Saturates at UINT64_MAX instead of wrapping (see ir/SizeLimits.h).
  uint64_t count = 1;
  for (const Dim &d : dims)
    count =
        llvm::SaturatingMultiply(count, static_cast<uint64_t>(d.getExtent()));
  return count;
}

uint64_t TensorType::getSizeInBytes() const {
  return dtypeStorageBytes(dtype, getNumElements());
}

/// Symbols print bare when they look like identifiers, quoted otherwise.
static bool isBareSymbol(llvm::StringRef s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      return false;
  return true;
}

void TensorType::print(llvm::raw_ostream &os) const {
  os << dtypeName(dtype) << '[';
  if (!ranked) {
    os << "*]";
    return;
  }
  for (unsigned i = 0, e = dims.size(); i != e; ++i) {
    if (i)
      os << ',';
    const Dim &d = dims[i];
    if (d.isStatic()) {
      os << d.getExtent();
    } else if (d.isSymbolic()) {
      if (isBareSymbol(d.getSymbol())) {
        os << d.getSymbol();
      } else {
        os << '"';
        os.write_escaped(d.getSymbol());
        os << '"';
      }
    } else {
      os << '?';
    }
  }
  os << ']';
}

std::string TensorType::str() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  print(os);
  return os.str();
}

llvm::raw_ostream &gmopt::operator<<(llvm::raw_ostream &os,
                                     const TensorType &type) {
  type.print(os);
  return os;
}
