//===- TextLexer.cpp - Tokens and lexical rules of the text form ----------===//
//
// Turns a text-form buffer into tokens with source locations, and implements
// the lexical conventions (bare names, string escapes, exact float literals)
// that the printer relies on to produce text the parser reads back
// unchanged. The lexer is a plain loop over the buffer: it never recurses,
// never reads past the end and reports malformed input as Error tokens.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/TextLexer.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

using namespace gmopt;
using namespace gmopt::text;

static bool isIdentifierStart(char c) { return llvm::isAlpha(c) || c == '_'; }

static bool isIdentifierChar(char c) {
  return llvm::isAlnum(c) || c == '_' || c == '.';
}

llvm::StringRef text::tokenKindName(TokenKind kind) {
  switch (kind) {
  case TokenKind::Eof:
    return "end of input";
  case TokenKind::Error:
    return "invalid token";
  case TokenKind::Identifier:
    return "identifier";
  case TokenKind::ValueName:
    return "value name";
  case TokenKind::GraphName:
    return "graph name";
  case TokenKind::Integer:
    return "integer";
  case TokenKind::Float:
    return "float";
  case TokenKind::String:
    return "string";
  case TokenKind::LParen:
    return "'('";
  case TokenKind::RParen:
    return "')'";
  case TokenKind::LBracket:
    return "'['";
  case TokenKind::RBracket:
    return "']'";
  case TokenKind::LBrace:
    return "'{'";
  case TokenKind::RBrace:
    return "'}'";
  case TokenKind::Less:
    return "'<'";
  case TokenKind::Greater:
    return "'>'";
  case TokenKind::Comma:
    return "','";
  case TokenKind::Equal:
    return "'='";
  case TokenKind::Colon:
    return "':'";
  case TokenKind::Star:
    return "'*'";
  case TokenKind::Question:
    return "'?'";
  case TokenKind::Minus:
    return "'-'";
  case TokenKind::Dot:
    return "'.'";
  }
  return "token";
}

//===----------------------------------------------------------------------===//
// Lexer
//===----------------------------------------------------------------------===//

Token Lexer::makeToken(TokenKind kind, const char *start) const {
  Token token;
  token.kind = kind;
  token.spelling = llvm::StringRef(start, cur - start);
  return token;
}

Token Lexer::makeError(const char *loc, std::string message) const {
  Token token;
  token.kind = TokenKind::Error;
  // Errors point at one character (or at the end of the buffer).
  token.spelling = llvm::StringRef(loc, loc < buffer.end() ? 1 : 0);
  token.text = std::move(message);
  return token;
}

void Lexer::skipWhitespaceAndComments() {
  const char *end = buffer.end();
  while (cur != end) {
    char c = *cur;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
        c == '\v') {
      ++cur;
      continue;
    }
    if (c == '/' && cur + 1 != end && cur[1] == '/') {
      while (cur != end && *cur != '\n')
        ++cur;
      continue;
    }
    return;
  }
}

Token Lexer::lex() {
  skipWhitespaceAndComments();
  const char *start = cur;
  if (cur == buffer.end())
    return makeToken(TokenKind::Eof, start);

  char c = *cur++;
  switch (c) {
  case '(':
    return makeToken(TokenKind::LParen, start);
  case ')':
    return makeToken(TokenKind::RParen, start);
  case '[':
    return makeToken(TokenKind::LBracket, start);
  case ']':
    return makeToken(TokenKind::RBracket, start);
  case '{':
    return makeToken(TokenKind::LBrace, start);
  case '}':
    return makeToken(TokenKind::RBrace, start);
  case '<':
    return makeToken(TokenKind::Less, start);
  case '>':
    return makeToken(TokenKind::Greater, start);
  case ',':
    return makeToken(TokenKind::Comma, start);
  case '=':
    return makeToken(TokenKind::Equal, start);
  case ':':
    return makeToken(TokenKind::Colon, start);
  case '*':
    return makeToken(TokenKind::Star, start);
  case '?':
    return makeToken(TokenKind::Question, start);
  case '-':
    return makeToken(TokenKind::Minus, start);
  case '.':
    return makeToken(TokenKind::Dot, start);
  case '%':
    return lexValueName(start);
  case '@':
    return lexGraphName(start);
  case '"': {
    std::string contents;
    if (std::optional<Token> error = lexStringBody(start, contents))
      return *error;
    Token token = makeToken(TokenKind::String, start);
    token.text = std::move(contents);
    return token;
  }
  default:
    break;
  }
  if (isIdentifierStart(c))
    return lexIdentifier(start);
  if (llvm::isDigit(c))
    return lexNumber(start);
  std::string message;
  llvm::raw_string_ostream os(message);
  if (llvm::isPrint(c))
    os << "unexpected character '" << c << "'";
  else
    os << "unexpected byte 0x"
       << llvm::format_hex_no_prefix(static_cast<unsigned char>(c), 2,
                                     /*Upper=*/true);
  return makeError(start, os.str());
}

