/*===- kv-capi-test.c - The kv C API, from C ---------------------*- C -*-===*\
|*                                                                            *|
|* Plain C, linked against libKVCAPI.so alone: registers and loads the kv     *|
|* dialect through its handle, parses a kv program (an edit of a fact that    *|
|* a later segment depends on), plans it with kv-optimize (registered         *|
|* pipeline, and the same passes added one by one), lowers it with            *|
|* kv-lower-to-cpu, and checks diagnostics of a bad program and a bad         *|
|* pipeline. Prints the planned module for FileCheck (kv-capi.test); every    *|
|* check is also made here, and any failure exits non-zero.                   *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#include "kv-c/Dialects.h"
#include "kv-c/Passes.h"

#include "mlir-c/Diagnostics.h"
#include "mlir-c/Dialect/Func.h"
#include "mlir-c/IR.h"
#include "mlir-c/Pass.h"
#include "mlir-c/Support.h"
#include "mlir-c/Transforms.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "kv-capi-test:%d: check failed: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* A context of three segments where @answer depends on @fact and @tools does
   not: editing @fact recomputes @fact and @answer and reuses @tools, shifted
   by the change in @fact's length. */
static const char *const kProgram =
    "!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8,\n"
    "    kv_heads = 4, vocab = 512, rope = interleaved, theta = 10000.0,\n"
    "    eps = 1.0e-05>\n"
    "!cache = !kv.cache<5x4x8xf32, @ctx>\n"
    "kv.context @ctx {\n"
    "  kv.segment @fact kind(fact) tokens(?)\n"
    "  kv.segment @tools kind(tool) tokens(16)\n"
    "  kv.segment @answer kind(answer) tokens(4) deps(@fact)\n"
    "}\n"
    "func.func @main(%m: !model, %fact: tensor<?xi32>,\n"
    "                %tools: tensor<16xi32>, %answer: tensor<4xi32>,\n"
    "                %new: tensor<?xi32>) -> tensor<?x512xf32> {\n"
    "  %c0 = kv.empty : !cache\n"
    "  %c1, %l1 = kv.prefill %m, %c0, %fact segment @fact last\n"
    "      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>\n"
    "  %c2, %l2 = kv.prefill %m, %c1, %tools segment @tools last\n"
    "      : !model, (!cache), tensor<16xi32> -> !cache, tensor<1x512xf32>\n"
    "  %c3, %l3 = kv.prefill %m, %c2, %answer segment @answer last\n"
    "      : !model, (!cache), tensor<4xi32> -> !cache, tensor<1x512xf32>\n"
    "  %e = kv.edit %m, %c3[@fact] = %new strategy <cot_slice>\n"
    "      : !model, !cache, tensor<?xi32>\n"
    "  %l = kv.logits %m, %e[@answer] : !model, !cache -> tensor<?x512xf32>\n"
    "  return %l : tensor<?x512xf32>\n"
    "}\n";

/* The same context, edited at a segment it does not declare. */
static const char *const kBadProgram =
    "!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8,\n"
    "    kv_heads = 4, vocab = 512>\n"
    "!cache = !kv.cache<5x4x8xf32, @ctx>\n"
    "kv.context @ctx {\n"
    "  kv.segment @fact kind(fact) tokens(?)\n"
    "}\n"
    "func.func @main(%m: !model, %c: !cache, %new: tensor<?xi32>) -> !cache {\n"
    "  %e = kv.edit %m, %c[@city] = %new strategy <exact>\n"
    "      : !model, !cache, tensor<?xi32>\n"
    "  return %e : !cache\n"
    "}\n";

/* A growing string that MLIR's print callbacks append to. */
typedef struct {
  char *data;
  size_t size;
} Buffer;

static void appendToBuffer(MlirStringRef chunk, void *userData) {
  Buffer *buffer = (Buffer *)userData;
  char *grown = (char *)realloc(buffer->data, buffer->size + chunk.length + 1);
  if (!grown) {
    fprintf(stderr, "kv-capi-test: out of memory\n");
    exit(2);
  }
  memcpy(grown + buffer->size, chunk.data, chunk.length);
  buffer->size += chunk.length;
  grown[buffer->size] = '\0';
  buffer->data = grown;
}

static char *printOperation(MlirOperation op) {
  Buffer buffer = {NULL, 0};
  appendToBuffer(mlirStringRefCreate("", 0), &buffer);
  mlirOperationPrint(op, appendToBuffer, &buffer);
  return buffer.data;
}

/* The error diagnostics of a context, concatenated. */
static MlirLogicalResult collectDiagnostic(MlirDiagnostic diagnostic,
                                           void *userData) {
  mlirDiagnosticPrint(diagnostic, appendToBuffer, userData);
  appendToBuffer(mlirStringRefCreateFromCString("\n"), userData);
  return mlirLogicalResultSuccess();
}

