// RUN: kv-opt %s --convert-kv-to-cpu --split-input-file --verify-diagnostics

// The attribute must be a dictionary.
// expected-error @+1 {{'kv.forward' must be a dictionary from names to !kv.model types, got [i32]}}
module attributes {kv.forward = [i32]} {
}

// -----

// Each entry must be a model type.
// expected-error @+1 {{'kv.forward' entry 'x' must be a !kv.model type, got f32}}
module attributes {kv.forward = {x = f32}} {
}

// -----

// A generated symbol may not clash with an existing one.
// expected-error @+1 {{cannot build the CPU forward 'tiny': symbol @tiny_prefill already exists}}
module attributes {kv.forward = {tiny = !kv.model<dim = 32, hidden = 64, layers = 1, heads = 2, kv_heads = 2, vocab = 10>}} {
  func.func @tiny_prefill() {
    return
  }
}

// -----

// Head sizes beyond what the attention kernel holds in registers.
// expected-error @+1 {{cannot build the CPU forward 'big': head size 2048 exceeds 1024}}
module attributes {kv.forward = {big = !kv.model<dim = 2048, hidden = 64, layers = 1, heads = 1, kv_heads = 1, vocab = 10>}} {
}
