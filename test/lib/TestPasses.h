//===- TestPasses.h - Registration of the kv test passes --------*- C++ -*-===//

#ifndef KVIR_TEST_LIB_TESTPASSES_H
#define KVIR_TEST_LIB_TESTPASSES_H

namespace mlir::kv::test {
void registerTestDependencySlicePass();

inline void registerTestPasses() { registerTestDependencySlicePass(); }
} // namespace mlir::kv::test

#endif // KVIR_TEST_LIB_TESTPASSES_H