/* How many ops of each kind of interest a module holds. */
typedef struct {
  int edits, logits, shifts, prefills, chains, kvOps, llvmFuncs;
} OpCounts;

static MlirWalkResult countOp(MlirOperation op, void *userData) {
  OpCounts *counts = (OpCounts *)userData;
  MlirStringRef name = mlirIdentifierStr(mlirOperationGetName(op));
  if (mlirStringRefEqual(name, mlirStringRefCreateFromCString("kv.edit")))
    ++counts->edits;
  if (mlirStringRefEqual(name, mlirStringRefCreateFromCString("kv.logits")))
    ++counts->logits;
  if (mlirStringRefEqual(name, mlirStringRefCreateFromCString("kv.rope_shift")))
    ++counts->shifts;
  if (mlirStringRefEqual(name, mlirStringRefCreateFromCString("kv.prefill")))
    ++counts->prefills;
  if (mlirStringRefEqual(name,
                         mlirStringRefCreateFromCString("kv.prefill_chain")))
    ++counts->chains;
  if (name.length > 3 && strncmp(name.data, "kv.", 3) == 0)
    ++counts->kvOps;
  if (mlirStringRefEqual(name, mlirStringRefCreateFromCString("llvm.func")))
    ++counts->llvmFuncs;
  return MlirWalkResultAdvance;
}

static OpCounts countOps(MlirModule module) {
  OpCounts counts = {0, 0, 0, 0, 0, 0, 0};
  mlirOperationWalk(mlirModuleGetOperation(module), countOp, &counts,
                    MlirWalkPreOrder);
  return counts;
}

/* Runs `pipeline` (a textual pipeline anchored on builtin.module) on a fresh
   parse of kProgram; returns the module, or a null one after a failure. */
static MlirModule planWithPipeline(MlirContext ctx, const char *pipeline) {
  MlirModule module =
      mlirModuleCreateParse(ctx, mlirStringRefCreateFromCString(kProgram));
  CHECK(!mlirModuleIsNull(module), "the kv program does not parse");
  if (mlirModuleIsNull(module))
    return module;
  MlirPassManager pm = mlirPassManagerCreate(ctx);
  Buffer error = {NULL, 0};
  MlirLogicalResult parsed = mlirParsePassPipeline(
      mlirPassManagerGetAsOpPassManager(pm),
      mlirStringRefCreateFromCString(pipeline), appendToBuffer, &error);
  CHECK(mlirLogicalResultIsSuccess(parsed), "pipeline '%s': %s", pipeline,
        error.data ? error.data : "");
  free(error.data);
  if (mlirLogicalResultIsSuccess(parsed)) {
    MlirLogicalResult ran =
        mlirPassManagerRunOnOp(pm, mlirModuleGetOperation(module));
    CHECK(mlirLogicalResultIsSuccess(ran), "pipeline '%s' failed", pipeline);
  }
  mlirPassManagerDestroy(pm);
  return module;
}