Token Lexer::lexIdentifier(const char *start) {
  while (cur != buffer.end() && isIdentifierChar(*cur))
    ++cur;
  return makeToken(TokenKind::Identifier, start);
}

Token Lexer::lexNumber(const char *start) {
  const char *end = buffer.end();
  if (*start == '0' && cur != end && (*cur == 'x' || *cur == 'X')) {
    ++cur;
    const char *digits = cur;
    while (cur != end && llvm::isHexDigit(*cur))
      ++cur;
    if (cur == digits)
      return makeError(start, "expected hexadecimal digits after '0x'");
    return makeToken(TokenKind::Integer, start);
  }
  while (cur != end && llvm::isDigit(*cur))
    ++cur;
  bool isFloat = false;
  if (cur != end && *cur == '.') {
    isFloat = true;
    ++cur;
    while (cur != end && llvm::isDigit(*cur))
      ++cur;
  }
  if (cur != end && (*cur == 'e' || *cur == 'E')) {
    // Only an exponent if digits follow; otherwise the 'e' starts a word.
    const char *p = cur + 1;
    if (p != end && (*p == '+' || *p == '-'))
      ++p;
    if (p != end && llvm::isDigit(*p)) {
      isFloat = true;
      cur = p;
      while (cur != end && llvm::isDigit(*cur))
        ++cur;
    }
  }
  return makeToken(isFloat ? TokenKind::Float : TokenKind::Integer, start);
}

Token Lexer::lexValueName(const char *start) {
  const char *end = buffer.end();
  Token token;
  if (cur != end && *cur == '"') {
    ++cur;
    std::string name;
    if (std::optional<Token> error = lexStringBody(cur - 1, name))
      return *error;
    token.text = std::move(name);
    token.quoted = true;
  } else {
    const char *nameStart = cur;
    while (cur != end && isValueNameChar(*cur) &&
           !(*cur == '/' && cur + 1 != end && cur[1] == '/'))
      ++cur;
    // A ':' ends a name unless more name characters follow, so that
    // `%x: f32[2]` reads as the name "x" followed by ':'.
    while (cur != nameStart && cur[-1] == ':')
      --cur;
    if (cur == nameStart)
      return makeError(start, "expected value name after '%'");
    token.text = std::string(nameStart, cur);
  }
  if (cur != end && *cur == '#') {
    const char *digits = cur + 1;
    const char *p = digits;
    while (p != end && llvm::isDigit(*p))
      ++p;
    if (p == digits)
      return makeError(cur, "expected digits after '#' in value name");
    token.suffix = llvm::StringRef(digits, p - digits);
    cur = p;
  }
  token.kind = TokenKind::ValueName;
  token.spelling = llvm::StringRef(start, cur - start);
  return token;
}

Token Lexer::lexGraphName(const char *start) {
  const char *end = buffer.end();
  Token token;
  if (cur != end && *cur == '"') {
    ++cur;
    std::string name;
    if (std::optional<Token> error = lexStringBody(cur - 1, name))
      return *error;
    token.text = std::move(name);
    token.quoted = true;
  } else {
    const char *nameStart = cur;
    while (cur != end && isIdentifierChar(*cur))
      ++cur;
    if (cur == nameStart)
      return makeError(start, "expected graph name after '@'");
    token.text = std::string(nameStart, cur);
  }
  token.kind = TokenKind::GraphName;
  token.spelling = llvm::StringRef(start, cur - start);
  return token;
}

std::optional<Token> Lexer::lexStringBody(const char *start, std::string &out) {
  const char *end = buffer.end();
  while (true) {
    if (cur == end || *cur == '\n')
      return makeError(start, "unterminated string literal");
    char c = *cur++;
    if (c == '"')
      return std::nullopt;
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    const char *escape = cur - 1;
    if (cur == end)
      return makeError(start, "unterminated string literal");
    char e = *cur++;
    switch (e) {
    case '\\':
    case '"':
    case '\'':
      out.push_back(e);
      continue;
    case 'n':
      out.push_back('\n');
      continue;
    case 't':
      out.push_back('\t');
      continue;
    case 'r':
      out.push_back('\r');
      continue;
    case 'x': {
      if (end - cur < 2 || !llvm::isHexDigit(cur[0]) ||
          !llvm::isHexDigit(cur[1]))
        return makeError(escape, "expected two hexadecimal digits after '\\x'");
      out.push_back(static_cast<char>(llvm::hexDigitValue(cur[0]) * 16 +
                                      llvm::hexDigitValue(cur[1])));
      cur += 2;
      continue;
    }
    default:
      break;
    }
    if (e >= '0' && e <= '7') {
      // Octal escape of one to three digits, as raw_ostream::write_escaped
      // produces.
      unsigned value = e - '0';
      for (int i = 0; i < 2 && cur != end && *cur >= '0' && *cur <= '7'; ++i)
        value = value * 8 + (*cur++ - '0');
      if (value > 255)
        return makeError(escape, "octal escape out of range");
      out.push_back(static_cast<char>(value));
      continue;
    }
    return makeError(escape, "invalid escape sequence in string literal");
  }
}

