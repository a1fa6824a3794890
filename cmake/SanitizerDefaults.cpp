//===- SanitizerDefaults.cpp - Options of the sanitizer runtimes ----------===//
//
// Compiled into every executable of a KVIR_SANITIZE build (the runtimes look
// these functions up in the executable). Environment variables still add to
// and override them.
//
//===----------------------------------------------------------------------===//

extern "C" {

/// Debian's libMLIR.so is not instrumented but writes to memory that LLVM's
/// allocators, compiled into our instrumented code, poison: user poisoning
/// off. Leaks are errors. No alternate signal stack: on an AMD EPYC (Zen 5)
/// machine, where glibc sizes signal stacks from the CPU's (sysconf
/// _SC_SIGSTKSZ), ASan's unmap of a thread's alternate stack at its exit
/// failed ("failed to deallocate 0x134c0 bytes ... unable to unmmap") and
/// killed kv-serve as its HTTP threads ended (Serve tests, now and then).
/// A stack overflow is then a plain SIGSEGV instead of an ASan report.
const char *__asan_default_options() {
  return "allow_user_poisoning=0:detect_leaks=1:strict_string_checks=1:"
         "use_sigaltstack=0";
}

/// Undefined behaviour stops the program, with a stack.
const char *__ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}

} // extern "C"