int main(void) {
  MlirContext ctx = mlirContextCreate();

  /* The dialects through their handles: kv, and func for func.func. */
  MlirDialectHandle kv = mlirGetDialectHandle__kv__();
  CHECK(mlirStringRefEqual(mlirDialectHandleGetNamespace(kv),
                           mlirStringRefCreateFromCString("kv")),
        "the kv handle names another namespace");
  MlirDialectRegistry registry = mlirDialectRegistryCreate();
  mlirDialectHandleInsertDialect(kv, registry);
  mlirDialectHandleInsertDialect(mlirGetDialectHandle__func__(), registry);
  mlirContextAppendDialectRegistry(ctx, registry);
  mlirDialectRegistryDestroy(registry);
  MlirDialect kvDialect = mlirDialectHandleLoadDialect(kv, ctx);
  CHECK(!mlirDialectIsNull(kvDialect), "the kv dialect does not load");
  CHECK(mlirStringRefEqual(mlirDialectGetNamespace(kvDialect),
                           mlirStringRefCreateFromCString("kv")),
        "the loaded dialect is not kv");

  mlirRegisterKVPassesAndPipelines();
  mlirRegisterKVPassesAndPipelines(); /* a second call does nothing */

  /* kv-optimize, the registered pipeline. */
  MlirModule planned = planWithPipeline(ctx, "builtin.module(kv-optimize)");
  if (mlirModuleIsNull(planned))
    return 1;
  MlirOperation plannedOp = mlirModuleGetOperation(planned);
  CHECK(mlirOperationVerify(plannedOp), "the planned module does not verify");
  OpCounts counts = countOps(planned);
  CHECK(counts.edits == 0, "%d kv.edit left", counts.edits);
  CHECK(counts.logits == 0, "%d kv.logits left", counts.logits);
  CHECK(counts.shifts == 0, "%d kv.rope_shift left", counts.shifts);
  /* Three prefills build the cache, fused into one chain; two recompute
     @fact and @answer (over a view list: no chain). */
  CHECK(counts.chains == 1, "%d kv.prefill_chain, expected 1", counts.chains);
  CHECK(counts.prefills == 2, "%d kv.prefill, expected 2", counts.prefills);
  char *viaPipeline = printOperation(plannedOp);
  printf("// planned by kv-optimize\n%s\n", viaPipeline);

  /* The same passes added one by one: the same module. */
  MlirModule module =
      mlirModuleCreateParse(ctx, mlirStringRefCreateFromCString(kProgram));
  MlirPassManager pm = mlirPassManagerCreate(ctx);
  mlirPassManagerAddOwnedPass(pm, mlirCreateKVKVDeriveCotSlicesPass());
  mlirPassManagerAddOwnedPass(pm, mlirCreateKVKVFuseRopeShiftPass());
  mlirPassManagerAddOwnedPass(pm, mlirCreateTransformsCanonicalizer());
  mlirPassManagerAddOwnedPass(pm, mlirCreateTransformsCSE());
  mlirPassManagerAddOwnedPass(pm, mlirCreateKVKVFusePrefillsPass());
  CHECK(mlirLogicalResultIsSuccess(
            mlirPassManagerRunOnOp(pm, mlirModuleGetOperation(module))),
        "the passes added one by one failed");
  mlirPassManagerDestroy(pm);
  char *viaPasses = printOperation(mlirModuleGetOperation(module));
  CHECK(strcmp(viaPipeline, viaPasses) == 0,
        "kv-optimize and its passes added one by one disagree:\n%s", viaPasses);
  free(viaPasses);
  free(viaPipeline);
  mlirModuleDestroy(module);

  /* kv-lower-to-cpu: no kv op is left, the program is LLVM functions. */
  MlirModule lowered =
      planWithPipeline(ctx, "builtin.module(kv-optimize, kv-lower-to-cpu)");
  if (!mlirModuleIsNull(lowered)) {
    OpCounts low = countOps(lowered);
    CHECK(low.kvOps == 0, "%d kv ops left after kv-lower-to-cpu", low.kvOps);
    CHECK(low.llvmFuncs > 0, "no llvm.func after kv-lower-to-cpu");
    printf("// kv-lower-to-cpu: %d kv ops, %s llvm.func\n", low.kvOps,
           low.llvmFuncs > 0 ? "some" : "no");
    mlirModuleDestroy(lowered);
  }

  /* A program the kv verifier rejects: the parse fails with its diagnostic. */
  Buffer diagnostics = {NULL, 0};
  appendToBuffer(mlirStringRefCreate("", 0), &diagnostics);
  MlirDiagnosticHandlerID handler = mlirContextAttachDiagnosticHandler(
      ctx, collectDiagnostic, &diagnostics, NULL);
  MlirModule bad =
      mlirModuleCreateParse(ctx, mlirStringRefCreateFromCString(kBadProgram));
  mlirContextDetachDiagnosticHandler(ctx, handler);
  CHECK(mlirModuleIsNull(bad), "a kv.edit of an undeclared segment parsed");
  CHECK(strstr(diagnostics.data, "@city") != NULL,
        "the diagnostic does not name @city: %s", diagnostics.data);
  printf("// bad program: %s", diagnostics.data);
  free(diagnostics.data);
  if (!mlirModuleIsNull(bad))
    mlirModuleDestroy(bad);

  /* A pipeline that names no registered pass. */
  MlirPassManager badPm = mlirPassManagerCreate(ctx);
  Buffer error = {NULL, 0};
  appendToBuffer(mlirStringRefCreate("", 0), &error);
  MlirLogicalResult parsed = mlirParsePassPipeline(
      mlirPassManagerGetAsOpPassManager(badPm),
      mlirStringRefCreateFromCString("builtin.module(kv-no-such-pass)"),
      appendToBuffer, &error);
  CHECK(mlirLogicalResultIsFailure(parsed), "an unknown pass parsed");
  CHECK(strstr(error.data, "kv-no-such-pass") != NULL,
        "the error does not name the pass: %s", error.data);
  printf("// bad pipeline: %s\n", error.data);
  free(error.data);
  mlirPassManagerDestroy(badPm);

  mlirModuleDestroy(planned);
  mlirContextDestroy(ctx);

  if (failures) {
    fprintf(stderr, "kv-capi-test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("// kv-capi-test: all checks passed\n");
  return 0;
}