//===----------------------------------------------------------------------===//
// Shared lexical conventions
//===----------------------------------------------------------------------===//

bool text::isValueNameChar(char c) {
  return llvm::isAlnum(c) || c == '_' || c == '.' || c == ':' || c == '/' ||
         c == '-';
}

bool text::isBareValueName(llvm::StringRef name) {
  if (name.empty() || name.back() == ':' || name.contains("//"))
    return false;
  bool allDigits = true;
  for (char c : name) {
    if (!isValueNameChar(c))
      return false;
    allDigits &= llvm::isDigit(c);
  }
  return !allDigits;
}

bool text::isBareIdentifier(llvm::StringRef word) {
  if (word.empty() || !isIdentifierStart(word.front()))
    return false;
  return llvm::all_of(word, isIdentifierChar);
}

/// True for `[A-Za-z_][A-Za-z0-9_]*`.
static bool isSimpleWord(llvm::StringRef word) {
  return !word.empty() && isIdentifierStart(word.front()) &&
         llvm::all_of(word,
                      [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

bool text::isBareOpName(llvm::StringRef domain, llvm::StringRef type) {
  if (!isSimpleWord(type))
    return false;
  if (domain.empty()) {
    // Words with a meaning where a statement may start cannot name a
    // standard op: `name` would read as the previous node's name.
    return type != "return" && type != "constant" && type != "_" &&
           type != "name";
  }
  llvm::SmallVector<llvm::StringRef, 4> parts;
  domain.split(parts, '.');
  return llvm::all_of(parts, isSimpleWord);
}

void text::printQuoted(llvm::raw_ostream &os, llvm::StringRef s) {
  os << '"';
  os.write_escaped(s, /*UseHexEscapes=*/true);
  os << '"';
}

void text::printIdentifierOrString(llvm::raw_ostream &os,
                                   llvm::StringRef word) {
  if (isBareIdentifier(word))
    os << word;
  else
    printQuoted(os, word);
}

const llvm::fltSemantics *text::floatSemantics(DType type) {
  switch (type) {
  case DType::F32:
    return &llvm::APFloat::IEEEsingle();
  case DType::F64:
    return &llvm::APFloat::IEEEdouble();
  case DType::F16:
    return &llvm::APFloat::IEEEhalf();
  case DType::BF16:
    return &llvm::APFloat::BFloat();
  case DType::F8E4M3FN:
    return &llvm::APFloat::Float8E4M3FN();
  case DType::F8E4M3FNUZ:
    return &llvm::APFloat::Float8E4M3FNUZ();
  case DType::F8E5M2:
    return &llvm::APFloat::Float8E5M2();
  case DType::F8E5M2FNUZ:
    return &llvm::APFloat::Float8E5M2FNUZ();
  default:
    return nullptr;
  }
}

std::optional<llvm::APFloat>
text::convertDecimalLiteral(llvm::StringRef literal,
                            const llvm::fltSemantics &semantics) {
  // APFloat accepts more spellings (hex floats, "inf", "nan") than the text
  // form; only plain decimal literals get here.
  llvm::StringRef digits = literal;
  digits.consume_front("-");
  if (digits.empty() || !llvm::isDigit(digits.front()))
    return std::nullopt;
  for (char c : digits)
    if (!llvm::isDigit(c) && c != '.' && c != 'e' && c != 'E' && c != '+' &&
        c != '-')
      return std::nullopt;
  llvm::APFloat value(semantics);
  llvm::Expected<llvm::APFloat::opStatus> status =
      value.convertFromString(literal, llvm::APFloat::rmNearestTiesToEven);
  if (!status) {
    llvm::consumeError(status.takeError());
    return std::nullopt;
  }
  if ((*status & llvm::APFloat::opOverflow) || value.isInfinity() ||
      value.isNaN())
    return std::nullopt;
  return value;
}

void text::printFloatBits(llvm::raw_ostream &os, const llvm::APInt &bits,
                          const llvm::fltSemantics &semantics) {
  llvm::APFloat value(semantics, bits);
  if (value.isNaN()) {
    unsigned width = bits.getBitWidth();
    os << "0x"
       << llvm::format_hex_no_prefix(bits.getZExtValue(), (width + 3) / 4,
                                     /*Upper=*/true);
    return;
  }
  if (value.isInfinity()) {
    os << (value.isNegative() ? "-inf" : "inf");
    return;
  }
  // Every supported format widens exactly to double.
  llvm::APFloat wide = value;
  bool losesInfo = false;
  (void)wide.convert(llvm::APFloat::IEEEdouble(),
                     llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  double d = wide.convertToDouble();
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, d);
    std::optional<llvm::APFloat> back =
        convertDecimalLiteral(buffer, semantics);
    if (back && back->bitcastToAPInt() == bits)
      break;
  }
  llvm::StringRef printed(buffer);
  os << printed;
  // Keep the literal a float literal: `1.0`, not `1`.
  if (printed.find_first_of(".e") == llvm::StringRef::npos)
    os << ".0";
}
