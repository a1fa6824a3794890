//===- Compiler.h - kv programs from source to code -------------*- C++ -*-===//
//
// The compiler driver the tools share: load a kv program and plan it
// (kv-optimize), describe an entry's signature for runners (an
// EntryManifest), lower the program to one module (kv-lower-to-cpu or
// kv-lower-to-nvvm: host code, the forward of every model it uses, for the
// GPU its kernels in a gpu.binary), then either JIT-compile that module
// (kv-run, kv-bench, tests) or write it as an object file with the manifest
// embedded (kv-aot) for a machine without LLVM.
//
//   program.mlir ─► kv-optimize ─► kv-lower-to-{cpu,nvvm} ─► one module
//                                                     ├─► JitProgram (here)
//                                                     └─► emitObject (AOT)
//
// Diagnostics go through the MLIRContext, at the op's location.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_COMPILER_COMPILER_H
#define KVIR_DRIVER_COMPILER_COMPILER_H

#include "runtime/core/ForwardABI.h"
#include "runtime/core/WeightFormat.h"
#include "runtime/exec/Session.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class ExecutionEngine;
} // namespace mlir
namespace llvm::orc {
class LLJIT;
} // namespace llvm::orc

namespace kvir::compiler {

/// Where the math of a lowered program runs.
enum class Target { Cpu, Gpu };

/// The dialects, extensions and LLVM IR translations a kv program, its
/// lowering and its JIT compilation need.
void registerDialects(mlir::DialectRegistry &registry);

/// Parses and verifies `path` ("-" for stdin) into `sourceMgr`, calls
/// `afterParsing` on it when given (e.g. retargetModel: what the program
/// and its exact reference share), then `beforePlanning` (e.g.
/// addAttributionEntry), then plans it (planProgram). Null after a
/// diagnostic. With `exactReference`, also plans exactReferenceOf the
/// program (copied before `beforePlanning`) into it (null when the program
/// has no erratum edit).
mlir::OwningOpRef<mlir::ModuleOp> loadProgram(
    mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr,
    llvm::StringRef path,
    llvm::function_ref<mlir::LogicalResult(mlir::ModuleOp)> beforePlanning =
        nullptr,
    mlir::OwningOpRef<mlir::ModuleOp> *exactReference = nullptr,
    llvm::function_ref<mlir::LogicalResult(mlir::ModuleOp)> afterParsing =
        nullptr);

/// The same for a program in memory.
mlir::OwningOpRef<mlir::ModuleOp> parseProgram(
    mlir::MLIRContext &context, llvm::StringRef text,
    llvm::function_ref<mlir::LogicalResult(mlir::ModuleOp)> beforePlanning =
        nullptr);

/// The reference of a program with erratum edits: an unplanned copy of
/// `module` with every `kv.edit` of strategy `erratum` turned into an `exact`
/// edit of the same tokens (its correction dropped), whose answers are
/// computed in the edited context itself. Null when `module` has no erratum
/// edit.
mlir::OwningOpRef<mlir::ModuleOp> exactReferenceOf(mlir::ModuleOp module);

/// Tags the ops kv-optimize plans (kv.edit, kv.compose, kv.logits), so that
/// what it derives from them counts as plan work, then runs kv-optimize.
mlir::LogicalResult planProgram(mlir::ModuleOp module);

/// The element type of the K/V pages of the program's `!kv.cache` values (f32
/// when it has none), or a diagnostic where two caches disagree: one pool
/// holds one element type.
mlir::FailureOr<kvrt_kv_dtype> programKvDtype(mlir::ModuleOp module);

/// The public function `name` with a body, or a diagnostic listing them.
mlir::FailureOr<mlir::func::FuncOp> lookupEntry(mlir::ModuleOp module,
                                                llvm::StringRef name);

/// The signature of `entry` for a runner: every argument must be bindable
/// (a !kv.model, tensor<?xi32>/tensor<Nxi32> tokens, a rank-3 f32 query
/// tensor, a !kv.cache the caller binds itself, as kv-serve does with its
/// contexts) and every result reportable, else a diagnostic; the pages' type
/// is the program's (programKvDtype). The sites are filled by lowerProgram.
mlir::FailureOr<exec::EntryManifest> describeEntry(mlir::func::FuncOp entry);

/// A location as a runner prints it: `file:line:col` of the first file
/// location inside `loc`, else its MLIR form.
std::string siteText(mlir::Location loc);

/// How to lower a program.
struct LowerOptions {
  Target target = Target::Cpu;
  /// Also emit the forward of this model (pages of exportDtype), even if
  /// the program does not use it: runners compare against a full prefill
  /// with it.
  std::optional<kvrt_model_config> exportModel;
  kvrt_kv_dtype exportDtype = KVRT_KV_F32;
  /// The formats of the weights of the model the program runs on: every
  /// forward of exportModel's config (the program's and the exported one)
  /// is built for them (kv.weight_formats, passes/Conversion/Forward/
  /// BuildForward.h). A program names a model's shape, not its file.
  kvir::WeightFormats exportFormats;
  /// GPU only: kv-lower-to-nvvm's chip, PTX features ("": the lowest PTX
  /// version the chip needs, at least +ptx80) and what the kernels become
  /// (`bin`: cubin; `isa`: PTX, JIT-compiled by the driver).
  std::string chip = "sm_90", features, format = "bin";
  /// CPU only: the vector width kv-lower-to-cpu's register blocking is
  /// chosen for (512, 256; 0: the host's).
  int64_t cpuVectorBits = 0;
  /// CPU only: how quantised weights are multiplied (kv-lower-to-cpu's
  /// quant-dot: auto, f32, int8, amx, avx2).
  std::string cpuQuantDot = "auto";
  /// CPU only: whether kv-lower-to-cpu refuses a quant-dot this host lacks
  /// (check-host); false for code built for another CPU whose features the
  /// caller checked (quantDotRefusal).
  bool cpuCheckHost = true;
};

/// A lowered copy of `module` (kv-lower-to-cpu or kv-lower-to-nvvm), and the
/// location of every site (the module attribute kv.exec_sites, removed).
mlir::OwningOpRef<mlir::ModuleOp>
lowerProgram(mlir::ModuleOp module, const LowerOptions &options,
             std::vector<mlir::Location> &sites);

/// A lowered module compiled for this machine by the ExecutionEngine, or
/// the object code of one loaded from the compile cache (CompileCache.h),
/// with the exec ABI (and, for the GPU, the mgpu* functions) bound.
class JitProgram {
public:
  /// Compiles `lowered` (LLVM -O3, the host CPU's features). Null after a
  /// diagnostic at `loc`. With `object`, also returns the object code
  /// compiled ("" where the engine could not give it).
  static std::unique_ptr<JitProgram> create(mlir::ModuleOp lowered,
                                            Target target, mlir::Location loc,
                                            std::string *object = nullptr);
  /// Links the CPU object code `object` (what create returned) into this
  /// process. Null with `error`; a symbol that does not resolve shows at
  /// its lookup.
  static std::unique_ptr<JitProgram> load(llvm::StringRef object,
                                          std::string &error);
  ~JitProgram();

