//===- SizePolynomial.cpp - Costs as formulas of run-time sizes -*- C++ -*-===//

#include "passes/Analysis/SizePolynomial.h"

#include "llvm/ADT/STLExtras.h"

#include <utility>

using namespace mlir::kv;

SizePolynomial::SizePolynomial(int64_t constant) {
  if (constant != 0)
    terms[{}] = constant;
}

SizePolynomial SizePolynomial::variable(unsigned index) {
  SizePolynomial p;
  p.terms[{index}] = 1;
  return p;
}

/// The first reason of the two (an inexact operand makes the result inexact).
static std::string firstReason(const SizePolynomial &a,
                               const SizePolynomial &b) {
  return (a.inexactReason().empty() ? b.inexactReason() : a.inexactReason())
      .str();
}

namespace mlir::kv {

SizePolynomial operator+(const SizePolynomial &a, const SizePolynomial &b) {
  SizePolynomial sum = a;
  for (const auto &[monomial, coefficient] : b.terms)
    if ((sum.terms[monomial] += coefficient) == 0)
      sum.terms.erase(monomial);
  sum.reason = firstReason(a, b);
  return sum;
}

SizePolynomial operator-(const SizePolynomial &a, const SizePolynomial &b) {
  return a + b * SizePolynomial(-1);
}

SizePolynomial operator*(const SizePolynomial &a, const SizePolynomial &b) {
  SizePolynomial product;
  for (const auto &[ma, ca] : a.terms)
    for (const auto &[mb, cb] : b.terms) {
      std::vector<unsigned> monomial = ma;
      monomial.insert(monomial.end(), mb.begin(), mb.end());
      llvm::sort(monomial);
      if ((product.terms[monomial] += ca * cb) == 0)
        product.terms.erase(monomial);
    }
  product.reason = firstReason(a, b);
  return product;
}

} // namespace mlir::kv

std::optional<int64_t> SizePolynomial::getConstant() const {
  if (terms.empty())
    return 0;
  if (terms.size() == 1 && terms.begin()->first.empty())
    return terms.begin()->second;
  return std::nullopt;
}

SizePolynomial SizePolynomial::halve() const {
  SizePolynomial half;
  half.reason = reason;
  for (const auto &[monomial, coefficient] : terms) {
    if (monomial.empty()) {
      // floor(c / 2) for either sign of c.
      int64_t floor =
          coefficient >= 0 ? coefficient / 2 : -((1 - coefficient) / 2);
      if (floor != 0)
        half.terms[monomial] = floor;
    } else if (coefficient % 2 == 0) {
      half.terms[monomial] = coefficient / 2;
    } else {
      half.terms[monomial] = coefficient / 2;
      if (half.reason.empty())
        half.reason = "half of an odd multiple of a size";
    }
  }
  return half;
}

SizePolynomial SizePolynomial::inexact(llvm::StringRef why) const {
  SizePolynomial p = *this;
  if (p.reason.empty())
    p.reason = why.str();
  return p;
}

int64_t SizePolynomial::evaluate(llvm::ArrayRef<int64_t> values) const {
  int64_t value = 0;
  for (const auto &[monomial, coefficient] : terms) {
    int64_t term = coefficient;
    for (unsigned index : monomial)
      term *= values[index];
    value += term;
  }
  return value;
}

std::string SizePolynomial::str(llvm::ArrayRef<std::string> names) const {
  std::vector<std::pair<std::vector<unsigned>, int64_t>> ordered(terms.begin(),
                                                                 terms.end());
  // By degree, then by the sizes' order.
  llvm::sort(ordered, [](const auto &a, const auto &b) {
    return std::make_pair(a.first.size(), a.first) <
           std::make_pair(b.first.size(), b.first);
  });
  std::string text;
  for (const auto &[monomial, coefficient] : ordered) {
    int64_t magnitude = coefficient < 0 ? -coefficient : coefficient;
    if (text.empty())
      text = coefficient < 0 ? "-" : "";
    else
      text += coefficient < 0 ? " - " : " + ";
    std::string product;
    for (size_t i = 0; i < monomial.size();) {
      size_t j = i;
      while (j < monomial.size() && monomial[j] == monomial[i])
        ++j;
      product += (product.empty() ? "" : "*") + names[monomial[i]];
      if (j - i > 1)
        product += "^" + std::to_string(j - i);
      i = j;
    }
    if (product.empty())
      text += std::to_string(magnitude);
    else if (magnitude == 1)
      text += product;
    else
      text += std::to_string(magnitude) + "*" + product;
  }
  return text.empty() ? "0" : text;
}
