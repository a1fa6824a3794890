//===- Session.h - Running a compiled kv program ----------------*- C++ -*-===//
//
// What every runner of a compiled kv program needs, whether the program was
// JIT-compiled (kv-run, kv-bench) or compiled ahead of time (kv-aot-run on a
// machine without LLVM), one header per job:
//
//   Values.h        what crosses the entry boundary, and the work a run counts
//   Manifest.h      the entry's signature (written by the compiler) and its
//                   text form; the symbols of an entry
//   ModelLoading.h  a model file or a seeded synthetic preset
//   TokenInput.h    input files, token lists and numbers from text
//   Binding.h       binding the arguments from files, text or samples
//   Backends.h      the backends by name
//   RunEntry.h      calling the entry over an execution context
//   Measure.h       full prefill, greedy continuation, logit fidelity
//
// This header includes them all (library KVSession). No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_SESSION_H
#define KVIR_RUNTIME_EXEC_SESSION_H

#include "runtime/exec/Backends.h"
#include "runtime/exec/Binding.h"
#include "runtime/exec/Manifest.h"
#include "runtime/exec/Measure.h"
#include "runtime/exec/ModelLoading.h"
#include "runtime/exec/RunEntry.h"
#include "runtime/exec/TokenInput.h"
#include "runtime/exec/Values.h"

#endif // KVIR_RUNTIME_EXEC_SESSION_H
