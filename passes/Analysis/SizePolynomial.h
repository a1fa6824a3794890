//===- SizePolynomial.h - Costs as formulas of run-time sizes ---*- C++ -*-===//
//
// A polynomial with integer coefficients over the sizes a plan's cost depends
// on (len(@city), len(@city'), ...): the cost of a plan whose segments have
// dynamic lengths, as a formula the planner can print. Tokens are linear in
// the sizes, FLOPs quadratic (attention). An operation whose result is no
// such polynomial (the minimum of a first_k budget and a dynamic length, the
// ceiling of a fraction of one) keeps the reason instead.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_ANALYSIS_SIZEPOLYNOMIAL_H
#define KVIR_PASSES_ANALYSIS_SIZEPOLYNOMIAL_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::kv {

class SizePolynomial {
public:
  SizePolynomial(int64_t constant = 0);
  /// The size numbered `index`.
  static SizePolynomial variable(unsigned index);

  friend SizePolynomial operator+(const SizePolynomial &a,
                                  const SizePolynomial &b);
  friend SizePolynomial operator-(const SizePolynomial &a,
                                  const SizePolynomial &b);
  friend SizePolynomial operator*(const SizePolynomial &a,
                                  const SizePolynomial &b);
  SizePolynomial &operator+=(const SizePolynomial &other) {
    return *this = *this + other;
  }

  /// The value when it depends on no size.
  std::optional<int64_t> getConstant() const;
  /// floor(this / 2); not a polynomial (see inexactReason) unless every
  /// coefficient of a size is even.
  SizePolynomial halve() const;
  /// The same value, marked as no polynomial of the sizes for `reason`.
  SizePolynomial inexact(llvm::StringRef reason) const;
  /// Why the value is no polynomial of the sizes; empty when it is one.
  llvm::StringRef inexactReason() const { return reason; }

  /// The value with `values[i]` for size i.
  int64_t evaluate(llvm::ArrayRef<int64_t> values) const;
  /// The formula with `names[i]` for size i: the constant, then each term
  /// by degree, "c*name" and "name^2" ("72 + len(@city')").
  std::string str(llvm::ArrayRef<std::string> names) const;

private:
  /// Coefficient of each product of sizes (sorted indices; {} is the
  /// constant). No zero coefficients.
  std::map<std::vector<unsigned>, int64_t> terms;
  std::string reason;
};

} // namespace mlir::kv

#endif // KVIR_PASSES_ANALYSIS_SIZEPOLYNOMIAL_H