  /// `_kvrt_entry_<name>`, or null.
  exec::EntryFn entry(llvm::StringRef name);
  /// The entry points of the forward of `config` for pages of `dtype` and
  /// weights in `formats` the module holds; null members where it has none.
  Forward forward(const kvrt_model_config &config, kvrt_kv_dtype dtype,
                  const kvir::WeightFormats &formats = kvir::WeightFormats());

  /// The address of a symbol of the compiled module, or null.
  void *lookup(llvm::StringRef symbol);

private:
  JitProgram() = default;
  /// One of them: what create compiled, or what load linked.
  std::unique_ptr<mlir::ExecutionEngine> engine;
  std::unique_ptr<llvm::orc::LLJIT> loaded;
  /// The config keys Forward::key points to.
  std::map<std::string, std::unique_ptr<std::string>> keys;
};

/// A program JIT-compiled for a runner: what kv-run and kv-bench use.
struct CompiledProgram {
  mlir::OwningOpRef<mlir::ModuleOp> planned;
  exec::EntryManifest manifest;
  std::vector<mlir::Location> sites;
  std::unique_ptr<JitProgram> jit;
  exec::EntryFn entry = nullptr;
  /// The forward of the exported model.
  Forward forward;
};

/// Describes, lowers and JIT-compiles the entry `entryName` of a planned
/// program (`planned` is taken over); where the process has a compile cache
/// (setCompileCache) and the target is the CPU, the code and sites come
/// from it when it has them, and go into it when it has not. Failure after
/// a diagnostic.
mlir::FailureOr<CompiledProgram>
compileProgram(mlir::OwningOpRef<mlir::ModuleOp> planned,
               llvm::StringRef entryName, const LowerOptions &options);

/// The forward of one config alone, for K/V pages of `dtype` and weights in
/// `formats` (a model's: kvir::WeightFormats::of), JIT-compiled for `target`
/// (or loaded from the compile cache, as compileProgram does; kv-run's
/// token-list form, benchmarks
/// and tests; cached per config for the life of the process, never
/// destroyed: an ExecutionEngine destroyed by an exit handler runs the JIT's
/// deinitializers after LLVM's statics are gone), its CPU register blocking
/// chosen for `cpuVectorBits` and its quantised weights multiplied as
/// `cpuQuantDot` says (LowerOptions). KVRT_ERR_INVALID_ARGUMENT for a
/// config the target cannot compile, with the message in kvrt_last_error().
kvrt_status
compileForward(const kvrt_model_config &config, Target target, Forward *out,
               kvrt_kv_dtype dtype = KVRT_KV_F32, int64_t cpuVectorBits = 0,
               const kvir::WeightFormats &formats = kvir::WeightFormats(),
               const std::string &cpuQuantDot = "auto");

/// The generated CPU matmul alone, for benchmarks against BLAS: c = a · bᵀ
/// with a [n][k], the f32 weights b [m][k] and c [n][m] (contiguous
/// buffers), as the forward computes its projections (the packed
/// micro-kernel from 4 rows on, on the runtime's threads). The weights are
/// passed as the forward takes them: their bytes (sizes[0] = 4 m k).
using MatmulFn = void (*)(kvrt_memref_f32 *a, kvrt_memref_weight *b,
                          kvrt_memref_f32 *c, int64_t n);
kvrt_status compileMatmul(int64_t m, int64_t k, MatmulFn *out);

/// The same for weights in a quantised `format` (not f32), as the forward's
/// CPU target multiplies them: b holds the weights' bytes in the file's
/// layout, or, where `rows_offset` (a one-entry table) holds an offset of 0
/// or more, the rows repacked for decode (kvrt::repackDecodeRows) at that
/// byte of b; a decode step (n below the packed kernels' rows) then reads
/// those. Benchmarks set the generated tiles beside hand-written ones on
/// the same buffer.
using QuantMatmulFn = void (*)(kvrt_memref_f32 *a, kvrt_memref_weight *b,
                               kvrt_memref_f32 *c, int64_t n,
                               kvrt_memref_i64 *rowsOffset);
kvrt_status compileQuantMatmul(kvrt_weight_format format, int64_t m, int64_t k,
                               QuantMatmulFn *out);

/// The forward of `config` as MLIR: upstream dialects, or lowered to the
/// LLVM dialect with `lowered` (inspection and tests).
kvrt_status getForwardSource(const kvrt_model_config &config, Target target,
                             bool lowered, std::string *out);

/// Writes `lowered` as a relocatable object for the host (PIC; the GPU's
/// binary embedded and loaded by a constructor), with each of `manifests`
/// embedded as the NUL-terminated string `_kvrt_manifest_<entry>`. `cpu`
/// names the CPU to generate code for ("native" for this machine's, or e.g.
/// "x86-64-v3").
mlir::LogicalResult emitObject(mlir::ModuleOp lowered,
                               llvm::ArrayRef<exec::EntryManifest> manifests,
                               llvm::StringRef path, llvm::StringRef cpu);

/// Writes the CPU forward of `config` alone (pages of `dtype`, weights in
/// `formats`, quantised products as `cpuQuantDot` says: LowerOptions) as a
/// relocatable object for this machine (emitObject with no manifests), its
/// functions named by forwardPrefix(): what kv-aot --forward links into the
/// library a runner without LLVM binds (kv-run's token-list form). Failure
/// after a diagnostic in `context`.
mlir::LogicalResult
emitForwardObject(mlir::MLIRContext &context, const kvrt_model_config &config,
                  kvrt_kv_dtype dtype, const kvir::WeightFormats &formats,
                  llvm::StringRef cpuQuantDot, llvm::StringRef path);

/// The CPU forward's quant-dot for code generated for `cpu` ("native" or an
/// LLVM CPU name): `requested` where the CPU has the integer dot path's
/// instructions (AVX-512 VNNI) or `requested` is not "auto", else "f32"
/// (LowerOptions::cpuQuantDot); "int8" for "auto" where this host would take
/// AMX tiles and the CPU has none; so that an object for another CPU never
/// holds instructions that CPU lacks.
std::string quantDotFor(llvm::StringRef cpu, llvm::StringRef requested);
/// Why code for `cpu` (an LLVM CPU name; "native" is never refused here, the
/// pass checks the host) cannot take quant-dot `quantDot` (a name the pass
/// does not know, or int8, amx, avx2 on a CPU that lacks their
/// instructions), or "" where it can.
std::string quantDotRefusal(llvm::StringRef cpu, llvm::StringRef quantDot);

} // namespace kvir::compiler

#endif // KVIR_DRIVER_COMPILER_COMPILER_H
