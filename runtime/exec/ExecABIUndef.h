//===- ExecABIUndef.h - Undefine ExecABI.def's type codes -------*- C++ -*-===//
//
// The parameter type codes of runtime/exec/ExecABI.def (CTX, SITE, VIEW, ...)
// are macros that each consumer defines to its own types before including
// the list. Including this file afterwards undefines them all, so that a
// consumer cannot leave one behind or forget a new one. No include guard: it
// is included once per expansion.
//
//===----------------------------------------------------------------------===//

#undef CTX
#undef SITE
#undef VIEW
#undef CVIEW
#undef VIEWS
#undef VIEW_OUT
#undef MODEL
#undef CTOKENS
#undef CTOKENS_LIST
#undef CLOGITS
#undef CTENSOR
#undef I32S
#undef I64S
#undef I64_OUT
#undef STR
#undef STRS
#undef I32
#undef I64
#undef F64
#undef PREFILL_FN
#undef ATTENTION_FN
#undef MATERIALIZE_FN
